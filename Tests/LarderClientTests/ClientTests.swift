import Foundation
import LarderClient
import LarderSync
import LarderTestThreads
import Testing

/// The client against `FakeServer`: pipelining, ordering, limits, deadlines and broken connections.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ClientTests {
    static func record(for request: Frame) -> Frame {
        let id = (try? GetRequest(json: request.jsonObject()).id) ?? UUID()
        let record = Record(id: id, rev: 1, createdAtMs: 0, updatedAtMs: 0, data: ["n": .string(id.wireString)])
        return FakeServer.reply(request, record.json)
    }

    /// Answers every held request, repeatedly, until `done` returns true.
    static func answerHeld(_ server: FakeServer, reversed: Bool = false, until done: @escaping @Sendable () -> Bool)
        async
    {
        while !done() {
            var held = server.takeHeld()
            if reversed { held.reverse() }
            for (frame, fd) in held { server.send(record(for: frame), to: fd) }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    @Test func repliesOutOfOrderReachTheirCallers() async throws {
        let server = FakeServer { _, _ in .hold }
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        let ids = (0..<10).map { _ in UUID() }
        // Hold all ten, then answer them last first.
        let answerer = Task {
            #expect(await server.waitForRequests { $0.count == 11 })
            for (frame, fd) in server.takeHeld().reversed() { server.send(ClientTests.record(for: frame), to: fd) }
        }
        try await withThrowingTaskGroup(of: (UUID, Record).self) { group in
            for id in ids { group.addTask { (id, try await client.get("c", id: id)) } }
            for try await (id, record) in group {
                #expect(record.id == id)
                #expect(record.data["n"] == .string(id.wireString))
            }
        }
        await answerer.value
    }

    @Test func neverExceedsTheAnnouncedInFlightLimit() async throws {
        let server = FakeServer(limits: Limits(maxInFlight: 3)) { _, _ in .hold }
        defer { server.stop() }
        // No deadline: the 20 requests wait for one another three at a time, however slowly a busy machine answers
        // (with the default 30 s, one ran out during a whole-suite run).
        let client = LarderClient(port: server.port, requestTimeout: nil)
        let finished = Counter()
        let answerer = Task { await ClientTests.answerHeld(server) { finished.value == 20 } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    _ = try await client.get("c", id: UUID())
                    finished.add()
                }
            }
            try await group.waitForAll()
        }
        await answerer.value
        #expect(server.maxSeenInFlight <= 3)
        #expect(server.requests.count == 21)
    }

    @Test func aSilentServerGivesDeadlineExceeded() async throws {
        let server = FakeServer { _, _ in .hold }
        defer { server.stop() }
        let client = LarderClient(port: server.port, requestTimeout: .milliseconds(200))
        let error = await #expect(throws: LarderError.self) { _ = try await client.get("c", id: UUID()) }
        #expect(error?.status == .deadlineExceeded)
    }

    @Test func aServerThatDiesFailsInFlightRequestsThenTheNextRequestReconnects() async throws {
        let calls = Counter()
        let server = FakeServer { request, _ in
            calls.add() == 1 ? .die : .reply(ClientTests.record(for: request))
        }
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        let error = await #expect(throws: LarderError.self) { _ = try await client.get("c", id: UUID()) }
        #expect(error?.status == .unavailable)
        #expect(error?.message.contains("lost the connection") == true)
        #expect(error?.isConnectFailure == false)
        let id = UUID()
        #expect(try await client.get("c", id: id).id == id)
        #expect(server.requests.filter { $0.opcode == Opcode.hello }.count == 2)
    }

    /// A port this test holds without listening: refused, and no other test's server can take it meanwhile (a port
    /// freed by a stopped server was taken by another test's in one run, which answered the PING).
    @Test func aClosedPortIsAConnectFailure() async throws {
        let held = try FakeServer.ClosedPort()
        let client = LarderClient(port: held.port)
        let error = await #expect(throws: LarderError.self) { try await client.ping() }
        #expect(error?.status == .unavailable)
        #expect(error?.isConnectFailure == true)
    }

    @Test func oversizedRequestsAreRefusedWithoutSending() async throws {
        let server = FakeServer(limits: Limits(maxBlobBytes: 1000)) { request, _ in
            .reply(FakeServer.reply(request, [:]))
        }
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        try await client.ping()
        let error = await #expect(throws: LarderError.self) {
            _ = try await client.blobPut(Data(repeating: 0xFF, count: 2000))
        }
        #expect(error?.status == .payloadTooLarge)
        #expect(!server.requests.contains { $0.opcode == .blobPut })
    }

    @Test func errorRepliesBecomeLarderErrors() async throws {
        let server = FakeServer { request, _ in
            .reply(
                FakeServer.reply(
                    request, ["code": 3, "name": "CONFLICT", "message": "rev 2 is not 1", "field": "rev", "currentRev": 2],
                    status: .conflict))
        }
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        let error = await #expect(throws: LarderError.self) {
            _ = try await client.replace("c", id: UUID(), data: [:], rev: 1)
        }
        #expect(error?.status == .conflict)
        #expect(error?.field == "rev")
        #expect(error?.details["currentRev"] == .int(2))
    }

    /// Cancelling the task of a call ends it at once with DEADLINE_EXCEEDED (README: "Cancelling the task of a call"),
    /// though the server never answers and the client has no deadline of its own: only the cancellation can end it.
    @Test func cancellingACallEndsItPromptly() async throws {
        let server = FakeServer { request, _ in
            request.opcode == .ping ? .reply(FakeServer.reply(request, [:])) : .hold
        }
        defer { server.stop() }
        let client = LarderClient(port: server.port, requestTimeout: nil)
        try await client.connect()
        let task = Task { try await client.get("c", id: UUID()) }
        // Cancelled once the server holds the GET: the call is surely waiting for its answer.
        #expect(await server.waitForRequests { $0.contains { $0.opcode == .get } })
        task.cancel()
        let error = await #expect(throws: LarderError.self) { _ = try await task.value }
        #expect(error?.status == .deadlineExceeded)
        #expect(error?.message == "GET was cancelled before the server answered", "\(error?.message ?? "")")
        // The connection is still good for the next call.
        try await client.ping()
    }

    struct Purchase: Codable, Sendable, Equatable {
        var item: String
        var date: Date
        var price: Double
        var photo: UUID?
    }

    @Test func modelsRoundTripWithDates() throws {
        let date = Date(timeIntervalSince1970: 1_714_566_600.123)
        let purchase = Purchase(item: "鮪魚飯糰", date: date, price: 35, photo: UUID())
        let object = try ModelCoding.encode(purchase)
        #expect(object["date"] == "2024-05-01T12:30:00.123Z")
        let back = try ModelCoding.decode(Purchase.self, from: object)
        #expect(back == purchase)
        let plain = try ModelCoding.decode(
            Purchase.self, from: ["item": "x", "date": "2024-05-01T12:30:00Z", "price": 13])
        #expect(plain.date == Date(timeIntervalSince1970: 1_714_566_600))
        let error = #expect(throws: LarderError.self) { _ = try ModelCoding.decode(Purchase.self, from: ["item": "x"]) }
        #expect(error?.field == "date")
    }

    // Promise: Protocol §5.8 "the client checks what it received against sha256"
    /// A backup whose bytes arrive damaged (one bit flipped on the way, so they no longer have the SHA-256 the
    /// server announced) is refused: `backup(to:)` throws saying so, and neither the file nor its partial copy is
    /// left behind. The same transfer undamaged writes the file.
    @Test func aBackupThatArrivesDamagedIsRefusedAndLeavesNoFile() async throws {
        let snapshot = Array("SQLite format 3\0".utf8) + (0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let damage = Locked(true)
        let server = FakeServer { request, _ in
            switch request.opcode {
            case .backup:
                let answer = BackupResponse(
                    backup: 1, size: Int64(snapshot.count), sha256: SHA256.hex(snapshot), format: "sqlite")
                return .reply(FakeServer.reply(request, answer.json))
            case .backupRead:
                guard let read = try? BackupReadRequest(json: request.jsonObject()) else { return .die }
                let start = Int(read.offset)
                var bytes = Array(snapshot[start..<min(snapshot.count, start + read.length)])
                if start == 0 && damage.withLock({ $0 }) { bytes[100] ^= 0x01 }
                let json: JSONObject = [
                    "backup": .int(read.backup), "offset": .int(read.offset), "length": .int(Int64(bytes.count)),
                ]
                return .reply(FakeServer.reply(request, json, binary: bytes))
            default:
                return .reply(FakeServer.reply(request, [:]))
            }
        }
        defer { server.stop() }
        let directory = NSTemporaryDirectory() + "larder-damaged-backup-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/backup.sqlite"
        let client = LarderClient(port: server.port)
        defer { client.close() }
        let error = await #expect(throws: LarderError.self) { try await client.backup(to: file, chunkBytes: 1_000) }
        #expect(error?.message.contains("damaged") == true, "\(String(describing: error))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty, "a damaged backup left a file")
        damage.withLock { $0 = false }
        try await client.backup(to: file, chunkBytes: 1_000)
        #expect(FileManager.default.contents(atPath: file).map(Array.init) == snapshot)
    }
}

