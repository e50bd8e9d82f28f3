import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Protocol.md §5.2's order of kinds (null and missing, numbers and booleans, strings, then arrays and objects by
/// their JSON text), checked against an order computed here from the rule, not from SQL: whole answers and small pages,
/// asc and desc, with and without an index, and GROUP's sections in the same order, on both stores.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SortOrderTests {
    /// Strings that could sort among arrays and objects (their text starts like JSON's), and the kinds around them.
    static let values: [JSON?] = [
        "1", "[", "a", "{z", [0], [1], ["k": 1], nil, .null, false, true, 0, 1, 1.0, 2.5, -3, "", "北", "{", "[0]",
        [], [:], ["a": []], ["k": 1], "a", 1, [0, "x"],
    ]

    /// The kind's place in the order.
    static func rank(_ value: JSON?) -> Int {
        switch value {
        case nil, .null?: 0
        case .bool?, .int?, .double?: 1
        case .string?: 2
        case .array?, .object?: 3
        }
    }

    static func number(_ value: JSON?) -> Double {
        switch value {
        case .bool(let b)?: b ? 1 : 0
        case .int(let i)?: Double(i)  // every integer here is exact as a double
        case .double(let d)?: d
        default: 0
        }
    }

    /// Ascending comparison of one key by the rule: -1, 0 (a tie) or 1.
    static func compare(_ a: JSON?, _ b: JSON?) -> Int {
        let (ra, rb) = (rank(a), rank(b))
        if ra != rb { return ra < rb ? -1 : 1 }
        func bytes(_ x: [UInt8], _ y: [UInt8]) -> Int { x == y ? 0 : (x.lexicographicallyPrecedes(y) ? -1 : 1) }
        switch ra {
        case 1:
            let (x, y) = (number(a), number(b))
            return x == y ? 0 : (x < y ? -1 : 1)
        case 2: return bytes(Array(a!.stringValue!.utf8), Array(b!.stringValue!.utf8))
        case 3: return bytes(a!.bytes, b!.bytes)
        default: return 0
        }
    }

    /// The records in the order of `keys` (field, descending), the id ascending last.
    static func sorted(_ records: [(UUID, JSONObject)], _ keys: [(String, Bool)]) -> [UUID] {
        records.sorted { x, y in
            for (field, descending) in keys {
                let c = compare(x.1[field], y.1[field])
                if c != 0 { return descending ? c > 0 : c < 0 }
            }
            return x.0.wireString < y.0.wireString
        }.map(\.0)
    }

    /// Every record of `query`, `limit` at a time.
    static func pages(_ store: AnyStore, _ collection: String, _ query: SearchQuery) throws -> [UUID] {
        var query = query
        var ids: [UUID] = []
        while true {
            let page = try store.search(collection, query)
            ids += page.records.map(\.id)
            guard let next = page.nextCursor else { return ids }
            #expect(!page.records.isEmpty)
            query.cursor = next
        }
    }

    /// What a client's replica answers for `query` over `collection`'s stored records (`RecordQuery`, the evaluator
    /// server and client share), page after page.
    static func replicaPages(_ store: AnyStore, _ collection: String, _ query: SearchQuery) throws -> [UUID] {
        let stored = try store.search(collection, SearchQuery(limit: 1000)).records
        let items = try stored.map { RecordQuery.Item(envelope: $0.envelope, data: try $0.decodedData()) }
        var query = query
        var ids: [UUID] = []
        while true {
            let page = try RecordQuery.search(items, collection: collection, query)
            ids += page.items.map(\.envelope.id)
            guard let next = page.nextCursor else { return ids }
            query.cursor = next
        }
    }

    @Test(arguments: StoreKind.allCases) func mixedKindsSortAndPageByTheRule(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            var records: [(UUID, JSONObject)] = []
            for (n, value) in Self.values.enumerated() {
                var data: JSONObject = ["n": .int(Int64(n % 3))]
                if let value { data["v"] = value }
                records.append((try store.create("mixed", id: nil, data: data).id, data))
            }
            let orders: [[(String, Bool)]] = [[("v", false)], [("v", true)], [("n", false), ("v", true)],
                                              [("n", true), ("v", false)]]
            for indexed in [false, true] {
                if indexed { _ = try store.createIndex("mixed", field: try FieldPath("v")) }
                for keys in orders {
                    let expected = Self.sorted(records, keys)
                    let sort = try keys.map { SortKey(field: try FieldPath($0.0), descending: $0.1) }
                    let label = "\(keys) indexed \(indexed)"
                    let whole = try store.search("mixed", SearchQuery(sort: sort, limit: 1000))
                    #expect(whole.records.map(\.id) == expected, "\(label)")
                    for limit in [1, 2, 3, 5] {
                        #expect(try Self.pages(store, "mixed", SearchQuery(sort: sort, limit: limit)) == expected,
                                "\(label), pages of \(limit)")
                        #expect(
                            try Self.replicaPages(store, "mixed", SearchQuery(sort: sort, limit: limit)) == expected,
                            "\(label), a replica's pages of \(limit)")
                    }
                }
            }
            // The strings that look like JSON, the arrays and the object alone, ascending: strings, then arrays,
            // then the object.
            let issue: [JSON] = ["1", "[", "a", "{z", [0], [1], ["k": 1]]
            for value in issue { _ = try store.create("issue", id: nil, data: ["v": value]) }
            let answer = try store.search("issue", SearchQuery(sort: [SortKey(field: try FieldPath("v"))], limit: 10))
            #expect(try answer.records.map { try $0.decodedData()["v"]! } == issue)
        }
    }

    /// A document holding `\u0000` (which PostgreSQL's json parser refuses) sorts its arrays and objects by their
    /// compact text like any other: objects whose members jsonb would reorder, arrays and objects with the NUL
    /// inside, beside an escaped backslash before `u0000`, and documents whose NUL is in another member.
    @Test(arguments: StoreKind.allCases) func documentsHoldingNULSortByTheirCompactText(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let values: [(JSON, JSON?)] = [
                (["b": 1, "a": "\u{0}"], nil), (["a": 2], nil), (["a": "\u{0}x"], nil), (["a": "\\u0000"], nil),
                (["\u{0}", 1], nil), (["\u{1}"], nil), (["\\\u{0}"], nil), (["z": 1], "\u{0}"), (["y": []], "\u{0}"),
                (["y": [:]], nil), ([["\u{0}"]], "a\u{0}b"),
            ]
            var records: [(UUID, JSONObject)] = []
            for (v, note) in values {
                var data: JSONObject = ["v": v]
                if let note { data["note"] = note }
                records.append((try store.create("nul", id: nil, data: data).id, data))
            }
            for indexed in [false, true] {
                if indexed { _ = try store.createIndex("nul", field: try FieldPath("v")) }
                for descending in [false, true] {
                    let expected = Self.sorted(records, [("v", descending)])
                    let sort = [SortKey(field: try FieldPath("v"), descending: descending)]
                    let whole = try store.search("nul", SearchQuery(sort: sort, limit: 100))
                    #expect(whole.records.map(\.id) == expected, "descending \(descending), indexed \(indexed)")
                    #expect(try Self.pages(store, "nul", SearchQuery(sort: sort, limit: 2)) == expected)
                    #expect(try Self.replicaPages(store, "nul", SearchQuery(sort: sort, limit: 2)) == expected)
                }
            }
        }
    }

    /// GROUP's sections come in the ascending sort order; they follow `eq`: 1 and 1.0 are one section (keyed by the
    /// integer), `true` and 1, `false` and 0 are apart (the boolean's first), null and missing are one.
    @Test(arguments: StoreKind.allCases) func groupSectionsComeInSortOrderAndFollowEq(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            for value in Self.values + [2.0, 2.0] {
                _ = try store.create("mixed", id: nil, data: value.map { ["v": $0] } ?? [:])
            }
            let groups = try store.group("mixed", field: try FieldPath("v"), filter: nil, text: nil, perGroup: 10)
            let expected: [JSON] = [
                .null, -3, false, 0, true, 1, 2.0, 2.5, "", "1", "[", "[0]", "a", "{", "{z", "北", [0, "x"], [0], [1],
                [], ["a": []], ["k": 1], [:],
            ]
            #expect(groups.map(\.key) == expected)
            // A client's replica groups the same records the same way (RecordQuery).
            let stored = try store.search("mixed", SearchQuery(limit: 1000)).records
            let items = try stored.map { RecordQuery.Item(envelope: $0.envelope, data: try $0.decodedData()) }
            let local = RecordQuery.group(items, field: try FieldPath("v"), filter: nil, text: nil, perGroup: 10)
            #expect(local.map(\.key) == expected)
            #expect(local.map(\.count) == groups.map(\.count))
            let counts = Dictionary(uniqueKeysWithValues: groups.map { ($0.key.bytes, $0.count) })
            #expect(counts[JSON.null.bytes] == 2 && counts[JSON.int(1).bytes] == 3)
            #expect(counts[JSON.bool(true).bytes] == 1)
            #expect(counts[JSON.object(["k": 1]).bytes] == 2 && counts[JSON.string("a").bytes] == 2)
            // Each section holds exactly what `eq` of its key selects.
            for group in groups where group.key.isScalar {
                #expect(group.records.count == group.count)
                for record in group.records {
                    let data = try record.decodedData()
                    let filter = Filter.compare(try FieldPath("v"), .eq, group.key)
                    let matches = group.key == .null ? (data["v"] ?? .null) == .null
                        : FilterEvaluator.matches(filter, record: record, data: data)
                    #expect(matches, "\(String(decoding: record.data, as: UTF8.self)) in section \(group.key)")
                }
            }
        }
    }

    /// A field index built before the order of kinds (on bare `json_extract`) is built again on the sort expression
    /// when the store opens (migration 8), so a sort on the field reads the index (sorting only ties by id).
    @Test func anIndexFromBeforeTheOrderOfKindsIsBuiltAgain() throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("larder-ix-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sort = SearchQuery(sort: [SortKey(field: try FieldPath("v"))], limit: 1000)
        var name = ""
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            for value in Self.values { _ = try store.create("mixed", id: nil, data: value.map { ["v": $0] } ?? [:]) }
            name = try store.createIndex("mixed", field: try FieldPath("v")).name
            let plan = try store.explain("mixed", sort)
            #expect(plan.contains(name) && !plan.contains("TEMP B-TREE FOR ORDER BY"), "\(plan)")
        }
        do {
            // The index as the previous release built it, and the migration (and those after it) not yet applied.
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.execute("DROP INDEX \"\(name)\"")
            try db.execute("CREATE INDEX \"\(name)\" ON documents(collection, json_extract(data, '$.\"v\"'))")
            try db.execute("DELETE FROM larder_migrations WHERE version >= 8")
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            let plan = try store.explain("mixed", sort)
            #expect(plan.contains(name) && !plan.contains("TEMP B-TREE FOR ORDER BY"), "\(plan)")
            let records = try store.list("mixed", limit: 1000, cursor: nil).records
            let expected = Self.sorted(try records.map { ($0.id, try $0.decodedData()) }, [("v", false)])
            #expect(try store.search("mixed", sort).records.map(\.id) == expected)
        }
    }

    /// `eq null` selects a field holding null and a missing field alike (as the null section of GROUP and the first
    /// place in a sort hold both), `ne` is exactly its complement for every value, `in` follows `eq`, and `exists`
    /// tells null from missing; the in-memory filter of WATCH answers the same as SQL.
    @Test(arguments: StoreKind.allCases) func eqNullMatchesAMissingFieldAndNeIsExactlyNotEq(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let documents = [
                #"{"v":null}"#, #"{}"#, #"{"w":1}"#, #"{"v":1}"#, #"{"v":1.0}"#, #"{"v":"a"}"#, #"{"v":false}"#,
                #"{"v":0}"#, #"{"v":{"k":null}}"#, #"{"v":[null]}"#, #"{"v":""}"#,
            ]
            var byText: [String: StoredRecord] = [:]
            for text in documents { byText[text] = try store.create("n", id: nil, data: try object(text)) }
            let all = Set(byText.values.map(\.id))
            func ids(_ filter: Filter) throws -> Set<UUID> {
                let sql = Set(try store.search("n", SearchQuery(filter: filter, limit: 1000)).records.map(\.id))
                let memory = Set(try byText.values.filter {
                    FilterEvaluator.matches(filter, record: $0, data: try $0.decodedData())
                }.map(\.id))
                #expect(sql == memory, "\(String(decoding: filter.json.bytes, as: UTF8.self))")
                return sql
            }
            let v = try FieldPath("v")
            let nullOrMissing = Set([#"{"v":null}"#, #"{}"#, #"{"w":1}"#].map { byText[$0]!.id })
            #expect(try ids(.compare(v, .eq, .null)) == nullOrMissing)
            #expect(try ids(.isIn(v, [.null])) == nullOrMissing)
            #expect(try ids(.compare(v, .ne, .null)) == all.subtracting(nullOrMissing))
            #expect(try ids(.exists(v, false)) == Set([#"{}"#, #"{"w":1}"#].map { byText[$0]!.id }))
            for value: JSON in [.null, 1, 1.0, "a", "", false, true, 0] {
                let eq = try ids(.compare(v, .eq, value))
                let ne = try ids(.compare(v, .ne, value))
                #expect(eq.isDisjoint(with: ne) && eq.union(ne) == all, "\(value)")
                #expect(try ids(.not(.compare(v, .eq, value))) == ne, "\(value)")
            }
            // The same through an index on the field.
            _ = try store.createIndex("n", field: v)
            #expect(try ids(.compare(v, .eq, .null)) == nullOrMissing)
            #expect(try ids(.compare(v, .ne, .null)) == all.subtracting(nullOrMissing))
        }
    }

    /// The PostgreSQL twin of migration 8: a field index built on the expressions before the order of kinds (arrays
    /// and objects of kind 2, with strings) is built again on the current ones (kind 3) by schema version 2, and a
    /// sort on the field answers by the rule.
    @Test func aPostgreSQLIndexFromBeforeTheOrderOfKindsIsBuiltAgain() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let sort = SearchQuery(sort: [SortKey(field: try FieldPath("v"))], limit: 1000)
        let configuration = StoreConfiguration(dataDirectory: "/nonexistent")
        var pgName = ""
        do {
            let store = try PostgresStore(url: schema.url, configuration: configuration)
            defer { store.close() }
            for value in Self.values { _ = try store.create("mixed", id: nil, data: value.map { ["v": $0] } ?? [:]) }
            _ = try store.createIndex("mixed", field: try FieldPath("v"))
        }
        do {
            // The index as the branch before schema version 2 built it, and the migration not yet applied.
            let connection = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 10_000)
            defer { connection.close() }
            let names = try connection.run([PGStatement("SELECT pg_name FROM field_indexes")])[0]
            pgName = names.text(0, 0)
            let old = PGField(path: try FieldPath("v")).indexColumns.replacingOccurrences(
                of: "WHEN 'object' THEN 3 WHEN 'array' THEN 3", with: "WHEN 'object' THEN 2 WHEN 'array' THEN 2")
            try connection.execute("DROP INDEX \(PGSQL.identifier(pgName))")
            try connection.execute(
                "CREATE INDEX \(PGSQL.identifier(pgName)) ON documents (\(old)) WHERE collection = 'mixed'")
            // Versions 2 and up (3 builds field indexes again too).
            try connection.execute("DELETE FROM larder_migrations WHERE version >= 2")
            let before = try connection.run([
                PGStatement(
                "SELECT indexdef FROM pg_indexes WHERE indexname = $1 AND schemaname = current_schema()",
                [.text(pgName)])
            ])[0]
            #expect(before.text(0, 0).contains("WHEN 'array'::text THEN 2"), "\(before.text(0, 0))")
        }
        let store = try PostgresStore(url: schema.url, configuration: configuration)
        defer { store.close() }
        let connection = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 10_000)
        defer { connection.close() }
        let definition = try connection.run([
            PGStatement(
                "SELECT indexdef FROM pg_indexes WHERE indexname = $1 AND schemaname = current_schema()",
                [.text(pgName)])
        ])[0]
        #expect(definition.rows == 1)
        #expect(definition.text(0, 0).contains("WHEN 'array'::text THEN 3"), "\(definition.text(0, 0))")
        let records = try store.list("mixed", limit: 1000, cursor: nil).records
        let expected = Self.sorted(try records.map { ($0.id, try $0.decodedData()) }, [("v", false)])
        #expect(try store.search("mixed", sort).records.map(\.id) == expected)
    }

    /// Schema version 3: a PostgreSQL field index from when arrays and objects of a document holding `\u0000` sorted
    /// by jsonb's rendering is built again on their stored text.
    @Test func aPostgreSQLIndexFromBeforeStoredTextSortsIsBuiltAgain() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let configuration = StoreConfiguration(dataDirectory: "/nonexistent")
        do {
            let store = try PostgresStore(url: schema.url, configuration: configuration)
            defer { store.close() }
            _ = try store.createIndex("nul", field: try FieldPath("v"))
        }
        let connection = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 10_000)
        defer { connection.close() }
        let pgName = try connection.run([PGStatement("SELECT pg_name FROM field_indexes")])[0].text(0, 0)
        func definition() throws -> String {
            try connection.run([
                PGStatement(
                    "SELECT indexdef FROM pg_indexes WHERE indexname = $1 AND schemaname = current_schema()",
                    [.text(pgName)])
            ])[0].text(0, 0)
        }
        #expect(try definition().contains("regexp_replace"))
        // The index as schema version 2 built it, and version 3 (and those after it) not yet applied.
        let field = PGField(path: try FieldPath("v"))
        let old = field.indexColumns.replacingOccurrences(of: field.rawHoldingNUL, with: "(\(field.value))::text")
        try connection.execute("DROP INDEX \(PGSQL.identifier(pgName))")
        try connection.execute(
            "CREATE INDEX \(PGSQL.identifier(pgName)) ON documents (\(old)) WHERE collection = 'nul'")
        try connection.execute("DELETE FROM larder_migrations WHERE version >= 3")
        #expect(try !definition().contains("regexp_replace"))
        try PostgresStore(url: schema.url, configuration: configuration).close()
        #expect(try definition().contains("regexp_replace"))
    }
}
