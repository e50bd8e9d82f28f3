import Foundation
import LarderClient
import LarderSync
import LarderTestThreads
import Testing

/// The library example in README.md, run as written against a real server, so the README cannot drift.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReadmeExampleTests {
    struct Purchase: Codable, Sendable {
        var store: String
        var item: String
        var date: Date
        var price: Int
        var discount: Bool
    }

    @Test func theReadmeLibraryExampleWorks() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let jpegBytes = Data(try ClientFixtures.bytes("rocket.jpg"))

        let client = LarderClient(host: "127.0.0.1", port: server.port)
        let purchases = client.collection("items", of: Purchase.self)
        let saved = try await purchases.create(Purchase(store: "7-Eleven", item: "鮪魚飯糰", date: .now, price: 35, discount: true))
        let photo = try await client.blobPut(jpegBytes, attachTo: BlobAttachment(collection: "items", id: saved.id))
        let cheap = try await purchases.search(Field("price") < 50 && Field("discount") == true, limit: 20).collect()
        var items: [String] = []
        for try await purchase in purchases.search(Field("store") == "7-Eleven", sortedBy: [Field("date").descending]) {
            items.append(purchase.value.item)
        }

        #expect(cheap.map(\.value.item) == ["鮪魚飯糰"])
        #expect(items == ["鮪魚飯糰"])
        #expect(photo.attachedTo?.id == saved.id)
        try await purchases.delete(saved.id)
        let gone = await #expect(throws: LarderError.self) { _ = try await client.blobHead(photo.id) }
        #expect(gone?.status == .notFound)
        client.close()
    }

    /// What the README's loop calls, and the loop as written.
    final class Screen: Sendable {
        let seen = Locked<[String]>([])
        func show(_ purchase: Stored<Purchase>) { seen.withLock { $0.append("show \(purchase.value.item)") } }
        func show(_ purchase: Stored<Purchase>?) {
            guard let purchase else { return seen.withLock { $0.append("nothing") } }
            seen.withLock { $0.append("show \(purchase.value.item) \(purchase.value.price) rev \(purchase.rev)") }
        }
        func hide(_ id: UUID) { seen.withLock { $0.append("hide") } }
        func reload() { seen.withLock { $0.append("reload") } }
        func print(_ id: UUID, _ text: String) { seen.withLock { $0.append("undecodable") } }

        /// The README's update of `item`, as written.
        func update(_ item: Stored<Purchase>, in purchases: LarderCollection<Purchase>) async throws {
            do {
                let updated = try await purchases.update(item) { $0.price = 42 }   // PATCH {"price":42} at item.rev
                show(updated)
            } catch where error.status == .conflict {
                let theirs = try error.currentVersion(as: Purchase.self)            // the server's version now
                show(theirs)
            }
        }

        /// The README's loop, until change `last`.
        func follow(_ purchases: LarderCollection<Purchase>, since: Int64?, until last: Int64) async throws {
            var lastSeq = since
            for try await change in try await purchases.changes(matching: Field("price") < 50, since: lastSeq) {
                switch change.kind {
                case .created(let purchase), .updated(let purchase): show(purchase)
                case .deleted(let id), .left(let id): hide(id)
                case .resync, .dropped: reload()
                case .undecodable(let id, let error): print(id, error.localizedDescription)
                }
                lastSeq = change.seq
                if lastSeq == last { break }
            }
        }
    }

    /// The README's typed update and typed changes, as written (`show`, `hide`, `reload` and `print` record what the
    /// loop did).
    @Test func theReadmeUpdateAndChangesExamplesRun() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let purchases = client.collection("items", of: Purchase.self)
        let other = server.client()
        defer { other.close() }
        let egg = Purchase(store: "全家", item: "茶葉蛋", date: .now, price: 13, discount: false)
        let item = try await purchases.create(egg)
        let screen = Screen()
        try await screen.update(item, in: purchases)
        try await screen.update(item, in: purchases)  // a revision behind now: the server's version is shown
        #expect(screen.seen.withLock { $0 } == ["show 茶葉蛋", "show 茶葉蛋 42 rev 2"])
        screen.seen.withLock { $0 = [] }

        let following = Task { try await screen.follow(purchases, since: 1, until: 4) }
        _ = try await other.create("items", ["item": "飯糰", "price": 30])
        _ = try await purchases.create(Purchase(store: "7-Eleven", item: "鮪魚飯糰", date: .now, price: 35, discount: true))
        try await WatchClientTests.within(120, "the loop's end") { try await following.value }
        // After change 1: change 2 is the egg at 42, 3 a record without the model's members (as the CLI writes
        // them), 4 the rice ball.
        #expect(screen.seen.withLock { $0 } == ["show 茶葉蛋", "undecodable", "show 鮪魚飯糰"])
    }

    struct Todo: Codable, Sendable {
        var title: String
        var isFinish: Bool
    }

    /// The README's tick and untick: two patches in flight together on one connection commit in the order started.
    @Test func theReadmeTickAndUntickEndUnticked() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)
        for _ in 0..<50 {
            let id = try await todos.create(Todo(title: "Buy milk", isFinish: false)).id

            let tick = Task.immediate { try await todos.patch(id, ["isFinish": true]) }
            let untick = Task.immediate { try await todos.patch(id, ["isFinish": false]) }  // commits after `tick`

            #expect(try await tick.value.rev == 2)
            #expect(try await untick.value.rev == 3)
            #expect(try await todos.get(id).value.isFinish == false)
        }
    }
}
