import Foundation
import LarderClient
import Testing

/// The library example in README.md, run as written against a real server, so the README cannot drift.
@Suite(.timeLimit(.minutes(20))) struct ReadmeExampleTests {
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
        let cheap = try await purchases.search(filter: .compare(try FieldPath("price"), .lt, 50), sort: [], limit: 20)

        #expect(cheap.values.map(\.item) == ["鮪魚飯糰"])
        #expect(photo.attachedTo?.id == saved.id)
        try await purchases.delete(saved.id)
        let gone = await #expect(throws: LarderError.self) { _ = try await client.blobHead(photo.id) }
        #expect(gone?.status == .notFound)
        client.close()
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