extension ClientTests {
    struct Shop: Codable, Sendable, Equatable {
        var name: String
        var url: String
        var tags: [String]
        var opened: Date
        var rating: Double?
        var address: [String: String]
    }

    /// The typed path writes the encoder's output as compact JSON once (no object tree in between) and stores what
    /// the tree would have: the same bytes, with JSONEncoder's escaped slashes unescaped.
    @Test func typedWritesSendTheEncodedDocumentOnce() async throws {
        let shop = Shop(
            name: "全家 FamilyMart \"信義\"", url: "https://example.com/a/b", tags: ["24h", "ATM"],
            opened: Date(timeIntervalSince1970: 1_700_000_000.5), rating: nil, address: ["city": "台北"])
        // (JSONEncoder's member order varies from one encoding to the next: objects are compared, not bytes.)
        let document = try ModelCoding.encodeDocument(shop)
        let object = try JSONParser.parseObject(document)
        #expect(object == (try ModelCoding.encode(shop)))
        #expect(document == object.bytes)  // compact, as the tree would write it
        #expect(String(decoding: document, as: UTF8.self).contains(#""url":"https://example.com/a/b""#))
        let notAnObject = #expect(throws: LarderError.self) { _ = try ModelCoding.encodeDocument(["a", "b"]) }
        #expect(notAnObject?.message.contains("must encode as a JSON object") == true)

        let id = UUID()
        let server = FakeServer { request, _ in
            guard request.opcode == .create || request.opcode == .replace else { return .reply(FakeServer.reply(request, [:])) }
            let sent = try! JSONParser.parseObject(request.json)
            let record: JSONObject = [
                "id": .string(id.wireString), "rev": request.opcode == .create ? 1 : 2,
                "createdAt": "2026-11-30T00:00:00.000Z", "updatedAt": "2026-11-30T00:00:00.000Z", "data": sent["data"]!,
            ]
            return .reply(FakeServer.reply(request, record))
        }
        defer { server.stop() }
        let shops = LarderClient(port: server.port).collection("shops", of: Shop.self)
        let created = try await shops.create(shop)
        #expect(created.value == shop && created.rev == 1)
        _ = try await shops.replace(id, with: shop, rev: 1)
        let writes = server.requests.filter { $0.opcode == .create || $0.opcode == .replace }
        try #require(writes.count == 2)
        let create = try CreateRequest(json: try JSONParser.parseObject(writes[0].json))
        #expect(create.collection == "shops" && create.id == nil && create.data == object)
        #expect(writes[0].json == DocumentWrite.request(collection: "shops", id: nil, document: create.data.bytes))
        let replace = try ReplaceRequest(json: try JSONParser.parseObject(writes[1].json))
        #expect(replace.id == id && replace.rev == 1 && replace.data == object)
        #expect(writes[1].json == DocumentWrite.request(collection: "shops", id: id, document: replace.data.bytes, rev: 1))
    }
}

