import Foundation
import LarderClient
import LarderServer
import LarderTestSupport
import LarderTestThreads
import Testing

/// One phone, two people: a replica's file holds one user's records, and nothing of it reaches, or comes from, a
/// connection signed in as anyone else.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReplicaUsersTests {
    struct Todo: Codable, Sendable, Equatable {
        var title: String
        var isFinish: Bool
    }

    static let fast = LarderReplica.Configuration(
        retryDelay: .milliseconds(20), maxRetryDelay: .milliseconds(200), probeInterval: .milliseconds(100))

    @Test(arguments: ServerStore.allCases) func aReplicaFileIsOneUsersAndWaitsForThem(_ store: ServerStore)
        async throws
    {
        let server = try ClientTestServer(store) { PasswordAccountsTests.configure(&$0) }
        defer { server.stop() }
        let endpoint = LarderClient.Endpoint.tcp(host: "127.0.0.1", port: server.port)
        let admin = LarderClient(configuration: .init(endpoint: endpoint, token: "admin-secret"))
        defer { admin.close() }
        try await admin.setRules(CollectionRules(read: .owner, create: .owner, update: .owner, delete: .owner), for: "todos")
        let directory = temporaryTestDirectory("larder-replica-users")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let folder = directory.path
        let (email, password) = ("ann@example.com", "ann's long password")
        let signUp = LarderClient(configuration: LarderClient.Configuration(endpoint: endpoint))
        try await signUp.signUp(email: email, password: password)
        signUp.close()

        // Ann signs in and works through her replica, as LarderReplica.init(path:client:user:)'s example does.
        let client = LarderClient(configuration: LarderClient.Configuration(endpoint: endpoint))
        defer { client.close() }
        let session = try await client.signIn(email: email, password: password)
        let file = folder + "/todos-" + session.user.id.replacingOccurrences(of: "/", with: "_") + ".sqlite"
        var replica = try LarderReplica(path: file, client: client, user: session.user.id)
        let ann = session
        let annFile = file
        replica.close()
        replica = try LarderReplica(path: annFile, client: client, user: ann.user.id, configuration: Self.fast)
        var todos = replica.collection("todos", of: Todo.self)
        replica.start()
        let vet = try todos.create(Todo(title: "Call the vet", isFinish: false))
        try await replica.synchronize()
        #expect(try replica.user() == ann.user.id)
        replica.close()

        // Ann signs out; Bob signs in on the same phone, with the same client.
        try await client.signOut()
        let bob = try await client.signUp(email: "bob@example.com", password: "bob's long password")
        let bobsOwn = try await client.collection("todos", of: Todo.self).create(Todo(title: "Bob's", isFinish: true))

        // Opened for Bob, Ann's file is refused.
        let refusal = #expect(throws: LarderError.self) {
            _ = try LarderReplica(path: annFile, client: client, user: bob.user.id, configuration: Self.fast)
        }
        #expect(refusal?.status == .permissionDenied)

        // Opened without naming a user, it stays Ann's: it sends and fetches nothing while Bob is signed in, and a
        // write made on it waits in its outbox.
        replica = try LarderReplica(path: annFile, client: client, configuration: Self.fast)
        todos = replica.collection("todos", of: Todo.self)
        replica.start()
        #expect(try todos.all().map(\.value) == [Todo(title: "Call the vet", isFinish: false)])
        try todos.update(vet) { $0.isFinish = true }
        let waiting = await #expect(throws: LarderError.self) { try await replica.synchronize(timeout: .seconds(2)) }
        #expect(waiting?.status == .deadlineExceeded)
        #expect(waiting?.message.contains("another user's records") == true)
        #expect(try todos.get(bobsOwn.id) == nil)
        #expect(replica.status.pendingWrites == 1)
        #expect(try await admin.get("todos", id: vet.id).data["isFinish"] == .bool(false))

        // Ann signs in again: her write goes out as hers, and the replica follows her records again.
        try await client.signOut()
        try await client.signIn(email: "ann@example.com", password: "ann's long password")
        try await replica.synchronize(timeout: .seconds(120))
        let stored = try await admin.get("todos", id: vet.id)
        #expect(stored.data["isFinish"] == .bool(true))
        #expect(stored.data["$owner"]?.stringValue == ann.user.id)
        #expect(try todos.get(bobsOwn.id) == nil)
        // Her replica still holds the file: it may not be removed yet.
        let held = #expect(throws: LarderError.self) { try LarderReplica.remove(path: annFile) }
        #expect(held?.field == "path")
        await replica.closed()

        // A new file with a write queued before it reached a server is not taken by whoever is signed in: the app
        // names the user, and the write goes out as theirs.
        let early = folder + "/early.sqlite"
        var unnamed = try LarderReplica(path: early, client: client, configuration: Self.fast)
        _ = try unnamed.collection("todos", of: Todo.self).create(Todo(title: "written at once", isFinish: false))
        unnamed.start()
        let unclaimed = await #expect(throws: LarderError.self) { try await unnamed.synchronize(timeout: .seconds(2)) }
        #expect(unclaimed?.message.contains("queued before it recorded whose they are") == true)
        #expect(try unnamed.user() == nil && unnamed.status.pendingWrites == 1)
        unnamed.close()
        unnamed = try LarderReplica(path: early, client: client, user: ann.user.id, configuration: Self.fast)
        _ = unnamed.collection("todos", of: Todo.self)
        unnamed.start()
        try await unnamed.synchronize(timeout: .seconds(120))
        #expect(unnamed.status.pendingWrites == 0)
        unnamed.close()

        // At sign-out the app removes her file: the next replica on that path starts empty, for whoever reaches it.
        try LarderReplica.remove(path: annFile)
        #expect(!FileManager.default.fileExists(atPath: annFile))
        let fresh = try LarderReplica(path: annFile, client: client, configuration: Self.fast)
        defer { fresh.close() }
        #expect(try fresh.user() == nil)
        #expect(try fresh.collection("todos", of: Todo.self).all().isEmpty)
    }

    /// At sign-out the app closes the replica and removes its file. `closed()` returns once nothing of the replica
    /// touches the file; a removal while a replica holds it open is refused, since that replica's connection, closed
    /// later, would remove by name the WAL of the next file made there and lose its writes.
    @Test func aFileIsRemovedOnlyOnceItsReplicaHasClosed() async throws {
        let directory = temporaryTestDirectory("larder-replica-remove")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.path + "/ann.sqlite"
        // No server: the replicas only write locally.
        let client = LarderClient(port: 1)
        defer { client.close() }
        var first: LarderReplica? = try LarderReplica(path: path, client: client, configuration: Self.fast)
        _ = try first!.collection("todos", of: Todo.self).create(Todo(title: "ann's", isFinish: false))
        first!.start()
        first!.close()
        let refused = #expect(throws: LarderError.self) { try LarderReplica.remove(path: directory.path + "/./ann.sqlite") }
        #expect(refused?.message.contains("closed()") == true)
        await first!.closed()
        let after = #expect(throws: LarderError.self) { _ = try first!.collection("todos", of: Todo.self).all() }
        #expect(after?.status == .unavailable)
        try LarderReplica.remove(path: path)
        for name in [path, path + "-wal", path + "-shm", path + ".photos"] {
            #expect(!FileManager.default.fileExists(atPath: name), "\(name)")
        }

        // The next user's file on the same path keeps its writes when the first replica object goes.
        let next = try LarderReplica(path: path, client: client, configuration: Self.fast)
        _ = try next.collection("todos", of: Todo.self).create(Todo(title: "bob's", isFinish: true))
        first = nil
        await next.closed()
        let reopened = try LarderReplica(path: path, client: client, configuration: Self.fast)
        #expect(try reopened.collection("todos", of: Todo.self).all().map(\.value.title) == ["bob's"])
        #expect(reopened.status.pendingWrites == 1)
        await reopened.closed()
    }
}
