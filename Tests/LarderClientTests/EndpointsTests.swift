import Foundation
import LarderSync
import LarderTestProcess
import LarderTestThreads
import Testing

@testable import LarderClient

/// A client that knows several servers: host lists, the next endpoint after a refusal or a drop, reads sent
/// again, writes never, and errors that say whether a write was sent.
///
/// Twenty minutes, as every suite (RELIABILITY.md section 11): a test's clock runs from the suite's start, and in the
/// whole run on the shared 2-core machine these waited past two minutes for a thread (a host-list parse "took" 189 s).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct EndpointsTests {
    @Test func hostListsReadAsPeopleWriteThem() throws {
        func parse(_ text: String) throws -> [String] {
            try HostList.parse(text, defaultPort: 7411).map { "\($0.host) \($0.port)" }
        }
        #expect(try parse("a:7411,b:7412") == ["a 7411", "b 7412"])
        #expect(try parse("db.example.com") == ["db.example.com 7411"])
        #expect(try parse(" a , b:9 ") == ["a 7411", "b 9"])
        #expect(try parse("[::1]:7500,::1,[fe80::1]") == ["::1 7500", "::1 7411", "fe80::1 7411"])
        for bad in ["a,,b", "a,", "a:0", "a:70000", "a:x", "[::1", "[::1]7411", ":7411"] {
            let error = #expect(throws: LarderError.self, "\(bad)") { _ = try parse(bad) }
            #expect(error?.status == .invalidArgument)
        }
    }

    /// Waits for `condition` (`waitUntil`); throws, naming `what`, if it does not hold within 120 s.
    static func waitFor(_ what: String, _ condition: () async throws -> Bool) async throws {
        guard try await waitUntil(120, condition) else {
            throw LarderError(.deadlineExceeded, "waited 120 s for \(what)")
        }
    }

    static func client(_ ports: [Int], maxInFlight: Int? = nil) -> LarderClient {
        // What these tests wait for is a drop or a refusal, which comes however busy the machine is: the request
        // and connect deadlines are generous ones (in a whole-suite run a fake server's thread can take many seconds
        // to accept and answer HELLO, and a drop can go unnoticed as long), there only so that a drop never noticed
        // fails the test (DEADLINE_EXCEEDED) instead of hanging it.
        var configuration = LarderClient.Configuration(requestTimeout: .seconds(120), connectTimeout: .seconds(120))
        configuration.endpoints = ports.map { .tcp(host: "127.0.0.1", port: $0) }
        return LarderClient(configuration: configuration)
    }

    /// A server that drops each connection at its first request after HELLO, and one that answers every request with
    /// a record (`ClientTests.record(for:)`), each announcing request keys or not; the caller stops both.
    static func dyingAndHealthy(dyingKeys: Bool = false, healthyKeys: Bool = false) -> (FakeServer, FakeServer) {
        (
            FakeServer(requestKeys: dyingKeys) { _, _ in .die },
            FakeServer(requestKeys: healthyKeys) { request, _ in .reply(ClientTests.record(for: request)) }
        )
    }

    @Test func aRefusingEndpointIsPassedOver() async throws {
        let closed = FakeServer { _, _ in .hold }
        let refusing = closed.port
        closed.stop()
        let server = FakeServer { request, _ in .reply(ClientTests.record(for: request)) }
        defer { server.stop() }
        let client = Self.client([refusing, server.port])
        let id = UUID()
        #expect(try await client.get("c", id: id).id == id)
    }

    @Test func aReadTheDropFailedIsSentAgainToTheNextServer() async throws {
        let (dying, healthy) = Self.dyingAndHealthy()
        defer { dying.stop() }
        defer { healthy.stop() }
        let client = Self.client([dying.port, healthy.port])
        let id = UUID()
        #expect(try await client.get("c", id: id).id == id)
        #expect(dying.requests.contains { $0.opcode == .get })
        #expect(healthy.requests.contains { $0.opcode == .get })
        #expect(try await client.ping() > .zero)
    }

    @Test func aWriteTheDropFailedIsNeverSentAgainAndSaysItWasSent() async throws {
        let (dying, healthy) = Self.dyingAndHealthy()
        defer { dying.stop() }
        defer { healthy.stop() }
        let client = Self.client([dying.port, healthy.port])
        let error = await #expect(throws: LarderError.self) { _ = try await client.create("c", ["n": 1]) }
        #expect(error?.status == .unavailable)
        #expect(error?.details["sent"] == .bool(true))
        #expect(error?.message.contains("CREATE was sent and may or may not have been applied") == true, "\(error!)")
        #expect(!healthy.requests.contains { $0.opcode == .create })
        // The next request opens a connection at the next server.
        let id = UUID()
        #expect(try await client.get("c", id: id).id == id)
    }

    /// In two whole-suite runs on the busy 2-core machine a first GET to a fresh fake server did not reach it within
    /// 120 s, without failing in the client (not yet explained; run alone it arrives in milliseconds): each attempt
    /// waits 60 s for it, and a stalled one is abandoned for a fresh server and client, three times at most.
    @Test func aWriteThatNeverLeftTheClientSaysItWasNotSent() async throws {
        for attempt in 1...3 {
            if try await Self.writeThatNeverLeftTheClient(lastAttempt: attempt == 3) { return }
        }
    }

    /// One attempt of `aWriteThatNeverLeftTheClientSaysItWasNotSent`; false when the GET did not reach the server in
    /// time (before `lastAttempt`, which fails instead).
    static func writeThatNeverLeftTheClient(lastAttempt: Bool) async throws -> Bool {
        // One request in flight at a time: the GET holds the only slot, the PATCH waits in the client for it, and the
        // server then closes the connection.
        let server = FakeServer(limits: Limits(maxInFlight: 1)) { _, _ in .hold }
        defer { server.stop() }
        let client = Self.client([server.port])
        // A GET that fails before it reaches the server ends the wait below with its own error, not a timeout.
        let readFailure = Locked<(any Error)?>(nil)
        let read = Task {
            do { return try await client.get("c", id: UUID()) } catch {
                readFailure.withLock { $0 = error }
                throw error
            }
        }
        let arrived = try await waitUntil(lastAttempt ? 120 : 60) {
            if let failure = readFailure.withLock({ $0 }) { throw failure }
            return server.requests.contains { $0.opcode == .get }
        }
        guard arrived else {
            if lastAttempt { throw LarderError(.deadlineExceeded, "waited 120 s for the GET to reach the server") }
            read.cancel()
            return false
        }
        let write = Task { try await client.patch("c", id: UUID(), patch: ["n": 2]) }
        // The PATCH waits in the client for the slot once its connection carries two requests.
        try await Self.waitFor("the PATCH to wait on the connection") { try await client.connection().load >= 2 }
        server.killClients()
        let writeError = await #expect(throws: LarderError.self) { _ = try await write.value }
        #expect(writeError?.details["sent"] == .bool(false))
        #expect(writeError?.message.contains("PATCH was not sent, so it was not applied") == true, "\(writeError!)")
        #expect(!server.requests.contains { $0.opcode == .patch })
        let readError = await #expect(throws: LarderError.self) { _ = try await read.value }
        #expect(readError?.details["sent"] == .bool(true))
        return true
    }

    /// The `requestKey` member of a request frame, when it has one.
    static func requestKey(_ frame: Frame) -> String? { (try? frame.jsonObject())?["requestKey"]?.stringValue }

    /// A server announcing request keys gets one with every write; a write its drop failed goes to the next server
    /// with the same key (the server applies it once), and the call succeeds.
    @Test func aKeyedWriteTheDropFailedIsSentAgainWithItsKey() async throws {
        let (dying, healthy) = Self.dyingAndHealthy(dyingKeys: true, healthyKeys: true)
        defer { dying.stop() }
        defer { healthy.stop() }
        let client = Self.client([dying.port, healthy.port])
        _ = try await client.create("c", ["n": 1])
        let first = try #require(dying.requests.first { $0.opcode == .create })
        let retry = try #require(healthy.requests.first { $0.opcode == .create })
        let key = try #require(Self.requestKey(first))
        #expect(UUID(uuidString: key) != nil)
        #expect(Self.requestKey(retry) == key, "one key for every try of one write")
        #expect(try retry.jsonObject()["data"] == ["n": 1])
        // Another write gets a key of its own.
        _ = try await client.patch("c", id: UUID(), patch: ["n": 2])
        let patch = try #require(healthy.requests.first { $0.opcode == .patch })
        #expect(Self.requestKey(patch) != nil && Self.requestKey(patch) != key)
        // Reads carry none.
        _ = try await client.get("c", id: UUID())
        #expect(healthy.requests.filter { $0.opcode == .get }.allSatisfy { Self.requestKey($0) == nil })
    }

    /// With one endpoint, a keyed write whose connection broke goes again on a new connection to the same server.
    @Test func aKeyedWriteIsSentAgainOnANewConnectionToTheSameServer() async throws {
        let drops = Locked(1)
        let server = FakeServer(requestKeys: true) { request, _ in
            drops.withLock { count in
                guard request.opcode == .delete, count > 0 else { return .reply(ClientTests.record(for: request)) }
                count -= 1
                return .die
            }
        }
        defer { server.stop() }
        let client = Self.client([server.port])
        let id = UUID()
        _ = try? await client.delete("c", id: id)
        let deletes = server.requests.filter { $0.opcode == .delete }
        #expect(deletes.count == 2)
        #expect(Set(deletes.compactMap(Self.requestKey)).count == 1, "both tries carry the one key")
    }

    /// A write sent with a key whose answer was lost is not sent, keyless, to a server that takes no keys.
    @Test func aKeyedWriteIsNotSentAgainToAServerWithoutKeys() async throws {
        let (dying, keyless) = Self.dyingAndHealthy(dyingKeys: true)
        defer { dying.stop() }
        defer { keyless.stop() }
        let client = Self.client([dying.port, keyless.port])
        let error = await #expect(throws: LarderError.self) { _ = try await client.create("c", ["n": 1]) }
        #expect(error?.status == .unavailable)
        #expect(error?.message.contains("takes no request keys") == true, "\(error!)")
        #expect(!keyless.requests.contains { $0.opcode == .create })
    }
}
