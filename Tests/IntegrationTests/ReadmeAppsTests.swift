import Foundation
import LarderClient
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// README's "Apps" section, the data layer of each of the five seed apps, compiled and run here against a server
/// loaded with `samples/` as README's Quick start loads it, on SQLite and on PostgreSQL; and the example on README's
/// first screen. The code between a
/// `// README:` line and `// README end` is the README's, character for character (less its indentation here):
/// `theReadmeShowsThisCode` fails when the two drift apart.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReadmeAppsTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// A server with the five apps' sample records, loaded with `larder import --mode upsert`, and a client of it.
    static func loaded(_ store: ServerStore) throws -> ClientTestServer {
        let server = try ClientTestServer(store)
        for name in ["profiles", "items", "todos", "students", "pokemon_items"] {
            let file = repository.appendingPathComponent("samples/\(name).json").path
            let run = try CLITests.run(["import", name, file, "--mode", "upsert", "--port", String(server.port)])
            guard run.status == 0 else { throw ServerTestError("import \(name): \(run.stderr)") }
        }
        return server
    }

    struct Todo: Codable, Sendable {
        var title: String
        var isFinish: Bool
    }

    /// The example on README's first screen.
    @Test func theFirstExample() async throws {
        let server = try Self.loaded(.sqlite)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        // README: first screen
        let todos = client.collection("todos", of: Todo.self)
        let milk = try await todos.create(Todo(title: "Buy milk", isFinish: false))
        try await todos.update(milk) { $0.isFinish = true }                        // sends {"isFinish":true} at milk.rev
        for try await todo in todos.search(Field("isFinish") == false) { print(todo.value.title) }
        // README end

        #expect(try await todos.get(milk.id).value.isFinish)
    }

    @Test(arguments: [ServerStore.sqlite, .postgres])
    func profileBook(_ store: ServerStore) async throws {
        let server = try Self.loaded(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        // README: profiles
        struct Profile: Codable, Sendable {
            var name: String
            var phone: String
            var height: Double
            var weight: Double
            var birthday: Date
            var zodiacSign: String
            var isMale: Bool
        }
        let profiles = client.collection("profiles", of: Profile.self)
        let book = try await profiles.search(sortedBy: [Field("name").ascending]).collect()
        let friend = Profile(
            name: "林小美", phone: "0933-111-222", height: 160, weight: 50, birthday: .now, zodiacSign: "Leo 獅子座",
            isMale: false)
        let added = try await profiles.create(friend)
        let edited = try await profiles.update(added) { $0.phone = "0933-333-444" }  // sends only the phone
        try await profiles.delete(edited.id)
        // README end

        #expect(book.count == 3 && book.map(\.value.name) == book.map(\.value.name).sorted())
        #expect(edited.rev == 2 && edited.value.phone == "0933-333-444" && edited.value.name == "林小美")
        #expect(try await profiles.count() == 3)
    }

    @Test(arguments: [ServerStore.sqlite, .postgres])
    func shopDiary(_ store: ServerStore) async throws {
        let server = try Self.loaded(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let jpeg = Data(try ClientFixtures.bytes("rocket.jpg"))

        // README: diary
        struct Purchase: Codable, Sendable {
            var store: String
            var item: String
            var date: Date
            var price: Int
            var discount: Bool
            var comment: String
            var photoName: String?
        }
        let diary = client.collection("items", of: Purchase.self)
        let lunch = try await diary.create(
            Purchase(store: "7-Eleven", item: "鮪魚飯糰", date: .now, price: 35, discount: true, comment: "好吃"))
        let photo = try await client.blobPut(jpeg, attachTo: BlobAttachment(collection: "items", id: lunch.id))
        let withPhoto = try await diary.update(lunch) { $0.photoName = photo.id.uuidString }
        let row = try await client.thumbnail(photo.id, maxSide: 256).bytes  // a small JPEG for the list's row
        let bargains = try await diary.search(Field("price") < 50 && Field("discount") == true).collect()
        // README end

        #expect(withPhoto.value.photoName == photo.id.uuidString)
        #expect(row.starts(with: [0xFF, 0xD8]) && row.count < jpeg.count)
        // Three sample purchases and the new one are under 50 with a discount.
        #expect(Set(bargains.map(\.value.item)) == ["鮪魚飯糰", "Instant noodles 泡麵", "御飯糰 Onigiri"])
        #expect(bargains.count == 4)
        try await diary.delete(lunch.id)
        let gone = await #expect(throws: LarderError.self) { _ = try await client.blobHead(photo.id) }
        #expect(gone?.status == .notFound, "the photo goes with its purchase")
    }

    @Test(arguments: [ServerStore.sqlite, .postgres])
    func todoList(_ store: ServerStore) async throws {
        let server = try Self.loaded(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let shown = Locked<[UUID]>([])
        func show<Model>(_ todo: Stored<Model>) { shown.withLock { $0.append(todo.id) } }
        func hide(_ id: UUID) {}
        func reload() {}

        // README: todos
        struct Todo: Codable, Sendable {
            var title: String
            var isFinish: Bool
        }
        let todos = client.collection("todos", of: Todo.self)
        let changes = try await todos.changes()  // another device's list, kept up to date
        let live = Task {
            for try await change in changes {
                switch change.kind {
                case .created(let todo), .updated(let todo): show(todo)
                case .deleted(let id), .left(let id): hide(id)
                default: reload()
                }
            }
        }
        let milk = try await todos.create(Todo(title: "Buy oat milk 買燕麥奶", isFinish: false))
        let done = try await todos.update(milk) { $0.isFinish = true }
        let left = try await todos.count(Field("isFinish") == false)
        // README end

        #expect(done.value.isFinish && done.rev == 2)
        #expect(left == 3, "three sample todos are open; the new one is done")
        let seen = await waitUntil(120) { shown.withLock { $0.count >= 2 } }
        #expect(seen && shown.withLock { $0 } == [milk.id, milk.id], "created, then updated")
        changes.cancel()
        live.cancel()
    }

    @Test(arguments: [ServerStore.sqlite, .postgres])
    func todosSortedByTitleUnderACollation(_ store: ServerStore) async throws {
        let server = try Self.loaded(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)

        // README: sorted todos
        for title in ["Walk the dog", "apple pie"] { _ = try await todos.create(Todo(title: title, isFinish: false)) }
        let byTitle = try await todos.search(sortedBy: [Field("title").ascending.collated("en")]).collect()
        // "apple pie", "Buy milk 買牛奶", ..., "Walk the dog", "預約牙醫"
        // README end

        #expect(
            byTitle.map(\.value.title) == [
                "apple pie", "Buy milk 買牛奶", "Finish SwiftUI chapter 13", "Return library books 還書", "Walk the dog",
                "預約牙醫",
            ])
        let bytes = try await todos.search(sortedBy: [Field("title").ascending]).collect()
        #expect(bytes.first?.value.title == "Buy milk 買牛奶" && bytes.map(\.value.title).last == "預約牙醫")
    }

    @Test(arguments: [ServerStore.sqlite, .postgres])
    func studentSearch(_ store: ServerStore) async throws {
        let server = try Self.loaded(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        // README: students
        struct Student: Codable, Sendable {
            var name: String
            var birthday: String
            var score: String
            var address: String
        }
        let students = client.collection("students", of: Student.self)
        let inBeijing = try await students.search(containing: "北京", in: [Field("address")]).collect()
        let topThree = try await students.search(sortedBy: [Field("score").descending], limit: 3).collect()
        // README end

        #expect(Set(inBeijing.map(\.value.name)) == ["张三", "王五", "赵六", "Alice Wang"])
        #expect(topThree.map(\.value.name) == ["周八", "张三", "赵六"])
    }

    @Test(arguments: [ServerStore.sqlite, .postgres])
    func catalogueSections(_ store: ServerStore) async throws {
        let server = try Self.loaded(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        // README: catalogue
        struct CatalogueItem: Codable, Sendable {
            var category: String
            var name: String
            var imageName: String
            var description: String
        }
        let catalogue = client.collection("pokemon_items", of: CatalogueItem.self)
        let sections = try await catalogue.group(by: Field("category"), perGroup: 100)  // "Ball", then "Medicine"
        let titles = sections.map { "\($0.key.stringValue ?? "Other") (\($0.count))" }
        let rows = sections.map { $0.records.map(\.value.name) }
        // README end

        #expect(titles == ["Ball (4)", "Medicine (3)"])
        #expect(rows[0].count == 4 && rows[0].contains("master-ball") && rows[1].contains("antidote"))
    }

    /// Each Swift block of README's first screen (before "Quick start") and of its "Apps" section is one of this
    /// file's `// README:` regions, as written.
    @Test func theReadmeShowsThisCode() throws {
        let readme = try String(contentsOf: Self.repository.appendingPathComponent("README.md"), encoding: .utf8)
        guard let quickStart = readme.range(of: "\n## Quick start\n"), let start = readme.range(of: "\n## Apps\n")
        else {
            Issue.record("README.md has no Quick start or no Apps section")
            return
        }
        let section = readme[start.upperBound...]
        let end = section.range(of: "\n## ")?.lowerBound ?? section.endIndex
        let lines = readme[..<quickStart.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
            + section[..<end].split(separator: "\n", omittingEmptySubsequences: false)
        let blocks = ReadmeText.swiftBlocks(lines)
        let regions = try ReadmeText.regions(ofFile: #filePath)
        #expect(blocks.count == 7, "README's first screen and Apps section have \(blocks.count) Swift blocks")
        #expect(regions.count == 7)
        for block in blocks {
            #expect(regions.contains(block), "README's Apps block is not this file's code:\n\(block)")
        }
    }
}
