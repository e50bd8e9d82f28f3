import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// One row of the search table: a collection, a SEARCH request as JSON, and the expected values of `key`, in order.
struct SearchCase: CustomStringConvertible, Sendable {
    var name: String
    var collection: String
    var request: String
    var key: String
    var expected: [String]
    var description: String { name }
}

let searchCases: [SearchCase] = [
    // Text search over every string field, Chinese at 1, 2 and 3+ characters.
    .init(name: "all fields, 2 Chinese chars", collection: "students",
          request: #"{"text":{"query":"北京"},"sort":[{"field":"birthday"}]}"#, key: "name", expected: ["张三", "王五"]),
    .init(name: "all fields, 1 Chinese char", collection: "students",
          request: #"{"text":{"query":"北"},"sort":[{"field":"birthday"}]}"#, key: "name", expected: ["张三", "王五"]),
    .init(name: "all fields, 1 char in two cities", collection: "students",
          request: #"{"text":{"query":"海"},"sort":[{"field":"birthday"}]}"#, key: "name", expected: ["张三", "李四"]),
    .init(name: "all fields, 5 Chinese chars", collection: "students",
          request: #"{"text":{"query":"北京市海淀"}}"#, key: "name", expected: ["张三"]),
    .init(name: "all fields, 3 chars across no boundary", collection: "students",
          request: #"{"text":{"query":"区中关"}}"#, key: "name", expected: ["张三"]),
    .init(name: "Latin, case-insensitive", collection: "students",
          request: #"{"text":{"query":"HEDON"}}"#, key: "name", expected: ["Hedon"]),
    .init(name: "Latin 2 chars in name scope", collection: "students",
          request: #"{"text":{"query":"He","fields":["name"]}}"#, key: "name", expected: ["Hedon"]),
    .init(name: "name scope excludes address", collection: "students",
          request: #"{"text":{"query":"北京","fields":["name"]}}"#, key: "name", expected: []),
    .init(name: "address scope, 1 char", collection: "students",
          request: #"{"text":{"query":"区","fields":["address"]},"sort":[{"field":"birthday","order":"desc"}]}"#,
          key: "name", expected: ["王五", "李四", "张三"]),
    .init(name: "address scope, Latin word", collection: "students",
          request: #"{"text":{"query":"ROAD","fields":["address"]}}"#, key: "name", expected: ["Hedon"]),
    .init(name: "name or address scope", collection: "students",
          request: #"{"text":{"query":"王","fields":["name","address"]}}"#, key: "name", expected: ["王五"]),
    .init(name: "no match across two fields", collection: "students",
          request: #"{"text":{"query":"张三北京"}}"#, key: "name", expected: []),
    .init(name: "mixed script, emoji", collection: "items",
          request: #"{"text":{"query":"sweet 🍯"}}"#, key: "item", expected: ["Iced latte 冰拿鐵"]),
    .init(name: "text with filter", collection: "students",
          request: #"{"text":{"query":"北京"},"filter":{"field":"score","op":"gt","value":"70"}}"#,
          key: "name", expected: ["张三"]),
    // Filters.
    .init(name: "lt, sorted asc", collection: "items",
          request: #"{"filter":{"field":"price","op":"lt","value":40},"sort":[{"field":"price"}]}"#,
          key: "item", expected: ["茶葉蛋", "鮪魚飯糰"]),
    .init(name: "and", collection: "items",
          request: #"{"filter":{"and":[{"field":"discount","op":"eq","value":true},{"field":"price","op":"gte","value":40}]}}"#,
          key: "item", expected: ["Instant noodles 泡麵"]),
    .init(name: "or, sorted desc", collection: "items",
          request: #"{"filter":{"or":[{"field":"price","op":"eq","value":13},{"field":"price","op":"eq","value":55}]},"sort":[{"field":"price","order":"desc"}]}"#,
          key: "item", expected: ["Iced latte 冰拿鐵", "茶葉蛋"]),
    .init(name: "not", collection: "items",
          request: #"{"filter":{"not":{"field":"discount","op":"eq","value":true}},"sort":[{"field":"price"}]}"#,
          key: "item", expected: ["茶葉蛋", "Iced latte 冰拿鐵"]),
    .init(name: "in", collection: "items",
          request: #"{"filter":{"field":"price","op":"in","value":[13,42,99,"35"]},"sort":[{"field":"price"}]}"#,
          key: "item", expected: ["茶葉蛋", "Instant noodles 泡麵"]),
    .init(name: "ne", collection: "items",
          request: #"{"filter":{"field":"price","op":"ne","value":35},"sort":[{"field":"price"}]}"#,
          key: "item", expected: ["茶葉蛋", "Instant noodles 泡麵", "Iced latte 冰拿鐵"]),
    .init(name: "prefix", collection: "items",
          request: #"{"filter":{"field":"store","op":"prefix","value":"Fam"}}"#, key: "item", expected: ["Iced latte 冰拿鐵"]),
    .init(name: "prefix is case-sensitive", collection: "items",
          request: #"{"filter":{"field":"store","op":"prefix","value":"fam"}}"#, key: "item", expected: []),
    .init(name: "contains, case-insensitive", collection: "items",
          request: #"{"filter":{"field":"comment","op":"contains","value":"SWEET"}}"#, key: "item", expected: ["Iced latte 冰拿鐵"]),
    .init(name: "contains, Chinese 1 char", collection: "items",
          request: #"{"filter":{"field":"item","op":"contains","value":"冰"}}"#, key: "item", expected: ["Iced latte 冰拿鐵"]),
    .init(name: "eq null", collection: "items",
          request: #"{"filter":{"field":"photoName","op":"eq","value":null},"sort":[{"field":"price"}]}"#,
          key: "item", expected: ["茶葉蛋", "鮪魚飯糰", "Instant noodles 泡麵", "Iced latte 冰拿鐵"]),
    .init(name: "exists on null field", collection: "items",
          request: #"{"filter":{"field":"photoName","op":"exists","value":true},"limit":2,"sort":[{"field":"price"}]}"#,
          key: "item", expected: ["茶葉蛋", "鮪魚飯糰"]),
    .init(name: "exists false", collection: "items",
          request: #"{"filter":{"field":"nope","op":"exists","value":false},"sort":[{"field":"price","order":"desc"}],"limit":1}"#,
          key: "item", expected: ["Iced latte 冰拿鐵"]),
    .init(name: "number gt excludes strings", collection: "students",
          request: #"{"filter":{"field":"score","op":"gt","value":0}}"#, key: "name", expected: []),
    .init(name: "string gte", collection: "students",
          request: #"{"filter":{"field":"score","op":"gte","value":"85"},"sort":[{"field":"score","order":"desc"}]}"#,
          key: "name", expected: ["张三", "李四"]),
    .init(name: "double gt", collection: "profiles",
          request: #"{"filter":{"field":"height","op":"gt","value":165},"sort":[{"field":"height","order":"desc"}]}"#,
          key: "name", expected: ["王小明", "Emily Chen"]),
    .init(name: "bool eq does not match numbers", collection: "profiles",
          request: #"{"filter":{"field":"isMale","op":"eq","value":true}}"#, key: "name", expected: ["王小明"]),
    .init(name: "ISO date strings compare as strings", collection: "profiles",
          request: #"{"filter":{"field":"birthday","op":"lt","value":"2000"},"sort":[{"field":"birthday"}]}"#,
          key: "name", expected: ["王小明", "林怡君"]),
    .init(name: "contains in every record", collection: "profiles",
          request: #"{"filter":{"field":"zodiacSign","op":"contains","value":"座"},"sort":[{"field":"name"}]}"#,
          key: "name", expected: ["Emily Chen", "林怡君", "王小明"]),
    .init(name: "sort desc by name", collection: "pokemon_items",
          request: #"{"filter":{"field":"category","op":"eq","value":"Medicine"},"sort":[{"field":"name","order":"desc"}]}"#,
          key: "name", expected: ["full-restore", "awakening", "antidote"]),
    .init(name: "two sort keys", collection: "pokemon_items",
          request: #"{"sort":[{"field":"category","order":"desc"},{"field":"name"}],"limit":4}"#,
          key: "name", expected: ["antidote", "awakening", "full-restore", "great-ball"]),
    .init(name: "text with Latin accents", collection: "pokemon_items",
          request: #"{"text":{"query":"POKÉ BALL","fields":["description"]},"sort":[{"field":"name"}]}"#,
          key: "name", expected: ["great-ball", "ultra-ball"]),
    .init(name: "envelope rev", collection: "todos",
          request: #"{"filter":{"field":"$rev","op":"eq","value":1},"sort":[{"field":"title"}]}"#,
          key: "title", expected: ["Buy milk 買牛奶", "Finish SwiftUI chapter 13", "預約牙醫"]),
    .init(name: "bool false", collection: "todos",
          request: #"{"filter":{"field":"isFinish","op":"eq","value":false},"sort":[{"field":"title","order":"desc"}]}"#,
          key: "title", expected: ["預約牙醫", "Buy milk 買牛奶"]),
]

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SearchTests {
    static func run(_ store: AnyStore, _ c: SearchCase) throws -> [String] {
        let query = try SearchQuery(json: try object(c.request))
        return try store.search(c.collection, query).records.map { $0.string(c.key) ?? "?" }
    }

    @Test(arguments: StoreKind.allCases, searchCases)
    func seedSearch(_ kind: StoreKind, _ c: SearchCase) throws {
        try withSeededStore(kind) { store in
            #expect(try SearchTests.run(store, c) == c.expected)
            let query = try SearchQuery(json: try object(c.request))
            if query.limit >= c.expected.count + 1 {
                #expect(try store.count(c.collection, filter: query.filter, text: query.text) == c.expected.count)
            }
        }
    }

    /// The whole table answers the same with the trigram index off and with field indexes on every sorted or filtered
    /// field.
    @Test func sameResultsWithAndWithoutIndexes() throws {
        try withSeededStore { store, directory in
            let plain = try SQLiteStore(
                configuration: StoreConfiguration(dataDirectory: directory, useTextIndex: false, useFieldIndexes: false))
            defer { plain.close() }
            for (collection, field) in [
                ("items", "price"), ("items", "store"), ("items", "discount"), ("items", "photoName"),
                ("students", "birthday"), ("students", "score"), ("profiles", "height"), ("profiles", "birthday"),
                ("profiles", "name"), ("pokemon_items", "category"), ("pokemon_items", "name"), ("todos", "title"),
            ] {
                _ = try store.createIndex(collection, field: try FieldPath(field))
            }
            for c in searchCases {
                let indexed = try SearchTests.run(store, c)
                #expect(indexed == c.expected, "\(c.name)")
                #expect(try SearchTests.run(plain, c) == indexed, "\(c.name)")
            }
        }
    }

    /// A sort on a long text field gives cursors as long as its values (a 6 KB title gives an 8 KB cursor): every one
    /// is taken back, and the pages cover the collection in order, once.
    @Test(arguments: StoreKind.allCases) func cursorsOfLongSortValuesPageThroughEverything(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            var titles: [String] = []
            for n in 0..<9 {
                let title = String(repeating: "長", count: 2_000) + " \(n)"  // 6,000+ bytes of UTF-8
                titles.append(title)
                _ = try store.create("books", id: nil, data: ["title": .string(title)])
            }
            var seen: [String] = []
            var cursor: String?
            repeat {
                // Parsed from JSON as a request is, so the cursor's length is checked.
                var json: JSONObject = ["sort": [["field": "title", "order": "desc"]], "limit": 2]
                if let cursor { json["cursor"] = .string(cursor) }
                let request = try SearchQuery(json: json)
                let page = try store.search("books", request)
                for record in page.records {
                    guard case .string(let title)? = try JSONParser.parseObject(record.data)["title"] else { continue }
                    seen.append(title)
                }
                if let next = page.nextCursor { #expect(next.utf8.count > 4096) }
                cursor = page.nextCursor
            } while cursor != nil && seen.count < 20
            #expect(seen == titles.sorted(by: >))
        }
    }

    @Test func queriesUseTheIndexes() throws {
        try withSeededStore { store, _ in
            let index = try store.createIndex("items", field: try FieldPath("price")).name
            let query = try SearchQuery(json: try object(
                #"{"filter":{"field":"price","op":"lt","value":40},"sort":[{"field":"price"}]}"#))
            let plan = try store.explain("items", query)
            #expect(plan.contains(index), "\(plan)")
            try store.textIndexer!.indexCollection("students")
            let text = try store.explain("students", SearchQuery(text: TextQuery(query: "北京市")))
            #expect(text.contains("text_index"), "\(text)")
        }
    }

    @Test func mixedTypesAgreeWithAndWithoutIndexOnGeneratedData() throws {
        try withStore { store, directory in
            var generator = SystemRandomNumberGenerator()
            let values: [JSON] = [.null, true, false, 0, 1, 1.5, -3, 42, "", "1", "a", "A", "b", "北", ["x": 1], [1, 2]]
            for n in 0..<400 {
                var data: JSONObject = ["n": .int(Int64(n))]
                if n % 7 != 0 { data["v"] = values.randomElement(using: &generator)! }
                data["address"] = ["city": values.randomElement(using: &generator)!]
                _ = try store.create("mixed", id: nil, data: data)
            }
            let requests = [
                #"{"filter":{"field":"v","op":"gt","value":1},"sort":[{"field":"v"}]}"#,
                #"{"filter":{"field":"v","op":"lte","value":"a"},"sort":[{"field":"v","order":"desc"}]}"#,
                #"{"filter":{"field":"v","op":"eq","value":1}}"#,
                #"{"filter":{"field":"v","op":"eq","value":true}}"#,
                #"{"filter":{"field":"v","op":"ne","value":"a"},"sort":[{"field":"v"},{"field":"n","order":"desc"}]}"#,
                #"{"filter":{"field":"v","op":"in","value":[null,1,"b"]}}"#,
                #"{"filter":{"field":"address.city","op":"gte","value":0},"sort":[{"field":"address.city"}]}"#,
                #"{"filter":{"not":{"field":"address.city","op":"exists","value":true}}}"#,
                #"{"sort":[{"field":"v","order":"desc"},{"field":"address.city"}],"limit":1000}"#,
                #"{"filter":{"field":"v","op":"prefix","value":""},"sort":[{"field":"v"}]}"#,
            ]
            var before: [[UUID]] = []
            for request in requests {
                before.append(try store.search("mixed", SearchQuery(json: object(request) + ["limit": 1000])).records.map(\.id))
            }
            _ = try store.createIndex("mixed", field: try FieldPath("v"))
            _ = try store.createIndex("mixed", field: try FieldPath("address.city"))
            for (n, request) in requests.enumerated() {
                let after = try store.search("mixed", SearchQuery(json: object(request) + ["limit": 1000])).records.map(\.id)
                #expect(after == before[n], "\(request)")
                // Paging through with small pages gives the same sequence.
                var paged: [UUID] = []
                var query = try SearchQuery(json: object(request) + ["limit": 7])
                while true {
                    let page = try store.search("mixed", query)
                    paged += page.records.map(\.id)
                    guard let next = page.nextCursor else { break }
                    query.cursor = next
                }
                #expect(paged == before[n], "paged: \(request)")
            }
            _ = directory
        }
    }

    @Test func textIndexAndScanAgreeOnGeneratedText() throws {
        try withStore { store, directory in
            let words = ["北京", "上海", "海淀区", "Road", "ROAD", "road trip", "Pokémon", "POKÉ", "x", "北", "京北", "\"q\"", "50%", "a_b"]
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<300 {
                let text = (0..<3).map { _ in words.randomElement(using: &generator)! }.joined(separator: " ")
                _ = try store.create("t", id: nil, data: ["a": .string(text), "b": ["c": .string(words.randomElement(using: &generator)!)]])
            }
            let scan = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, useTextIndex: false))
            defer { scan.close() }
            for query in ["北", "北京", "京北京", "road", "ad tr", "poké", "é", "\"q", "50%", "%", "_", "a_b", "海淀区", "zzz"] {
                for fields in [nil, [try FieldPath("a")], [try FieldPath("b")], [try FieldPath("b.c")]] {
                    let q = SearchQuery(text: TextQuery(query: query, fields: fields), limit: 1000)
                    let indexed = try store.search("t", q).records.map(\.id)
                    let scanned = try scan.search("t", q).records.map(\.id)
                    #expect(indexed == scanned, "\(query) \(String(describing: fields))")
                    let expected = try store.list("t", limit: 1000, cursor: nil).records.filter { record in
                        let data = try! record.decodedData()
                        let strings: [String]
                        switch fields?.first?.segments {
                        case nil: strings = [data["a"]!.stringValue!, data["b"]!["c"]!.stringValue!]
                        case ["a"]?: strings = [data["a"]!.stringValue!]
                        default: strings = [data["b"]!["c"]!.stringValue!]
                        }
                        return strings.contains { $0.lowercased().contains(query.lowercased()) }
                    }.map(\.id)
                    #expect(Set(indexed) == Set(expected), "\(query)")
                }
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func groupByCategory(_ kind: StoreKind) throws {
        try withSeededStore(kind) { store in
            let groups = try store.group(
                "pokemon_items", field: try FieldPath("category"), filter: nil, text: nil, perGroup: 2)
            #expect(groups.map(\.key) == ["Ball", "Medicine"])
            #expect(groups.map(\.count) == [4, 3])
            #expect(groups[0].records.map { $0.string("name") } == ["poke-ball", "great-ball"])
            #expect(groups[1].records.map { $0.string("name") } == ["antidote", "awakening"])
            let filtered = try store.group(
                "pokemon_items", field: try FieldPath("category"),
                filter: .contains(try FieldPath("description"), "cures"), text: nil, perGroup: 0)
            #expect(filtered == [Group(key: "Medicine", count: 2, records: [])])
            let byBool = try store.group("todos", field: try FieldPath("isFinish"), filter: nil, text: nil, perGroup: 5)
            #expect(byBool.map(\.key) == [false, true])
            #expect(byBool.map(\.count) == [2, 1])
            let missing = try store.group("todos", field: try FieldPath("nope"), filter: nil, text: TextQuery(query: "牙"), perGroup: 5)
            #expect(missing.map(\.key) == [.null])
            #expect(missing.first?.records.first?.string("title") == "預約牙醫")
            expectError(.invalidArgument, field: "perGroup") {
                _ = try store.group("todos", field: try FieldPath("nope"), filter: nil, text: nil, perGroup: -1)
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func cursorRejectsAnotherSortOrGarbage(_ kind: StoreKind) throws {
        try withSeededStore(kind) { store in
            let page = try store.search("pokemon_items", SearchQuery(sort: [SortKey(field: try FieldPath("name"))], limit: 2))
            let cursor = try #require(page.nextCursor)
            expectError(.invalidArgument, field: "cursor") {
                _ = try store.search("pokemon_items", SearchQuery(limit: 2, cursor: cursor))
            }
            expectError(.invalidArgument, field: "cursor") {
                _ = try store.search("pokemon_items", SearchQuery(limit: 2, cursor: "bm90IGEgY3Vyc29y"))
            }
            expectError(.invalidArgument, field: "limit") { _ = try store.search("pokemon_items", SearchQuery(limit: 0)) }
        }
    }

    /// Pages stay exact while another task inserts and deletes between pages: no record is repeated, every record that
    /// existed throughout appears once, and the order holds.
    @Test(arguments: StoreKind.allCases) func cursorPagesStayExactUnderConcurrentWrites(_ kind: StoreKind) async throws {
        try await withStoreAsync(kind) { store in
            var stable: Set<UUID> = []
            var volatile: [UUID] = []
            for n in 0..<300 {
                let record = try store.create("c", id: nil, data: ["k": .int(Int64(n % 37)), "n": .int(Int64(n))])
                if n % 3 == 0 { volatile.append(record.id) } else { stable.insert(record.id) }
            }
            let churn = Task.detached { [volatile] in
                var toDelete = volatile
                var n = 1000
                while !Task.isCancelled {
                    _ = try? store.create("c", id: nil, data: ["k": .int(Int64(n % 37)), "n": .int(Int64(n))])
                    if let id = toDelete.popLast() { _ = try? store.delete("c", id: id, expectedRev: nil) }
                    n += 1
                    try? await Task.sleep(nanoseconds: 200_000)
                }
            }
            var query = try SearchQuery(json: object(#"{"sort":[{"field":"k","order":"desc"},{"field":"n"}],"limit":11}"#))
            var seen: [UUID] = []
            var keys: [(Int64, Int64)] = []
            while true {
                let page = try store.search("c", query)
                for record in page.records {
                    seen.append(record.id)
                    let data = try record.decodedData()
                    keys.append((data["k"]!.intValue!, data["n"]!.intValue!))
                }
                guard let next = page.nextCursor else { break }
                query.cursor = next
                try await Task.sleep(nanoseconds: 1_000_000)
            }
            churn.cancel()
            _ = await churn.result
            #expect(Set(seen).count == seen.count, "a record was repeated")
            #expect(stable.isSubset(of: Set(seen)), "a record was skipped")
            for i in 1..<keys.count {
                let (a, b) = (keys[i - 1], keys[i])
                #expect(a.0 > b.0 || (a.0 == b.0 && a.1 < b.1), "order broke at \(i)")
            }
        }
    }
}

extension JSONObject {
    static func + (lhs: JSONObject, rhs: JSONObject) -> JSONObject {
        var result = lhs
        for (key, value) in rhs { result[key] = value }
        return result
    }
}
