import LarderSchema
import LarderTestThreads
import LarderWire
import Testing

/// Every keyword, on values it accepts and values it refuses, with the exact violations.
@Suite("Schema keywords", .ownThreads, .timeLimit(.minutes(20)))
struct KeywordTests {
    /// `{"type": "object", "properties": {"v": property}}`: a record's member `v` under `property`.
    static func member(_ property: JSON) -> JSON { ["type": "object", "properties": ["v": property]] }

    /// The violations of `{"v": value}` under `member(property)`.
    static func check(_ property: JSON, _ value: JSON) throws -> [SchemaViolation] {
        try SchemaCheck.violations(member(property), ["v": value])
    }

    @Test("type: each name, integer as a number without a fraction, and a list")
    func type() throws {
        #expect(try Self.check(["type": "string"], "a") == [])
        #expect(try Self.check(["type": "string"], 42) == [violation("/v", "type", "string", "42")])
        #expect(try Self.check(["type": "number"], 1.5) == [])
        #expect(try Self.check(["type": "number"], "1") == [violation("/v", "type", "number", #""1""#)])
        #expect(try Self.check(["type": "integer"], 3) == [])
        #expect(try Self.check(["type": "integer"], 1.0) == [])
        #expect(try Self.check(["type": "integer"], -0.0) == [])
        #expect(try Self.check(["type": "integer"], 1e300) == [])
        #expect(try Self.check(["type": "integer"], 3.5) == [violation("/v", "type", "integer", "3.5")])
        #expect(try Self.check(["type": "boolean"], false) == [])
        #expect(try Self.check(["type": "boolean"], nil) == [violation("/v", "type", "boolean", "null")])
        #expect(try Self.check(["type": "null"], nil) == [])
        #expect(try Self.check(["type": "null"], true) == [violation("/v", "type", "null", "true")])
        #expect(try Self.check(["type": "object"], [:]) == [])
        #expect(try Self.check(["type": "object"], [1]) == [violation("/v", "type", "object", "an array")])
        #expect(try Self.check(["type": "array"], []) == [])
        #expect(try Self.check(["type": "array"], ["a": 1]) == [violation("/v", "type", "array", "an object")])
        let list: JSON = ["type": ["integer", "null"]]
        #expect(try Self.check(list, nil) == [])
        #expect(try Self.check(list, 7) == [])
        #expect(try Self.check(list, 7.25) == [violation("/v", "type", "integer or null", "7.25")])
        #expect(try Self.check(list, "7") == [violation("/v", "type", "integer or null", #""7""#)])
        #expect(try Self.check(["type": ["number", "integer"]], 7.25) == [])
        #expect(try SchemaCheck.violations(["type": "object"], [1, 2]) == [violation("", "type", "object", "an array")])
    }

