import Foundation
import LarderClient
import LarderServer
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Synchronization
import Testing

@testable import LarderStore

/// `larder-server --postgres`: the start-up line, start-up failures, and the database going away under the server.
/// The fault tests stop and start a cluster of their own.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct PostgresServerTests {
    /// The shared cluster's TCP URL with the password (the socket needs none).
    static func tcpURL(password: String, schema: String) throws -> String {
        let socketURL = try TestPostgres.url()
        guard let portText = socketURL.split(separator: "port=").last?.prefix(while: \.isNumber) else {
            throw ServerTestError("no port in \(socketURL)")
        }
        return "postgresql://larder:\(password)@127.0.0.1:\(portText)/larder?options=-csearch_path%3D\(schema)"
    }

    static func stderr(_ run: ServerProcessTests.Run) -> String {
        run.process.waitUntilExit()
        return String(decoding: run.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    @Test func theStartUpLineNamesTheStoreWithoutThePassword() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let url = try Self.tcpURL(password: "larder", schema: schema.name)
        let run = try ServerProcessTests.launch(["--port", "0", "--postgres", url, "--log-level", "error"])
        defer {
            run.process.terminate()
            run.process.waitUntilExit()
        }
        let line = try ServerProcessTests.firstLine(run.stdout, of: run.process)
        #expect(line.contains(" listening on tcp://127.0.0.1:"))
        #expect(line.contains("postgres postgresql://larder:***@127.0.0.1:"), "\(line)")
        #expect(!line.contains("larder:larder@"), "\(line)")
        #expect(line.hasSuffix(" (synchronous_commit on)\n"), "\(line)")
    }

    // Promise: OPERATING.md Scaling out "no data directory (`--data-dir` and its `larder.lock` are not used)".
    /// On PostgreSQL a server keeps nothing on its own disk: two servers given the same `--data-dir` both start
    /// (no `larder.lock` between them), serve writes, and never create it.
    @Test func serversOnPostgreSQLUseNoDataDirectory() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let directory = ServerProcessTests.temporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let servers = try (0..<2).map { _ in
            try ServerChild(dataDirectory: directory, arguments: ["--postgres", schema.url])
        }
        defer {
            for server in servers {
                _ = server.stop()
                try? FileManager.default.removeItem(atPath: server.logPath)
            }
        }
        for server in servers {
            let client = LarderClient(port: server.port)
            defer { client.close() }
            _ = try await client.create("notes", ["text": "kept in PostgreSQL"])
        }
        #expect(!FileManager.default.fileExists(atPath: directory), "a server on PostgreSQL made \(directory)")
    }

    /// `--synchronous full` makes the writer's commits wait for their WAL flush even where the database (or the
    /// role, or the URL) turned `synchronous_commit` off; `normal` keeps what the database says. The start-up line
    /// shows the writer's setting.
    @Test func synchronousFullOverridesADatabaseThatTurnedSynchronousCommitOff() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let url = schema.url + "%20-csynchronous_commit%3Doff"
        for (mode, expected) in [("normal", "off"), ("full", "on")] {
            let run = try ServerProcessTests.launch([
                "--port", "0", "--postgres", url, "--synchronous", mode, "--log-level", "error",
            ])
            let line = try ServerProcessTests.firstLine(run.stdout, of: run.process)
            run.process.terminate()
            run.process.waitUntilExit()
            #expect(line.hasSuffix(" (synchronous_commit \(expected))\n"), "--synchronous \(mode): \(line)")
        }
    }

    /// `--postgres-timeout-ms` bounds how long a request waits on the database: a GET stuck behind a table lock that
    /// a test session holds (until the answer comes) is answered UNAVAILABLE naming the database and the option, and
    /// the server serves the same GET once the lock is gone.
    @Test func aCallPastThePostgresTimeoutIsUnavailableAndNamesTheOption() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let directory = ServerProcessTests.temporaryDirectory().path
        // A first server makes the tables with the default timeout, so the short one below bounds only requests and
        // not a start-up on a busy database.
        let first = try ServerChild(dataDirectory: directory, arguments: ["--postgres", schema.url])
        #expect(first.stop() == 0)
        try? FileManager.default.removeItem(atPath: first.logPath)
        let timeoutMs = 5000 * SanitizerBuild.current.timeFactor
        // The option bounds the start-up's calls too: on a database the whole suite keeps busy, one of them can take
        // longer, and the server then exits saying so. It is started again until it is up (a few tries at most).
        var started: ServerChild?
        for attempt in 1...5 where started == nil {
            do {
                started = try ServerChild(
                    dataDirectory: directory,
                    arguments: ["--postgres", schema.url, "--postgres-timeout-ms", "\(timeoutMs)"])
            } catch where attempt < 5 && "\(error)".contains("no answer within \(timeoutMs) ms") {}
        }
        let server = try #require(started)
        defer {
            _ = server.stop()
            try? FileManager.default.removeItem(atPath: server.logPath)
        }
        let client = LarderClient(port: server.port, requestTimeout: .milliseconds(3 * timeoutMs))
        defer { client.close() }
        let kept = try await client.create("items", ["n": 1])
        let gate = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 120_000)
        defer { gate.close() }
        _ = try gate.run([PGStatement("BEGIN"), PGStatement("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")])
        do {
            _ = try await client.get("items", id: kept.id)
            Issue.record("a GET behind the lock was answered")
        } catch {
            #expect(error.status == .unavailable, "\(error)")
            #expect(error.message.contains("PostgreSQL at"), "\(error.message)")
            #expect(
                error.message.contains("no answer within \(timeoutMs) ms (--postgres-timeout-ms)"), "\(error.message)")
        }
        _ = try gate.run([PGStatement("COMMIT")])
        #expect(try await client.get("items", id: kept.id).data["n"] == 1)
    }

    @Test func aWrongPasswordExitsOneWithOneClearLine() throws {
        let url = try Self.tcpURL(password: "not-the-password", schema: "public")
        let run = try ServerProcessTests.launch(["--port", "0", "--postgres", url])
        let errors = Self.stderr(run)
        #expect(run.process.terminationStatus == 1)
        #expect(errors.split(separator: "\n").count == 1, "\(errors)")
        #expect(errors.contains("password authentication failed"), "\(errors)")
        #expect(errors.contains("127.0.0.1"))
        #expect(!errors.contains("not-the-password"))
    }

    @Test func anUnreachableDatabaseExitsOneWithOneClearLine() throws {
        // A port on this machine that nothing listens on: the connection is refused at once.
        let run = try ServerProcessTests.launch([
            "--port", "0", "--postgres", "postgresql://larder:secret@127.0.0.1:1/larder?connect_timeout=5",
        ])
        let errors = Self.stderr(run)
        #expect(run.process.terminationStatus == 1)
        #expect(errors.split(separator: "\n").count == 1, "\(errors)")
        #expect(errors.contains("cannot connect to PostgreSQL at 127.0.0.1:1 database 'larder'"), "\(errors)")
        #expect(!errors.contains("secret"))
    }

    @Test func aNewerSchemaExitsOne() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        try PostgresStore(url: schema.url).close()
        try PGAdmin.execute(url: schema.url, "INSERT INTO larder_migrations(version, name) VALUES (42, 'later')")
        let run = try ServerProcessTests.launch(["--port", "0", "--postgres", schema.url])
        let errors = Self.stderr(run)
        #expect(run.process.terminationStatus == 1)
        #expect(errors.contains("schema version 42, newer than"), "\(errors)")
    }

    @Test func aMalformedURLIsAUsageError() throws {
        let run = try ServerProcessTests.launch(["--postgres", "host='unterminated"])
        let errors = Self.stderr(run)
        #expect(run.process.terminationStatus == 64)
        #expect(errors.contains("--postgres"), "\(errors)")
    }

    @Test func aGETWaitingOnPostgreSQLNeverHoldsUpItsEventLoop() throws {
        // One event loop. A transaction holding an exclusive lock on `documents` makes the GET wait inside
        // PostgreSQL for as long as the test wants; meanwhile a PING on another connection of the same loop must be
        // answered. Then the lock goes and the GET is answered.
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.logLevel = .error
        configuration.ioQueues = 1
        configuration.postgresURL = schema.url
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        let reader = try RawClient.tcp(port: port)
        try reader.hello()
        let other = try RawClient.tcp(port: port)
        try other.hello()
        let created = try other.call(.create, ["collection": "c", "data": ["n": 1]])
        let id = try #require(created.replyJSON["id"]?.stringValue)

        let gate = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 120_000)
        defer { gate.close() }
        _ = try gate.run([PGStatement("BEGIN"), PGStatement("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")])
        let getID = try reader.send(.get, ["collection": "c", "id": .string(id)])
        // The GET is waiting for the lock (PostgreSQL says so) before the loop is probed.
        let deadline = Date().addingTimeInterval(120)
        var waiting = false
        while !waiting && Date() < deadline {
            let probe = try PGConnection(settings: try PGSettings(url: schema.url), timeoutMs: 120_000)
            waiting = try probe.run([
                PGStatement(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM documents%'")
            ])[0].int(0, 0) > 0
            probe.close()
            if !waiting { usleep(20_000) }
        }
        #expect(waiting)
        #expect(try other.call(.ping).status == .ok)
        _ = try gate.run([PGStatement("COMMIT")])
        let answer = try #require(try reader.receive(timeout: 120))
        #expect(answer.requestID == getID && answer.status == .ok)
        #expect(answer.replyJSON["id"]?.stringValue == id)
    }

    /// A server on a cluster of the test's own.
    static func withServer(_ body: (Cluster, Int) async throws -> Void) async throws {
        let cluster = try Cluster()
        defer { cluster.remove() }
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.logLevel = .error
        configuration.postgresURL = cluster.url
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        try await body(cluster, port)
    }

    /// Waits (generously) until a write through `client` succeeds again.
    static func waitForRecovery(_ client: LarderClient) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            if (try? await client.create("probe", ["ok": true])) != nil { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw ServerTestError("the server did not serve again within 120 s of PostgreSQL's restart")
    }

    @Test func aStoppedDatabaseAnswersUnavailableAndTheServerRecoversByItself() async throws {
        try await Self.withServer { cluster, port in
            // The client waits as long as the suite's deadlines: an answer that does not come within them is the
            // client's own DEADLINE_EXCEEDED, which `expectUnavailable` tells from the server's UNAVAILABLE.
            let client = LarderClient(
                configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: port), requestTimeout: .seconds(120)))
            defer { client.close() }
            let kept = try await client.create("items", ["item": "茶葉蛋", "price": 13])
            try cluster.stop(mode: "fast")
            func expectUnavailable(_ what: String, _ body: () async throws(LarderError) -> Void) async {
                do {
                    try await body()
                    Issue.record("\(what) succeeded with PostgreSQL stopped")
                } catch {
                    #expect(error.status == .unavailable, "\(what): \(error)")
                    #expect(error.message.contains("PostgreSQL at"), "\(what): \(error.message)")
                }
            }
            await expectUnavailable("CREATE") { () async throws(LarderError) in
                _ = try await client.create("items", ["item": "泡麵"])
            }
            await expectUnavailable("GET") { () async throws(LarderError) in _ = try await client.get("items", id: kept.id) }
            await expectUnavailable("SEARCH") { () async throws(LarderError) in
                _ = try await client.search("items", SearchQuery(limit: 5))
            }
            await expectUnavailable("COUNT") { () async throws(LarderError) in _ = try await client.count("items") }
            await expectUnavailable("PATCH") { () async throws(LarderError) in
                _ = try await client.patch("items", id: kept.id, patch: ["price": 14])
            }
            await expectUnavailable("STATS") { () async throws(LarderError) in _ = try await client.stats() }
            // Each request was answered by the server, UNAVAILABLE, while the database was still down (none waited
            // for it to come back), and the server itself is up.
            _ = try await client.ping()
            try cluster.start()
            try await Self.waitForRecovery(client)
            #expect(try await client.get("items", id: kept.id).data["price"] == 13)
            #expect(try await client.count("items") == 1)
        }
    }

    @Test func everyAcknowledgedWriteSurvivesAnImmediateStop() async throws {
        try await Self.withServer { cluster, port in
            let client = LarderClient(port: port, connections: 4)
            defer { client.close() }
            let tally = WriteTally()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<8 {
                    group.addTask {
                        for n in 0..<2_000 {
                            if tally.stopped.load(ordering: .acquiring) { return }
                            let id = UUID()
                            do {
                                let data: JSONObject = ["writer": .int(Int64(writer)), "n": .int(Int64(n))]
                                _ = try await client.create("w", data, id: id)
                                tally.acknowledged.withLock { $0.append(id) }
                            } catch {
                                // Refused or cut off while the database goes down: not acknowledged, so not owed.
                                if tally.stopped.load(ordering: .acquiring) { return }
                            }
                        }
                    }
                }
                // Until the writers have a few hundred writes acknowledged, then a crash of the database.
                let deadline = ContinuousClock.now + .seconds(120)
                while tally.acknowledged.withLock({ $0.count }) < 300 && ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                try cluster.stop(mode: "immediate")
                tally.stopped.store(true, ordering: .releasing)
                try await group.waitForAll()
            }
            try cluster.start()
            try await Self.waitForRecovery(client)
            let ids = tally.acknowledged.withLock { $0 }
            #expect(ids.count >= 300)
            var missing: [UUID] = []
            for chunk in stride(from: 0, to: ids.count, by: 500) {
                let slice = Array(ids[chunk..<min(ids.count, chunk + 500)])
                missing += try await client.getMany("w", ids: slice).missing
            }
            #expect(missing.isEmpty, "\(missing.count) acknowledged writes lost")
        }
    }
}

/// What the writers of the crash test share: the ids acknowledged, and whether the database was stopped.
final class WriteTally: Sendable {
    let acknowledged = Locked<[UUID]>([])
    let stopped = Atomic<Bool>(false)
}
