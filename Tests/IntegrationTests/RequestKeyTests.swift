import Foundation
import LarderServer
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Request keys (Protocol.md section 5.10) on real servers of both stores: the same key again answers the first
/// write's bytes and applies nothing, from any connection and, on PostgreSQL, from any server sharing the database;
/// every keyed write honours it; a key reused for another request is refused; a refused write stores nothing; an
/// expired key is a new write; HELLO announces the retention; a write without a key is what it always was.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct RequestKeyTests {
    enum Backend: String, Sendable, CaseIterable { case sqlite, postgres }

    /// A server of `backend` on port 0 (PostgreSQL: in a fresh schema), shut down when `body` returns.
    static func withServer(
        _ backend: Backend, _ configure: (inout ServerConfiguration) -> Void = { _ in },
        _ body: (Int) async throws -> Void
    ) async throws {
        let directory = temporaryTestDirectory("larder-keys")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.ioQueues = 2
        var schema: TestSchema?
        if backend == .postgres {
            schema = try TestPostgres.newSchema()
            configuration.postgresURL = schema?.url
        }
        defer { schema?.drop() }
        configure(&configuration)
        let server = try LarderServer(configuration: configuration, hooks: ServerHooks())
        defer { server.shutdown() }
        try await body(try server.start())
    }

    /// A connection that said HELLO.
    static func connect(_ port: Int) throws -> RawClient {
        let client = try RawClient.tcp(port: port)
        try client.hello()
        return client
    }

    static func ok(_ frame: Frame, _ what: String = "") throws -> JSON {
        guard frame.status == .ok else { throw ServerTestError("\(what) failed: \(frame.replyText)") }
        return frame.replyJSON
    }

    static func keyed(_ json: JSONObject, _ key: UUID) -> JSONObject {
        var json = json
        json["requestKey"] = .string(key.uuidString)
        return json
    }

    static func lastChangeSeq(_ client: RawClient) -> Int64? { client.statsValue()["store"]?["lastChangeSeq"]?.intValue }

    static func count(_ client: RawClient, _ collection: String) throws -> Int64? {
        try ok(client.call(.count, ["collection": .string(collection)]), "COUNT")["count"]?.intValue
    }

    static func rev(_ client: RawClient, _ collection: String, _ id: String) throws -> Int64? {
        try ok(client.call(.get, ["collection": .string(collection), "id": .string(id)]), "GET")["rev"]?.intValue
    }

    @Test(arguments: Backend.allCases) func theSameKeyTwiceAppliesOnceAndAnswersTheSameBytes(_ backend: Backend) async throws {
        try await Self.withServer(backend) { port in
            let a = try Self.connect(port)
            let b = try Self.connect(port)
            let key = UUID()
            let create = Self.keyed(["collection": "notes", "data": ["title": "milk"]], key)
            let first = try a.call(.create, create)
            let id = try #require(try Self.ok(first)["id"]?.stringValue)
            let seq = Self.lastChangeSeq(a)
            let second = try b.call(.create, create)
            #expect(second.status == .ok && second.unsequencedJSON == first.unsequencedJSON, "the retry answers the first answer's bytes")
            #expect(try Self.count(a, "notes") == 1)
            #expect(Self.lastChangeSeq(a) == seq, "a retry logs no change")

            // Both connections at once, one key: one applies, both answer it.
            let patchKey = UUID()
            let patch = Self.keyed(["collection": "notes", "id": .string(id), "patch": ["done": true]], patchKey)
            let idA = try a.send(.patch, patch)
            let idB = try b.send(.patch, patch)
            let answerA = try #require(try a.receive())
            let answerB = try #require(try b.receive())
            #expect(answerA.requestID == idA && answerB.requestID == idB)
            #expect(answerA.status == .ok && answerA.unsequencedJSON == answerB.unsequencedJSON, "\(answerA.replyText) \(answerB.replyText)")
            #expect(try Self.rev(a, "notes", id) == 2)
        }
    }

    /// Every write that takes a key: sent twice (the second time on another connection), it applies once and both
    /// answers are the same bytes; without the key the second would be a second write or a refusal.
    @Test(arguments: Backend.allCases) func everyKeyedWriteOpcodeHonoursItsKey(_ backend: Backend) async throws {
        try await Self.withServer(backend) { port in
            let a = try Self.connect(port)
            let b = try Self.connect(port)
            let jpeg = flatJPEG(width: 16, height: 16)
            let docID = UUID().uuidString.lowercased()
            _ = try Self.ok(a.call(.create, ["collection": "items", "id": .string(docID), "data": ["n": 0]]))
            let putID = UUID().uuidString.lowercased()
            _ = try Self.ok(a.call(.blobPut, ["id": .string(putID)], binary: jpeg))
            let begun = try Self.ok(a.call(.blobUpload, ["size": .int(Int64(jpeg.count))]))
            let upload = try #require(begun["upload"]?.stringValue)
            _ = try Self.ok(
                a.call(
                    .blobUploadChunk,
                    ["upload": .string(upload), "offset": 0, "crc32": .int(Int64(CRC32.checksum(jpeg)))], binary: jpeg))

            let table: [(Opcode, JSONObject, [UInt8], (RawClient) throws -> Bool)] = [
                (.create, ["collection": "items", "data": ["n": 1]], [], { c in try Self.count(c, "items") == 2 }),
                (.replace, ["collection": "items", "id": .string(docID), "data": ["n": 2]], [], { c in
                    try Self.rev(c, "items", docID) == 2
                }),
                (.patch, ["collection": "items", "id": .string(docID), "patch": ["m": 3]], [], { c in
                    try Self.rev(c, "items", docID) == 3
                }),
                (.blobPut, [:], jpeg, { c in try Self.ok(c.call(.blobList))["blobs"]?.arrayValue?.count == 2 }),
                (.blobDelete, ["id": .string(putID)], [], { c in
                    try Self.ok(c.call(.blobList))["blobs"]?.arrayValue?.count == 1
                }),
                (.blobUploadFinish, ["upload": .string(upload)], [], { c in
                    try Self.ok(c.call(.blobList))["blobs"]?.arrayValue?.count == 2
                }),
                (.delete, ["collection": "items", "id": .string(docID)], [], { c in try Self.count(c, "items") == 1 }),
            ]
            for (opcode, json, binary, appliedOnce) in table {
                let request = Self.keyed(json, UUID())
                let first = try a.call(opcode, request, binary: binary)
                _ = try Self.ok(first, opcode.name)
                let seq = Self.lastChangeSeq(a)
                let second = try b.call(opcode, request, binary: binary)
                #expect(second.status == .ok, "\(opcode.name): \(second.replyText)")
                #expect(second.unsequencedJSON == first.unsequencedJSON, "the retry answers the first answer's bytes")
                #expect(try appliedOnce(a), "the write applied once")
                #expect(Self.lastChangeSeq(a) == seq, "a retry logs no change")
            }
        }
    }

    @Test(arguments: Backend.allCases) func aKeyReusedForAnotherRequestIsRefused(_ backend: Backend) async throws {
        try await Self.withServer(backend) { port in
            let client = try Self.connect(port)
            let key = UUID()
            let first = try Self.ok(client.call(.create, Self.keyed(["collection": "notes", "data": ["n": 1]], key)))
            let id = try #require(first["id"]?.stringValue)
            for (opcode, json) in [
                (Opcode.create, ["collection": "notes", "data": ["n": 2]] as JSONObject),
                (.create, ["collection": "other", "data": ["n": 1]]),
                (.patch, ["collection": "notes", "id": .string(id), "patch": ["n": 1]]),
            ] {
                let refused = try client.call(opcode, Self.keyed(json, key))
                #expect(refused.status == .invalidArgument, "\(refused.replyText)")
                let error = LarderError(status: refused.status, json: refused.replyJSON)
                #expect(error.field == "requestKey")
                #expect(error.message.contains("used for another request"), "\(error.message)")
            }
            #expect(try Self.count(client, "notes") == 1)
            #expect(try Self.rev(client, "notes", id) == 1)
            let malformed = try client.call(
                .create, ["collection": "notes", "data": ["n": 1], "requestKey": "not-a-uuid"])
            #expect(malformed.status == .invalidArgument)
            #expect(LarderError(status: malformed.status, json: malformed.replyJSON).field == "requestKey")
        }
    }

    /// One CREATE written two ways (the usual form the tree-free reader takes, and one with escapes and whitespace
    /// only the general reader takes) is one request: the second, with the same key, answers the first.
    @Test func bothReadersFingerprintOneRequestAlike() async throws {
        try await Self.withServer(.sqlite) { port in
            let client = try Self.connect(port)
            let key = UUID().uuidString.lowercased()
            let forms = [
                #"{"collection":"notes","data":{"title":"milk"},"requestKey":"\#(key)"}"#,
                #"{ "collection" : "notes", "requestKey" : "\#(key.uppercased())", "data" : { "title" : "milk" } }"#,
            ]
            var answers: [[UInt8]] = []
            for form in forms {
                let answer = try DocumentWritePathTests.call(client, .create, form)
                #expect(answer.status == .ok, "\(answer.replyText)")
                answers.append(answer.json)
            }
            #expect(answers[0] == answers[1])
            #expect(try Self.count(client, "notes") == 1)
        }
    }

    /// A refused write stores nothing: the same request with the same key, once what refused it is gone, applies.
    @Test(arguments: Backend.allCases) func aRefusedWriteStoresNothing(_ backend: Backend) async throws {
        try await Self.withServer(backend) { port in
            let client = try Self.connect(port)
            let id = UUID().uuidString.lowercased()
            _ = try Self.ok(client.call(.create, ["collection": "notes", "id": .string(id), "data": ["n": 0]]))
            let request = Self.keyed(["collection": "notes", "id": .string(id), "data": ["n": 1]], UUID())
            let refused = try client.call(.create, request)
            #expect(refused.status == .conflict, "\(refused.replyText)")
            _ = try Self.ok(client.call(.delete, ["collection": "notes", "id": .string(id)]))
            let applied = try client.call(.create, request)
            #expect(applied.status == .ok, "\(applied.replyText)")
            #expect(try Self.rev(client, "notes", id) == 1)
        }
    }

    /// A key older than `--request-key-retention-ms` is a new key: the same request applies again, once.
    @Test(arguments: Backend.allCases) func anExpiredKeyIsANewWrite(_ backend: Backend) async throws {
        try await Self.withServer(backend, { $0.limits.requestKeyRetentionMs = 300 }) { port in
            let client = try RawClient.tcp(port: port)
            #expect(try client.hello().limits.requestKeyRetentionMs == 300)
            let id = try #require(try Self.ok(client.call(.create, ["collection": "notes", "data": ["n": 0]]))["id"])
            let patch = Self.keyed(["collection": "notes", "id": id, "patch": ["n": 1]], UUID())
            #expect(try Self.ok(client.call(.patch, patch))["rev"]?.intValue == 2)
            #expect(try Self.ok(client.call(.patch, patch))["rev"]?.intValue == 2)
            // Each try within the retention answers revision 2; the first after it applies (3), and the ones after
            // that answer 3 from the key it stored.
            let expired = try await waitUntil(120) { try Self.ok(client.call(.patch, patch))["rev"]?.intValue == 3 }
            #expect(expired)
            #expect(try Self.ok(client.call(.patch, patch))["rev"]?.intValue == 3)
            #expect(try Self.rev(client, "notes", id.stringValue!) == 3)
        }
    }

    @Test(arguments: Backend.allCases) func helloAnnouncesTheRetention(_ backend: Backend) async throws {
        try await Self.withServer(backend) { port in
            let client = try RawClient.tcp(port: port)
            let hello = try client.call(.hello, HelloRequest(client: "tests").json)
            #expect(try HelloResponse(json: hello.jsonObject()).limits.requestKeyRetentionMs == 86_400_000)
            #expect(hello.replyText.contains(#""requestKeyRetentionMs":86400000"#))
        }
    }

    /// Without a key (or with `requestKey: null`) a write is what it always was: each one applies.
    @Test(arguments: Backend.allCases) func aWriteWithoutAKeyBehavesAsBefore(_ backend: Backend) async throws {
        try await Self.withServer(backend) { port in
            let client = try Self.connect(port)
            let id = UUID().uuidString.lowercased()
            let create: JSONObject = ["collection": "notes", "id": .string(id), "data": ["n": 0]]
            _ = try Self.ok(client.call(.create, create))
            #expect(try client.call(.create, create).status == .conflict)
            var patch: JSONObject = ["collection": "notes", "id": .string(id), "patch": ["n": 1]]
            _ = try Self.ok(client.call(.patch, patch))
            patch["requestKey"] = .null
            _ = try Self.ok(client.call(.patch, patch))
            _ = try Self.ok(client.call(.patch, patch))
            #expect(try Self.rev(client, "notes", id) == 4)
            let dropped = try client.call(.dropCollection, ["collection": "notes", "requestKey": .string(UUID().uuidString)])
            #expect(dropped.status == .invalidArgument, "only the listed writes take a key: \(dropped.replyText)")
        }
    }

    /// Two servers on one PostgreSQL, each sent the same keyed writes at the same moment: each key applies once and
    /// both servers answer its bytes (the second server's claim of the key waits for the first's transaction).
    @Test func oneKeyOnTwoServersAtOnceAppliesOnce() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        try withServerOnPort0({ $0.postgresURL = schema.url }) { _, portA in
            try withServerOnPort0({ $0.postgresURL = schema.url }) { _, portB in
                let a = try Self.connect(portA)
                let b = try Self.connect(portB)
                let id = try #require(try Self.ok(a.call(.create, ["collection": "notes", "data": ["n": 0]]))["id"])
                let rounds = 40
                for round in 0..<rounds {
                    let create = Self.keyed(["collection": "notes", "data": ["round": .int(Int64(round))]], UUID())
                    let patch = Self.keyed(["collection": "notes", "id": id, "patch": ["round": .int(Int64(round))]], UUID())
                    _ = try a.sendTogether([(.create, create), (.patch, patch)])
                    _ = try b.sendTogether([(.patch, patch), (.create, create)])
                    var fromA: [Opcode: Frame] = [:]
                    var fromB: [Opcode: Frame] = [:]
                    for _ in 0..<2 {
                        let frame = try #require(try a.receive())
                        fromA[frame.opcode] = frame
                    }
                    for _ in 0..<2 {
                        let frame = try #require(try b.receive())
                        fromB[frame.opcode] = frame
                    }
                    for opcode in [Opcode.create, .patch] {
                        let answerA = try #require(fromA[opcode])
                        let answerB = try #require(fromB[opcode])
                        #expect(answerA.status == .ok, "\(answerA.replyText)")
                        #expect(answerA.unsequencedJSON == answerB.unsequencedJSON, "\(answerA.replyText) \(answerB.replyText)")
                    }
                }
                #expect(try Self.count(a, "notes") == Int64(1 + rounds))
                #expect(try Self.rev(b, "notes", id.stringValue!) == Int64(1 + rounds))
            }
        }
    }

    /// On PostgreSQL a keyed write waits for a transaction that holds its key (another server's write under way): when
    /// that transaction commits, the write answers the answer it stored and applies nothing; when it rolls back, the
    /// write applies. The other server is a test session holding the key's row in an open transaction.
    @Test func aKeyHeldByAnotherTransactionIsWaitedFor() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        try await Self.withServer(.postgres, { $0.postgresURL = schema.url }) { port in
            let client = try Self.connect(port)
            let session = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 120_000)
            defer { session.close() }
            let elsewhere = Array(#"{"answered":"elsewhere"}"#.utf8)
            for commits in [true, false] {
                let key = UUID()
                let fingerprint = RequestKey.document(
                    key, .create, collection: "notes", id: nil, rev: nil, data: Array(#"{"n":1}"#.utf8))
                try session.execute("BEGIN")
                _ = try session.run([
                    PGStatement(
                        "INSERT INTO request_keys(key, request, digest, answer, created_at) VALUES ($1, $2, $3, $4, $5)",
                        [
                            .uuid(key), .text(fingerprint.request), .text(fingerprint.digest), .bytes(elsewhere),
                            .int(nowMillis()),
                        ])
                ])
                let id = try client.send(.create, Self.keyed(["collection": "notes", "data": ["n": 1]], key))
                let waiting = try await waitUntil(120) {
                    try ScaleOutTests.lockWaiters(schema.url, "request_keys", atLeast: 1)
                }
                #expect(waiting, "the server's claim of the key waits for the open transaction")
                try session.execute(commits ? "COMMIT" : "ROLLBACK")
                let answer = try #require(try client.receive())
                #expect(answer.requestID == id && answer.status == .ok, "\(answer.replyText)")
                if commits {
                    #expect(answer.unsequencedJSON == elsewhere, "the answer the other transaction stored")
                    #expect(try Self.count(client, "notes") == 0, "nothing applied")
                } else {
                    #expect(answer.replyJSON["rev"]?.intValue == 1, "the key was free again: the write applied")
                    #expect(try Self.count(client, "notes") == 1)
                }
            }
        }
    }
}
