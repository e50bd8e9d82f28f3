import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// A server's collection-schema bounds are its configuration: HELLO announces them, and SCHEMA_SET takes a schema at
/// each bound and refuses one past it, naming the keyword; a `pattern` match stops at the configured step bound.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SchemaLimitsServerTests {
    /// Bounds well below the defaults, so each is crossed by a small schema.
    static let small = SchemaLimits(
        maxDepth: 3, maxNodes: 6, maxEnumValues: 4, maxConstantValues: 6, maxPatternBytes: 10, maxPatterns: 2,
        maxRequired: 3, patternMatchSteps: 500)

    /// `schema` nested `levels` deep through `items`.
    static func nested(_ levels: Int) -> JSON {
        var schema: JSON = ["type": "string"]
        for _ in 0..<levels { schema = ["items": schema] }
        return schema
    }

    /// `count` empty subschemas under `properties` (the root makes one more).
    static func members(_ count: Int) -> JSON {
        var properties: JSONObject = [:]
        for n in 0..<count { properties["p\(n)"] = [:] }
        return ["properties": .object(properties)]
    }

    /// `count` properties, each with the pattern `pattern`.
    static func patterns(_ count: Int, _ pattern: String = "a") -> JSON {
        var properties: JSONObject = [:]
        for n in 0..<count { properties["p\(n)"] = ["pattern": .string(pattern)] }
        return ["properties": .object(properties)]
    }

    /// Per bound: a schema at it, one past it, and the keyword the refusal names (nil: none, a count of subschemas).
    static let cases: [(String, JSON, JSON, String?)] = [
        ("maxSchemaDepth", nested(3), nested(4), "items"),
        ("maxSchemaNodes", members(5), members(6), nil),
        ("maxSchemaEnumValues", ["enum": [1, 2, 3, 4]], ["enum": [1, 2, 3, 4, 5]], "enum"),
        ("maxSchemaConstantValues", ["const": [1, 2, 3, 4, 5]], ["const": [1, 2, 3, 4, 5, 6]], "const"),
        ("maxSchemaPatternBytes", ["pattern": "abcdefghij"], ["pattern": "abcdefghijk"], "pattern"),
        ("maxSchemaPatterns", patterns(2), patterns(3), "pattern"),
        ("maxSchemaRequired", ["required": ["a", "b", "c"]], ["required": ["a", "b", "c", "d"]], "required"),
    ]

    @Test(arguments: ServerStore.allCases)
    func configuredSchemaBoundsAreAnnouncedAndEachIsCrossed(_ store: ServerStore) throws {
        let server = try ClientTestServer(store) { $0.limits.schema = Self.small }
        defer { server.stop() }
        let client = try RawClient.tcp(port: server.port)
        let hello = try client.hello()
        #expect(hello.limits.schema == Self.small)
        for (name, atBound, pastBound, keyword) in Self.cases {
            let accepted = try client.call(.schemaSet, ["collection": "at", "schema": atBound])
            #expect(accepted.status == .ok, "\(name): \(accepted.replyText)")
            let refused = try client.call(.schemaSet, ["collection": "past", "schema": pastBound])
            #expect(refused.status == .invalidArgument && refused.replyJSON["field"] == "schema", "\(name): \(refused.replyText)")
            #expect(refused.replyJSON["keyword"] == keyword.map(JSON.string), "\(name): \(refused.replyText)")
        }
        // The match that a default server finishes stops at 500 steps here: a violation that says so.
        let set = try client.call(.schemaSet, ["collection": "m", "schema": ["properties": ["v": ["pattern": "^(a|aa)+$"]]]])
        #expect(set.status == .ok, "\(set.replyText)")
        let reply = try client.call(.create, ["collection": "m", "data": ["v": .string(String(repeating: "a", count: 20) + "b")]])
        #expect(reply.status == .invalidArgument)
        let violation = reply.replyJSON["violations"]?.arrayValue?.first
        #expect(violation?["expected"]?.stringValue?.contains("within the match limit") == true, "\(reply.replyText)")
    }

    @Test(arguments: ServerStore.allCases)
    func defaultBoundsAreAnnouncedAndASchemaPastASmallBoundIsTakenByDefault(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try RawClient.tcp(port: server.port)
        #expect(try client.hello().limits.schema == .default)
        for (name, _, pastBound, _) in Self.cases {
            let reply = try client.call(.schemaSet, ["collection": "c", "schema": pastBound])
            #expect(reply.status == .ok, "\(name): \(reply.replyText)")
        }
        let set = try client.call(.schemaSet, ["collection": "m", "schema": ["properties": ["v": ["pattern": "^(a|aa)+$"]]]])
        #expect(set.status == .ok, "\(set.replyText)")
        let reply = try client.call(.create, ["collection": "m", "data": ["v": .string(String(repeating: "a", count: 20) + "b")]])
        #expect(reply.status == .invalidArgument)
        let violation = reply.replyJSON["violations"]?.arrayValue?.first
        #expect(violation?["expected"]?.stringValue == "matching /^(a|aa)+$/", "\(reply.replyText)")
    }
}
