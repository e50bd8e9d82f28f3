import LarderSchema
import LarderTestThreads
import LarderWire
import Testing

/// Schemas and records made to cost: each is refused when set, or bounded when validated.
@Suite("Hostile schemas and records", .ownThreads, .timeLimit(.minutes(20)))
struct HostileTests {
    /// Whether `body` took less than `seconds`.
    static func quick(_ seconds: Double, _ body: () throws -> Void) rethrows -> Bool {
        let clock = ContinuousClock()
        let elapsed = try clock.measure(body)
        return elapsed < .milliseconds(Int(seconds * 1000))
    }

    @Test("subschemas nested 10,000 deep are refused at the limit, quickly")
    func deepNesting() throws {
        var schema: JSON = ["type": "string"]
        for _ in 0..<10_000 { schema = ["items": schema] }
        var error: SchemaError?
        #expect(Self.quick(1) { error = SchemaCheck.refusal(schema) })
        #expect(error?.keyword == "items")
        #expect(error?.pointer == String(repeating: "/items", count: CollectionSchema.maxDepth + 1))
        #expect(error?.message.contains("more than \(CollectionSchema.maxDepth) levels") == true)
        // Taken apart a level at a time: releasing the whole tree at once would recurse 10,000 deep.
        while case .object(let object) = schema, let inner = object["items"] { schema = inner }

        // At the limit itself it compiles, and validates.
        var deepest: JSON = ["type": "string"]
        var record: JSON = 1
        for _ in 0..<CollectionSchema.maxDepth {
            deepest = ["properties": ["a": deepest]]
            record = ["a": record]
        }
        let pointer = String(repeating: "/a", count: CollectionSchema.maxDepth)
        #expect(try SchemaCheck.violations(deepest, record) == [violation(pointer, "type", "string", "1")])
    }

    @Test("an enum of 100,000 values is refused, and so are too many values in all")
    func hugeEnum() {
        let huge: JSON = ["enum": .array((0..<100_000).map { .int(Int64($0)) })]
        var error: SchemaError?
        #expect(Self.quick(1) { error = SchemaCheck.refusal(huge) })
        #expect(error?.keyword == "enum" && error?.pointer == "/enum")
        #expect(error?.message.contains("the limit is \(CollectionSchema.maxEnumValues)") == true)
        // At the limit it compiles.
        #expect((try? CollectionSchema(json: ["enum": .array((0..<1_000).map { .int(Int64($0)) })])) != nil)
        // Many enums, each under the limit, still count against all the constants together.
        var properties = JSONObject()
        for n in 0..<20 { properties["p\(n)"] = ["enum": .array((0..<1_000).map { .int(Int64($0)) })] }
        let many = SchemaCheck.refusal(["properties": .object(properties)])
        #expect(many?.keyword == "enum" && many?.message.contains("\(CollectionSchema.maxConstantValues)") == true)
        // A const nested deeper than the limit.
        var deep: JSON = 1
        for _ in 0...CollectionSchema.maxDepth { deep = [deep] }
        #expect(SchemaCheck.refusal(["const": deep])?.keyword == "const")
    }

    @Test("too many subschemas, patterns, required names, or a pattern too long, are refused")
    func sizes() {
        var properties = JSONObject()
        for n in 0..<CollectionSchema.maxNodes { properties["p\(n)"] = [:] }
        #expect(SchemaCheck.refusal(["properties": .object(properties)])?.message.contains("more than \(CollectionSchema.maxNodes) subschemas") == true)
        var patterns = JSONObject()
        for n in 0...CollectionSchema.maxPatterns { patterns["p\(n)"] = ["pattern": "a"] }
        let tooMany = SchemaCheck.refusal(["properties": .object(patterns)])
        #expect(tooMany?.keyword == "pattern" && tooMany?.pointer == "/properties/p\(CollectionSchema.maxPatterns)/pattern")
        let long = SchemaCheck.refusal(["pattern": .string(String(repeating: "a", count: CollectionSchema.maxPatternBytes + 1))])
        #expect(long?.keyword == "pattern" && long?.message.contains("the limit is \(CollectionSchema.maxPatternBytes)") == true)
        let required = SchemaCheck.refusal(["required": .array((0...CollectionSchema.maxRequired).map { .string("m\($0)") })])
        #expect(required?.keyword == "required")
    }

