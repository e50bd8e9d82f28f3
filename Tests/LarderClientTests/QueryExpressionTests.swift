import Foundation
import LarderCLI
import LarderTestThreads
import Testing

@testable import LarderClient

/// The Swift query expressions: the JSON filters they build (Protocol.md §5.2), the same as the CLI's `--where`
/// syntax builds, and their mistakes as errors rather than traps.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct QueryExpressionTests {
    /// The compact JSON text of a filter, members in the order they are sent.
    static func text(_ filter: Filter) -> String { String(decoding: filter.json.bytes, as: UTF8.self) }

    /// The compact JSON text of the filter an expression builds.
    static func text(_ expression: FilterExpression) throws -> String { text(try expression.filter()) }

    /// One row: `--where` expressions (joined with AND, as the CLI joins repeated options), the Swift expression an
    /// app writes for the same question, and the JSON filter both must send.
    struct Row: Sendable, CustomTestStringConvertible {
        var wheres: [String]
        var swift: FilterExpression
        var json: String
        var testDescription: String { wheres.joined(separator: " ") }
    }

    static let owner = UUID(uuidString: "3F2504E0-4F89-41D3-9A0C-0305E82C3301")!

    /// The one table shared by the CLI's text syntax and the Swift API.
    static let table: [Row] = [
        Row(wheres: ["price<50"], swift: Field("price") < 50, json: #"{"field":"price","op":"lt","value":50}"#),
        Row(wheres: ["price<=50"], swift: Field("price") <= 50, json: #"{"field":"price","op":"lte","value":50}"#),
        Row(wheres: ["price>12.5"], swift: Field("price") > 12.5, json: #"{"field":"price","op":"gt","value":12.5}"#),
        Row(wheres: ["price >= 12.5"], swift: Field("price") >= 12.5,
            json: #"{"field":"price","op":"gte","value":12.5}"#),
        Row(wheres: ["name<m"], swift: Field("name") < "m", json: #"{"field":"name","op":"lt","value":"m"}"#),
        Row(wheres: ["category=Ball"], swift: Field("category") == "Ball",
            json: #"{"field":"category","op":"eq","value":"Ball"}"#),
        Row(wheres: ["category==Ball"], swift: Field("category") == "Ball",
            json: #"{"field":"category","op":"eq","value":"Ball"}"#),
        Row(wheres: ["discount=true"], swift: Field("discount") == true,
            json: #"{"field":"discount","op":"eq","value":true}"#),
        Row(wheres: ["score=\"92\""], swift: Field("score") == "92",
            json: #"{"field":"score","op":"eq","value":"92"}"#),
        Row(wheres: ["score=92"], swift: Field("score") == 92, json: #"{"field":"score","op":"eq","value":92}"#),
        Row(wheres: ["nickname=null"], swift: Field("nickname") == nil,
            json: #"{"field":"nickname","op":"eq","value":null}"#),
        Row(wheres: ["nickname!=null"], swift: Field("nickname") != nil,
            json: #"{"field":"nickname","op":"ne","value":null}"#),
        Row(wheres: ["store!=7-Eleven"], swift: Field("store") != "7-Eleven",
            json: #"{"field":"store","op":"ne","value":"7-Eleven"}"#),
        Row(wheres: ["address~北京"], swift: Field("address").contains("北京"),
            json: #"{"field":"address","op":"contains","value":"北京"}"#),
        Row(wheres: ["name~张"], swift: Field("name").contains("张"),
            json: #"{"field":"name","op":"contains","value":"张"}"#),
        Row(wheres: ["name^=poke"], swift: Field("name").hasPrefix("poke"),
            json: #"{"field":"name","op":"prefix","value":"poke"}"#),
        Row(wheres: [#"category=["Ball","Medicine"]"#], swift: Field("category").in(["Ball", "Medicine"]),
            json: #"{"field":"category","op":"in","value":["Ball","Medicine"]}"#),
        Row(wheres: ["n=[1,null,2.5]"], swift: Field("n").in([1, nil, 2.5]),
            json: #"{"field":"n","op":"in","value":[1,null,2.5]}"#),
        Row(wheres: ["address.zip?"], swift: Field("address.zip").exists,
            json: #"{"field":"address.zip","op":"exists","value":true}"#),
        Row(wheres: ["!address.zip?"], swift: Field("address.zip").isMissing,
            json: #"{"field":"address.zip","op":"exists","value":false}"#),
        Row(wheres: ["$rev>1"], swift: Field("$rev") > 1, json: #"{"field":"$rev","op":"gt","value":1}"#),
        Row(wheres: ["owner=3F2504E0-4F89-41D3-9A0C-0305E82C3301"], swift: Field("owner") == owner,
            json: #"{"field":"owner","op":"eq","value":"3F2504E0-4F89-41D3-9A0C-0305E82C3301"}"#),
        Row(wheres: ["due<2024-05-01T12:30:00.000Z"], swift: Field("due") < Date(timeIntervalSince1970: 1_714_566_600),
            json: #"{"field":"due","op":"lt","value":"2024-05-01T12:30:00.000Z"}"#),
        Row(wheres: ["price<50", "discount=true"], swift: Field("price") < 50 && Field("discount") == true,
            json: #"{"and":[{"field":"price","op":"lt","value":50},{"field":"discount","op":"eq","value":true}]}"#),
        Row(wheres: ["price<50", "category=Ball", "photoName?"],
            swift: Field("price") < 50 && Field("category") == "Ball" && Field("photoName").exists,
            json: #"{"and":[{"field":"price","op":"lt","value":50},{"field":"category","op":"eq","value":"Ball"},"#
                + #"{"field":"photoName","op":"exists","value":true}]}"#),
    ]

    @Test(arguments: table) func theCLIAndTheSwiftAPIBuildTheSameFilter(_ row: Row) throws {
        let cli = try #require(try FilterSyntax.filter(wheres: row.wheres, json: nil))
        let swift = try row.swift.filter()
        #expect(swift == cli)
        #expect(Self.text(cli) == row.json)
        #expect(Self.text(swift) == row.json)
    }

    @Test func orNotAndNestingBuildTheirJSONForm() throws {
        let a = Field("a") == 1
        let b = Field("b") == 2
        let c = Field("c") == 3
        let leaf = { (name: String, n: Int) in #"{"field":"\#(name)","op":"eq","value":\#(n)}"# }
        #expect(
            try Self.text(a || b || c) == #"{"or":["# + leaf("a", 1) + "," + leaf("b", 2) + "," + leaf("c", 3) + "]}")
        #expect(try Self.text(!a) == #"{"not":"# + leaf("a", 1) + "}")
        #expect(try Self.text(!Field("zip").exists) == #"{"not":{"field":"zip","op":"exists","value":true}}"#)
        #expect(
            try Self.text(a && (b || !c))
                == #"{"and":["# + leaf("a", 1) + #",{"or":["# + leaf("b", 2) + #",{"not":"# + leaf("c", 3) + "}]}]}")
        #expect(
            try Self.text((a || b) && c)
                == #"{"and":[{"or":["# + leaf("a", 1) + "," + leaf("b", 2) + "]}," + leaf("c", 3) + "]}")
        // A wire filter joins Swift expressions as it is.
        let wire = Filter.prefix(try FieldPath("name"), "poke")
        #expect(try (FilterExpression(wire) && a).filter() == .and([wire, try a.filter()]))
    }

    enum Category: String, Codable, FilterValue { case ball = "Ball" }
    struct Money: Codable, ComparableFilterValue {
        var cents: Int
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(Double(cents) / 100)
        }
    }
    struct Pair: Codable, FilterValue { var a = 1, b = 2 }

    @Test func valuesAreComparedInTheFormTheirModelStores() throws {
        let date = try #require(ISO8601DateFormatter().date(from: "2024-05-01T12:30:00Z")).addingTimeInterval(0.25)
        #expect(
            try Self.text(Field("due") >= date) == #"{"field":"due","op":"gte","value":"2024-05-01T12:30:00.250Z"}"#)
        // The envelope's times are milliseconds since 1970.
        #expect(
            try Self.text(Field("$createdAt") >= date) == #"{"field":"$createdAt","op":"gte","value":1714566600250}"#)
        #expect(try Self.text(Field("$updatedAt") < date) == #"{"field":"$updatedAt","op":"lt","value":1714566600250}"#)
        #expect(try Self.text(Field("kind") == Category.ball) == #"{"field":"kind","op":"eq","value":"Ball"}"#)
        #expect(try Self.text(Field("price") < Money(cents: 1250)) == #"{"field":"price","op":"lt","value":12.5}"#)
        #expect(try Self.text(Field("ratio") > Float(0.1)) == #"{"field":"ratio","op":"gt","value":0.1}"#)
        #expect(try Self.text(Field("big") == UInt64.max).hasPrefix(#"{"field":"big","op":"eq","value":1.8446"#))
        #expect(try Self.text(Field("n") == Int8(-3)) == #"{"field":"n","op":"eq","value":-3}"#)
        let nickname: String? = nil
        #expect(try Self.text(Field("nickname") == nickname) == #"{"field":"nickname","op":"eq","value":null}"#)
        let names: [String] = ["a", "b"]
        #expect(try Self.text(Field("name").in(names)) == #"{"field":"name","op":"in","value":["a","b"]}"#)
        let pair = try #require(throws: LarderError.self) { try (Field("p") == Pair()).filter() }
        #expect(pair.status == .invalidArgument)
        #expect(pair.message.contains("Pair encodes as an object"), "\(pair.message)")
        let nan = try #require(throws: LarderError.self) { try (Field("x") < Double.nan).filter() }
        #expect(nan.status == .invalidArgument && nan.message.contains("finite"), "\(nan.message)")
    }

    @Test func anInvalidFieldPathIsAnErrorNotATrap() throws {
        for (path, words) in [
            ("", "must not be empty"), ("a..b", "must not be empty"), ("$nope", "unknown envelope field"),
            ("a\u{1}b", "control characters"), (String(repeating: "a.", count: 40) + "a", "at most 32 segments"),
        ] {
            let error = try #require(throws: LarderError.self) { try (Field(path) == 1).filter() }
            #expect(error.status == .invalidArgument)
            #expect(error.message.contains(words), "\(error.message)")
            #expect(error.message.hasPrefix("Field(\""), "\(error.message)")
            #expect(error.field == "filter")
            // Joined with a valid expression, or negated, the mistake stays.
            #expect(throws: LarderError.self) { try (Field("ok") == 1 && !Field(path).exists).filter() }
            #expect(throws: LarderError.self) { try Field(path).ascending.sortKey() }
        }
    }

    @Test func theFilterLimitsAreCheckedWhenTheExpressionIsBuilt() throws {
        let many = try #require(throws: LarderError.self) { try Field("n").in(Array(0...1000)).filter() }
        #expect(many.field == "filter.value" && many.message.contains("at most 1000"), "\(many)")
        var deep = Field("n") == 0
        for _ in 0..<32 { deep = !deep }
        let tooDeep = try #require(throws: LarderError.self) { try deep.filter() }
        #expect(tooDeep.message.contains("nest at most 32"), "\(tooDeep)")
        var wide = Field("n") == 0
        for n in 1...256 { wide = wide || Field("n") == n }
        let tooWide = try #require(throws: LarderError.self) { try wide.filter() }
        #expect(tooWide.message.contains("at most 256 clauses"), "\(tooWide)")
    }

    struct Item: Codable, Sendable { var name: String }

    @Test func searchBuildsItsQueryFromSortTextAndFilter() throws {
        let client = LarderClient(port: 1)
        let items = client.collection("items", of: Item.self)
        let query = try items.search(
            Field("price") < 50, containing: "北京", in: [Field("address"), Field("name")],
            sortedBy: [Field("price").descending, Field("name").ascending], limit: 30, pageSize: 10
        ).pages.query()
        let expected = try SearchQuery(
            json: try JSONParser.parseObject(
                Array(
                    (#"{"filter":{"field":"price","op":"lt","value":50},"#
                        + #""text":{"query":"北京","fields":["address","name"]},"#
                        + #""sort":[{"field":"price","order":"desc"},{"field":"name","order":"asc"}]}"#).utf8)))
        #expect(query == expected)
        #expect(try items.search(containing: "张").pages.query()?.text == TextQuery(query: "张"))

        let orphan = try #require(throws: LarderError.self) { try items.search(in: [Field("name")]).pages.query() }
        #expect(orphan.field == "text.fields")
        let envelope = try #require(throws: LarderError.self) {
            try items.search(containing: "x", in: [Field("$id")]).pages.query()
        }
        #expect(envelope.message.contains("data fields"), "\(envelope)")
        let badSort = try #require(throws: LarderError.self) {
            try items.search(sortedBy: [Field("").ascending]).pages.query()
        }
        #expect(badSort.field == "sort")
        let nine = Array(repeating: Field("a").ascending, count: 9)
        #expect(throws: LarderError.self) { try items.search(sortedBy: nine).pages.query() }
    }

    @Test func aQueryMistakeIsThrownByTheFirstNextBeforeAnythingIsSent() async throws {
        // Port 1 refuses connections: reaching the network would throw UNAVAILABLE instead.
        let client = LarderClient(port: 1)
        let items = client.collection("items", of: Item.self)
        let sequences: [RecordSequence<Item>] = [
            items.search(Field("") == 1), items.search(pageSize: 0), items.search(limit: -1),
        ]
        for sequence in sequences {
            let error = try await #require(throws: LarderError.self) { _ = try await sequence.collect() }
            #expect(error.status == .invalidArgument, "\(error)")
        }
        // A limit of 0 reads nothing.
        #expect(try await items.search(limit: 0).collect().isEmpty)
    }
}