    @Test("properties: each member under its subschema, at its pointer; other members are free")
    func properties() throws {
        let schema: JSON = [
            "properties": [
                "name": ["type": "string"],
                "address": ["properties": ["zip": ["type": "string"], "city": ["type": "string"]]],
            ]
        ]
        #expect(try SchemaCheck.violations(schema, ["name": "Ada", "address": ["zip": "0150"], "other": 1]) == [])
        #expect(try SchemaCheck.violations(schema, [:]) == [])
        #expect(
            try SchemaCheck.violations(schema, ["name": 1, "address": ["zip": 150, "city": ["x"]]]) == [
                violation("/name", "type", "string", "1"), violation("/address/zip", "type", "string", "150"),
                violation("/address/city", "type", "string", "an array"),
            ])
        // A keyword of one type ignores the others: `properties` on a string value.
        #expect(try SchemaCheck.violations(schema, ["address": "Oslo"]) == [])
    }

    @Test("required: each missing member at the pointer it would have, after the members' own violations")
    func required() throws {
        let schema: JSON = [
            "properties": ["title": ["type": "string"], "address": ["required": ["zip"]]],
            "required": ["title", "done", "address"],
        ]
        #expect(try SchemaCheck.violations(schema, ["title": "a", "done": false, "address": ["zip": "1"]]) == [])
        #expect(
            try SchemaCheck.violations(schema, ["title": 1, "address": [:]]) == [
                violation("/title", "type", "string", "1"), violation("/address/zip", "required", "present"),
                violation("/done", "required", "present"),
            ])
        #expect(
            try SchemaCheck.violations(schema, [:]) == [
                violation("/title", "required", "present"), violation("/done", "required", "present"),
                violation("/address", "required", "present"),
            ])
        // `null` is present.
        #expect(try SchemaCheck.violations(["required": ["a"]], ["a": nil]) == [])
        // More than 64 required names (the bits of one word).
        let names = (0..<70).map { "m\($0)" }
        let many: JSON = ["required": .array(names.map { .string($0) })]
        var record = JSONObject()
        for name in names where name != "m66" { record[name] = 1 }
        #expect(try SchemaCheck.violations(many, .object(record)) == [violation("/m66", "required", "present")])
    }

    @Test("additionalProperties: false reports each member not in properties; true allows them")
    func additionalProperties() throws {
        let closed: JSON = [
            "properties": ["a": ["type": "integer"]], "required": ["b"], "additionalProperties": false,
        ]
        #expect(try SchemaCheck.violations(closed, ["a": 1]) == [violation("/b", "required", "present")])
        #expect(
            try SchemaCheck.violations(closed, ["x": "secret", "a": "1", "b": [1], "c": ["d": 1]]) == [
                violation("/x", "additionalProperties", "only the members in properties", #""secret""#),
                violation("/a", "type", "integer", #""1""#),
                violation("/b", "additionalProperties", "only the members in properties", "an array"),
                violation("/c", "additionalProperties", "only the members in properties", "an object"),
            ])
        #expect(try SchemaCheck.violations(["additionalProperties": true], ["x": 1]) == [])
        #expect(try SchemaCheck.violations(["additionalProperties": false], [:]) == [])
    }

    @Test("enum: JSON equality (1 equals 1.0, members in any order), strings by code points")
    func enumeration() throws {
        let states: JSON = ["enum": ["open", "done", 1, nil, true, ["a": 1, "b": [2]], [1, 2]]]
        for value: JSON in ["open", "done", 1, 1.0, nil, true, ["b": [2.0], "a": 1], [1, 2.0]] {
            #expect(try Self.check(states, value) == [], "\(value)")
        }
        let expected = #"one of ["open","done",1,null,true,{"a":1,"b":[2]},[1,2]]"#
        for (value, found): (JSON, String) in [
            ("Open", #""Open""#), (2, "2"), (1.5, "1.5"), (false, "false"), (["a": 1], "an object"),
            ([2, 1], "an array"),
        ] {
            #expect(try Self.check(states, value) == [violation("/v", "enum", expected, found)])
        }
        // A long list is counted, not quoted.
        let long: JSON = ["enum": .array((0..<200).map { .string("value \($0)") })]
        #expect(try Self.check(long, "value 199") == [])
        #expect(try Self.check(long, "value 200") == [violation("/v", "enum", "one of the 200 values of enum", #""value 200""#)])
        // Strings compare as code points: no Unicode normalization (é precomposed is not e + U+0301).
        #expect(try Self.check(["enum": ["\u{E9}"]], "e\u{301}") == [violation("/v", "enum", #"one of ["é"]"#, "\"e\u{301}\"")])
    }

    @Test("const: one value, by JSON equality")
    func constant() throws {
        #expect(try Self.check(["const": 3], 3.0) == [])
        #expect(try Self.check(["const": 3], 4) == [violation("/v", "const", "3", "4")])
        #expect(try Self.check(["const": "x"], "x") == [])
        #expect(try Self.check(["const": "x"], "y") == [violation("/v", "const", #""x""#, #""y""#)])
        #expect(try Self.check(["const": nil], nil) == [])
        #expect(try Self.check(["const": nil], false) == [violation("/v", "const", "null", "false")])
        #expect(try Self.check(["const": ["a": [1, "b"]]], ["a": [1.0, "b"]]) == [])
        #expect(try Self.check(["const": ["a": [1, "b"]]], ["a": [1]]) == [violation("/v", "const", #"{"a":[1,"b"]}"#, "an object")])
        // type, enum and const are all checked, in that order.
        #expect(
            try Self.check(["type": "string", "enum": ["a"], "const": "a"], 1) == [
                violation("/v", "type", "string", "1"), violation("/v", "enum", #"one of ["a"]"#, "1"),
                violation("/v", "const", #""a""#, "1"),
            ])
    }

    @Test("minimum, maximum, exclusiveMinimum, exclusiveMaximum: inclusive and exclusive, integers against doubles exactly")
    func bounds() throws {
        let range: JSON = ["minimum": 0, "maximum": 10.5]
        for value: JSON in [0, 0.0, 10, 10.5, 5] { #expect(try Self.check(range, value) == [], "\(value)") }
        #expect(try Self.check(range, -1) == [violation("/v", "minimum", ">= 0", "-1")])
        #expect(try Self.check(range, -0.001) == [violation("/v", "minimum", ">= 0", "-0.001")])
        #expect(try Self.check(range, 11) == [violation("/v", "maximum", "<= 10.5", "11")])
        let open: JSON = ["exclusiveMinimum": 0, "exclusiveMaximum": 1]
        #expect(try Self.check(open, 0.5) == [])
        #expect(try Self.check(open, 0) == [violation("/v", "exclusiveMinimum", "> 0", "0")])
        #expect(try Self.check(open, 1.0) == [violation("/v", "exclusiveMaximum", "< 1", "1.0")])
        #expect(
            try Self.check(["minimum": 5, "exclusiveMinimum": 5], 4) == [
                violation("/v", "minimum", ">= 5", "4"), violation("/v", "exclusiveMinimum", "> 5", "4"),
            ])
        // 2^63 - 1 is below 2^63 (as a double, 9223372036854775807 would round up to it).
        #expect(try Self.check(["exclusiveMaximum": 9_223_372_036_854_775_808.0], .int(.max)) == [])
        #expect(try Self.check(["maximum": .int(.max - 1)], .int(.max)) == [
            violation("/v", "maximum", "<= 9223372036854775806", "9223372036854775807")
        ])
        #expect(try Self.check(["minimum": .int(.min)], .int(.min)) == [])
        // Bounds ignore what is not a number.
        #expect(try Self.check(range, "-1") == [])
    }

    @Test("minLength, maxLength: in code points, escapes decoded")
    func lengths() throws {
        let schema: JSON = ["minLength": 2, "maxLength": 4]
        #expect(try Self.check(schema, "ab") == [])
        #expect(try Self.check(schema, "é日本🍯") == [])
        #expect(try Self.check(schema, "🍯") == [violation("/v", "minLength", "at least 2 characters", #""🍯""#)])
        #expect(try Self.check(schema, "abcde") == [violation("/v", "maxLength", "at most 4 characters", #""abcde""#)])
        #expect(try Self.check(["minLength": 1], "") == [violation("/v", "minLength", "at least 1 character", #""""#)])
        // Escapes count as what they stand for: "\u00e9\n\ud83c\udf6f" is 3 characters.
        let bytes = Array(#"{"v": "\u00e9\n\ud83c\udf6f"}"#.utf8)
        let compiled = try SchemaCheck.compile(Self.member(["maxLength": 3]))
        #expect(compiled.validate(bytes) == [])
        #expect(
            try SchemaCheck.compile(Self.member(["maxLength": 2])).validate(bytes) == [
                violation("/v", "maxLength", "at most 2 characters", #""é\n🍯""#)
            ])
        #expect(try Self.check(schema, 12345) == [])
    }

    @Test("pattern: unanchored, Unicode-aware, ECMA-262 escapes")
    func pattern() throws {
        let zip: JSON = ["pattern": "^[0-9]{5}$"]
        #expect(try Self.check(zip, "01500") == [])
        #expect(try Self.check(zip, "0150") == [violation("/v", "pattern", "matching /^[0-9]{5}$/", #""0150""#)])
        // `$` is the end of the string, not before a final newline.
        #expect(try Self.check(zip, "01500\n") == [violation("/v", "pattern", "matching /^[0-9]{5}$/", #""01500\n""#)])
        #expect(try Self.check(["pattern": "b"], "abc") == [])
        #expect(try Self.check(["pattern": "^.{3}$"], "日本語") == [])
        #expect(try Self.check(["pattern": #"^\p{Han}+$"#], "日本語") == [])
        #expect(try Self.check(["pattern": #"^\w+$"#], "Pokémon") == [])
        #expect(try Self.check(["pattern": #"^\u0041\u{1F36F}$"#], "A🍯") == [])
        #expect(try Self.check(zip, 12345) == [])
    }

    @Test("items, minItems, maxItems: each element at its index, the counts after the elements")
    func items() throws {
        let tags: JSON = ["items": ["type": "string", "maxLength": 3], "minItems": 1, "maxItems": 2]
        #expect(try Self.check(tags, ["a", "bc"]) == [])
        #expect(try Self.check(tags, []) == [violation("/v", "minItems", "at least 1 item", "0 items")])
        #expect(
            try Self.check(tags, ["a", 2, "long"]) == [
                violation("/v/1", "type", "string", "2"), violation("/v/2", "maxLength", "at most 3 characters", #""long""#),
                violation("/v", "maxItems", "at most 2 items", "3 items"),
            ])
        #expect(try Self.check(["minItems": 2], [1]) == [violation("/v", "minItems", "at least 2 items", "1 item")])
        let nested: JSON = ["items": ["items": ["type": "integer"]]]
        #expect(try Self.check(nested, [[1], [2, "x"]]) == [violation("/v/1/1", "type", "integer", #""x""#)])
        #expect(try Self.check(["items": ["properties": ["id": ["type": "string"]]]], [["id": 1]]) == [
            violation("/v/0/id", "type", "string", "1")
        ])
        #expect(try Self.check(tags, "not an array") == [])
    }

    @Test("format: uuid (RFC 9562) and date-time (RFC 3339) are asserted")
    func format() throws {
        let uuid: JSON = ["format": "uuid"]
        for good: JSON in [
            "01900000-0000-7000-8000-000000003001", "3F2504E0-4F89-11D3-9A0C-0305E82C3301",
            "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
        ] {
            #expect(try Self.check(uuid, good) == [], "\(good)")
        }
        for bad in [
            "01900000000070008000000000003001", "{01900000-0000-7000-8000-000000003001}",
            "01900000-0000-7000-8000-00000000300g", "01900000-0000-7000-8000-0000000030011", "0190000-00000-7000-8000-000000003001",
            "",
        ] {
            let found = bad.count > SchemaViolation.foundCharacters ? nil : "\"\(bad)\""
            let result = try Self.check(uuid, .string(bad))
            #expect(result.map(\.keyword) == ["format"] && result.first?.expected == "a uuid (RFC 9562)", "\(bad)")
            if let found { #expect(result.first?.found == found) }
        }
        let dateTime: JSON = ["format": "date-time"]
        for good in [
            "2024-05-01T12:30:00Z", "2024-05-01t12:30:00z", "2024-05-01T12:30:00.123456+08:00", "2024-02-29T00:00:00-00:30",
            "1998-12-31T23:59:60Z", "1998-12-31T15:59:60.123-08:00", "2000-02-29T23:59:59+23:59",
        ] {
            #expect(try Self.check(dateTime, .string(good)) == [], "\(good)")
        }
        for bad in [
            "2024-05-01", "2024-05-01 12:30:00Z", "2024-05-01T12:30:00", "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z", "2024-13-01T00:00:00Z", "2024-00-01T00:00:00Z", "2024-05-01T24:00:00Z",
            "2024-05-01T12:60:00Z", "1998-12-31T23:59:61Z", "1998-12-31T23:58:60Z", "1998-12-31T23:59:60+01:00",
            "2024-05-01T12:30:00.Z", "2024-05-01T12:30:00+0800", "2024-05-01T12:30:00+24:00", "２０２４-05-01T12:30:00Z",
            "2024-05-01T12:30:00Z ",
        ] {
            #expect(
                try Self.check(dateTime, .string(bad)) == [violation("/v", "format", "a date-time (RFC 3339)", "\"\(bad)\"")],
                "\(bad)")
        }
        #expect(try Self.check(dateTime, 20240501) == [])
    }

    @Test("true and false as subschemas")
    func booleanSchemas() throws {
        let schema: JSON = ["properties": ["gone": false, "any": true], "items": false]
        #expect(try SchemaCheck.violations(schema, ["any": ["x": 1]]) == [])
        #expect(
            try SchemaCheck.violations(schema, ["gone": 1, "any": 2]) == [
                violation("/gone", "false", "nothing (the schema here is false)", "1")
            ])
        #expect(try SchemaCheck.violations(false, [:]) == [violation("", "false", "nothing (the schema here is false)", "an object")])
        #expect(try SchemaCheck.violations(true, [:]) == [])
        #expect(try SchemaCheck.violations([:], ["a": 1]) == [])
        #expect(try SchemaCheck.violations(["items": false], []) == [])
        #expect(try SchemaCheck.violations(["items": false], [nil]) == [violation("/0", "false", "nothing (the schema here is false)", "null")])
    }
}
