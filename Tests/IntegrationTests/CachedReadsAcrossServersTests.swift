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

/// Servers on one PostgreSQL with their read caches on (the default): a client that sends the highest sequence number
/// it has seen (`afterSeq`; LarderClient does) reads its writes and never goes back in time, whichever server answers;
/// a server whose change follower is held behind makes such a read wait, then read the database, never answer stale.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct CachedReadsAcrossServersTests {
    /// `count` servers on `url`; `gated` (when given) is the server whose change follower waits at `gate`.
    struct Servers {
        let children: [ServerChild]
        let root: URL

        init(count: Int, url: String, arguments: [String] = [], gated: Int? = nil, gate: ServerGate? = nil) throws {
            root = ServerProcessTests.temporaryDirectory()
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            var children: [ServerChild] = []
            for index in 0..<count {
                let gates = index == gated ? gate.map { [TestGateVariable.follower: $0.path] } ?? [:] : [:]
                children.append(
                    try ServerChild(
                        dataDirectory: root.appendingPathComponent("s\(index)").path,
                        arguments: ["--postgres", url] + arguments, gates: gates))
            }
            self.children = children
        }

        var ports: [Int] { children.map(\.port) }

        func client(_ index: Int) -> LarderClient {
            LarderClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: ports[index]), requestTimeout: .seconds(120)))
        }

        func raw(_ index: Int) throws -> RawClient {
            let raw = try RawClient.tcp(port: ports[index])
            _ = try raw.hello()
            return raw
        }

        /// What server `index` announces in HELLO.
        func hello(_ index: Int) throws -> HelloResponse { try RawClient.tcp(port: ports[index]).hello() }

        func stop() {
            for child in children where child.process.isRunning { _ = child.stop() }
            try? FileManager.default.removeItem(at: root)
        }
    }

    /// The answer's revision and `n`, and its `seq` when it carries one.
    static func parse(_ frame: Frame) throws -> (rev: Int64, n: Int64?, seq: Int64?) {
        guard frame.status == .ok else { throw ServerTestError("answer \(frame.status.name): \(frame.replyJSON)") }
        let object = try frame.jsonObject()
        let data = object["data"]?.objectValue
        return (object["rev"]?.intValue ?? -1, data?["n"]?.intValue, object["seq"]?.intValue)
    }

    /// Creates a document of `collection` through `raw`: its id, and the answer.
    static func create(_ raw: RawClient, _ collection: String, _ data: JSONObject) throws -> (id: JSON, rev: Int64, seq: Int64?) {
        let frame = try raw.call(.create, ["collection": .string(collection), "data": .object(data)])
        let parsed = try parse(frame)
        return (try frame.jsonObject()["id"] ?? .null, parsed.rev, parsed.seq)
    }

    /// Two servers on a fresh schema, the second's change follower waiting at a gate the test holds; `body` gets
    /// them, the gate and a raw connection to each. Everything is stopped and removed when it returns.
    static func withHeldFollower(
        waitMs: Int, _ body: (Servers, ServerGate, RawClient, RawClient) async throws -> Void
    ) async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let gate = try ServerGate()
        let servers = try Servers(
            count: 2, url: schema.url, arguments: ["--after-seq-wait-ms", String(waitMs)], gated: 1, gate: gate)
        defer {
            gate.open()
            servers.stop()
        }
        try await body(servers, gate, try servers.raw(0), try servers.raw(1))
    }

    static func stat(_ raw: RawClient, _ path: String...) -> Int64 {
        var value = raw.statsValue()
        for name in path { value = value.objectValue?[name] ?? .null }
        return value.intValue ?? -1
    }

    /// Write on one server, read on the next, through LarderClient: each client hands what it has seen to the next
    /// (`advanceSeq`, as an app does between the clients that serve one user), and every read reflects the write
    /// before it and never a revision older than one already read. Plain reads in between keep older answers in
    /// the caches.
    @Test func writeThenReadOnAnotherServerThroughLarderClient() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 3, url: schema.url)
        defer { servers.stop() }
        let clients = (0..<3).map { servers.client($0) }
        let plain = try (0..<3).map { try servers.raw($0) }
        let id = try await clients[0].create("ryw", ["n": 0]).id
        var stale = 0
        var backwards = 0
        var lastRev = [Int64](repeating: 0, count: 3)
        for i in 1...2_000 {
            let (writer, reader) = (clients[i % 3], clients[(i + 1) % 3])
            writer.advanceSeq(to: reader.seenSeq)
            let written = try await writer.patch("ryw", id: id, patch: ["n": .int(Int64(i))])
            reader.advanceSeq(to: writer.seenSeq)
            let read = try await reader.get("ryw", id: id)
            if read.rev != written.rev || read.data["n"] != .int(Int64(i)) { stale += 1 }
            let again = try await reader.get("ryw", id: id)
            if again.rev < read.rev || again.rev < lastRev[(i + 1) % 3] { backwards += 1 }
            lastRev[(i + 1) % 3] = again.rev
            // A read without afterSeq on the third server: it may answer from its cache (and keep what it read).
            _ = try plain[(i + 2) % 3].call(.get, ["collection": "ryw", "id": .string(id.wireString)])
        }
        #expect(stale == 0, "\(stale) reads missed a write the reading client had seen")
        #expect(backwards == 0, "\(backwards) reads went back to an older revision")
        // Once the followers have applied the last write, repeated reads come from the caches.
        for index in 0..<3 {
            let hits = Self.stat(plain[index], "readCache", "hits")
            #expect(
                try await waitUntil(120) {
                    _ = try await clients[index].get("ryw", id: id)
                    return Self.stat(plain[index], "readCache", "hits") > hits
                }, "server \(index) never answered from its read cache")
        }
    }

    /// One LarderClient that knows every server, with a connection to each, used by several tasks at once: every
    /// task reads what it wrote, whichever connection (server) its requests take.
    @Test func oneClientOfThreeServersReadsItsWritesFromEveryTask() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 3, url: schema.url)
        defer { servers.stop() }
        var configuration = LarderClient.Configuration(connections: 3, requestTimeout: .seconds(120))
        configuration.endpoints = servers.ports.map { .tcp(host: "127.0.0.1", port: $0) }
        let client = LarderClient(configuration: configuration)
        let stale = SharedCounter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<6 {
                group.addTask {
                    let id = try await client.create("tasks", ["n": 0, "task": .int(Int64(task))]).id
                    for i in 1...150 {
                        let written = try await client.patch("tasks", id: id, patch: ["n": .int(Int64(i))])
                        let read = try await client.get("tasks", id: id)
                        if read.rev < written.rev { stale.add(1) }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(stale.value == 0, "\(stale.value) reads missed the task's own write")
    }

    /// The raw protocol: a write's answer carries `seq`; a GET with `afterSeq` on another server answers the write
    /// (with a `seq` at least as new); a GET without it carries no `seq`.
    @Test func rawProtocolWriteSeqAndAfterSeq() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try Servers(count: 3, url: schema.url)
        defer { servers.stop() }
        let raws = try (0..<3).map { try servers.raw($0) }
        let created = try Self.create(raws[0], "raw", ["n": 0])
        let id = created.id
        #expect(created.seq != nil, "a CREATE's answer carries seq")
        var previous = created.seq ?? 0
        var stale = 0
        for i in 1...600 {
            let written = try Self.parse(
                try raws[i % 3].call(.patch, ["collection": "raw", "id": id, "patch": ["n": .int(Int64(i))]]))
            let seq = try #require(written.seq, "a PATCH's answer carries seq")
            #expect(seq > previous, "sequence numbers grow")
            previous = seq
            let read = try Self.parse(
                try raws[(i + 1) % 3].call(.get, ["collection": "raw", "id": id, "afterSeq": .int(seq)]))
            if read.rev != written.rev || read.n != Int64(i) { stale += 1 }
            #expect((read.seq ?? 0) >= seq, "a GET with afterSeq answers a seq at least as new")
            if i % 100 == 0 {
                let plain = try raws[(i + 2) % 3].call(.get, ["collection": "raw", "id": id])
                #expect(try Self.parse(plain).seq == nil, "a GET without afterSeq answers no seq")
            }
        }
        #expect(stale == 0, "\(stale) GETs with afterSeq missed the write they named")
        // A number no server has reached (made up, or of another database): the wait, then the database.
        let beyond = try Self.parse(
            try raws[2].call(.get, ["collection": "raw", "id": id, "afterSeq": .int(previous + 1_000_000)]))
        #expect(beyond.n == 600 && (beyond.seq ?? 0) >= previous, "the database answers, with the newest number it holds")
        let deleted = try raws[1].call(.delete, ["collection": "raw", "id": id])
        #expect(try deleted.jsonObject()["seq"]?.intValue ?? 0 > previous, "a DELETE's answer carries seq")
    }

    /// A server with a database of its own (SQLite) has applied every change it answered: a GET with `afterSeq`
    /// answers at once, with its `seq`, whatever the number.
    @Test func aServerOfItsOwnAnswersAfterSeqAtOnce() throws {
        let directory = ServerProcessTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try ServerChild(dataDirectory: directory.path, arguments: ["--after-seq-wait-ms", "60000"])
        defer { _ = server.stop() }
        let raw = try RawClient.tcp(port: server.port)
        _ = try raw.hello()
        let created = try Self.create(raw, "own", ["n": 1])
        let seq = try #require(created.seq, "a CREATE's answer carries seq on SQLite too")
        for afterSeq in [seq, seq + 1_000_000] {
            let started = ContinuousClock.now
            let read = try Self.parse(try raw.call(.get, ["collection": "own", "id": created.id, "afterSeq": .int(afterSeq)]))
            #expect(read.n == 1 && (read.seq ?? 0) >= seq)
            #expect(ContinuousClock.now - started < .seconds(30), "it did not wait for the number")
        }
    }

    /// A server whose change follower is stopped (held at its gate): its cache keeps an old answer, which a GET
    /// without afterSeq may get; a GET whose afterSeq names the newer write waits `--after-seq-wait-ms`, then reads
    /// the database and answers the write. Once the follower goes on, every read answers it.
    @Test func heldFollowerMakesTheReadWaitThenReadTheDatabase() async throws {
        try await Self.withHeldFollower(waitMs: 400) { servers, gate, a, b in
            #expect(try servers.hello(1).limits.afterSeqWaitMs == 400)
            let created = try Self.create(a, "held", ["n": 1])
            let id = created.id
            // B's follower reaches its gate (at the create's notification, or its fallback poll) and stays there.
            try gate.waitForHeld(1)
            let get: JSONObject = ["collection": "held", "id": id]
            _ = try Self.parse(try b.call(.get, get))
            #expect(try Self.parse(try b.call(.get, get)).n == 1)
            let written = try Self.parse(try a.call(.patch, ["collection": "held", "id": id, "patch": ["n": 2]]))
            let seq = try #require(written.seq)
            #expect(seq > (created.seq ?? 0))
            // Without afterSeq B answers what it has applied: its cache still holds n 1.
            #expect(try Self.parse(try b.call(.get, get)).n == 1, "B's follower is held, so its cache is behind")
            let fellThrough = Self.stat(b, "readCache", "afterSeqFellThrough")
            let started = ContinuousClock.now
            var sequenced = get
            sequenced["afterSeq"] = .int(seq)
            let read = try Self.parse(try b.call(.get, sequenced))
            let waited = ContinuousClock.now - started
            #expect(read.n == 2 && read.rev == written.rev, "a GET with afterSeq never answers stale")
            #expect(waited >= .milliseconds(400), "it waited the whole bound for the follower: \(waited)")
            #expect(Self.stat(b, "readCache", "afterSeqFellThrough") > fellThrough)
            // The follower learns of the write from its notification, which may come after the read above: STATS is
            // asked again (each answer a round trip) until it shows, or the deadline.
            let lagDeadline = ContinuousClock.now + .seconds(60)
            var lag = Self.stat(b, "follower", "lagChanges")
            while lag < 1 && ContinuousClock.now < lagDeadline { lag = Self.stat(b, "follower", "lagChanges") }
            #expect(lag >= 1, "STATS shows the follower behind")
            // LarderClient, having seen the write, reads it on B too.
            let client = servers.client(1)
            client.advanceSeq(to: seq)
            #expect(try await client.get("held", id: UUID(uuidString: id.stringValue!)!).data["n"] == 2)
            gate.open()
            #expect(
                try await waitUntil(120) { try Self.parse(try b.call(.get, get)).n == 2 },
                "once the follower goes on, B's plain reads answer the write")
            #expect(
                await waitUntil(120) { Self.stat(b, "follower", "lagChanges") == 0 },
                "the follower catches up: \(b.statsValue().objectValue?["follower"] ?? .null)")
        }
    }

    /// With `--after-seq-wait-ms 0` a GET whose afterSeq the server has not applied reads the database at once.
    @Test func noWaitReadsTheDatabaseAtOnce() async throws {
        try await Self.withHeldFollower(waitMs: 0) { servers, gate, a, b in
            #expect(try servers.hello(1).limits.afterSeqWaitMs == 0)
            let id = try Self.create(a, "now", ["n": 1]).id
            try gate.waitForHeld(1)
            _ = try b.call(.get, ["collection": "now", "id": id])
            let written = try Self.parse(try a.call(.patch, ["collection": "now", "id": id, "patch": ["n": 2]]))
            let read = try Self.parse(
                try b.call(.get, ["collection": "now", "id": id, "afterSeq": .int(try #require(written.seq))]))
            #expect(read.n == 2)
            #expect(Self.stat(b, "readCache", "afterSeqWaits") == 0, "nothing waited")
            #expect(Self.stat(b, "readCache", "afterSeqFellThrough") >= 1)
        }
    }

    /// A record cached on B and changed through A, with B's follower delayed at its gate for every change: a client
    /// that has seen the change never gets the cached answer; one that has not may (the cache is in play).
    @Test func recordChangedElsewhereIsNeverStaleForAClientThatSawIt() async throws {
        try await Self.withHeldFollower(waitMs: 50) { servers, gate, a, b in
            let created = try Self.create(a, "doc", ["n": 0])
            let id = created.id
            let get: JSONObject = ["collection": "doc", "id": id]
            var applied = created.seq ?? 0
            var stale = 0
            var cachedOld = 0
            for i in 1...40 {
                // Let B's follower apply everything so far, then cache the current answer on B.
                try gate.waitForHeld(gate.arrived + 1)
                gate.release()
                #expect(await waitUntil(120) { Self.stat(b, "follower", "appliedSeq") >= applied })
                _ = try b.call(.get, get)
                let written = try Self.parse(try a.call(.patch, ["collection": "doc", "id": id, "patch": ["n": .int(Int64(i))]]))
                applied = try #require(written.seq)
                if try Self.parse(try b.call(.get, get)).n != Int64(i) { cachedOld += 1 }
                var sequenced = get
                sequenced["afterSeq"] = .int(applied)
                if try Self.parse(try b.call(.get, sequenced)).n != Int64(i) { stale += 1 }
            }
            #expect(stale == 0, "\(stale) reads with afterSeq answered a record older than the change they named")
            #expect(cachedOld > 0, "reads without afterSeq never met the cache's older answer: the test did not test")
        }
    }
}
