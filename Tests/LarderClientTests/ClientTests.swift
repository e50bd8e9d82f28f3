import Foundation
import LarderClient
import Synchronization
import Testing

/// The client against `FakeServer`: pipelining, ordering, limits, deadlines and broken connections.
@Suite struct ClientTests {
    static func record(for request: Frame) -> Frame {
        let id = (try? GetRequest(json: request.jsonObject()).id) ?? UUID()
        let record = Record(id: id, rev: 1, createdAt: 0, updatedAt: 0, data: ["n": .string(id.wireString)])
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
            while server.requests.count < 11 { try? await Task.sleep(for: .milliseconds(2)) }
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
        let client = LarderClient(port: server.port)
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

    @Test func aClosedPortIsAConnectFailure() async throws {
        let server = FakeServer { _, _ in .hold }
        let port = server.port
        server.stop()
        let client = LarderClient(port: port)
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
            _ = try await client.blobPut([UInt8](repeating: 0xFF, count: 2000))
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

    @Test func cancellingACallEndsItPromptly() async throws {
        let server = FakeServer { _, _ in .hold }
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        try await client.connect()
        let task = Task { try await client.get("c", id: UUID()) }
        try await Task.sleep(for: .milliseconds(50))
        task.cancel()
        await #expect(throws: LarderError.self) { _ = try await task.value }
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
}

/// A counter shared by test tasks.
final class Counter: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    /// Adds one and returns the new value.
    @discardableResult func add() -> Int { count.withLock { $0 += 1; return $0 } }
}
