import LarderSchema
import LarderTestThreads
import LarderWire
import Testing

/// Schemas refused when set: an unsupported keyword by name, a keyword of the wrong type, each with where it is.
@Suite("Schema compile refusals", .ownThreads, .timeLimit(.minutes(20)))
struct CompileTests {
    /// The refusal's pointer and keyword, and whether its message contains `text`.
    static func expectRefusal(
        _ schema: JSON, pointer: String, keyword: String?, mentioning text: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard let error = SchemaCheck.refusal(schema, sourceLocation: sourceLocation) else { return }
        #expect(error.pointer == pointer, sourceLocation: sourceLocation)
        #expect(error.keyword == keyword, sourceLocation: sourceLocation)
        #expect(error.message.contains(text), "\(error.message)", sourceLocation: sourceLocation)
    }

    @Test("an unsupported keyword is named, with its pointer, wherever it is")
    func unknownKeywords() {
        Self.expectRefusal(["minProperties": 1], pointer: "/minProperties", keyword: "minProperties", mentioning: "minProperties is not supported")
        Self.expectRefusal(
            ["properties": ["address": ["type": "object", "patternProperties": [:]]]],
            pointer: "/properties/address/patternProperties", keyword: "patternProperties",
            mentioning: "patternProperties is not supported")
        Self.expectRefusal(["items": ["$ref": "#"]], pointer: "/items/$ref", keyword: "$ref", mentioning: "$ref")
        Self.expectRefusal(["$schema": "http://json-schema.org/draft-07/schema#"], pointer: "/$schema", keyword: "$schema", mentioning: "the only dialect supported is https://json-schema.org/draft/2020-12/schema")
        Self.expectRefusal(["title": 1], pointer: "/title", keyword: "title", mentioning: "title must be a string, not a number")
        Self.expectRefusal(["properties": ["a": ["$comment": nil]]], pointer: "/properties/a/$comment", keyword: "$comment", mentioning: "must be a string")
        // A member name with `/` or `~` is escaped in the pointer (RFC 6901).
        Self.expectRefusal(
            ["properties": ["a/b~c": ["oneOf": []]]], pointer: "/properties/a~1b~0c/oneOf", keyword: "oneOf",
            mentioning: "oneOf")
        for keyword in ["allOf", "anyOf", "not", "if", "multipleOf", "uniqueItems", "contains", "prefixItems", "dependentRequired", "default", "$id", "$defs", "examples"] {
            var schema = JSONObject()
            schema[keyword] = 1
            Self.expectRefusal(.object(schema), pointer: "/\(keyword)", keyword: keyword, mentioning: keyword)
        }
    }

    @Test("$schema (2020-12 only), title, description and $comment are kept as annotations and check nothing")
    func annotations() throws {
        let schema: JSON = [
            "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Todo", "description": "a todo",
            "$comment": "kept", "type": "object",
            "properties": ["title": ["type": "string", "description": "what to do", "$comment": "c"]],
        ]
        let compiled = try CollectionSchema(json: schema)
        #expect(compiled.json == schema)
        #expect(compiled.validate(["title": "x"] as JSON) == [])
        #expect(compiled.validate(["title": 1] as JSON).map(\.keyword) == ["type"])
        #expect(try CollectionSchema(json: ["title": "only annotations"]).validate(JSON.int(3)) == [])
    }

    @Test("each keyword's value of the wrong type is refused")
    func wrongTypes() {
        let cases: [(JSON, String, String)] = [
            (["type": 3], "type", "type must be a type name"),
            (["type": "text"], "type", "found \"text\""),
            (["type": []], "type", "non-empty array"),
            (["type": ["string", "string"]], "type", "string twice"),
            (["properties": [1]], "properties", "an object of schemas"),
            (["required": "a"], "required", "an array of member names"),
            (["required": [1]], "required", "not a number"),
            (["required": ["a", "a"]], "required", #""a" twice"#),
            (["additionalProperties": ["type": "string"]], "additionalProperties", "a boolean"),
            (["enum": []], "enum", "non-empty array"),
            (["enum": "a"], "enum", "non-empty array"),
            (["minimum": "3"], "minimum", "a number, not a string"),
            (["exclusiveMaximum": nil], "exclusiveMaximum", "a number, not null"),
            (["minLength": -1], "minLength", "non-negative integer of at most 2147483647, not -1"),
            (["maxLength": 1.5], "maxLength", "not 1.5"),
            (["minItems": "1"], "minItems", "a non-negative integer, not a string"),
            (["maxItems": 1e12], "maxItems", "not 1"),
            (["pattern": 3], "pattern", "a string"),
            (["pattern": "(a"], "pattern", "not a valid regular expression"),
            (["pattern": #"a\C"#], "pattern", "not a valid regular expression"),
            (["format": "email"], "format", #"the format "email" is not supported"#),
            (["format": 1], "format", "a string"),
            (["items": [["type": "string"]]], "items", "prefixItems"),
        ]
        for (schema, keyword, text) in cases {
            Self.expectRefusal(schema, pointer: "/\(keyword)", keyword: keyword, mentioning: text)
        }
        // Counts written as whole doubles are integers.
        #expect((try? CollectionSchema(json: ["minLength": 2.0])) != nil)
        Self.expectRefusal(["properties": ["a": 3]], pointer: "/properties/a", keyword: nil, mentioning: "an object or a boolean, not a number")
        Self.expectRefusal(["items": "string"], pointer: "/items", keyword: nil, mentioning: "not a string")
        Self.expectRefusal([1], pointer: "", keyword: nil, mentioning: "not an array")
    }

    @Test("the schema is kept as given")
    func keepsJSON() throws {
        let json: JSON = ["type": "object", "properties": ["a": ["enum": [1, 2]]]]
        #expect(try CollectionSchema(json: json).json == json)
    }

    @Test("violations and errors describe themselves, and a violation's JSON carries found only when there is one")
    func descriptions() {
        let v = violation("/address/zip", "pattern", "matching /^[0-9]{5}$/", #""1234""#)
        #expect(v.description == #"/address/zip: pattern: expected matching /^[0-9]{5}$/, found "1234""#)
        #expect(v.json == ["pointer": "/address/zip", "keyword": "pattern", "expected": "matching /^[0-9]{5}$/", "found": #""1234""#])
        #expect(violation("/a", "required", "present").json == ["pointer": "/a", "keyword": "required", "expected": "present"])
        #expect(violation("", "type", "object", "an array").description == "(the record): type: expected object, found an array")
        #expect(SchemaError(pointer: "", keyword: nil, message: "m").description == "schema (root): m")
    }
}
