import Foundation
import LarderClient
import LarderTestThreads
import Testing

/// `LarderCollection.changes(matching:since:)`: the change feed as typed values, a record that does not decode as one
/// value among the others, and resuming from a sequence number.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TypedChangesTests {
    struct Todo: Codable, Sendable, Equatable {
        var title: String
        var done: Bool
    }

    /// A change's kind without its payload, to compare lists of them.
    enum Shape: Equatable {
        case created(UUID, Todo), updated(UUID, Int64, Todo), deleted(UUID), left(UUID), dropped, resync
        case undecodable(UUID, Status, String?)
    }

    static func shape(_ change: CollectionChange<Todo>) -> Shape {
        switch change.kind {
        case .created(let todo): .created(todo.id, todo.value)
        case .updated(let todo): .updated(todo.id, todo.rev, todo.value)
        case .deleted(let id): .deleted(id)
        case .left(let id): .left(id)
        case .dropped: .dropped
        case .resync: .resync
        case .undecodable(let id, let error): .undecodable(id, error.status, error.field)
        }
    }

    /// The next `count` changes, failing after 120 s.
    static func take(_ count: Int, from changes: CollectionChanges<Todo>) async throws -> [CollectionChange<Todo>] {
        try await WatchClientTests.within(120, "\(count) changes") {
            var taken: [CollectionChange<Todo>] = []
            for try await change in changes {
                taken.append(change)
                if taken.count == count { break }
            }
            return taken
        }
    }

    @Test(arguments: ServerStore.allCases) func everyKindComesTypedAndAnUndecodableRecordIsOneValue(
        _ store: ServerStore
    ) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        let writer = server.client()
        defer {
            client.close()
            writer.close()
        }
        let todos = client.collection("todos", of: Todo.self)
        let written = writer.collection("todos", of: Todo.self)
        let changes = try await todos.changes()
        let open = try await todos.changes(matching: .compare(try FieldPath("done"), .eq, false))

        let milk = try await written.create(Todo(title: "Buy milk 買牛奶", done: false))
        let renamed = try await written.update(milk) { $0.title = "Buy oat milk" }
        var done = renamed
        done.value.done = true
        let finished = try await written.save(done)
        // Written by the CLI or an older app: no `done`. It comes as a value that says so, and the feed goes on.
        let old = try await writer.create("todos", ["title": "from the CLI"])
        let eggs = try await written.create(Todo(title: "Eggs", done: false))
        try await writer.delete("todos", id: milk.id)
        try await writer.dropCollection("todos")

        let all = try await Self.take(7, from: changes)
        #expect(
            all.map(Self.shape) == [
                .created(milk.id, milk.value), .updated(milk.id, 2, renamed.value),
                .updated(milk.id, 3, finished.value), .undecodable(old.id, .decodingFailed, "done"),
                .created(eggs.id, eggs.value), .deleted(milk.id), .dropped,
            ])
        #expect(all.map(\.seq) == Array(1...7))
        #expect(all.allSatisfy { abs(($0.time ?? .distantPast).timeIntervalSinceNow) < 600 })
        if case .undecodable(_, let error) = all[3].kind {
            #expect(error.localizedDescription.contains("does not decode as Todo"), "\(error.localizedDescription)")
        }
        #expect(changes.lastSeq == 7)

        // The filtered view: the finished todo leaves it (it is not deleted), and the one without `done` never
        // matched.
        let filtered = try await Self.take(5, from: open)
        #expect(
            filtered.map(Self.shape) == [
                .created(milk.id, milk.value), .updated(milk.id, 2, renamed.value), .left(milk.id),
                .created(eggs.id, eggs.value), .dropped,
            ])
        changes.cancel()
        open.cancel()
        try await WatchClientTests.waitForSubscriptions(0, via: writer)
    }

    @Test(arguments: ServerStore.allCases) func changesResumeFromASequenceNumber(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)
        let first = try await todos.changes()
        var made: [Stored<Todo>] = []
        for n in 1...3 { made.append(try await todos.create(Todo(title: "todo \(n)", done: false))) }
        let seen = try await Self.take(2, from: first)
        let saved = try #require(seen.last?.seq)
        #expect(saved == 2 && first.lastSeq == 2)
        first.cancel()
        // Closed, the app wrote on; opened again from the saved number, it sees each later change once.
        let fourth = try await todos.create(Todo(title: "todo 4", done: false))
        try await todos.delete(made[0].id)
        let again = try await todos.changes(since: saved)
        let missed = try await Self.take(3, from: again)
        #expect(
            missed.map(Self.shape) == [
                .created(made[2].id, made[2].value), .created(fourth.id, fourth.value), .deleted(made[0].id),
            ])
        #expect(missed.map(\.seq) == [3, 4, 5])
        let fifth = try await todos.create(Todo(title: "todo 5", done: true))
        #expect(try await Self.take(1, from: again).map(Self.shape) == [.created(fifth.id, fifth.value)])
        #expect(again.lastSeq == 6)
    }

    @Test func aResyncComesWhenTheLogNoLongerReachesBack() async throws {
        let server = try ClientTestServer { $0.changeRetentionEvents = 2 }
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)
        for n in 0..<6 { _ = try await todos.create(Todo(title: "\(n)", done: false)) }
        let changes = try await todos.changes(since: 1)
        let resync = try await Self.take(1, from: changes)
        #expect(resync.map(Self.shape) == [.resync] && resync.first?.seq == 6)
        let next = try await todos.create(Todo(title: "after", done: false))
        #expect(try await Self.take(1, from: changes).map(Self.shape) == [.created(next.id, next.value)])
    }
}
