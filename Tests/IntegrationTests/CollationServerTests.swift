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

    /// Chinese by pinyin and Japanese through a server on each store: the same order from both, and pinyin's as its
    /// readers read it.
    @Test func chineseAndJapaneseSortAlikeThroughBothStores() async throws {
        let words = [
            "zh-u-co-pinyin": ["北京", "上海", "广州", "深圳", "杭州", "成都", "重庆", "阿里", "西安", "南京"],
            "ja": ["さくら", "サクラ", "あい", "アイ", "かき", "カキ", "ひらがな", "東京", "京都", "ん"],
        ]
        var orders: [ServerStore: [String: [String]]] = [:]
        for store in ServerStore.allCases {
            let server = try ClientTestServer(store)
            defer { server.stop() }
            let client = LarderClient(host: "127.0.0.1", port: server.port)
            defer { client.close() }
            for (collation, titles) in words {
                let books = client.collection("books_\(collation == "ja" ? "ja" : "zh")", of: Book.self)
                for title in titles { _ = try await books.create(Book(title: title)) }
                let read = try await books.search(sortedBy: [Field("title").ascending.collated(collation)], pageSize: 4)
                    .collect()
                orders[store, default: [:]][collation] = read.map(\.value.title)
            }
        }
        #expect(orders[.sqlite] == orders[.postgres], "the stores disagree: \(orders)")
        #expect(
            orders[.sqlite]?["zh-u-co-pinyin"] == ["阿里", "北京", "成都", "重庆", "广州", "杭州", "南京", "上海", "深圳", "西安"])
        #expect(orders[.sqlite]?["ja"]?.count == 10)
    }

    /// 2,500 records read 100 at a time under a collation through a server, with records inserted between pages:
    /// every record that was there from the start is read exactly once, in the collation's order.
    @Test(arguments: ServerStore.allCases)
    func pagingUnderACollationSkipsAndRepeatsNothing(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let syllables = ["ä", "a", "o", "ö", "ss", "ß", "u", "ü", "B", "b", "Z", "z"]
        func title(_ n: Int) -> String {
            "\(syllables[n % 12])\(syllables[(n / 12) % 12])\(syllables[(n / 144) % 12]) \(n)"
        }
        var initial = Set<UUID>()
        for n in 0..<2_500 { initial.insert(try await client.create("words", ["title": .string(title(n))]).id) }
        var query = try SearchQuery(json: [
            "limit": 100, "sort": [["field": "title", "order": "asc", "collation": "de", "strength": 2]],
        ])
        var seen: [UUID] = []
        var inserted = 2_500
        repeat {
            let page = try await client.search("words", query)
            seen += page.records.map(\.id)
            query.cursor = page.nextCursor
            // Records that sort before, within and after the pages read so far.
            for _ in 0..<7 {
                _ = try await client.create("words", ["title": .string(title(inserted * 7 % 3_001))])
                inserted += 1
            }
        } while query.cursor != nil
        #expect(seen.count == Set(seen).count, "a record was read twice")
        #expect(initial.isSubset(of: Set(seen)), "\(initial.subtracting(seen).count) records were skipped")
        // The whole read, in one go afterwards, has the pages' records in the same order.
        var all: [UUID] = []
        query.cursor = nil
        query.limit = 1_000
        repeat {
            let page = try await client.search("words", query)
            all += page.records.map(\.id)
            query.cursor = page.nextCursor
        } while query.cursor != nil
        let seenSet = Set(seen)
        #expect(all.filter { seenSet.contains($0) } == seen, "the pages' order is not the collation's")
    }
}
