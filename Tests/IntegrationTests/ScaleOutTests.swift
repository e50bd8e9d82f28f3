#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Several real larder-server processes on one PostgreSQL: read-your-writes across servers, revisions
/// across servers, one change feed with one order and one numbering on every server (also while a writing
/// transaction is held open, or holds a number and rolls back), and clients that go on to the next server when one
/// dies or the database restarts, losing nothing acknowledged.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct ScaleOutTests {
    /// `count` servers on `url`, each a process of its own.
    struct Servers {
        let children: [ServerChild]
        let root: URL

        init(count: Int, url: String, arguments: [String] = []) throws {
            root = ServerProcessTests.temporaryDirectory()
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            var children: [ServerChild] = []
            for index in 0..<count {
                children.append(
                    try ServerChild(
                        dataDirectory: root.appendingPathComponent("s\(index)").path,
                        arguments: ["--postgres", url] + arguments))
            }
            self.children = children
        }

        var ports: [Int] { children.map(\.port) }

        /// A client of server `index` alone.
        func client(_ index: Int, connections: Int = 1) -> LarderClient {
            LarderClient(host: "127.0.0.1", port: ports[index], connections: connections)
        }

        /// A client that knows every server, as `--host a,b,c` makes one.
        func clientOfAll(connections: Int) -> LarderClient {
            var configuration = LarderClient.Configuration(connections: connections, requestTimeout: .seconds(120))
            configuration.endpoints = ports.map { .tcp(host: "127.0.0.1", port: $0) }
            return LarderClient(configuration: configuration)
        }

        func stop() {
            for child in children where child.process.isRunning { _ = child.stop() }
            try? FileManager.default.removeItem(at: root)
        }
    }

    /// Whether PostgreSQL shows at least `count` sessions waiting on a lock for a statement containing `text`.
    static func lockWaiters(_ url: String, _ text: String, atLeast count: Int) throws -> Bool {
        let probe = try PGConnection(settings: try PGSettings(url: url), timeoutMs: 120_000)
        defer { probe.close() }
        let waiting = try probe.run([
            PGStatement(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0",
                [.text(text)])
        ])[0].int(0, 0)
        return waiting >= Int64(count)
    }

    /// Collects the events of a WATCH until cancelled.
    final class Watcher: Sendable {
        let events = Locked<[ChangeEvent]>([])
        let task: Task<Void, Never>

        init(_ client: LarderClient, collection: String, since: Int64? = nil) async throws {
            let feed = try await client.watch(collection: collection, since: since)
            let events = self.events
            task = Task {
                do {
                    for try await event in feed { events.withLock { $0.append(event) } }
                } catch {}
            }
        }

        var seqs: [Int64] { events.withLock { $0.map(\.seq) } }
        var count: Int { events.withLock { $0.count } }
    }

    /// Every watcher saw the same events, numbered one after another with no hole and no repeat.
    static func expectOneFeed(_ watchers: [Watcher], count: Int) {
        let first = watchers[0].events.withLock { $0.map { "\($0.seq) \($0.kind) \($0.id?.wireString ?? "-")" } }
        #expect(first.count == count, "\(first)")
        for watcher in watchers.dropFirst() {
            let lines = watcher.events.withLock { $0.map { "\($0.seq) \($0.kind) \($0.id?.wireString ?? "-")" } }
            #expect(lines == first)
        }
        let seqs = watchers[0].seqs
        for (a, b) in zip(seqs, seqs.dropFirst()) { #expect(b == a + 1, "\(seqs)") }
    }

    /// Without read caches, every read goes to the database: any client reads a write acknowledged by any server,
    /// whether or not it has seen it (`CachedReadsAcrossServersTests` covers the caches and `afterSeq`).
    @Test func readYourWritesAThousandTimesAcrossServers() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 3, url: schema.url, arguments: ["--read-cache-bytes", "0"])
        defer { servers.stop() }
        let clients = (0..<3).map { servers.client($0) }
        let id = try await clients[0].create("ryw", ["n": 0]).id
        var stale = 0
        for i in 1...1000 {
            let writer = clients[i % 3]
            let reader = clients[(i + 1) % 3]
            let written = try await writer.patch("ryw", id: id, patch: ["n": .int(Int64(i))])
            let read = try await reader.get("ryw", id: id)
            if read.rev != written.rev || read.data["n"] != .int(Int64(i)) { stale += 1 }
            if i % 25 == 0 {
                let many = try await reader.getMany("ryw", ids: [id])
                if many.records.first?.rev != written.rev { stale += 1 }
                let found = try await reader.search(
                    "ryw", SearchQuery(filter: .compare(try FieldPath("n"), .eq, .int(Int64(i)))))
                if found.records.map(\.id) != [id] { stale += 1 }
            }
            if i % 100 == 0 {
                let jpeg = uniqueJPEG(commentBytes: 64 + i)
                let blob = try await writer.blobPut(Data(jpeg), attachTo: BlobAttachment(collection: "ryw", id: id))
                if try await reader.blobGet(blob.id).bytes != Data(jpeg) { stale += 1 }
            }
        }
        #expect(stale == 0, "\(stale) reads missed a write acknowledged by another server")
    }

    @Test func fiftyClientsOnThreeServersCountToExactlyFiveThousand() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 3, url: schema.url)
        defer { servers.stop() }
        let clients = (0..<3).map { servers.client($0, connections: 4) }
        let counter = try await clients[0].create("counters", ["n": 0]).id
        let conflicts = SharedCounter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<50 {
                let client = clients[worker % 3]
                group.addTask {
                    for _ in 0..<100 {
                        while true {
                            let current = try await client.get("counters", id: counter)
                            let n = current.data["n"]?.intValue ?? 0
                            do {
                                _ = try await client.replace(
                                    "counters", id: counter, data: ["n": .int(n + 1)], rev: current.rev)
                                break
                            } catch let error as LarderError where error.status == .conflict {
                                conflicts.add(1)
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        // The last write may have gone through another server: the reader is told what the writers have seen.
        for client in clients { clients[2].advanceSeq(to: client.seenSeq) }
        let final = try await clients[2].get("counters", id: counter)
        #expect(final.data["n"] == .int(5000))
        #expect(final.rev == 5001)
        report("scale-out: 50 clients x 100 increments over 3 servers = \(final.data["n"] ?? .null), "
            + "\(conflicts.value) CONFLICTs retried")

        // The same client-made id created through every server at once: exactly one succeeds.
        for round in 0..<20 {
            let id = UUID()
            let outcomes = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<3 {
                    let client = clients[index]
                    group.addTask {
                        do {
                            _ = try await client.create("once", ["server": .int(Int64(index))], id: id)
                            return true
                        } catch let error as LarderError where error.status == .conflict {
                            return false
                        }
                    }
                }
                return try await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 }.count == 1, "round \(round): \(outcomes)")
        }
    }

    /// The trap of numbers handed out before commit: a write held open in its transaction (by a row lock a test
    /// session holds) while writes through the other servers commit; then a session that takes a number the way a
    /// batch does and rolls back while writes wait behind it. Every server's subscribers get every change, in one
    /// order, numbered without a hole or a repeat, and none waits for the held or rolled-back transaction.
    @Test func outOfOrderCommitsReachEveryWatcherOnceInOneOrder() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 3, url: schema.url)
        defer { servers.stop() }
        let clients = (0..<3).map { servers.client($0, connections: 2) }
        let held = try await clients[0].create("feed", ["n": 0]).id
        // From just after that create, change 1 of this new schema, on every server: a WATCH without `since` starts
        // after what its server has published, which on another server may not include change 1 yet.
        var watchers: [Watcher] = []
        for client in clients { watchers.append(try await Watcher(client, collection: "feed", since: 1)) }
        defer { for watcher in watchers { watcher.task.cancel() } }

        // 1. Server 0's batch waits inside its transaction for a row lock the gate holds.
        let gate = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 120_000)
        defer { gate.close() }
        _ = try gate.run([
            PGStatement("BEGIN"), PGStatement("SELECT 1 FROM documents WHERE id = $1 FOR UPDATE", [.uuid(held)]),
        ])
        let heldWrite = Task { try await clients[0].patch("feed", id: held, patch: ["n": 1]) }
        #expect(try await waitUntil(120) { try Self.lockWaiters(schema.url, "documents", atLeast: 1) })
        for k in 0..<6 { _ = try await clients[1 + k % 2].create("feed", ["k": .int(Int64(k))]) }
        // Nobody waits for the held transaction: the six are delivered on every server, server 0 included.
        #expect(await waitUntil(120) { watchers.allSatisfy { $0.count >= 6 } })
        #expect(watchers.allSatisfy { $0.count == 6 })
        _ = try gate.run([PGStatement("COMMIT")])
        let patched = try await heldWrite.value
        #expect(patched.rev == 2)
        #expect(await waitUntil(120) { watchers.allSatisfy { $0.count >= 7 } })
        Self.expectOneFeed(watchers, count: 7)
        #expect(watchers[0].events.withLock { $0.last?.id } == held)

        // 2. A transaction takes the next number as a batch does, holds it while writes queue behind it, and rolls
        // back: the writes then commit with the numbers that follow, and no subscriber waits for the lost one.
        let rogue = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 120_000)
        defer { rogue.close() }
        _ = try rogue.run([PGStatement("BEGIN"), PGStatement("UPDATE larder_seq SET last = last + 1 WHERE id = 1")])
        let queued = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for k in 0..<4 {
                    let client = clients[k % 3]
                    group.addTask { _ = try await client.create("feed", ["q": .int(Int64(k))]) }
                }
                try await group.waitForAll()
            }
        }
        #expect(try await waitUntil(120) { try Self.lockWaiters(schema.url, "larder_seq", atLeast: 1) })
        _ = try rogue.run([PGStatement("ROLLBACK")])
        try await queued.value
        #expect(await waitUntil(120) { watchers.allSatisfy { $0.count >= 11 } })
        Self.expectOneFeed(watchers, count: 11)

        // 3. Replay with `since` on another server: exactly what followed, once.
        let since = watchers[0].seqs[3]
        let replay = try await clients[2].watch(collection: "feed", since: since)
        var replayed: [Int64] = []
        for try await event in replay {
            replayed.append(event.seq)
            if replayed.count == 7 { break }
        }
        replay.cancel()
        #expect(replayed == Array(watchers[0].seqs[4...]))
    }

    // Promise: OPERATING.md Scaling out "a server also reads the log once a second without one"
    /// A change committed without its NOTIFY, as when a server is killed between its COMMIT and its NOTIFY: the
    /// test commits a change-log entry itself, with the statement a batch's COMMIT carries (`PGWriter.changeInsert`:
    /// the next numbers from `larder_seq` and the rows of `changes`), and sends no notification. No server wrote it,
    /// so none announces it; only the follower's read of the log after `fallbackPollMs` without a notification
    /// brings it to the subscribers of every server. (The document row such a write also commits is left out: WATCH
    /// reads only the change log.)
    @Test func aChangeCommittedWithoutItsNotifyReachesEveryWatcher() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 2, url: schema.url)
        defer { servers.stop() }
        let clients = (0..<2).map { servers.client($0) }
        defer { for client in clients { client.close() } }
        var watchers: [Watcher] = []
        for client in clients { watchers.append(try await Watcher(client, collection: "lost")) }
        defer { for watcher in watchers { watcher.task.cancel() } }

        // A write through server 0, announced as usual: once every watcher has it, each subscription is live and
        // each server has published the whole log, so what follows can reach them only through their followers.
        let announced = try await clients[0].create("lost", ["k": "announced"])
        #expect(await waitUntil(120) { watchers.allSatisfy { $0.count >= 1 } })
        #expect(watchers.allSatisfy { $0.events.withLock { $0.map(\.id) } == [announced.id] })

        // The unannounced commit.
        let id = UUID()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let entry = ChangeEntry(
            seq: 0, kind: .create, collection: "lost", time: now,
            record: StoredRecord(id: id, rev: 1, createdAt: now, updatedAt: now, data: Array(#"{"k":"lost"}"#.utf8)))
        let session = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 60_000)
        defer { session.close() }
        let results = try session.run([PGStatement("BEGIN"), PGWriter.changeInsert([entry]), PGStatement("COMMIT")])
        let seq = results[1].int(0, 0) + 1

        try #require(
            await waitUntil(120) { watchers.allSatisfy { $0.count >= 2 } },
            "change \(seq), committed without a NOTIFY, never arrived: the watchers hold \(watchers.map(\.seqs))")
        for (index, watcher) in watchers.enumerated() {
            let events = watcher.events.withLock { $0 }
            #expect(events.count == 2, "server \(index): \(events)")
            let last = try #require(events.last, "server \(index) delivered nothing")
            #expect(last.seq == seq, "server \(index)")
            #expect(last.kind == .create, "server \(index)")
            #expect(last.id == id, "server \(index)")
            #expect(last.rev == 1, "server \(index)")
            #expect(last.record?.data["k"] == "lost", "server \(index)")
        }
    }

    @Test func aSIGKILLedServerUnderLoadLosesNothingAcknowledged() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 3, url: schema.url)
        defer { servers.stop() }
        let client = servers.clientOfAll(connections: 3)
        let acked = Locked<[UUID]>([])
        let failures = Locked<[String]>([])
        let killedAt = Locked<Int?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<6 {
                group.addTask {
                    let deadline = monotonicSeconds() + 240
                    while monotonicSeconds() < deadline {
                        let done = acked.withLock { acked in
                            killedAt.withLock { $0.map { acked.count >= $0 + 300 } ?? false }
                        }
                        if done { return }
                        let id = UUID()
                        do {
                            _ = try await client.create("load", ["w": .int(Int64(worker))], id: id)
                            acked.withLock { $0.append(id) }
                        } catch let error as LarderError where error.status == .unavailable {
                            // A create in flight on the killed server goes again, with its request key, to the
                            // next server; one that still fails says whether it was sent.
                            failures.withLock { $0.append(error.message) }
                        }
                    }
                    Issue.record("the load did not reach its count within 240 s")
                }
            }
            #expect(await waitUntil(120) { acked.withLock { $0.count } >= 150 })
            killedAt.withLock { $0 = acked.withLock { $0.count } }
            servers.children[0].kill()
            try await group.waitForAll()
        }
        let ids = acked.withLock { $0 }
        let before = killedAt.withLock { $0 } ?? 0
        #expect(ids.count >= before + 300, "clients went on through the other servers")
        for message in failures.withLock({ $0 }) {
            #expect(message.contains("was sent") || message.contains("was not sent") || message.contains("no server"),
                "\(message)")
        }
        // Every acknowledged write is there, read through the survivors.
        let reader = servers.client(1)
        for chunk in stride(from: 0, to: ids.count, by: 500) {
            let part = Array(ids[chunk..<min(ids.count, chunk + 500)])
            let found = try await reader.getMany("load", ids: part)
            #expect(found.missing.isEmpty, "\(found.missing.count) acknowledged creates are missing")
        }
    }

    @Test func everyServerRecoversByItselfAfterPostgreSQLStopsImmediately() async throws {
        let cluster = try Cluster()
        defer { cluster.remove() }
        let servers = try Servers(count: 3, url: cluster.url)
        defer { servers.stop() }
        let client = servers.clientOfAll(connections: 3)
        let acked = Locked<[UUID]>([])
        let refused = SharedCounter()
        let restarted = Locked<Int?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<6 {
                group.addTask {
                    let deadline = monotonicSeconds() + 300
                    while monotonicSeconds() < deadline {
                        let done = acked.withLock { acked in
                            restarted.withLock { $0.map { acked.count >= $0 + 150 } ?? false }
                        }
                        if done { return }
                        let id = UUID()
                        do {
                            _ = try await client.create("load", ["w": .int(Int64(worker))], id: id)
                            acked.withLock { $0.append(id) }
                        } catch let error as LarderError
                            where error.status == .unavailable || error.status == .deadlineExceeded
                        {
                            refused.add(1)
                            try await Task.sleep(for: .milliseconds(20))
                        }
                    }
                    Issue.record("the load did not reach its count within 300 s")
                }
            }
            #expect(await waitUntil(120) { acked.withLock { $0.count } >= 150 })
            try cluster.stop(mode: "immediate")
            #expect(await waitUntil(120) { refused.value > 0 })
            try cluster.start()
            // Each server, by itself, writes again.
            for index in 0..<3 {
                let own = servers.client(index)
                #expect(
                    await waitUntil(120) {
                        (try? await own.create("probe", ["server": .int(Int64(index))])) != nil
                    }, "server \(index) did not recover")
            }
            restarted.withLock { $0 = acked.withLock { $0.count } }
            try await group.waitForAll()
        }
        let ids = acked.withLock { $0 }
        let reader = servers.client(2)
        for chunk in stride(from: 0, to: ids.count, by: 500) {
            let part = Array(ids[chunk..<min(ids.count, chunk + 500)])
            let found = try await reader.getMany("load", ids: part)
            #expect(found.missing.isEmpty, "\(found.missing.count) acknowledged creates are missing")
        }
    }

    /// A subscriber whose server dies resumes on another with `since` (what `larder watch --host a,b` does): every
    /// change once, in order.
    @Test func aWatchResumesOnAnotherServerFromItsLastSeq() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 2, url: schema.url)
        defer { servers.stop() }
        let watching = servers.clientOfAll(connections: 1)  // its first connection goes to server 0
        let writer = servers.client(1)
        let feed = try await watching.watch(collection: "w")
        var seen: [Int64] = []
        for k in 0..<5 { _ = try await writer.create("w", ["k": .int(Int64(k))]) }
        for try await event in feed {
            seen.append(event.seq)
            if seen.count == 5 { break }
        }
        servers.children[0].kill()
        for k in 5..<10 { _ = try await writer.create("w", ["k": .int(Int64(k))]) }
        let resumed = try await watching.watch(collection: "w", since: feed.lastSeq)
        for try await event in resumed {
            seen.append(event.seq)
            if seen.count == 10 { break }
        }
        resumed.cancel()
        #expect(seen == Array(seen[0]...(seen[0] + 9)), "\(seen)")
    }

    /// `larder watch --host a,b` whose server is SIGKILLed: one line on stderr, then it resumes on the other server
    /// after the last change it printed, every change once and in order.
    @Test func larderWatchResumesOnAnotherServerAfterItsLastChange() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 2, url: schema.url)
        defer { servers.stop() }
        let writer = servers.client(1)
        defer { writer.close() }
        let first = servers.client(0)
        defer { first.close() }
        let list = servers.ports.map { "127.0.0.1:\($0)" }.joined(separator: ",")
        let watcher = try CLIWatchReconnectTests.Watcher(["watch", "w", "--json", "--host", list])
        // The CLI's first connection goes to the first server of the list.
        try await CLIPromptTests.waitForSubscriptions(1, first)
        for k in 0..<3 { _ = try await writer.create("w", ["k": .int(Int64(k))]) }
        let before = try watcher.events(3).map { $0["seq"]?.intValue ?? -1 }
        servers.children[0].kill()
        let line = try #require(try watcher.lines(1, stderr: true).first)
        #expect(line.hasSuffix("to resume after change \(before.last ?? -1)"), "\(line)")
        // Written while the watch may or may not be back on the second server: either way each shows once.
        for k in 3..<6 { _ = try await writer.create("w", ["k": .int(Int64(k))]) }
        let after = try watcher.events(3)
        let seqs = before + after.map { $0["seq"]?.intValue ?? -1 }
        #expect(seqs == Array(seqs[0]...(seqs[0] + 5)), "\(seqs)")
        #expect(after.map { $0["record"]?["data"]?["k"] } == [3, 4, 5])
        let (status, rest) = try watcher.interrupt()
        #expect(status == 0)
        #expect(rest.isEmpty, "an event twice or more lines: \(rest)")
    }

    /// Wake-ups without a NOTIFY in any write transaction (PostgreSQL serializes the commits of transactions that
    /// notify on one global lock): with every statement logged on a cluster of the test's own, two servers take
    /// concurrent writes while a third's subscriber receives them all; in the log, no transaction that numbered
    /// changes (`UPDATE larder_seq`) notified, and the notifications went out in transactions of their own.
    @Test func noWriteTransactionCarriesANotify() async throws {
        let cluster = try Cluster()
        defer { cluster.remove() }
        try PGAdmin.execute(url: cluster.url, "ALTER SYSTEM SET log_statement = 'all'")
        try PGAdmin.execute(url: cluster.url, "ALTER SYSTEM SET log_line_prefix = '%p|'")
        try PGAdmin.execute(url: cluster.url, "SELECT pg_reload_conf()")
        #expect(
            try await waitUntil(120) {
                let probe = try PGConnection(settings: try PGSettings(url: cluster.url), timeoutMs: 120_000)
                defer { probe.close() }
                return try probe.run([PGStatement("SHOW log_statement")])[0].text(0, 0) == "all"
            })
        let servers = try Servers(count: 3, url: cluster.url)
        defer { servers.stop() }
        let subscriber = servers.client(2)
        defer { subscriber.close() }
        let watcher = try await Watcher(subscriber, collection: "n")
        defer { watcher.task.cancel() }
        let clients = [servers.client(0, connections: 4), servers.client(1, connections: 4)]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                let client = clients[worker % 2]
                group.addTask {
                    for k in 0..<25 {
                        _ = try await client.create("n", ["w": .int(Int64(worker)), "k": .int(Int64(k))])
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(await waitUntil(120) { watcher.count >= 200 })
        #expect(watcher.count == 200)

        // Each logged statement by backend: `PID|LOG:  execute <name>: SQL` or `PID|LOG:  statement: SQL`; a
        // statement's further lines carry no prefix.
        let log = try String(contentsOfFile: cluster.directory + "/log", encoding: .utf8)
        var entries: [(pid: Substring, text: String)] = []
        for line in log.split(separator: "\n") {
            if let bar = line.firstIndex(of: "|"), line[..<bar].allSatisfy(\.isNumber), !line[..<bar].isEmpty {
                entries.append((line[..<bar], String(line[line.index(after: bar)...])))
            } else if !entries.isEmpty {
                entries[entries.count - 1].text += "\n" + line
            }
        }
        var open: [Substring: [String]] = [:]
        var writes = 0
        var notifies = 0
        var offending: [String] = []
        for (pid, text) in entries where text.hasPrefix("LOG:  execute ") || text.hasPrefix("LOG:  statement: ") {
            let statement = text.split(separator: ":", maxSplits: 2).last.map(String.init) ?? ""
            let sql = statement.trimmingCharacters(in: .whitespacesAndNewlines)
            if sql.uppercased().hasPrefix("BEGIN") {
                open[pid] = []
            } else if sql.uppercased().hasPrefix("COMMIT") || sql.uppercased().hasPrefix("ROLLBACK") {
                let transaction = open.removeValue(forKey: pid) ?? []
                let numbers = transaction.contains { $0.contains("UPDATE larder_seq") }
                let notified = transaction.contains { $0.contains("pg_notify") || $0.uppercased().hasPrefix("NOTIFY") }
                if numbers { writes += 1 }
                if numbers && notified { offending.append(transaction.joined(separator: "; ")) }
            } else {
                open[pid, default: []].append(sql)
            }
            if sql.contains("pg_notify") { notifies += 1 }
        }
        #expect(writes > 0, "no write transaction found in the log")
        #expect(notifies > 0, "no wake-up found in the log")
        #expect(offending.isEmpty, "\(offending.count) write transactions notified: \(offending.prefix(2))")
        report("scale-out: \(writes) write transactions, \(notifies) NOTIFYs in transactions of their own")
    }

    /// `larder --host a,b` and `LARDER_HOST=a,b`: a server that refuses is passed over, and a list it cannot read is a
    /// usage error naming the item.
    @Test func theCLITakesAHostList() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 2, url: schema.url)
        defer { servers.stop() }
        let closed = try ServerChild(
            dataDirectory: servers.root.appendingPathComponent("closed").path, arguments: ["--postgres", schema.url])
        let dead = closed.port
        _ = closed.stop()
        let list = "127.0.0.1:\(dead),127.0.0.1:\(servers.ports[0]),127.0.0.1:\(servers.ports[1])"
        var r = try CLITests.run(["--host", list, "create", "items", #"{"n":1}"#])
        #expect(r.status == 0, "\(r.stderr)")
        let id = try #require(try r.json.first?["id"]?.stringValue)
        r = try CLITests.run(["--json", "get", "items", id], environment: ["LARDER_HOST": list])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try r.json.first?["data"]?["n"] == 1)
        r = try CLITests.run(["--host", "127.0.0.1:\(servers.ports[0]),,b", "ping"])
        #expect(r.status == 64)
        #expect(r.stderr.contains("empty item"), "\(r.stderr)")
    }
}
