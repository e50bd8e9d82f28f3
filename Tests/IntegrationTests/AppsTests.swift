import Foundation
import LarderClient
import LarderTestSupport
import LarderTestThreads
import Testing

/// Where an app's server runs: in the test process, or as the `larder-server` binary, as a user runs it.
enum AppBackend: String, CaseIterable, Sendable, CustomStringConvertible {
    case inProcess = "in-process server"
    case process = "larder-server process"
    /// The binary with TLS on its TCP port (test certificates made by `openssl`); clients verify it against the CA.
    case tls = "larder-server process over TLS"

    var description: String { rawValue }
}

/// A server for an app test on either backend, restartable on the same port and data.
final class AppServer: @unchecked Sendable {
    let port: Int
    private let inProcess: ClientTestServer?
    private var child: ServerChild?
    private let directory: String
    /// The process's store options: `--postgres` with a schema of its own on PostgreSQL, none on SQLite; and TLS.
    private let storeArguments: [String]
    private let schema: TestSchema?
    /// What clients need to reach a server over TLS.
    let tls: LarderClient.TLSSettings?

    init(_ backend: AppBackend, _ store: ServerStore = .sqlite) throws {
        let certificates = TestCertificates.shared
        let tlsArguments = backend == .tls
            ? ["--tls-cert", certificates.serverCertificate, "--tls-key", certificates.serverKey] : []
        tls = backend == .tls ? .init(caFile: certificates.caFile) : nil
        switch backend {
        case .inProcess:
            let server = try ClientTestServer(store)
            inProcess = server
            port = server.port
            directory = server.directory
            storeArguments = []
            schema = nil
        case .process, .tls:
            inProcess = nil
            directory = NSTemporaryDirectory() + "larder-app-\(UUID().uuidString)"
            schema = store == .postgres ? try TestPostgres.newSchema() : nil
            storeArguments = (schema.map { ["--postgres", $0.url] } ?? []) + tlsArguments
            let server = try ServerChild(dataDirectory: directory, arguments: storeArguments)
            child = server
            port = server.port
        }
    }

    func client() -> LarderClient {
        LarderClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: port), tls: tls))
    }

    /// The `larder` CLI's options to reach this server.
    var cliOptions: [String] {
        ["--port", String(port)] + (tls.map { ["--tls", "--ca", $0.caFile ?? ""] } ?? [])
    }

    /// Stops the server cleanly and starts it again on the same port and data.
    func restart() throws {
        if let inProcess { try inProcess.restart() }
        if let old = child {
            #expect(old.stop() == 0)
            child = try ServerChild(dataDirectory: directory, arguments: ["--port", "\(port)"] + storeArguments)
        }
    }

    func stop() {
        inProcess?.stop()
        if let child {
            _ = child.stop()
            try? FileManager.default.removeItem(atPath: directory)
            try? FileManager.default.removeItem(atPath: child.logPath)
            schema?.drop()
        }
    }
}

