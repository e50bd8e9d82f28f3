import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Sorts under an ICU collation (`SortKey.collation`): the words of several languages in the order people read them,
/// the same on SQLite and PostgreSQL, ascending and descending, whole and in pages; keyset cursors that neither skip
/// nor repeat under inserts between pages; unknown locales refused naming the field.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CollationTests {
    /// Per language: the collation, and its words in the order they are created.
    static let languages: [(collation: String, strength: Int?, words: [String])] = [
        ("en", nil, ["Walk the dog", "apple pie", "Apple", "apple", "zebra", "Zoo", "éclair", "eclair", "banana", "Éclair"]),
        ("en", 1, ["Walk the dog", "apple pie", "Apple", "apple", "zebra", "Zoo", "éclair", "eclair", "banana", "Éclair"]),
        ("de", nil, ["Straße", "Strasse", "Strauß", "Äpfel", "Apfel", "Bär", "Bahn", "Öl", "Ofen", "Übel", "Ufer", "zahl", "Zug"]),
        ("zh-u-co-pinyin", nil, ["北京", "上海", "广州", "深圳", "杭州", "成都", "重庆", "阿里", "西安", "南京"]),
        ("ja", nil, ["さくら", "サクラ", "あい", "アイ", "かき", "カキ", "ひらがな", "東京", "京都", "ん"]),
    ]

    /// The `title`s of every record of `collection`, sorted under `collation`, read in pages of `limit`.
    static func titles(
        _ store: AnyStore, _ collection: String, _ key: SortKey, limit: Int
    ) throws -> [String] {
        var query = SearchQuery(sort: [key], limit: limit)
        var titles: [String] = []
        while true {
            let page = try store.search(collection, query)
            titles += try page.records.map { try $0.decodedData()["title"]?.stringValue ?? "" }
            guard let next = page.nextCursor else { return titles }
            query.cursor = next
        }
    }

    /// Every language's order on `kind`, ascending and descending, whole and in pages of 3 (which must agree).
    static func orders(_ kind: StoreKind) throws -> [String: [String]] {
        try withStore(kind) { store in
            var orders: [String: [String]] = [:]
            for (n, language) in languages.enumerated() {
                let collection = "words\(n)"
                for word in language.words {
                    _ = try store.create(collection, id: nil, data: ["title": .string(word)])
                }
                // A number and a missing title sort apart from the strings, as without a collation.
                _ = try store.create(collection, id: nil, data: ["title": 7])
                _ = try store.create(collection, id: nil, data: [:])
                for descending in [false, true] {
                    let key = SortKey(
                        field: try FieldPath("title"), descending: descending, collation: language.collation,
                        strength: language.strength)
                    let whole = try titles(store, collection, key, limit: 100)
                    #expect(try titles(store, collection, key, limit: 3) == whole, "\(kind) \(key.json) in pages")
                    orders["\(language.collation)/\(language.strength ?? 3)/\(descending ? "desc" : "asc")"] = whole
                }
            }
            return orders
        }
    }

    @Test func eachLanguageSortsAsItsReadersReadAndBothStoresAgree() throws {
        let sqlite = try Self.orders(.sqlite)
        let postgres = try Self.orders(.postgres)
        for (label, order) in sqlite.sorted(by: { $0.key < $1.key }) {
            print("collation \(label): \(order.joined(separator: " | "))")
            #expect(postgres[label] == order, "\(label): SQLite \(order), PostgreSQL \(postgres[label] ?? [])")
        }
        // English: case and accents count after the letters, lower case first. German: umlauts beside their base
        // letters, ß as ss. Japanese: by kana order, hiragana before katakana of the same sound, kanji after kana.
        let pairs: [(String, [String])] = [
            ("en/3/asc", [
                "apple", "Apple", "apple pie", "banana", "eclair", "éclair", "Éclair", "Walk the dog", "zebra", "Zoo",
            ]),
            ("en/3/desc", ["Walk the dog", "apple pie"]),
            ("de/3/asc", ["Apfel", "Äpfel", "Bahn", "Ofen", "Öl", "Strasse", "Straße", "Strauß", "Übel", "Ufer", "zahl"]),
            // Kanji by JIS X 0208's order of their readings: 京 (kyō) before 東 (tō).
            ("ja/3/asc", ["あい", "アイ", "かき", "カキ", "さくら", "サクラ", "ひらがな", "ん", "京都", "東京"]),
        ]
        for (label, words) in pairs {
            let order = sqlite[label] ?? []
            #expect(order.filter { words.contains($0) } == words, "\(label): \(words) in this order in \(order)")
        }
        // Chinese by pinyin: a, bei, cheng, chong, guang, hang, nan, shang, shen, xi.
        let pinyin = (sqlite["zh-u-co-pinyin/3/asc"] ?? []).filter { $0.unicodeScalars.first.map { $0.value > 0x3000 } ?? false }
        #expect(pinyin == ["阿里", "北京", "成都", "重庆", "广州", "杭州", "南京", "上海", "深圳", "西安"])
    }

    @Test(arguments: StoreKind.allCases) func bytesStayTheDefault(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            for word in ["apple pie", "Walk the dog"] { _ = try store.create("c", id: nil, data: ["title": .string(word)]) }
            let titles = try Self.titles(store, "c", SortKey(field: try FieldPath("title")), limit: 10)
            #expect(titles == ["Walk the dog", "apple pie"])
            let read = try Self.titles(store, "c", SortKey(field: try FieldPath("title"), collation: "en"), limit: 10)
            #expect(read == ["apple pie", "Walk the dog"])
        }
    }

    @Test(arguments: StoreKind.allCases) func anUnknownLocaleIsInvalidNamingTheField(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            _ = try store.create("c", id: nil, data: ["title": "a"])
            for tag in ["xx", "qq-zz", "en-", "1234"] {
                let key = SortKey(field: try FieldPath("title"), collation: tag)
                let query = SearchQuery(sort: [SortKey(field: try FieldPath("n")), key])
                #expect {
                    _ = try store.search("c", query)
                } throws: { error in
                    let error = error as? LarderError
                    return error?.status == .invalidArgument && error?.field == "sort.1.collation"
                        && error?.message.contains(tag) == true
                }
            }
        }
    }

    /// 2,500 records read 100 at a time under a collation while others are created between pages, before and after
    /// the cursor: every record there at the start is read once, none twice, in the collated order.
    @Test(arguments: StoreKind.allCases) func pagesUnderACollationSkipAndRepeatNothingUnderInserts(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let stems = ["apple", "Äpfel", "Apfel", "Straße", "strasse", "zebra", "Öl", "ofen", "北京", "さくら", "Walk"]
            var initial = Set<UUID>()
            for n in 0..<2_500 {
                let title = stems[n % stems.count] + " \(n % 97)"
                initial.insert(try store.create("many", id: nil, data: ["title": .string(title)]).id)
            }
            let key = SortKey(field: try FieldPath("title"), collation: "de", strength: 2)
            var query = SearchQuery(sort: [key], limit: 100)
            var seen: [UUID] = []
            var pages = 0
            while true {
                let page = try store.search("many", query)
                seen += page.records.map(\.id)
                pages += 1
                for (n, stem) in stems.enumerated() where n % 3 == pages % 3 {
                    _ = try store.create("many", id: nil, data: ["title": .string(stem + " new \(pages)")])
                }
                guard let next = page.nextCursor else { break }
                query.cursor = next
            }
            #expect(Set(seen).count == seen.count, "a record was read twice")
            #expect(initial.isSubset(of: Set(seen)), "\(initial.subtracting(seen).count) records were skipped")
            // What was read is in the collated order: the same records read whole come in the same order.
            let whole = try store.search("many", SearchQuery(sort: [key], limit: 1_000))
            let seenSet = Set(seen)
            let firstThousand = whole.records.map(\.id).filter { seenSet.contains($0) }
            let firstSet = Set(firstThousand)
            #expect(seen.filter { firstSet.contains($0) } == firstThousand)
        }
    }

    /// An INDEX under a collation serves the sort under it (EXPLAIN names the index) on both stores, answers the same
    /// records as without it, and is another index than the field's plain one; a bad locale is refused naming it.
    @Test(arguments: StoreKind.allCases) func aCollatedIndexServesTheSortUnderItsCollation(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let stems = ["apple", "Äpfel", "Apfel", "Straße", "strasse", "zebra", "Öl", "ofen", "Walk"]
            for n in 0..<3_000 {
                _ = try store.create("books", id: nil, data: ["title": .string(stems[n % stems.count] + " \(n)")])
            }
            let title = try FieldPath("title")
            let query = SearchQuery(sort: [SortKey(field: title, collation: "de", strength: 2)], limit: 20)
            let before = try store.search("books", query).records.map(\.id)
            let plain = try store.createIndex("books", field: title)
            let collated = try store.createIndex("books", field: title, collation: "de", strength: 2)
            #expect(collated.created && collated.name != plain.name)
            #expect(try store.createIndex("books", field: title, collation: "de", strength: 2).created == false)
            let plan: String
            if let postgres = store as? PostgresStore {
                try PGAdmin.execute(url: postgres.settings.url, "ANALYZE documents")
                plan = try postgres.explain("books", query)
                #expect(plan.contains("Index") && plan.contains("lx_"), "\(plan)")
            } else {
                let sqlite = try #require(store as? SQLiteStore)
                plan = try sqlite.explain("books", query)
                #expect(plan.contains(collated.name) && plan.contains("INDEX"), "\(plan)")
            }
            print("\(kind) plan of a sort under de/2 with its index:\n\(plan)")
            #expect(try store.search("books", query).records.map(\.id) == before)
            #expect(throws: LarderError.self) { try store.createIndex("books", field: title, collation: "xx") }
        }
    }
}
