import Foundation
import LarderClient
import LarderTestProcess
import LarderTestThreads
import Testing

/// `LarderReplica.synchronize` when no server can be reached: it gives up at its deadline and says what it was
/// waiting for, so that an app (or a failing test) can tell an unreachable server from a stuck outbox.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReplicaSynchronizeTests {
    @Test func aReplicaThatCannotReachAServerSaysWhatItWaitsFor() async throws {
        let folder = NSTemporaryDirectory() + "larder-replica-sync-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let client = LarderClient(socketPath: folder + "/no-server.sock")
        defer { client.close() }
        let replica = try LarderReplica(
            path: folder + "/replica.sqlite", client: client,
            configuration: LarderReplica.Configuration(retryDelay: .milliseconds(20), maxRetryDelay: .milliseconds(100)))
        defer { replica.close() }
        struct Todo: Codable, Sendable {
            var title: String
        }
        let todos = replica.collection("todos", of: Todo.self)
        try todos.create(Todo(title: "Buy milk"))
        replica.start()
        // Short waits, repeated until one of them reports the failed attempts (the first may end before any).
        var message = ""
        let reported = await waitUntil(120) {
            do throws(LarderError) {
                try await replica.synchronize(timeout: .milliseconds(100))
                message = "synchronized"
            } catch {
                #expect(error.status == .deadlineExceeded)
                message = error.message
            }
            return message.contains("the last failure: ")
        }
        #expect(reported, "\(message)")
        #expect(message.contains("no server answers"), "\(message)")
        #expect(message.contains("1 write waits in its outbox"), "\(message)")
        #expect(message.contains("not loaded yet: todos"), "\(message)")
        #expect(message.contains("UNAVAILABLE"), "\(message)")
        #expect(try todos.count() == 1, "the local write stays readable")
    }
}
