#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// A `larder-server` child on SQLite or on a PostgreSQL schema of its own, and what the replica tests reach it
/// through: `FaultRelay`s that take a replica offline (a blackhole: the network went silent) and lose answers, and a
/// client straight to the server, which tells what the server holds.
final class ReplicaTestServer: Sendable {
    let directory: String
    let schema: TestSchema?
    let child: ServerChild
    /// A client straight to the server.
    let direct: LarderClient

    init(_ store: ServerStore, arguments: [String] = []) throws {
        directory = NSTemporaryDirectory() + "larder-replica-\(UUID().uuidString)"
        schema = store == .postgres ? try TestPostgres.newSchema() : nil
        child = try ServerChild(
            dataDirectory: directory, arguments: (schema.map { ["--postgres", $0.url] } ?? []) + arguments)
        direct = LarderClient(port: child.port, requestTimeout: .seconds(120))
    }

    /// A relay in front of the server, and a client through it that gives up on a silent network within seconds.
    func relayed() throws -> (FaultRelay, LarderClient) {
        let relay = try FaultRelay(upstreamPort: child.port)
        var configuration = LarderClient.Configuration(
            endpoint: .tcp(host: "127.0.0.1", port: relay.port), requestTimeout: .seconds(3),
            connectTimeout: .seconds(2))
        configuration.clientName = "replica"
        return (relay, LarderClient(configuration: configuration))
    }

    /// A replica in a new file of the test's directory, through `client`, retrying fast.
    func replica(_ client: LarderClient, name: String = UUID().uuidString) throws -> LarderReplica {
        try FileManager.default.createDirectory(atPath: directory + "-replicas", withIntermediateDirectories: true)
        return try LarderReplica(
            path: directory + "-replicas/\(name).sqlite", client: client,
            configuration: LarderReplica.Configuration(
                retryDelay: .milliseconds(20), maxRetryDelay: .milliseconds(500), probeInterval: .milliseconds(200),
                pageSize: 7))
    }

    func stop() {
        direct.close()
        _ = child.stop()
        schema?.drop()
        try? FileManager.default.removeItem(atPath: directory)
        try? FileManager.default.removeItem(atPath: directory + "-replicas")
        try? FileManager.default.removeItem(atPath: child.logPath)
    }

    /// Every record of `collection` on the server, by id.
    func records(_ collection: String) async throws -> [UUID: Record] {
        var all: [UUID: Record] = [:]
        var cursor: String?
        repeat {
            let page = try await direct.list(collection, limit: 1000, cursor: cursor)
            for record in page.records { all[record.id] = record }
            cursor = page.nextCursor
        } while cursor != nil
        return all
    }
}

/// A todo of the todo app.
struct ReplicaTodo: Codable, Sendable, Equatable {
    var title: String
    var isFinish: Bool
    var note: String?
}

/// A record of the query tests: any data with a number `n`.
struct ReplicaThing: Codable, Sendable {
    var n: Int
}