    @Test("a catastrophic pattern ends as a violation within its match limit")
    func catastrophicPattern() throws {
        let schema = try SchemaCheck.compile(["properties": ["v": ["pattern": "(a+)+$"]]])
        let hostile = String(repeating: "a", count: 30) + "b"
        var result: [SchemaViolation] = []
        #expect(Self.quick(10) { result = schema.validate(["v": .string(hostile)]) })
        #expect(result.count == 1)
        #expect(result.first?.keyword == "pattern" && result.first?.pointer == "/v")
        #expect(result.first?.found == "\"\(String(repeating: "a", count: 30))b\"")
        #expect(
            result.first?.expected
                == "matching /(a+)+$/ within the match limit (matching this string took too many steps)")
        // Twenty such values: the violation cap bounds the time too.
        let many = JSON.array(Array(repeating: .string(hostile), count: 100))
        let items = try SchemaCheck.compile(["items": ["pattern": "^(a|aa)+$"]])
        var capped: [SchemaViolation] = []
        #expect(Self.quick(30) { capped = items.validate(many) })
        #expect(capped.count == CollectionSchema.maxViolations)
        #expect(capped.allSatisfy { $0.keyword == "pattern" })
    }

    @Test("a pattern that hits the step limit says so")
    func limitText() throws {
        // Nested quantifiers over a long string: exponential backtracking, stopped by the limit.
        let schema = try SchemaCheck.compile(["pattern": "^(\\w+\\s?)*$"])
        let subject = String(repeating: "word ", count: 8) + String(repeating: "x", count: 40) + "!"
        let result = schema.validate(.string(subject))
        #expect(result.count == 1)
        #expect(result.first?.expected == "matching /^(\\w+\\s?)*$/ within the match limit (matching this string took too many steps)")
    }

    @Test("long strings: checked in time, quoted short")
    func longStrings() throws {
        let long = String(repeating: "日", count: 1_000_000)
        let schema = try SchemaCheck.compile(["items": ["maxLength": 10, "pattern": "^\\p{Han}+$", "format": "uuid"]])
        var result: [SchemaViolation] = []
        #expect(Self.quick(5) { result = schema.validate([.string(long)]) })
        let quoted = "\"" + String(repeating: "日", count: SchemaViolation.foundCharacters) + "…\" (1000000 characters)"
        #expect(
            result == [
                violation("/0", "maxLength", "at most 10 characters", quoted),
                violation("/0", "format", "a uuid (RFC 9562)", quoted),
            ])
        // A long number is cut too.
        let number = try SchemaCheck.compile(["maximum": 0]).validate(Array("1\(String(repeating: "0", count: 300))".utf8))
        #expect(number.first?.found == "1" + String(repeating: "0", count: SchemaViolation.foundCharacters - 1) + "…")
    }

    @Test("at most 20 violations, in document order")
    func violationCap() throws {
        var properties = JSONObject()
        var record = JSONObject()
        for n in 0..<30 {
            properties["p\(n)"] = ["type": "string"]
            record["p\(n)"] = .int(Int64(n))
        }
        let result = try SchemaCheck.violations(["properties": .object(properties)], .object(record))
        #expect(result == (0..<20).map { violation("/p\($0)", "type", "string", "\($0)") })
        let required = try SchemaCheck.violations(["required": .array((0..<30).map { .string("r\($0)") })], [:])
        #expect(required == (0..<20).map { violation("/r\($0)", "required", "present") })
        // Two violations per element: the cap falls between a value's keywords.
        let items = try SchemaCheck.violations(["items": ["type": "string", "enum": ["x"]]], .array((0..<15).map { .int($0) }))
        #expect(items.count == 20 && items.last == violation("/9", "enum", #"one of ["x"]"#, "9"))
    }
}