extension ClientTests {
    /// Typed reads hand a record's stored bytes to the decoder as they are (`AnswerReader`); answers in other forms,
    /// and data that does not decode, take the general path, with its value or its error.
    @Test func typedReadsDecodeTheStoredBytes() async throws {
        let id = UUID()
        let time = "2024-05-01T12:30:00.123Z"
        let usual = #"{"id":"\#(id.wireString)","rev":3,"createdAt":"\#(time)","updatedAt":"\#(time)","data":"#
            + #"{"item":"鮪魚飯糰 \"大\"","date":"\#(time)","price":35.5}}"#
        let unusual = #" { "data" : { "item" : "\u9baa魚飯糰 \"大\"", "date" : "2024-05-01T12:30:00.123Z", "price" : 35.5 },"#
            + #" "rev" : 3, "id" : "\#(id.uuidString)", "createdAt" : "\#(time)", "updatedAt" : "\#(time)", "x" : 1 } "#
        let wrongType = #"{"id":"\#(id.wireString)","rev":3,"createdAt":"\#(time)","updatedAt":"\#(time)","data":"#
            + #"{"item":"x","date":"\#(time)","price":"cheap"}}"#
        let answers = Locked([usual, unusual, wrongType, #"{"records":[\#(usual),\#(unusual)],"nextCursor":"next"}"#])
        let server = FakeServer { request, _ in
            guard request.opcode == .get || request.opcode == .list else { return .reply(FakeServer.reply(request, [:])) }
            let text = answers.withLock { $0.removeFirst() }
            return .reply(
                Frame(opcode: request.opcode, requestID: request.requestID, status: .ok, flags: .response, json: Array(text.utf8)))
        }
        defer { server.stop() }
        let purchases = LarderClient(port: server.port).collection("items", of: Purchase.self)
        let expected = Purchase(item: "鮪魚飯糰 \"大\"", date: Date(timeIntervalSince1970: 1_714_566_600.123), price: 35.5)
        let first = try await purchases.get(id)
        #expect(first.value == expected && first.rev == 3 && first.id == id)
        let second = try await purchases.get(id)
        #expect(second.value == expected && second.rev == 3 && second.createdAt == first.createdAt)
        let error = await #expect(throws: LarderError.self) { _ = try await purchases.get(id) }
        #expect(error?.field == "price" && error?.message.contains("does not decode as Purchase") == true)
        let page = try await purchases.list()
        #expect(page.records.map(\.value) == [expected, expected] && page.nextCursor == "next")
    }
}

/// A counter shared by test tasks.
final class Counter: Sendable {
    private let count = Locked(0)
    var value: Int { count.withLock { $0 } }
    /// Adds one and returns the new value.
    @discardableResult func add() -> Int { count.withLock { $0 += 1; return $0 } }
}