/// The five apps Larder was made for, replayed through the typed client with their own model structs (the shapes of
/// samples/README.md), each on an in-process server, on a `larder-server` process and on one over TLS, on SQLite and on
/// PostgreSQL.
///
/// After a server restart a test reopens its client's connection (`close()`): the client hears of the old one's end
/// on its reader thread, which a busy machine may run late, and a request sent on it meanwhile would fail (the
/// reconnect after such a failure is ClientLibraryTests' business).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct AppsTests {
    struct Profile: Codable, Sendable, Equatable {
        var name: String
        var phone: String
        var height: Double
        var weight: Double
        var birthday: Date
        var zodiacSign: String
        var isMale: Bool
    }

    @Test(arguments: AppBackend.allCases, ServerStore.allCases)
    func profileBookSurvivesARestart(_ backend: AppBackend, _ store: ServerStore) async throws {
        let server = try AppServer(backend, store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let book = client.collection("profiles", of: Profile.self)
        let date = { (text: String) in ISO8601DateFormatter().date(from: text)! }
        let ming = try await book.create(
            Profile(
                name: "王小明", phone: "0912-345-678", height: 172.5, weight: 64.2, birthday: date("1995-02-14T00:00:00Z"),
                zodiacSign: "Aquarius 水瓶座", isMale: true))
        let lin = try await book.create(
            Profile(
                name: "林怡君", phone: "0988-111-222", height: 160, weight: 50.5, birthday: date("1998-08-30T00:00:00Z"),
                zodiacSign: "Virgo 處女座", isMale: false))
        let emily = try await book.create(
            Profile(
                name: "Emily Chen", phone: "+1 415 555 0101", height: 165.3, weight: 55,
                birthday: date("2001-12-25T00:00:00Z"), zodiacSign: "Capricorn 摩羯座", isMale: false))
        var edited = lin
        edited.value.weight = 51.0
        edited.value.phone = "0988-000-111"
        let saved = try await book.save(edited)
        // A second device saves the profile it read before that edit: refused, and the edit stands.
        var stale = lin
        stale.value.zodiacSign = "Leo 獅子座"
        let conflict = await #expect(throws: LarderError.self) { _ = try await book.save(stale) }
        #expect(conflict?.status == .conflict)
        try await book.delete(emily.id)

        try server.restart()
        client.close()
        let after = try await book.all()
        #expect(after.map(\.id) == [ming.id, lin.id])
        #expect(after[0].value == ming.value)
        #expect(after[1].value == saved.value && after[1].rev == 2)
        let gone = await #expect(throws: LarderError.self) { _ = try await book.get(emily.id) }
        #expect(gone?.status == .notFound)
        let deletedAgain = await #expect(throws: LarderError.self) { _ = try await book.delete(emily.id) }
        #expect(deletedAgain?.status == .notFound)
    }

    struct Purchase: Codable, Sendable, Equatable {
        var store: String
        var item: String
        var date: Date
        var price: Int
        var discount: Bool
        var comment: String
        var photoName: String?
        /// The photo's blob.
        var photo: UUID?
    }

    @Test(arguments: AppBackend.allCases, ServerStore.allCases)
    func shopDiaryPhotosGoWithTheirPurchase(_ backend: AppBackend, _ store: ServerStore) async throws {
        let server = try AppServer(backend, store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let diary = client.collection("items", of: Purchase.self)
        var purchase = try await diary.create(
            Purchase(
                store: "7-Eleven", item: "鮪魚飯糰", date: Date(timeIntervalSince1970: 1_714_566_600), price: 35,
                discount: true, comment: "好吃，但有點小"))
        let attachment = BlobAttachment(collection: "items", id: purchase.id)
        let first = try ClientFixtures.bytes("rocket.jpg")
        let photo = try await client.blobPut(Data(first), attachTo: attachment)
        purchase.value.photo = photo.id
        purchase = try await diary.save(purchase)
        let shown = try await diary.get(purchase.id)
        let shownBytes = try await client.blobGet(try #require(shown.value.photo)).bytes
        #expect(ClientFixtures.sha256(Array(shownBytes)) == photo.sha256)
        #expect(photo.sha256 == ClientFixtures.sha256(first) && photo.width > 0 && photo.height > 0)

        // A better photo replaces it: the new one is attached and saved, the old one deleted.
        let second = try ClientFixtures.bytes("grace_hopper.jpg")
        let replacement = try await client.blobPut(Data(second), attachTo: attachment)
        purchase.value.photo = replacement.id
        purchase = try await diary.save(purchase)
        try await client.blobDelete(photo.id)
        let old = await #expect(throws: LarderError.self) { _ = try await client.blobGet(photo.id) }
        #expect(old?.status == .notFound)
        #expect(try await client.blobList(attachedTo: attachment).blobs.map(\.id) == [replacement.id])

        // The server restarts: the purchase and its photo are as they were.
        try server.restart()
        client.close()
        let reopened = try await diary.get(purchase.id)
        #expect(reopened.value == purchase.value && reopened.rev == purchase.rev)
        let bytes = Array(try await client.blobGet(try #require(reopened.value.photo)).bytes)
        #expect(bytes == second && ClientFixtures.sha256(bytes) == replacement.sha256)
        #expect(try await client.blobList(attachedTo: attachment).blobs.map(\.id) == [replacement.id])

        // Deleting the purchase deletes its photo.
        let deleted = try await diary.delete(purchase.id)
        #expect(deleted.blobsDeleted == 1)
        let gone = await #expect(throws: LarderError.self) { _ = try await client.blobHead(replacement.id) }
        #expect(gone?.status == .notFound)
    }

    struct Todo: Codable, Sendable, Equatable {
        var title: String
        var isFinish: Bool
    }

    @Test(arguments: AppBackend.allCases, ServerStore.allCases)
    func todoListWithClientMadeIDsSurvivesARestart(_ backend: AppBackend, _ store: ServerStore) async throws {
        let server = try AppServer(backend, store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)
        let items = [
            (UUID(), Todo(title: "Buy milk 買牛奶", isFinish: false)),
            (UUID(), Todo(title: "Finish SwiftUI chapter 13", isFinish: true)),
            (UUID(), Todo(title: "預約牙醫", isFinish: false)),
        ]
        for (id, todo) in items { #expect(try await todos.create(todo, id: id).id == id) }
        let duplicate = await #expect(throws: LarderError.self) {
            _ = try await todos.create(items[0].1, id: items[0].0)
        }
        #expect(duplicate?.status == .conflict)
        let toggled = try await todos.patch(items[0].0, ["isFinish": true])
        #expect(toggled.value.isFinish && toggled.rev == 2)
        let back = try await todos.patch(items[0].0, ["isFinish": false], rev: 2)
        #expect(!back.value.isFinish && back.rev == 3)
        try await todos.delete(items[2].0)
        let open = try await todos.search(filter: .compare(try FieldPath("isFinish"), .eq, false))
        #expect(open.records.map(\.id) == [items[0].0])
        #expect(try await todos.get(items.map(\.0)).map(\.id) == [items[0].0, items[1].0])
        let before = try await todos.all()

        try server.restart()
        client.close()
        let after = try await todos.all()
        #expect(after.map(\.id) == before.map(\.id) && after.map(\.value) == before.map(\.value))
        let revs = Dictionary(uniqueKeysWithValues: after.map { ($0.id, $0.rev) })
        #expect(revs == [items[0].0: 3, items[1].0: 1])
        // The list goes on where it was.
        let added = try await todos.create(Todo(title: "Return library books 還書", isFinish: false), id: UUID())
        #expect(try await todos.count(filter: .compare(try FieldPath("isFinish"), .eq, false)) == 2)
        #expect(Set(try await todos.all().map(\.id)) == Set(after.map(\.id) + [added.id]))
    }

    struct Student: Codable, Sendable, Equatable {
        var name: String
        var birthday: String
        var score: String
        var address: String
    }

    enum Scope { case all, name, address }

    /// The student register's records, in the order they are added.
    static let students = [
        Student(name: "张三", birthday: "2000-01-01", score: "92", address: "北京市海淀区中关村大街1号"),
        Student(name: "李四", birthday: "2001-03-15", score: "85", address: "上海市浦东新区世纪大道100号"),
        Student(name: "Hedon", birthday: "1999-11-11", score: "78", address: "Guangzhou Tianhe Road 208"),
        Student(name: "王五", birthday: "2002-07-07", score: "66", address: "北京市朝阳区建国路88号"),
        Student(name: "北京 Fan", birthday: "2003-03-03", score: "70", address: "Taipei"),
    ]

    @Test(arguments: AppBackend.allCases, ServerStore.allCases)
    func studentRegisterSearchScopes(_ backend: AppBackend, _ store: ServerStore) async throws {
        let server = try AppServer(backend, store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let register = client.collection("students", of: Student.self)
        let students = AppsTests.students
        var stored: [Stored<Student>] = []
        for student in students { stored.append(try await register.create(student)) }
        /// Names in the order the search gives them (creation order, the app's list order).
        func names(_ text: String, _ scope: Scope) async throws -> [String] {
            let fields: [FieldPath]? =
                switch scope {
                case .all: nil
                case .name: [try FieldPath("name")]
                case .address: [try FieldPath("address")]
                }
            return try await register.search(text: TextQuery(query: text, fields: fields)).values.map(\.name)
        }
        #expect(try await names("北京", .address) == ["张三", "王五"])
        #expect(try await names("北京", .name) == ["北京 Fan"])
        #expect(try await names("北京", .all) == ["张三", "王五", "北京 Fan"])
        #expect(try await names("hedon", .all) == ["Hedon"])
        #expect(try await names("TIANHE", .address) == ["Hedon"])
        #expect(try await register.count(text: TextQuery(query: "北京", fields: [try FieldPath("address")])) == 2)
        // One character, as the search field shows results from the first keystroke.
        #expect(try await names("王", .name) == ["王五"])
        #expect(try await names("北", .all) == ["张三", "王五", "北京 Fan"])
        #expect(try await names("h", .name) == ["Hedon"])
        #expect(try await names("1", .address) == ["张三", "李四"])
        #expect(try await names("區", .all) == [])
        // The order the app asks for: by score, best first.
        let ranked = try await register.search(sort: [SortKey(field: try FieldPath("score"), descending: true)])
        #expect(ranked.values.map(\.name) == ["张三", "李四", "Hedon", "北京 Fan", "王五"])

        // 王五 moves to Shanghai: found there, no longer in Beijing.
        var moved = stored[3]
        moved.value.address = "上海市徐汇区衡山路1号"
        _ = try await register.save(moved)
        #expect(try await names("北京", .address) == ["张三"])
        #expect(try await names("上海", .address) == ["李四", "王五"])
        #expect(try await names("衡山路", .all) == ["王五"])
        // 张三 leaves: no search finds him.
        try await register.delete(stored[0].id)
        #expect(try await names("北京", .address) == [])
        #expect(try await names("张", .all) == [])
        #expect(try await names("北京", .all) == ["北京 Fan"])
        #expect(try await register.count(text: TextQuery(query: "中关村")) == 0)
    }

    struct CatalogueItem: Codable, Sendable, Equatable {
        var category: String
        var name: String
        var imageName: String
        var description: String
    }

    @Test(arguments: AppBackend.allCases, ServerStore.allCases)
    func catalogueSectionsAndDetail(_ backend: AppBackend, _ store: ServerStore) async throws {
        let server = try AppServer(backend, store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let catalogue = client.collection("pokemon_items", of: CatalogueItem.self)
        // Thirteen balls (more than a section shows) and three medicines, made interleaved.
        let balls = ["poke", "great", "ultra", "master", "safari", "net", "dive", "nest", "repeat", "timer", "luxury",
                     "premier", "dusk"].map { "\($0)-ball" }
        let medicines = ["antidote", "awakening", "full-restore"]
        var made: [String] = []
        for (n, name) in balls.enumerated() {
            made.append(name)
            _ = try await catalogue.create(
                CatalogueItem(category: "Ball", name: name, imageName: name, description: "About \(name) Pokémon"))
            if n < medicines.count {
                made.append(medicines[n])
                _ = try await catalogue.create(
                    CatalogueItem(
                        category: "Medicine", name: medicines[n], imageName: medicines[n],
                        description: "About \(medicines[n]) Pokémon"))
            }
        }
        let sections = try await catalogue.group(by: "category")
        #expect(sections.map(\.key) == ["Ball", "Medicine"])
        #expect(sections.map(\.count) == [13, 3])
        // Inside a section, the order they were added in; the section shows its first ten.
        #expect(sections[0].records.map(\.value.name) == Array(balls.prefix(GroupRequest.defaultPerGroup)))
        #expect(sections[1].records.map(\.value.name) == medicines)
        // "Show all" pages through the whole category, in the same order.
        var all: [String] = []
        var cursor: String?
        repeat {
            let page = try await catalogue.search(
                SearchQuery(filter: .compare(try FieldPath("category"), .eq, "Ball"), limit: 5, cursor: cursor))
            all += page.values.map(\.name)
            cursor = page.nextCursor
        } while cursor != nil
        #expect(all == balls)
        let row = try #require(sections[0].records.first)
        let detail = try await catalogue.get(row.id)
        #expect(detail.value == row.value)
        #expect(detail.value.description == "About poke-ball Pokémon")
    }

    /// The sample records of samples/, loaded as samples/README.md says (`larder import --mode upsert`, twice: it
    /// can run again without doubling anything), read by each app with its model.
    @Test(arguments: AppBackend.allCases)
    func theSamplesLoadIntoEachApp(_ backend: AppBackend) async throws {
        let server = try AppServer(backend)
        defer { server.stop() }
        let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("samples")
        var expected: [String: [JSON]] = [:]
        for name in ["profiles", "items", "todos", "students", "pokemon_items"] {
            let file = samples.appendingPathComponent("\(name).json").path
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
            let records = try #require(try JSONParser.parse(bytes).arrayValue)
            let port = server.cliOptions
            let n = records.count
            var r = try CLITests.run(["import", name, file, "--mode", "upsert"] + port)
            #expect(r.status == 0 && r.stderr.contains("created: \(n), replaced: 0, errors: 0"), "\(r.stderr)")
            r = try CLITests.run(["import", name, file, "--mode", "upsert"] + port)
            #expect(r.status == 0 && r.stderr.contains("created: 0, replaced: \(n), errors: 0"), "\(r.stderr)")
            expected[name] = records.compactMap { $0["data"] }
            // Every record arrived with its id and data as in the file (the import runs many at once: any order).
            let exported = try CLITests.run(["export", name] + port).json
            func idAndData(_ record: JSON) -> JSON { ["id": record["id"] ?? nil, "data": record["data"] ?? nil] }
            #expect(Set(exported.map(idAndData)) == Set(records.map(idAndData)), "\(name)")
        }
        let client = server.client()
        defer { client.close() }
        func names(_ name: String, _ key: String) -> Set<String> {
            Set((expected[name] ?? []).compactMap { $0[key]?.stringValue })
        }
        let profiles = try await client.collection("profiles", of: Profile.self).all()
        #expect(Set(profiles.map(\.value.name)) == names("profiles", "name"))
        let purchases = try await client.collection("items", of: Purchase.self).all()
        #expect(Set(purchases.map(\.value.item)) == names("items", "item"))
        #expect(purchases.allSatisfy { $0.value.photo == nil && $0.value.photoName == nil })
        let todos = try await client.collection("todos", of: Todo.self).all()
        #expect(Set(todos.map(\.value.title)) == names("todos", "title"))
        let register = client.collection("students", of: Student.self)
        #expect(Set(try await register.all().map(\.value.name)) == names("students", "name"))
        // README's examples hold on them.
        let beijing = try await register.search(text: TextQuery(query: "北京", fields: [try FieldPath("address")]))
        #expect(!beijing.records.isEmpty && beijing.values.allSatisfy { $0.address.contains("北京") })
        let cheap = try await client.collection("items", of: Purchase.self).search(
            filter: .and([.compare(try FieldPath("price"), .lt, 50), .compare(try FieldPath("discount"), .eq, true)]))
        #expect(!cheap.records.isEmpty && cheap.values.allSatisfy { $0.price < 50 && $0.discount })
        let sections = try await client.collection("pokemon_items", of: CatalogueItem.self).group(by: "category")
        #expect(sections.map(\.key) == ["Ball", "Medicine"])
        #expect(sections.map(\.count).reduce(0, +) == expected["pokemon_items"]?.count)
    }
}
