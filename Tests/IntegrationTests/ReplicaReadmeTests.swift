import Foundation
import LarderClient
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// README's "Offline apps" example, run as written against a real server process, so the README cannot drift.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReplicaReadmeTests {
    struct Todo: Codable, Sendable {
        var title: String
        var isFinish: Bool
    }

    /// What the example's loop shows, as the screen would.
    final class Screen: Sendable {
        let lists = Locked<[[String]]>([])
        func show(_ list: [(String, String)]) { lists.withLock { $0.append(list.map { "\($0.0) \($0.1)" }) } }
    }

    /// The example as written: `folder` is the test's directory, `show` records what the list showed.
    static func example(port: Int, folder: String, screen: Screen) async throws -> LarderReplica {
        func show(_ list: [(String, String)]) { screen.show(list) }

        let client = LarderClient(host: "127.0.0.1", port: port)
        let replica = try LarderReplica(path: folder + "/todos.sqlite", client: client)
        let todos = replica.collection("todos", of: Todo.self, conflicts: .clientWins)
        replica.start()

        let milk = try todos.create(Todo(title: "Buy milk", isFinish: false))   // in the file at once, online or not
        try todos.update(milk) { $0.isFinish = true }                          // queued; sent when a server answers
        let open = try todos.search(Field("isFinish") == false, sortedBy: [Field("title").ascending], limit: 20)
        #expect(open.records.isEmpty)

        Task {
            for await list in try todos.changes(sortedBy: [Field("title").ascending]) {   // now, then at every change
                show(list.map { ($0.value.title, $0.isPending ? "sending…" : "saved") })
            }                                                                             // ends at replica.close()
        }
        return replica
    }

    @Test func theReadmeOfflineExampleWorks() async throws {
        let folder = NSTemporaryDirectory() + "larder-readme-replica-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let child = try ServerChild(dataDirectory: folder + "/data")
        defer { _ = child.stop() }
        let screen = Screen()
        let replica = try await ReplicaReadmeTests.example(port: child.port, folder: folder, screen: screen)
        // Generous: the whole suite beside it can hold the machine for minutes; the error says what was waiting.
        try await replica.synchronize(timeout: .seconds(300))
        #expect(await waitUntil(120) { screen.lists.withLock { $0.last } == ["Buy milk saved"] })
        #expect(screen.lists.withLock { $0.first } == ["Buy milk sending…"], "pending until the server applied it")
        let direct = LarderClient(port: child.port)
        defer { direct.close() }
        let stored = try await direct.search("todos", SearchQuery())
        #expect(stored.records.map { $0.data["isFinish"] } == [.bool(true)])
        replica.close()
    }
}