/// The local replica against real servers of both stores: offline work and its drain, exactly once through lost
/// answers, conflicts under each policy, a resync after the change log moved on, and local reads that answer what
/// the server answers.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct ReplicaTests {
    /// The replica holds exactly what the server holds: the same ids, revisions and data, nothing pending.
    static func converged<Model>(_ replica: ReplicaCollection<Model>, _ server: ReplicaTestServer) async throws -> Bool {
        let remote = try await server.records(replica.name)
        let local = try replica.all()
        guard local.count == remote.count, replica.replica.status.pendingWrites == 0 else { return false }
        for record in local {
            guard let theirs = remote[record.id], theirs.rev == record.stored.rev, !record.isPending,
                try ModelCoding.encode(record.value) == theirs.data
            else { return false }
        }
        return true
    }

    /// The todo app offline: 100 todos added, 30 ticked, 10 deleted, every write answered at once from the file and
    /// kept across a restart of the app; then online behind a relay that loses the answer of every other write (and
    /// cuts its connection): the server ends up holding exactly the local state, each write applied once (one change
    /// logged per write).
    @Test(arguments: ServerStore.allCases) func theTodoAppWorksOfflineAndEveryWriteIsAppliedOnce(_ store: ServerStore)
        async throws
    {
        let server = try ReplicaTestServer(store)
        defer { server.stop() }
        let (relay, client) = try server.relayed()
        defer {
            relay.stop()
            client.close()
        }
        relay.blackhole(true)
        var replica = try server.replica(client, name: "todo")
        var todos = replica.collection("todos", of: ReplicaTodo.self)
        replica.start()
        #expect(await waitUntil(120) { replica.status.state == .offline }, "a silent network is offline")

        var added: [ReplicaRecord<ReplicaTodo>] = []
        for n in 0..<100 { added.append(try todos.create(ReplicaTodo(title: "todo \(n)", isFinish: false))) }
        for todo in added[0..<30] { try todos.update(todo) { $0.isFinish = true } }
        for todo in added[90..<100] { try todos.delete(todo.id) }
        #expect(try todos.count() == 90)
        #expect(try todos.count(Field("isFinish") == true) == 30)
        #expect(try todos.all().allSatisfy(\.isPending), "nothing reached the server yet")
        #expect(replica.status.pendingWrites == 140)
        #expect(try await server.direct.count("todos") == 0)

        // The app is closed and opened again, still offline: the outbox and the records are in the file.
        replica.close()
        replica = try server.replica(client, name: "todo")
        todos = replica.collection("todos", of: ReplicaTodo.self)
        #expect(replica.status.pendingWrites == 140)
        #expect(try todos.count(Field("isFinish") == false) == 60)
        replica.start()

        relay.dropAnswers(.writeAnswers { $0 % 2 == 1 })
        relay.blackhole(false)
        relay.cutAll()
        #expect(await waitUntil(120) { (try? await ReplicaTests.converged(todos, server)) == true })
        #expect(relay.dropped >= 70, "the answers of half the writes were lost: \(relay.dropped)")
        let stats = try await server.direct.stats()
        #expect(stats["store"]?["lastChangeSeq"]?.intValue == 140, "one logged change per write, none twice")
        #expect(try await server.direct.count("todos", filter: .compare(try FieldPath("isFinish"), .eq, true)) == 30)
        #expect(await waitUntil(120) { replica.status.state == .online })
        replica.close()
    }

    /// An app killed with SIGKILL while its replica drains, then started again on the same file: every write is on
    /// the server exactly once (the one whose answer the kill lost is sent again with its key), none is lost.
    @Test(arguments: ServerStore.allCases) func anAppKilledMidDrainLosesNothingAndAppliesNothingTwice(
        _ store: ServerStore
    ) async throws {
        let server = try ReplicaTestServer(store)
        defer { server.stop() }
        let relay = try FaultRelay(upstreamPort: server.child.port)
        defer { relay.stop() }
        relay.delay(.milliseconds(5))  // a slow network: the drain takes seconds, and the kill lands inside it
        try FileManager.default.createDirectory(atPath: server.directory + "-replicas", withIntermediateDirectories: true)
        let path = server.directory + "-replicas/killed.sqlite"
        func app(_ arguments: [String]) throws -> (ChildProcess, Pipe) {
            let process = ChildProcess()
            process.executableURL = try ServerProcessTests.binary("larder-replica-test")
            process.arguments = arguments
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            return (process, out)
        }
        let (first, firstOut) = try app(["write", path, "\(relay.port)", "150"])
        #expect(try first.firstLine(of: firstOut).trimmingCharacters(in: .whitespacesAndNewlines) == "queued 300")
        #expect(await waitUntil(120) { ((try? await server.direct.count("todos")) ?? 0) >= 20 })
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        let atKill = try await server.direct.stats()["store"]?["lastChangeSeq"]?.intValue ?? 0
        #expect(atKill < 300, "killed mid-drain: \(atKill) of 300 writes applied")

        let (second, secondOut) = try app(["drain", path, "\(relay.port)"])
        let queued = try second.firstLine(of: secondOut)
        #expect(queued.hasPrefix("queued "), "\(queued)")
        #expect(second.waitUntilExit(seconds: 120), "the second run drained what was left")
        #expect(second.terminationStatus == 0)
        #expect(try await server.direct.count("todos") == 150)
        let ticked = try await server.direct.count("todos", filter: .compare(try FieldPath("isFinish"), .eq, true))
        #expect(ticked == 150)
        let stats = try await server.direct.stats()
        #expect(stats["store"]?["lastChangeSeq"]?.intValue == 300, "one logged change per write, none twice")
    }

    /// A write the server refuses for good (a title its schema does not allow) is dropped, reported on
    /// `refusals()`, and the record shows the server's version again; the writes queued after it go on and reach the
    /// server.
    @Test func aRefusedWriteIsReportedAndTheOutboxGoesOn() async throws {
        let server = try ReplicaTestServer(.sqlite)
        defer { server.stop() }
        try await server.direct.setSchema(
            "todos", ["type": "object", "properties": ["title": ["type": "string", "maxLength": 20]]])
        let replica = try server.replica(server.direct)
        let todos = replica.collection("todos", of: ReplicaTodo.self)
        let refusals = Locked<[ReplicaRefusal]>([])
        let refusalStream = replica.refusals()
        let refusalWatcher = Task {
            for await refusal in refusalStream { refusals.withLock { $0.append(refusal) } }
        }
        defer { refusalWatcher.cancel() }
        let long = try todos.create(ReplicaTodo(title: String(repeating: "long ", count: 10), isFinish: false))
        let short = try todos.create(ReplicaTodo(title: "Buy milk", isFinish: false))
        try todos.update(short) { $0.isFinish = true }
        #expect(try todos.count() == 2)
        replica.start()
        #expect(await waitUntil(120) { !refusals.withLock { $0.isEmpty } }, "the refusal was reported")
        let refusal = try #require(refusals.withLock { $0.first })
        #expect(refusal.id == long.id)
        #expect(refusal.operation == .create)
        #expect(refusal.error.status == .invalidArgument, "\(refusal.error)")
        #expect(await waitUntil(120) { (try? await ReplicaTests.converged(todos, server)) == true })
        #expect(try todos.get(long.id) == nil, "the refused create is gone from the replica")
        #expect(try todos.get(short.id)?.value == ReplicaTodo(title: "Buy milk", isFinish: true))
        replica.close()
    }

    /// The diary app: an entry and its photo made offline, kept across a restart of the app, then online behind a
    /// relay that loses the answers of half the writes (the upload's FINISH among them): the photo is stored once,
    /// byte for byte, attached to its entry; another replica reads it from the server once and then from its cache,
    /// which keeps to its size.
    @Test(arguments: ServerStore.allCases) func aPhotoTakenOfflineIsUploadedAndAttachedLater(_ store: ServerStore)
        async throws
    {
        struct Entry: Codable, Sendable, Equatable {
            var shop: String
            var price: Int
        }
        let server = try ReplicaTestServer(store, arguments: ["--blob-chunk-bytes", "16KiB"])
        defer { server.stop() }
        let (relay, client) = try server.relayed()
        defer {
            relay.stop()
            client.close()
        }
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")
        let photoFile = fixtures.appendingPathComponent("grace_hopper.jpg")
        let bytes = try Data(contentsOf: photoFile)
        relay.blackhole(true)
        var replica = try server.replica(client, name: "diary")
        var diary = replica.collection("diary", of: Entry.self)
        let entry = try diary.create(Entry(shop: "7-Eleven", price: 35))
        let blob = try diary.attachPhoto(contentsOf: photoFile, to: entry.id)
        #expect(try await diary.photo(blob) == bytes, "the photo reads back offline")
        #expect(try diary.pendingPhotos(of: entry.id) == [blob])
        replica.close()
        replica = try server.replica(client, name: "diary")
        diary = replica.collection("diary", of: Entry.self)
        #expect(replica.status.pendingWrites == 2)
        replica.start()

        relay.dropAnswers(.writeAnswers { $0 % 2 == 1 })
        relay.blackhole(false)
        relay.cutAll()
        #expect(await waitUntil(120) { replica.status.pendingWrites == 0 })
        #expect(try diary.pendingPhotos(of: entry.id).isEmpty)
        let stored = try await server.direct.blobGet(blob)
        #expect(stored.bytes == bytes, "byte for byte")
        #expect(stored.info.attachedTo == BlobAttachment(collection: "diary", id: entry.id))
        #expect(try await server.direct.count("diary") == 1)
        replica.close()

        // Another phone reads the photo: from the server once, then from its cache; a cache the size of the larger
        // photo keeps only the last one read.
        let rocket = try Data(contentsOf: fixtures.appendingPathComponent("rocket.jpg"))
        #expect(rocket.count > bytes.count)
        var configuration = LarderReplica.Configuration()
        configuration.photoCacheBytes = rocket.count + 100  // the larger photo, not both
        let other = try LarderReplica(
            path: server.directory + "-replicas/other.sqlite", client: server.direct, configuration: configuration)
        let otherDiary = other.collection("diary", of: Entry.self)
        #expect(try await otherDiary.photo(blob) == bytes)
        #expect(try other.cachedPhotoBytes() == bytes.count)
        let second = try await server.direct.putBlob(contentsOf: fixtures.appendingPathComponent("rocket.jpg"))
        #expect(try await otherDiary.photo(second.id).count == Int(second.size))
        #expect(try other.cachedPhotoBytes() == Int(second.size), "the least recently used photo went")
        let thumbnail = try await otherDiary.thumbnail(second.id, maxSide: 64)
        #expect(try await otherDiary.thumbnail(second.id, maxSide: 64) == thumbnail)
        other.close()
    }

    /// Three servers on one PostgreSQL, the one the replica drains through killed with SIGKILL mid-drain: the
    /// replica goes on through the others, and every write is applied exactly once (each todo created, then ticked:
    /// revision 2, no more).
    @Test func aReplicaDrainsThroughTheOtherServersWhenOneIsKilled() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try ScaleOutTests.Servers(count: 3, url: schema.url)
        defer { servers.stop() }
        var configuration = LarderClient.Configuration(requestTimeout: .seconds(10), connectTimeout: .seconds(5))
        configuration.endpoints = servers.ports.map { .tcp(host: "127.0.0.1", port: $0) }
        let client = LarderClient(configuration: configuration)
        defer { client.close() }
        let survivor = servers.client(2)
        defer { survivor.close() }
        let directory = servers.root.appendingPathComponent("replicas")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let replica = try LarderReplica(
            path: directory.appendingPathComponent("todo.sqlite").path, client: client,
            configuration: LarderReplica.Configuration(retryDelay: .milliseconds(20), maxRetryDelay: .milliseconds(500)))
        let todos = replica.collection("todos", of: ReplicaTodo.self)
        for n in 0..<200 {
            let todo = try todos.create(ReplicaTodo(title: "todo \(n)", isFinish: false))
            try todos.update(todo) { $0.isFinish = true }
        }
        replica.start()
        #expect(await waitUntil(120) { ((try? await survivor.count("todos")) ?? 0) >= 20 })
        servers.children[0].kill()
        let pendingAtKill = replica.status.pendingWrites
        #expect(pendingAtKill > 0, "killed mid-drain")
        #expect(await waitUntil(120) { replica.status.pendingWrites == 0 })
        var cursor: String?
        var revisions: [Int64: Int] = [:]
        var finished = 0
        repeat {
            let page = try await survivor.list("todos", limit: 1000, cursor: cursor)
            for record in page.records {
                revisions[record.rev, default: 0] += 1
                if record.data["isFinish"] == true { finished += 1 }
            }
            cursor = page.nextCursor
        } while cursor != nil
        #expect(revisions == [2: 200], "each todo created once and ticked once")
        #expect(finished == 200)
        replica.close()
    }

    /// A change made on the server reaches an online replica through its feed, and a record deleted there leaves it.
    @Test func serverChangesFlowIntoAnOnlineReplica() async throws {
        let server = try ReplicaTestServer(.sqlite)
        defer { server.stop() }
        let existing = try await server.direct.create("todos", ["title": "before", "isFinish": false])
        let replica = try server.replica(server.direct)
        let todos = replica.collection("todos", of: ReplicaTodo.self)
        let screens = Locked<[[String]]>([])
        let watcher = Task {
            for await screen in try todos.changes(matching: Field("isFinish") == false, sortedBy: [Field("title").ascending]) {
                screens.withLock { $0.append(screen.map(\.value.title)) }
            }
        }
        defer { watcher.cancel() }
        #expect(await waitUntil(120) { screens.withLock { $0.first } == [] }, "the first answer: the file, empty")
        replica.start()
        try await replica.synchronize()
        #expect(await waitUntil(120) { (try? todos.get(existing.id))?.value.title == "before" })
        let added = try await server.direct.create("todos", ["title": "added", "isFinish": false])
        _ = try await server.direct.delete("todos", id: existing.id)
        #expect(await waitUntil(120) { (try? todos.get(added.id)) != nil && (try? todos.get(existing.id)) == nil })
        #expect(await waitUntil(120) { screens.withLock { $0.last } == ["added"] }, "the query's sequence followed")
        #expect(screens.withLock { $0.contains(["before"]) })
        replica.close()
    }

    /// The three policies, two replicas editing the same record while offline: the first online wins the server;
    /// the second's write meets a conflict, reported on `conflicts()`, decided by its policy; and both replicas end up
    /// holding what the server holds.
    @Test(arguments: ["serverWins", "clientWins", "merge"], ServerStore.allCases)
    func twoReplicasEditingOneRecordOfflineConverge(_ policyName: String, _ store: ServerStore) async throws {
        let server = try ReplicaTestServer(store)
        defer { server.stop() }
        let original = try await server.direct.create(
            "todos", ["title": "Buy milk", "isFinish": false], id: UUID())
        let policy: ConflictPolicy<ReplicaTodo> =
            switch policyName {
            case "serverWins": .serverWins
            case "clientWins": .clientWins
            default:
                .merge { server, local in
                    guard var merged = server?.value else { return local }
                    merged.isFinish = merged.isFinish || (local?.isFinish ?? false)
                    return merged
                }
            }
        let (relayA, clientA) = try server.relayed()
        let (relayB, clientB) = try server.relayed()
        defer {
            relayA.stop()
            relayB.stop()
            clientA.close()
            clientB.close()
        }
        let a = try server.replica(clientA)
        let b = try server.replica(clientB)
        let todosA = a.collection("todos", of: ReplicaTodo.self, conflicts: policy)
        let todosB = b.collection("todos", of: ReplicaTodo.self, conflicts: policy)
        let conflicts = Locked<[ReplicaConflict]>([])
        let conflictStream = b.conflicts()
        let conflictWatcher = Task {
            for await conflict in conflictStream { conflicts.withLock { $0.append(conflict) } }
        }
        defer { conflictWatcher.cancel() }
        a.start()
        b.start()
        try await a.synchronize()
        try await b.synchronize()

        relayA.blackhole(true)
        relayB.blackhole(true)
        relayA.cutAll()
        relayB.cutAll()
        #expect(await waitUntil(120) { a.status.state == .offline && b.status.state == .offline })
        try todosA.update(try #require(try todosA.get(original.id))) { $0.title = "Buy oat milk" }
        try todosB.update(try #require(try todosB.get(original.id))) { $0.isFinish = true }

        relayA.blackhole(false)
        relayA.cutAll()
        try await a.synchronize()
        relayB.blackhole(false)
        relayB.cutAll()

        #expect(await waitUntil(120) { !conflicts.withLock { $0.isEmpty } }, "the conflict was reported")
        let conflict = try #require(conflicts.withLock { $0.first })
        #expect(conflict.id == original.id)
        #expect(try conflict.serverVersion(as: ReplicaTodo.self)?.value.title == "Buy oat milk")
        #expect(try conflict.localVersion(as: ReplicaTodo.self)?.isFinish == true)
        let expected: ReplicaTodo
        switch policyName {
        case "serverWins":
            #expect(conflict.resolution == .keptServer)
            expected = ReplicaTodo(title: "Buy oat milk", isFinish: false)
        case "clientWins":
            #expect(conflict.resolution == .keptLocal)
            expected = ReplicaTodo(title: "Buy oat milk", isFinish: true)  // the patch applied over the new revision
        default:
            expected = ReplicaTodo(title: "Buy oat milk", isFinish: true)
        }
        #expect(await waitUntil(120) {
            let convergedA = (try? await ReplicaTests.converged(todosA, server)) == true
            let convergedB = (try? await ReplicaTests.converged(todosB, server)) == true
            return convergedA && convergedB
        }, "both replicas hold what the server holds")
        #expect(conflicts.withLock { $0.count } == 1, "one conflict, reported once")
        let final = try await server.records("todos")[original.id]?.data
        #expect(final == (try ModelCoding.encode(expected)))
        a.close()
        b.close()
    }

    /// A replica away longer than the change log's retention: its WATCH answers `resync`, it reads the collection by
    /// pages again, and it ends up holding exactly what the server holds: records created, changed and deleted while
    /// it was away (their changes pruned from the log), and its own offline write applied on top.
    @Test(arguments: ServerStore.allCases) func aReplicaAwayLongerThanTheLogResyncsAndConverges(_ store: ServerStore)
        async throws
    {
        let server = try ReplicaTestServer(store, arguments: ["--change-retention", "5"])
        defer { server.stop() }
        var ids: [UUID] = []
        for n in 0..<20 {
            ids.append(try await server.direct.create("todos", ["title": .string("todo \(n)"), "isFinish": false]).id)
        }
        let (relay, client) = try server.relayed()
        defer {
            relay.stop()
            client.close()
        }
        let replica = try server.replica(client)
        let todos = replica.collection("todos", of: ReplicaTodo.self, conflicts: .clientWins)
        replica.start()
        #expect(await waitUntil(120) { (try? await ReplicaTests.converged(todos, server)) == true })

        relay.blackhole(true)
        relay.cutAll()
        #expect(await waitUntil(120) { replica.status.state == .offline })
        let mine = try todos.create(ReplicaTodo(title: "written offline", isFinish: false))
        for id in ids[0..<8] { _ = try await server.direct.delete("todos", id: id) }
        for id in ids[8..<14] { _ = try await server.direct.patch("todos", id: id, patch: ["isFinish": true]) }
        for n in 0..<9 { _ = try await server.direct.create("todos", ["title": .string("new \(n)"), "isFinish": false]) }
        #expect(try todos.count() == 21, "offline, the replica still shows what it had, and its own write")

        relay.blackhole(false)
        relay.cutAll()
        #expect(await waitUntil(120) { (try? await ReplicaTests.converged(todos, server)) == true })
        #expect(try todos.count() == 22)
        #expect(try todos.get(ids[0]) == nil, "a delete whose change the log no longer holds came through the reload")
        #expect(try todos.get(mine.id)?.isPending == false)
        #expect(try todos.count(Field("isFinish") == true) == 6)
        replica.close()
    }

    /// Local reads answer what the server answers for the same queries: filters of every kind, substring search,
    /// sorts over mixed kinds in both directions, page after page through the cursors; counts and groups.
    @Test(arguments: ServerStore.allCases) func localReadsMatchTheServer(_ store: ServerStore) async throws {
        let server = try ReplicaTestServer(store)
        defer { server.stop() }
        let values: [JSON?] = [
            "1", "[", "a", "{z", [0], ["k": 1], nil, .null, false, true, 0, 1, 1.0, 2.5, -3, "", "北京市海淀区", "Ball",
            "ball", [], "a", 1, 9_007_199_254_740_993, 9_007_199_254_740_992.0,
        ]
        for (n, value) in values.enumerated() {
            var data: JSONObject = ["n": .int(Int64(n)), "name": .string(n % 3 == 0 ? "Poke Ball \(n)" : "北京 \(n)")]
            if let value { data["v"] = value }
            if n % 4 == 0 { data["address"] = ["city": .string(n % 8 == 0 ? "北京" : "Taipei")] }
            _ = try await server.direct.create("things", data)
        }
        let replica = try server.replica(server.direct)
        let things = replica.collection("things", of: ReplicaThing.self)
        replica.start()
        #expect(await waitUntil(120) { (try? things.count()) == values.count })

        let filters: [FilterExpression?] = [
            nil, Field("v") == 1, Field("v") != nil, Field("v") < "b", Field("v") >= 0, Field("v").exists,
            Field("v").isMissing, Field("name").contains("BALL"), Field("name").hasPrefix("北"),
            Field("v").in([1, "a", nil]), !(Field("v") == "a") && Field("n") > 3, Field("v") == true,
            Field("address.city") == "北京" || Field("n") < 2,
        ]
        let sorts: [[Ordering]] = [
            [], [Field("v").ascending], [Field("v").descending], [Field("name").descending, Field("n").ascending],
            [Field("address.city").ascending, Field("$createdAt").descending],
        ]
        for filter in filters {
            for order in sorts {
                for limit in [3, 50] {
                    var keys: [SortKey] = []
                    for ordering in order { keys.append(try ordering.sortKey()) }
                    let query = SearchQuery(filter: try filter?.filter(), sort: keys)
                    var localIDs: [UUID] = []
                    var remoteIDs: [UUID] = []
                    var localCursor: String?
                    var remoteCursor: String?
                    repeat {
                        let local = try things.search(filter, sortedBy: order, limit: limit, cursor: localCursor)
                        localIDs += local.records.map(\.id)
                        localCursor = local.nextCursor
                    } while localCursor != nil
                    repeat {
                        var paged = query
                        paged.limit = limit
                        paged.cursor = remoteCursor
                        let remote = try await server.direct.search("things", paged)
                        remoteIDs += remote.records.map(\.id)
                        remoteCursor = remote.nextCursor
                    } while remoteCursor != nil
                    #expect(localIDs == remoteIDs, "\(String(describing: query.filter?.json)) \(query.sort.map(\.json))")
                }
            }
            let remoteCount = try await server.direct.count("things", filter: try filter?.filter())
            #expect(try things.count(filter) == remoteCount)
        }
        for text in ["ball", "北京", "京 1", "TAIPEI"] {
            let local = try things.search(containing: text, limit: 1000).records.map(\.id)
            let remote = try await server.direct.search("things", SearchQuery(text: TextQuery(query: text), limit: 1000))
            #expect(local == remote.records.map { $0.id }, "text \(text)")
            let inCity = try things.count(containing: text, in: [Field("address")])
            let remoteInCity = try await server.direct.count(
                "things", text: TextQuery(query: text, fields: [try FieldPath("address")]))
            #expect(inCity == remoteInCity, "text \(text) in address")
        }
        let localGroups = try things.group(by: Field("v"), perGroup: 0).map { "\($0.key)=\($0.count)" }
        let remoteGroups = try await server.direct.group("things", by: "v", perGroup: 0).groups.map {
            "\($0.key)=\($0.count)"
        }
        #expect(localGroups == remoteGroups)
        let collated = #expect(throws: LarderError.self) {
            _ = try things.search(sortedBy: [Field("name").ascending.collated("de")])
        }
        #expect(collated?.field == "sort.0.collation", "a collation sort is the server's alone, and says so")
        let oversized = #expect(throws: LarderError.self) {
            _ = try LarderReplica(
                path: server.directory + "-replicas/pages.sqlite", client: server.direct,
                configuration: LarderReplica.Configuration(pageSize: 1001))
        }
        #expect(oversized?.field == "pageSize", "a LIST page holds 1000 records at most")
        replica.close()
    }
}
