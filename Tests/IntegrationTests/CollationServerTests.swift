import Foundation
import LarderClient
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Collations through a real server on each store: SEARCH with a collated sort key from the client's `Ordering`, an
/// INDEX under a collation, and the refusals that name `sort.N.collation` and `collation`.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CollationServerTests {
    struct Book: Codable, Sendable {
        var title: String
    }

    @Test(arguments: ServerStore.allCases)
    func collationsThroughAServer(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let books = client.collection("books", of: Book.self)
        for title in ["Zug", "Äpfel", "Straße", "apple", "Apfel", "Strasse", "Öl", "Ofen"] {
            _ = try await books.create(Book(title: title))
        }
        let index = try await client.index("books", field: "title", collation: "de", strength: 2)
        let plain = try await client.index("books", field: "title")
        #expect(index.created && plain.created && index.name != plain.name)
        let read = try await books.search(sortedBy: [Field("title").ascending.collated("de", strength: 2)], pageSize: 3)
            .collect()
        #expect(read.map(\.value.title) == ["Apfel", "Äpfel", "apple", "Ofen", "Öl", "Strasse", "Straße", "Zug"])
        let bytes = try await books.search(sortedBy: [Field("title").ascending]).collect()
        #expect(bytes.map(\.value.title) == ["Apfel", "Ofen", "Strasse", "Straße", "Zug", "apple", "Äpfel", "Öl"])

        let badSort = await #expect(throws: LarderError.self) {
            _ = try await books.search(sortedBy: [Field("title").ascending.collated("xx")]).collect()
        }
        #expect(badSort?.status == .invalidArgument && badSort?.field == "sort.0.collation")
        let badIndex = await #expect(throws: LarderError.self) {
            _ = try await client.index("books", field: "title", collation: "xx")
        }
        #expect(badIndex?.status == .invalidArgument && badIndex?.field == "collation")
        let badStrength = await #expect(throws: LarderError.self) {
            _ = try await client.index("books", field: "title", collation: "de", strength: 9)
        }
        #expect(badStrength?.status == .invalidArgument && badStrength?.field == "strength")
    }
}
