import Foundation
import LarderServer
import LarderSync
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Collection schemas through a real server on each store: SCHEMA_SET and SCHEMA_GET, every write checked (CREATE,
/// REPLACE, PATCH after its merge), the exact violations a refusal carries, warn mode, the stored records' report,
/// hostile schemas, and roles.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SchemaServerTests {
    /// An admin connection to `server` (which has no tokens, so HELLO gives every right).
    static func connect(_ server: ClientTestServer) throws -> RawClient {
        let client = try RawClient.tcp(port: server.port)
        try client.hello()
        return client
    }

    /// SCHEMA_SET, which must succeed; answers its JSON.
    @discardableResult
    static func setSchema(
        _ client: RawClient, _ collection: String, _ schema: JSON, action: String = "error",
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> JSON {
        let reply = try client.call(
            .schemaSet, ["collection": .string(collection), "schema": schema, "validationAction": .string(action)])
        #expect(reply.status == .ok, "\(reply.replyText)", sourceLocation: sourceLocation)
        return reply.replyJSON
    }

    /// A refusal's `violations`, as `(pointer, keyword, expected, found)`.
    static func violations(_ reply: Frame) -> [SchemaViolation] {
        (reply.replyJSON["violations"]?.arrayValue ?? []).compactMap { SchemaViolation(json: $0) }
    }

    /// One keyword's case: a property schema, a value it accepts, a value it refuses and the exact violations.
    struct KeywordCase: Sendable {
        let property: JSON
        let accepted: JSON
        let refused: JSON
        let expected: [SchemaViolation]
    }

    static func v(_ pointer: String, _ keyword: String, _ expected: String, _ found: String? = nil) -> SchemaViolation {
        SchemaViolation(pointer: pointer, keyword: keyword, expected: expected, found: found)
    }

    /// The cases of LarderSchemaTests' keyword suite, each on the record member `v`.
    static let keywordCases: [KeywordCase] = [
        KeywordCase(property: ["type": "string"], accepted: "a", refused: 42, expected: [v("/v", "type", "string", "42")]),
        KeywordCase(
            property: ["type": ["integer", "null"]], accepted: nil, refused: 7.25,
            expected: [v("/v", "type", "integer or null", "7.25")]),
        KeywordCase(property: ["type": "integer"], accepted: 1.0, refused: 3.5, expected: [v("/v", "type", "integer", "3.5")]),
        KeywordCase(property: ["enum": ["a", "b"]], accepted: "b", refused: "c", expected: [v("/v", "enum", #"one of ["a","b"]"#, #""c""#)]),
        KeywordCase(property: ["const": 3], accepted: 3.0, refused: 4, expected: [v("/v", "const", "3", "4")]),
        KeywordCase(property: ["minimum": 0], accepted: 0, refused: -1, expected: [v("/v", "minimum", ">= 0", "-1")]),
        KeywordCase(property: ["maximum": 10.5], accepted: 10.5, refused: 11, expected: [v("/v", "maximum", "<= 10.5", "11")]),
        KeywordCase(property: ["exclusiveMinimum": 5], accepted: 5.5, refused: 5, expected: [v("/v", "exclusiveMinimum", "> 5", "5")]),
        KeywordCase(property: ["exclusiveMaximum": 1], accepted: 0.5, refused: 2, expected: [v("/v", "exclusiveMaximum", "< 1", "2")]),
        KeywordCase(property: ["minLength": 2], accepted: "🍯🍯", refused: "🍯", expected: [v("/v", "minLength", "at least 2 characters", #""🍯""#)]),
        KeywordCase(property: ["maxLength": 4], accepted: "abcd", refused: "abcde", expected: [v("/v", "maxLength", "at most 4 characters", #""abcde""#)]),
        // Characters, not bytes: three Chinese characters are nine bytes of UTF-8, an emoji four.
        KeywordCase(
            property: ["maxLength": 3], accepted: "北京市", refused: "北京市🍯",
            expected: [v("/v", "maxLength", "at most 3 characters", #""北京市🍯""#)]),
        KeywordCase(
            property: ["pattern": "^[0-9]{5}$"], accepted: "01500", refused: "0150",
            expected: [v("/v", "pattern", "matching /^[0-9]{5}$/", #""0150""#)]),
        KeywordCase(
            property: ["items": ["type": "string"], "minItems": 1, "maxItems": 2], accepted: ["a"], refused: [1, "b", "c"],
            expected: [v("/v/0", "type", "string", "1"), v("/v", "maxItems", "at most 2 items", "3 items")]),
        KeywordCase(property: ["minItems": 1], accepted: [1], refused: [], expected: [v("/v", "minItems", "at least 1 item", "0 items")]),
        KeywordCase(
            property: ["format": "uuid"], accepted: "01900000-0000-7000-8000-000000003001", refused: "0190",
            expected: [v("/v", "format", "a uuid (RFC 9562)", #""0190""#)]),
        KeywordCase(
            property: ["format": "date-time"], accepted: "2024-05-01T12:30:00Z", refused: "2024-05-01",
            expected: [v("/v", "format", "a date-time (RFC 3339)", #""2024-05-01""#)]),
        KeywordCase(
            property: ["type": "object", "required": ["zip"], "properties": ["zip": ["type": "string"]],
                "additionalProperties": false],
            accepted: ["zip": "0150"], refused: ["city": "Oslo"],
            expected: [
                v("/v/city", "additionalProperties", "only the members in properties", #""Oslo""#),
                v("/v/zip", "required", "present"),
            ]),
        // `additionalProperties: true` allows any other member; `required` still holds.
        KeywordCase(
            property: ["type": "object", "required": ["zip"], "additionalProperties": true],
            accepted: ["zip": "0150", "city": "Oslo", "floor": 3], refused: ["city": "Oslo"],
            expected: [v("/v/zip", "required", "present")]),
        KeywordCase(property: false, accepted: nil, refused: 1, expected: [v("/v", "false", "nothing (the schema here is false)", "1")]),
    ]

    @Test(arguments: ServerStore.allCases)
    func eachKeywordAcceptsAndRefusesWithTheExactViolations(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try Self.connect(server)
        for (index, test) in Self.keywordCases.enumerated() {
            let collection = "k\(index)"
            // `false` as the member's schema refuses the member whenever it is there: the accepted record omits it.
            let acceptedRecord: JSON = test.property == false ? [:] : ["v": test.accepted]
            try Self.setSchema(client, collection, ["type": "object", "properties": ["v": test.property]])
            let created = try client.call(.create, ["collection": .string(collection), "data": acceptedRecord])
            #expect(created.status == .ok, "case \(index): \(created.replyText)")
            let refused = try client.call(.create, ["collection": .string(collection), "data": ["v": test.refused]])
            #expect(refused.status == .invalidArgument, "case \(index)")
            #expect(Self.violations(refused) == test.expected, "case \(index): \(refused.replyText)")
            #expect(refused.replyJSON["field"]?.stringValue == "data")
            // REPLACE is checked the same way, and leaves the record as it was.
            let id = try #require(created.replyJSON["id"])
            let replaced = try client.call(
                .replace, ["collection": .string(collection), "id": id, "data": ["v": test.refused]])
            #expect(Self.violations(replaced) == test.expected, "case \(index): \(replaced.replyText)")
            let read = try client.call(.get, ["collection": .string(collection), "id": id])
            #expect(read.replyJSON["rev"] == 1)
        }
    }

    /// The refusal is Protocol.md's `schema-violation-response` vector, byte for byte.
    @Test(arguments: ServerStore.allCases)
    func theRefusalIsProtocolMdsVector(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try Self.connect(server)
        try Self.setSchema(
            client, "todos", ["type": "object", "required": ["title"], "properties": ["title": ["type": "string"]]])
        let reply = try client.call(.create, ["collection": "todos", "data": ["title": 3]])
        let expected = #"{"violations":[{"pointer":"/title","keyword":"type","expected":"string","found":"3"}],"#
            + #""code":1,"name":"INVALID_ARGUMENT","message":"the record does not match the schema of 'todos': "#
            + #"/title: type: expected string, found 3; change the record, or the schema with SCHEMA_SET","#
            + #""field":"data"}"#
        #expect(reply.replyText == expected)
    }

    @Test(arguments: ServerStore.allCases)
    func patchIsCheckedAfterItsMergeAndTheStoredRecordsAreReported(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try Self.connect(server)
        // Records stored before the schema: twelve that will not match, three that will.
        var invalid: [JSON] = []
        for n in 0..<15 {
            let data: JSON = n % 5 == 4 ? ["title": .string("ok \(n)"), "done": false] : ["title": .int(Int64(n))]
            let reply = try client.call(.create, ["collection": "todos", "data": data])
            if n % 5 != 4 { invalid.append(try #require(reply.replyJSON["id"])) }
        }
        let schema: JSON = [
            "type": "object", "required": ["title"],
            "properties": ["title": ["type": "string", "minLength": 1], "done": ["type": "boolean"]],
        ]
        let set = try Self.setSchema(client, "todos", schema)
        #expect(set["nonMatching"]?["count"] == 12)
        #expect(set["nonMatching"]?["ids"] == .array(Array(invalid.prefix(10))))
        #expect(set["version"] == 1 && set["validationAction"] == "error")
        // Nothing stored changed.
        #expect(try client.call(.get, ["collection": "todos", "id": invalid[0]]).replyJSON["rev"] == 1)

        // A PATCH that would make a valid record invalid is refused, and the record stays as it was.
        let valid = try client.call(.create, ["collection": "todos", "data": ["title": "buy milk", "done": false]])
        let validID = try #require(valid.replyJSON["id"])
        let broken = try client.call(.patch, ["collection": "todos", "id": validID, "patch": ["title": nil, "done": "yes"]])
        #expect(broken.status == .invalidArgument)
        #expect(broken.replyJSON["field"] == "patch")
        #expect(
            Self.violations(broken) == [Self.v("/done", "type", "boolean", #""yes""#), Self.v("/title", "required", "present")])
        let after = try client.call(.get, ["collection": "todos", "id": validID]).replyJSON
        #expect(after["rev"] == 1 && after["data"] == ["title": "buy milk", "done": false])
        // One that makes an invalid record valid is accepted.
        let fixed = try client.call(.patch, ["collection": "todos", "id": invalid[0], "patch": ["title": "fixed"]])
        #expect(fixed.status == .ok, "\(fixed.replyText)")
        #expect(fixed.replyJSON["rev"] == 2)
        // A REPLACE is checked before the document is read: its refusal comes before NOT_FOUND and CONFLICT.
        let missing = try client.call(
            .replace, ["collection": "todos", "id": .string(UUID().uuidString), "data": ["title": 1]])
        #expect(missing.status == .invalidArgument && missing.replyJSON["field"] == "data")
        let stale = try client.call(.replace, ["collection": "todos", "id": validID, "rev": 9, "data": ["title": 1]])
        #expect(stale.status == .invalidArgument)
        // A PATCH that leaves an invalid record invalid is refused.
        let still = try client.call(.patch, ["collection": "todos", "id": invalid[1], "patch": ["done": true]])
        #expect(Self.violations(still) == [Self.v("/title", "type", "string", "1")])
    }

    @Test(arguments: ServerStore.allCases)
    func schemaGetAnswersTheSchemaAsSetAndRemovingItStopsTheChecks(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try Self.connect(server)
        let none = try client.call(.schemaGet, ["collection": "notes"])
        #expect(none.replyJSON == ["collection": "notes", "schema": nil, "validationAction": "error", "version": 0])
        let schema: JSON = [
            "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Note", "description": "a note",
            "$comment": "annotations are kept", "type": "object", "required": ["text"],
        ]
        try Self.setSchema(client, "notes", schema, action: "warn")
        let got = try client.call(.schemaGet, ["collection": "notes"])
        #expect(got.replyJSON == ["collection": "notes", "schema": schema, "validationAction": "warn", "version": 1])
        try Self.setSchema(client, "notes", ["required": ["text"]])
        #expect(try client.call(.create, ["collection": "notes", "data": [:]]).status == .invalidArgument)
        let removed = try Self.setSchema(client, "notes", nil)
        #expect(removed["version"] == 3 && removed["nonMatching"] == ["count": 0, "ids": []])
        #expect(try client.call(.create, ["collection": "notes", "data": [:]]).status == .ok)
        #expect(try client.call(.schemaGet, ["collection": "notes"]).replyJSON["schema"] == .null)
        // A schema stays when its collection is dropped: the collection made again under the name is checked.
        try Self.setSchema(client, "notes", ["required": ["text"]])
        #expect(try client.call(.dropCollection, ["collection": "notes"]).status == .ok)
        #expect(try client.call(.schemaGet, ["collection": "notes"]).replyJSON["version"] == 4)
        #expect(try client.call(.create, ["collection": "notes", "data": [:]]).status == .invalidArgument)
    }

    @Test(arguments: ServerStore.allCases)
    func warnModeAcceptsAndCountsInStats(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try Self.connect(server)
        try Self.setSchema(client, "todos", ["required": ["title"]], action: "warn")
        for _ in 0..<3 {
            #expect(try client.call(.create, ["collection": "todos", "data": ["done": true]]).status == .ok)
        }
        #expect(try client.call(.create, ["collection": "todos", "data": ["title": "fine"]]).status == .ok)
        #expect(client.statsValue()["schemaWarnings"] == ["todos": 3])
    }

    @Test(arguments: ServerStore.allCases)
    func aBadSchemaIsRefusedNamingItsKeywordAndPointer(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try Self.connect(server)
        let cases: [(JSON, String, String)] = [
            (["properties": ["zip": ["pattern": "(a"]]], "/properties/zip/pattern", "pattern"),
            (["properties": ["a": ["oneOf": []]]], "/properties/a/oneOf", "oneOf"),
            (["$schema": "http://json-schema.org/draft-07/schema#"], "/$schema", "$schema"),
        ]
        for (schema, pointer, keyword) in cases {
            let reply = try client.call(.schemaSet, ["collection": "c", "schema": schema])
            #expect(reply.status == .invalidArgument)
            #expect(reply.replyJSON["field"] == "schema")
            #expect(reply.replyJSON["pointer"] == .string(pointer) && reply.replyJSON["keyword"] == .string(keyword))
            #expect(reply.replyJSON["message"]?.stringValue?.contains(pointer) == true, "\(reply.replyText)")
        }
        let missing = try client.call(.schemaSet, ["collection": "c"])
        #expect(missing.status == .invalidArgument && missing.replyJSON["field"] == "schema")
        let action = try client.call(.schemaSet, ["collection": "c", "schema": [:], "validationAction": "log"])
        #expect(action.status == .invalidArgument && action.replyJSON["field"] == "validationAction")
        #expect(try client.call(.schemaGet, ["collection": "c"]).replyJSON["version"] == 0)
    }

    /// Deep nesting and huge enums are refused when set; a catastrophic pattern against a long string ends at its
    /// match limit; meanwhile another client is answered.
    @Test(arguments: ServerStore.allCases)
    func hostileSchemasAreRefusedOrBoundedAndOthersAreServed(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = try Self.connect(server)
        // Subschemas nested past 32 levels (through `items`, one JSON level each) are refused by the schema's bound...
        var deep: JSON = ["type": "string"]
        for _ in 0..<40 { deep = ["items": deep] }
        let nested = try client.call(.schemaSet, ["collection": "h", "schema": deep])
        #expect(nested.status == .invalidArgument && nested.replyJSON["keyword"] == "items", "\(nested.replyText)")
        // ...and through `properties` (two JSON levels each) the request's own nesting bound comes first.
        var deeper: JSON = ["type": "string"]
        for _ in 0..<40 { deeper = ["properties": ["a": deeper]] }
        let refused = try client.call(.schemaSet, ["collection": "h", "schema": deeper])
        #expect(refused.status == .invalidArgument && refused.replyText.contains("nesting deeper"), "\(refused.replyText)")
        let huge = try client.call(
            .schemaSet, ["collection": "h", "schema": ["enum": .array((0..<5_000).map { .int(Int64($0)) })]])
        #expect(huge.status == .invalidArgument && huge.replyJSON["keyword"] == "enum")

        try Self.setSchema(client, "h", ["properties": ["v": ["pattern": "^(a|aa)+$"]]])
        let other = try Self.connect(server)
        let note = try other.call(.create, ["collection": "free", "data": ["n": 1]])
        let noteID = try #require(note.replyJSON["id"])
        let hostile = JSON.string(String(repeating: "a", count: 50_000) + "b")
        var sent: [UInt32] = []
        for _ in 0..<8 {
            sent.append(try client.send(.create, ["collection": "h", "data": ["v": hostile]]))
        }
        // The other client is answered while those are checked.
        for _ in 0..<5 {
            #expect(try other.call(.get, ["collection": "free", "id": noteID]).status == .ok)
        }
        for id in sent {
            let reply = try #require(try client.receive())
            #expect(reply.requestID == id && reply.status == .invalidArgument)
            let found = Self.violations(reply)
            #expect(found.map(\.keyword) == ["pattern"] && found.first?.pointer == "/v")
            // Refused because the match ran out of steps, not because it finished.
            #expect(
                found.first?.expected
                    == "matching /^(a|aa)+$/ within the match limit (matching this string took too many steps)",
                "\(found)")
            // The offending string is quoted only in part.
            #expect(reply.json.count < 2_000)
        }
    }

    @Test(arguments: ServerStore.allCases)
    func onlyAnAdminSetsOrReadsSchemas(_ store: ServerStore) throws {
        let directory = temporaryTestDirectory("larder-schema-roles")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("tokens").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("admin a-token\nwrite w-token\n".utf8))
        let server = try ClientTestServer(store) { $0.tokenFile = file }
        defer { server.stop() }
        let writer = try RawClient.tcp(port: server.port)
        try writer.hello(token: "w-token")
        let set = try writer.call(.schemaSet, ["collection": "todos", "schema": ["required": ["title"]]])
        #expect(set.status == .permissionDenied && set.replyJSON["opcode"] == "SCHEMA_SET")
        #expect(try writer.call(.schemaGet, ["collection": "todos"]).status == .permissionDenied)
        // Nothing was set: the writer's record without a title is stored.
        #expect(try writer.call(.create, ["collection": "todos", "data": [:]]).status == .ok)
        let admin = try RawClient.tcp(port: server.port)
        try admin.hello(token: "a-token")
        #expect(try admin.call(.schemaGet, ["collection": "todos"]).replyJSON["version"] == 0)
    }

    /// Three servers on one PostgreSQL: a schema set through one is enforced by the others from its answer on, though
    /// they checked writes to the collection just before (with no schema, then with the previous one), and its removal
    /// likewise.
    @Test func aSchemaSetOnOneServerBindsEveryServerFromItsAnswer() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        var servers: [LarderServer] = []
        var clients: [RawClient] = []
        defer { for server in servers { server.shutdown() } }
        for index in 0..<3 {
            let directory = temporaryTestDirectory("larder-schema-pg-\(index)")
            var configuration = ServerConfiguration.forTests(in: directory)
            configuration.postgresURL = schema.url
            configuration.ioQueues = 1
            let server = try LarderServer(configuration: configuration)
            servers.append(server)
            let client = try RawClient.tcp(port: try server.start())
            try client.hello()
            clients.append(client)
        }
        // Every server has written to the collection, so each holds its view of the (absent) schema.
        for client in clients {
            #expect(try client.call(.create, ["collection": "todos", "data": ["n": 1]]).status == .ok)
        }
        for round in 0..<3 {
            let setter = clients[round]
            try Self.setSchema(setter, "todos", ["required": ["title"], "properties": ["title": ["type": "string"]]])
            for (index, client) in clients.enumerated() {
                let refused = try client.call(.create, ["collection": "todos", "data": ["n": 2]])
                #expect(refused.status == .invalidArgument, "round \(round), server \(index): \(refused.replyText)")
                #expect(Self.violations(refused) == [Self.v("/title", "required", "present")])
            }
            // A new version: the other servers check against it at once.
            try Self.setSchema(setter, "todos", ["properties": ["title": ["type": "integer"]]])
            for (index, client) in clients.enumerated() {
                let refused = try client.call(.create, ["collection": "todos", "data": ["title": "x"]])
                #expect(Self.violations(refused) == [Self.v("/title", "type", "integer", #""x""#)], "server \(index)")
                #expect(try client.call(.create, ["collection": "todos", "data": ["n": 3]]).status == .ok)
            }
            // Removed: every server accepts what the schema refused.
            try Self.setSchema(setter, "todos", nil)
            for (index, client) in clients.enumerated() {
                let accepted = try client.call(.create, ["collection": "todos", "data": ["title": "x"]])
                #expect(accepted.status == .ok, "round \(round), server \(index): \(accepted.replyText)")
            }
        }
    }
}
