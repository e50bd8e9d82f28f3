import Foundation
import LarderSchema
import LarderTestThreads
import LarderWire
import Testing

/// Records as the write path has them (bytes in any JSON spelling), pointers, and the seed apps' shapes.
@Suite("Schema validation of records", .ownThreads, .timeLimit(.minutes(20)))
struct RecordTests {
    /// The repository's sample records of `collection` (samples/<collection>.json): each element's `data`.
    static func samples(_ collection: String) throws -> [JSON] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let bytes = try Data(contentsOf: root.appendingPathComponent("samples/\(collection).json"))
        let records = try #require(try JSONParser.parse(Array(bytes)).arrayValue)
        return try records.map { try #require($0["data"]) }
    }

    /// The todo app's records.
    static let todo: JSON = [
        "type": "object",
        "properties": ["title": ["type": "string", "minLength": 1, "maxLength": 200], "isFinish": ["type": "boolean"]],
        "required": ["title", "isFinish"],
        "additionalProperties": false,
    ]

    /// The catalogue app's records (pokemon_items).
    static let catalogue: JSON = [
        "type": "object",
        "properties": [
            "category": ["enum": ["Ball", "Medicine"]],
            "name": ["type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 64],
            "imageName": ["type": "string", "pattern": "^[a-z0-9-]+$"],
            "description": ["type": "string", "maxLength": 500],
        ],
        "required": ["category", "name", "imageName", "description"],
        "additionalProperties": false,
    ]

    /// The shop diary's records (items): a date-time, an integer price, an optional photo.
    static let shopDiary: JSON = [
        "type": "object",
        "properties": [
            "store": ["type": "string", "minLength": 1], "item": ["type": "string", "minLength": 1],
            "date": ["type": "string", "format": "date-time"], "price": ["type": "integer", "minimum": 0],
            "discount": ["type": "boolean"], "comment": ["type": "string"],
            "photoName": ["type": ["string", "null"], "format": "uuid"],
        ],
        "required": ["store", "item", "date", "price", "discount"],
        "additionalProperties": false,
    ]

    @Test("the todo app's sample records pass its schema; broken ones get exact violations")
    func todos() throws {
        let schema = try SchemaCheck.compile(Self.todo)
        let records = try Self.samples("todos")
        #expect(records.count == 4)
        for record in records { #expect(schema.validate(record) == [], "\(record)") }
        #expect(schema.validate(["title": "", "isFinish": "no", "due": "2024-05-01"]) == [
            violation("/title", "minLength", "at least 1 character", #""""#),
            violation("/isFinish", "type", "boolean", #""no""#),
            violation("/due", "additionalProperties", "only the members in properties", #""2024-05-01""#),
        ])
        #expect(schema.validate(["isFinish": true]) == [violation("/title", "required", "present")])
        #expect(schema.validate(["title", "isFinish"]) == [violation("", "type", "object", "an array")])
    }

    @Test("the catalogue app's sample records pass its schema; broken ones get exact violations")
    func catalogue() throws {
        let schema = try SchemaCheck.compile(Self.catalogue)
        let records = try Self.samples("pokemon_items")
        #expect(records.count >= 7)
        for record in records { #expect(schema.validate(record) == [], "\(record)") }
        var broken = try #require(records.first?.objectValue)
        broken["category"] = "Berry"
        broken["name"] = "Poke Ball"
        broken["imageName"] = nil
        #expect(schema.validate(.object(broken)) == [
            violation("/category", "enum", #"one of ["Ball","Medicine"]"#, #""Berry""#),
            violation("/name", "pattern", "matching /^[a-z0-9]+(-[a-z0-9]+)*$/", #""Poke Ball""#),
            violation("/imageName", "required", "present"),
        ])
    }

    @Test("the shop diary's sample records pass its schema")
    func shopDiary() throws {
        let schema = try SchemaCheck.compile(Self.shopDiary)
        for record in try Self.samples("items") { #expect(schema.validate(record) == [], "\(record)") }
        #expect(schema.validate([
            "store": "7-Eleven", "item": "x", "date": "2024-05-01 12:30", "price": 35.5, "discount": true,
            "photoName": "photo.jpg",
        ]) == [
            violation("/date", "format", "a date-time (RFC 3339)", #""2024-05-01 12:30""#),
            violation("/price", "type", "integer", "35.5"),
            violation("/photoName", "format", "a uuid (RFC 9562)", #""photo.jpg""#),
        ])
    }

    @Test("any JSON spelling of a record gives the same violations: whitespace, escapes in names and values")
    func spellings() throws {
        let schema = try SchemaCheck.compile([
            "properties": ["title": ["type": "string", "maxLength": 3], "tags": ["items": ["enum": ["a", "é"]]]],
            "required": ["title"],
            "additionalProperties": false,
        ])
        let compact = Array(#"{"title":"long","tags":["a","é","b"],"x":-1.5e2}"#.utf8)
        let spaced = Array("""
            { "\\u0074itle" : "l\\u006fng" ,
              "tags" : [ "\\u0061", "\\u00e9" , "b" ] , "x" : -1.5e2 }
            """.utf8)
        let expected = [
            violation("/title", "maxLength", "at most 3 characters", #""long""#),
            violation("/tags/2", "enum", #"one of ["a","é"]"#, #""b""#),
            violation("/x", "additionalProperties", "only the members in properties", "-1.5e2"),
        ]
        #expect(schema.validate(compact) == expected)
        #expect(schema.validate(spaced) == expected)
    }

    @Test("pointers escape ~ and / (RFC 6901) and name array indices")
    func pointers() throws {
        let schema: JSON = ["properties": ["a/b": ["type": "string"], "m~n": ["items": ["type": "string"]]], "required": ["x/y"]]
        #expect(try SchemaCheck.violations(schema, ["a/b": 1, "m~n": ["s", 2]]) == [
            violation("/a~1b", "type", "string", "1"), violation("/m~0n/1", "type", "string", "2"),
            violation("/x~1y", "required", "present"),
        ])
        #expect(try SchemaCheck.violations(["properties": ["": ["type": "null"]]], ["": 1]) == [violation("/", "type", "null", "1")])
    }

    @Test("bytes that are not JSON stop validation with a violation, never a crash")
    func malformed() throws {
        let schema = try SchemaCheck.compile(["properties": ["a": ["items": ["type": "string"]]]])
        for text in ["", "{", #"{"a":["#, #"{"a":["x""#, #"{"a" 1}"#, #"{"a":[1}"#] {
            let result = schema.validate(Array(text.utf8))
            #expect(result.last?.expected == "well-formed JSON", "\(text)")
        }
    }

    @Test("one compiled schema validates from many threads at once")
    func concurrent() async throws {
        let schema = try SchemaCheck.compile(Self.catalogue)
        let records = try Self.samples("pokemon_items")
        let bad: JSON = ["category": "Ball", "name": "Bad Name", "imageName": "x", "description": ""]
        let failures = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var failures = 0
                    for _ in 0..<200 {
                        for record in records where !schema.validate(record).isEmpty { failures += 1 }
                        if schema.validate(bad).map(\.keyword) != ["pattern"] { failures += 1 }
                    }
                    return failures
                }
            }
            return await group.reduce(0, +)
        }
        #expect(failures == 0)
    }
}
