import Foundation
import LarderClient
import Testing

/// `LarderReplica.synchronize` when no server can be reached: it gives up at its deadline and says what it was
/// waiting for, so that an app (or a failing test) can tell an unreachable server from a stuck outbox.
@Suite(.timeLimit(.minutes(20))) struct ReplicaSynchronizeTests {
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
        let error = await #expect(throws: LarderError.self) { try await replica.synchronize(timeout: .milliseconds(500)) }
        #expect(error?.status == .deadlineExceeded)
        let message = error?.message ?? ""
        #expect(message.contains("no server answers"), "\(message)")
        #expect(message.contains("1 write waits in its outbox"), "\(message)")
        #expect(message.contains("not loaded yet: todos"), "\(message)")
        #expect(message.contains("the last failure: ") && message.contains("UNAVAILABLE"), "\(message)")
        #expect(try todos.count() == 1, "the local write stays readable")
    }
}
