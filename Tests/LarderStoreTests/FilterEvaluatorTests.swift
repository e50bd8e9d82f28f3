import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore
import LarderIO

/// The in-memory filter (WATCH) selects exactly the records SEARCH's SQL selects, over documents chosen for their edge
/// cases: mixed kinds, integers beside reals, case and Unicode, nesting, arrays, null and missing, envelope affinity.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct FilterEvaluatorTests {
    static let documents: [String] = [
        #"{"n":1,"s":"abc","b":true,"a":{"b":1},"tags":["x","y"]}"#,
        #"{"n":1.0,"s":"ABC","b":false,"a":{"b":"x"},"tags":"x"}"#,
        #"{"n":1.5,"s":"Ábc","a":[1,2]}"#,
        #"{"n":-3,"s":"北京市海淀区","a":"str"}"#,
        #"{"n":9007199254740993,"s":"","a":{"b":null}}"#,
        #"{"n":9007199254740992.0,"s":"10","a":{"b":{"c":2}}}"#,
        #"{"n":1e20,"s":"e\u0301"}"#,
        #"{"n":0,"s":"é","b":null}"#,
        #"{"n":null,"s":null}"#,
        #"{"n":"1","s":1,"b":"true"}"#,
        #"{"n":true,"s":"ß Straße İstanbul"}"#,
        #"{"s":"abc\u0000d","n":[1]}"#,
        #"{"s":"Hedon","n":2,"x":{"y":{"z":"deep"}}}"#,
        #"{}"#,
        #"{"n":-0.0,"s":" 2 "}"#,
    ]

    static let fields = ["n", "s", "b", "a", "a.b", "a.b.c", "tags", "x.y.z", "missing", "$id", "$rev", "$createdAt", "$updatedAt"]

    static let values: [JSON] = [
        .null, true, false, 0, 1, 1.0, 1.5, -3, 2, 3, 9_007_199_254_740_993, 9_007_199_254_740_992.0, 1e20, -0.5,
        "", "a", "abc", "ABC", "AB", "北", "北京", "10", "1", "3", " 2 ", "1e0", "0x1", "x", "é", "E", "ß", "STRASSE",
        "İ", "deep", "3f", "zzz", "0", "2.5",
    ]

    @Test func everyLeafAndManyTreesAgreeWithSQL() throws {
        try withStore({ $0.useFieldIndexes = true }) { store, _ in
            var records: [StoredRecord] = []
            for (n, text) in Self.documents.enumerated() {
                let id = UUID(uuidString: String(format: "%08lx-0000-4000-8000-%012lx", n * 0x1111_1111 % 0xFFFF_FFFF, n))!
                var record = try store.create("ev", id: id, data: try object(text))
                for _ in 0..<(n % 3) { record = try store.patch("ev", id: id, patch: [:], expectedRev: nil) }
                records.append(record)
            }
            _ = try store.createIndex("ev", field: try FieldPath("s"))  // the indexed form of the SQL too
            let decoded = try records.map { ($0, try $0.decodedData()) }
            let firstID = records[3].id.wireString
            let values = Self.values + [
                .string(firstID), .string(firstID.uppercased()), .string(String(firstID.prefix(8))),
                .int(records[5].createdAt), .int(records[5].updatedAt), .string(String(records[5].createdAt)),
            ]

            var leaves: [Filter] = []
            for name in Self.fields {
                let field = try FieldPath(name)
                for value in values {
                    leaves.append(.compare(field, .eq, value))
                    leaves.append(.compare(field, .ne, value))
                    switch value {
                    case .int, .double, .string:
                        for op in [Filter.Comparison.lt, .lte, .gt, .gte] { leaves.append(.compare(field, op, value)) }
                    default: break
                    }
                    if case .string(let text) = value {
                        leaves.append(.prefix(field, text))
                        leaves.append(.contains(field, text))
                    }
                }
                leaves.append(.exists(field, true))
                leaves.append(.exists(field, false))
                leaves.append(.isIn(field, [1, "abc", .null, true]))
                leaves.append(.isIn(field, []))
            }
            var generator = SplitMix64(seed: 0x5EED)
            var trees: [Filter] = []
            for _ in 0..<400 { trees.append(Self.randomTree(leaves, depth: 3, &generator)) }

            var checked = 0
            for filter in leaves + trees {
                let page = try store.search("ev", SearchQuery(filter: filter, limit: 1000))
                let sql = Set(page.records.map(\.id))
                let memory = Set(decoded.filter { FilterEvaluator.matches(filter, record: $0.0, data: $0.1) }.map(\.0.id))
                #expect(sql == memory, "\(String(decoding: filter.json.bytes, as: UTF8.self))")
                checked += 1
            }
            #expect(checked > 2000)
        }
    }

    static func randomTree(_ leaves: [Filter], depth: Int, _ g: inout SplitMix64) -> Filter {
        if depth == 0 || Int.random(in: 0..<3, using: &g) == 0 { return leaves.randomElement(using: &g)! }
        switch Int.random(in: 0..<3, using: &g) {
        case 0: return .and((0..<Int.random(in: 1...3, using: &g)).map { _ in randomTree(leaves, depth: depth - 1, &g) })
        case 1: return .or((0..<Int.random(in: 1...3, using: &g)).map { _ in randomTree(leaves, depth: depth - 1, &g) })
        default: return .not(randomTree(leaves, depth: depth - 1, &g))
        }
    }

    @Test func sqliteAffinityOnEnvelopeText() {
        #expect(FilterEvaluator.numericAffinity(" 3 ").map { if case .int(3) = $0 { true } else { false } } == true)
        #expect(FilterEvaluator.numericAffinity("1e1").map { if case .real(10) = $0 { true } else { false } } == true)
        for text in ["0x10", "inf", "nan", "12abc", "", " ", ".", "+", "1e", "--1"] {
            #expect(FilterEvaluator.numericAffinity(text) == nil, "\(text)")
        }
        #expect(FilterEvaluator.realText(5) == "5.0")
        #expect(FilterEvaluator.realText(1e20) == "1.0e+20")
        #expect(FilterEvaluator.realText(0.1) == "0.1")
        #expect(FilterEvaluator.contains("abc", "") && !FilterEvaluator.contains("", "a"))
    }
}
