import Foundation
import LarderClient
import LarderServer
import LarderTestProcess
import LarderTestThreads
import Testing

/// The library against a `larder-server` process killed with SIGKILL in the middle of a request.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct ClientKilledServerTests {
    @Test func aRequestInFlightFailsClearlyAndTheNextCallReconnects() async throws {
        let directory = NSTemporaryDirectory() + "larder-killed-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Every SEARCH waits at the test's gate, so one is surely in flight when the server dies.
        let gate = try ServerGate()
        defer { gate.open() }
        let first = try ServerChild(
            dataDirectory: directory, gates: [TestGateVariable.search: gate.path])
        let client = LarderClient(port: first.port)
        defer { client.close() }
        let created = try await client.create("todos", ["title": "Buy milk 買牛奶", "isFinish": false])

        // Kill once the server holds the SEARCH, however long a busy machine takes to send it (from a thread of its
        // own: the wait blocks).
        let killer = TestThread {
            try gate.waitForHeld(1)
            first.kill()
        }
        async let slow = client.search("todos", SearchQuery())
        do {
            _ = try await slow
            Issue.record("a search in flight on a killed server succeeded")
        } catch let error as LarderError {
            #expect(error.status == .unavailable)
            #expect(error.message.contains("127.0.0.1:\(first.port)"), "\(error.message)")
        }
        try await killer.finished()

        // The same port and data: the next call connects again and finds what was acknowledged.
        let second = try ServerChild(dataDirectory: directory, arguments: ["--port", "\(first.port)"])
        defer { _ = second.stop() }
        #expect(second.port == first.port)
        let again = try await client.get("todos", id: created.id)
        #expect(again.data == created.data)
        #expect(again.rev == 1)
    }
}
