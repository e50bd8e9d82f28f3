import Foundation
import LarderStore
import LarderWire
import Testing

/// One test per problem the hostile-client table (HostileClientTests) found in the store; RELIABILITY.md lists them.
@Suite struct ReliabilityHostileFindingsTests {
    static func withStore(_ body: (SQLiteStore) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-in-\(UUID().wireString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory.path))
        defer { store.close() }
        try body(store)
    }

    /// Every scalar kind (filters compare only scalars), and values that only look alike (1 and "1", true and 1).
    static let values: [JSON] = [1, 1.0, 2.5, 0, -0.0, "1", "a", "A", "北京", true, false, nil, 9_007_199_254_740_993]

    static func ids(_ store: SQLiteStore, _ filter: Filter) throws -> Set<UUID> {
        Set(try store.search("kinds", SearchQuery(filter: filter, limit: 1000)).records.map(\.id))
    }

    /// Finding 3: `in` was written as one OR term per value, nesting a level per value, and SQLite refuses
    /// expressions deeper than 1,000: `in` with the documented maximum of 1,000 values answered INTERNAL.
    @Test func inWithAThousandValuesWorks() throws {
        try Self.withStore { store in
            for n in 0..<1200 { _ = try store.create("kinds", id: nil, data: ["n": .int(Int64(n))]) }
            let field = try FieldPath("n")
            let thousand = (0..<1000).map { JSON.int(Int64($0 * 2)) }
            #expect(try store.count("kinds", filter: .isIn(field, thousand), text: nil) == 600)
            let twenty = Filter.and((0..<20).map { _ in .isIn(field, thousand) })
            #expect(try store.count("kinds", filter: twenty, text: nil) == 600)
            // The largest filter a request may carry: 255 of them under one `and`.
            let most = Filter.and((0..<255).map { _ in .isIn(field, thousand) })
            #expect(try store.count("kinds", filter: most, text: nil) == 600)
        }
    }

    /// `in` still selects exactly what an `or` of `eq` selects, value kind by value kind, on data and envelope fields,
    /// with and without an index.
    @Test func inMeansAnOrOfEq() throws {
        try Self.withStore { store in
            var stored: [UUID] = []
            for value in Self.values + [[1], ["a": 1]] {
                stored.append(try store.create("kinds", id: nil, data: ["v": value]).id)
            }
            stored.append(try store.create("kinds", id: nil, data: ["other": 1]).id)
            let field = try FieldPath("v")
            for indexed in [false, true] {
                if indexed { _ = try store.createIndex("kinds", field: field) }
                for size in 1...Self.values.count {
                    for start in stride(from: 0, to: Self.values.count, by: 3) {
                        let chosen = Array((Self.values + Self.values)[start..<(start + size)])
                        let viaIn = try Self.ids(store, .isIn(field, chosen))
                        let viaOr = try Self.ids(store, .or(chosen.map { .compare(field, .eq, $0) }))
                        #expect(viaIn == viaOr, "in \(chosen) (indexed: \(indexed))")
                    }
                }
            }
            let id = try FieldPath("$id")
            let some = [stored[0], stored[3], stored[7]]
            let upper = some.map { JSON.string($0.wireString.uppercased()) } + ["not-an-id", 5]
            #expect(try Self.ids(store, .isIn(id, upper)) == Set(some))
            let rev = try FieldPath("$rev")
            #expect(try Self.ids(store, .isIn(rev, [1, "2"])) == Set(stored))
        }
    }
}
