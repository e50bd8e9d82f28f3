#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderStore
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// `--metrics-port`: `/metrics` in Prometheus's text format (checked by `promtool`, which scripts/bootstrap installs)
/// and `/healthz`.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct MetricsTests {
    struct HTTPAnswer {
        var status: Int
        var body: String
    }

    /// One HTTP/1.1 request over a fresh connection, read to its end. Throws after 120 s of silence with the
    /// connection still open, so a server that never answers fails the test instead of hanging it.
    static func http(port: Int, _ path: String, method: String = "GET") throws -> HTTPAnswer {
        let client = try RawClient.tcp(port: port)
        try client.writeAll(Array("\(method) \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8))
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        let silence = 120.0
        var deadline = monotonicSeconds() + silence
        while true {
            let remaining = deadline - monotonicSeconds()
            guard remaining > 0 else {
                throw ServerTestError(
                    "\(method) \(path): the answer stopped for \(Int(silence)) s with the connection open: "
                        + "'\(String(decoding: bytes.prefix(200), as: UTF8.self))'")
            }
            var pfd = pollfd(fd: client.fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(min(remaining, 3600) * 1000))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            let n = buffer.withUnsafeMutableBytes { read(client.fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes += buffer[0..<n]
            deadline = monotonicSeconds() + silence
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let statusLine = text.prefix { $0 != "\r" }.split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw ServerTestError("not an HTTP answer: \(text.prefix(200))")
        }
        let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
        return HTTPAnswer(status: status, body: body)
    }

    /// `promtool check metrics` on `text`: its exit status and what it said.
    static func promtool(_ text: String) throws -> (status: Int32, output: String) {
        let directory = NSTemporaryDirectory() + "larder-promtool-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let input = directory + "/metrics.txt", output = directory + "/out"
        _ = FileManager.default.createFile(atPath: input, contents: Data(text.utf8))
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["promtool", "check", "metrics"]
        process.standardInput = FileHandle(forReadingAtPath: input)
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle(forWritingAtPath: output)
        try process.run()
        process.waitUntilExit()
        return (process.terminationStatus, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    static func value(_ text: String, _ sample: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(sample + " ") {
            return Double(line.dropFirst(sample.count + 1))
        }
        return nil
    }

    @Test func metricsPassPromtoolAndCountEveryRequest() throws {
        try withServerOnPort0({ $0.metricsPort = 0 }) { server, port in
            let metricsPort = try #require(server.metricsPort)
            let c = try RawClient.tcp(port: port)
            #expect(try c.call(.ping).status == .ok)
            _ = try c.hello()
            let created = try c.call(.create, ["collection": "notes", "data": ["text": "hello"]])
            let id = created.replyJSON["id"] ?? .null
            for _ in 0..<20 { #expect(try c.call(.get, ["collection": "notes", "id": id]).status == .ok) }
            let missing = UUID().wireString
            #expect(try c.call(.get, ["collection": "notes", "id": .string(missing)]).status == .notFound)
            #expect(try c.call(.search, ["collection": "notes"]).status == .ok)
            // A write accepted in warn mode that does not match its collection's schema, counted by collection.
            let set = try c.call(
                .schemaSet, ["collection": "drafts", "schema": ["required": ["text"]], "validationAction": "warn"])
            #expect(set.status == .ok)
            #expect(try c.call(.create, ["collection": "drafts", "data": [:]]).status == .ok)

            let answer = try Self.http(port: metricsPort, "/metrics")
            #expect(answer.status == 200)
            let text = answer.body
            let checked = try Self.promtool(text)
            #expect(checked.status == 0, "promtool check metrics: \(checked.output)")
            #expect(Self.value(text, #"larder_requests_total{opcode="GET",status="OK"}"#) == 20)
            #expect(Self.value(text, #"larder_requests_total{opcode="GET",status="NOT_FOUND"}"#) == 1)
            #expect(Self.value(text, #"larder_request_errors_total{opcode="GET"}"#) == 1)
            // Every request is timed: cache hits, HELLO and PING included.
            #expect(Self.value(text, #"larder_request_duration_seconds_count{opcode="GET"}"#) == 21)
            #expect(Self.value(text, #"larder_request_duration_seconds_bucket{opcode="GET",le="+Inf"}"#) == 21)
            #expect(Self.value(text, #"larder_request_duration_seconds_count{opcode="HELLO"}"#) == 1)
            #expect(Self.value(text, #"larder_request_duration_seconds_count{opcode="PING"}"#) == 1)
            #expect((Self.value(text, "larder_read_cache_hits_total") ?? 0) >= 19)
            #expect(Self.value(text, "larder_connections_open") == 1)
            #expect(Self.value(text, "larder_store_documents") == 2)
            #expect(Self.value(text, #"larder_schema_warnings_total{collection="drafts"}"#) == 1)
            #expect(Self.value(text, "larder_store_up") == 1)
            #expect((Self.value(text, #"larder_received_bytes_total{form="wire"}"#) ?? 0) > 0)
            #expect(Self.value(text, "larder_watch_subscriptions") == 0)
            // The last change reaches the event loops' inboxes before its answer, and leaves them when each loop
            // next turns: on a busy machine that can be after this scrape, so the gauge is read until it is 0.
            var lag = Self.value(text, "larder_watch_lag_changes")
            let deadline = Date().addingTimeInterval(120)
            while lag != 0, Date() < deadline {
                lag = Self.value(try Self.http(port: metricsPort, "/metrics").body, "larder_watch_lag_changes")
            }
            #expect(lag == 0)
            // The work pool's stated size, as STATS shows it.
            #expect(Self.value(text, "larder_work_pool_threads") == 16)
            #expect(Self.value(text, "larder_work_pool_max_queued") == 10_000)
            #expect(Self.value(text, "larder_work_pool_refused_total") == 0)

            #expect(try Self.http(port: metricsPort, "/healthz").status == 200)
            #expect(try Self.http(port: metricsPort, "/nothing").status == 404)
            #expect(try Self.http(port: metricsPort, "/metrics", method: "DELETE").status == 405)
        }
    }

    /// 503 while the server shuts down (a SEARCH held in flight keeps it in its grace period), and 503 when the store
    /// does not answer.
    @Test func healthzIs503WhileShuttingDownAndWhenTheStoreIsGone() async throws {
        let gate = try ServerGate()
        let directory = temporaryTestDirectory("larder-healthz")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.metricsPort = 0
        let server = try LarderServer(configuration: configuration, hooks: ServerHooks(search: gate.gate))
        let port = try server.start()
        let metricsPort = try #require(server.metricsPort)
        #expect(try Self.http(port: metricsPort, "/healthz").status == 200)
        let c = try RawClient.tcp(port: port)
        _ = try c.hello()
        _ = try c.send(.search, ["collection": "notes"])
        try await offThePool { try gate.waitForHeld(1) }
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            server.shutdown()
            stopped.signal()
        }
        // The server stops accepting first; /healthz turns 503 while the SEARCH is held.
        var answer = try Self.http(port: metricsPort, "/healthz")
        let turned = try await waitUntil(120) {
            answer = try Self.http(port: metricsPort, "/healthz")
            return answer.status != 200
        }
        #expect(turned, "/healthz still answers 200 while the server shuts down")
        #expect(answer.status == 503)
        #expect(answer.body.contains("shutting down"))
        gate.open()
        try await offThePool { stopped.wait() }

        // A store that no longer answers (closed under the server) fails the check.
        let storeDirectory = temporaryTestDirectory("larder-healthz-store")
        defer { try? FileManager.default.removeItem(at: storeDirectory) }
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: storeDirectory.path))
        var second = ServerConfiguration.forTests(in: storeDirectory)
        second.metricsPort = 0
        let other = LarderServer(configuration: second, store: store)
        _ = try other.start()
        defer { other.shutdown() }
        let otherMetrics = try #require(other.metricsPort)
        #expect(try Self.http(port: otherMetrics, "/healthz").status == 200)
        store.close()
        let gone = try Self.http(port: otherMetrics, "/healthz")
        #expect(gone.status == 503)
        #expect(gone.body.contains("UNAVAILABLE"))
        let metrics = try Self.http(port: otherMetrics, "/metrics")
        #expect(metrics.status == 200)
        #expect(Self.value(metrics.body, "larder_store_up") == 0)
    }

    /// On PostgreSQL: 503 while the database is stopped (a cluster of the test's own), 200 again once it is back;
    /// and BACKUP says that pg_dump is the way.
    @Test func healthzIs503WhilePostgreSQLIsUnreachable() async throws {
        let cluster = try await offThePool { try Cluster() }
        defer { cluster.remove() }
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.logLevel = .error
        configuration.postgresURL = cluster.url
        configuration.metricsPort = 0
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        let metricsPort = try #require(server.metricsPort)
        #expect(try Self.http(port: metricsPort, "/healthz").status == 200)
        let up = try Self.http(port: metricsPort, "/metrics")
        #expect(Self.value(up.body, "larder_store_up") == 1)
        let checked = try Self.promtool(up.body)
        #expect(checked.status == 0, "promtool check metrics: \(checked.output)")

        let c = try RawClient.tcp(port: port)
        _ = try c.hello()
        let backup = try c.call(.backup)
        #expect(backup.status == .unknownOpcode)
        #expect(backup.replyText.contains("pg_dump"))

        try await offThePool { try cluster.stop(mode: "fast") }
        let down = try Self.http(port: metricsPort, "/healthz")
        #expect(down.status == 503)
        #expect(down.body.contains("UNAVAILABLE") && down.body.contains("PostgreSQL"), "\(down.body)")
        #expect(Self.value(try Self.http(port: metricsPort, "/metrics").body, "larder_store_up") == 0)

        try await offThePool { try cluster.start() }
        var again = try Self.http(port: metricsPort, "/healthz")
        let back = try await waitUntil(120) {
            again = try Self.http(port: metricsPort, "/healthz")
            return again.status == 200
        }
        #expect(back, "/healthz never answered 200 again once PostgreSQL was back")
        #expect(again.status == 200, "\(again.body)")
    }

    /// Whether the peer has closed `fd` (a read would answer end of file), without waiting.
    static func closedByPeer(_ fd: Int32) -> Bool {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, 0) > 0 else { return false }
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK))
        return n == 0 || (n < 0 && errno == ECONNRESET)
    }

    // Promise: OPERATING.md "Metrics and health: at most 16 clients, each closed after 10 s of silence"
    /// Sixteen silent clients fill the metrics port: a seventeenth's request is not answered while they are all
    /// open (it is refused, or waits for a place); the server closes the silent ones after their 10 s of silence, and
    /// the port serves again.
    @Test func theMetricsPortServesSixteenClientsAndClosesSilentOnes() async throws {
        let directory = temporaryTestDirectory("larder-metrics-limits")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.metricsPort = 0
        let server = try LarderServer(configuration: configuration)
        _ = try server.start()
        defer { server.shutdown() }
        let metricsPort = try #require(server.metricsPort)
        #expect(try Self.http(port: metricsPort, "/healthz").status == 200)
        var silent: [RawClient] = []
        for _ in 0..<16 { silent.append(try RawClient.tcp(port: metricsPort)) }
        let extra = try RawClient.tcp(port: metricsPort)
        try extra.writeAll(Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8))
        // Wait for the seventeenth's first byte or its close.
        let answered = await waitUntil(120) {
            var pfd = pollfd(fd: extra.fd, events: Int16(POLLIN), revents: 0)
            return poll(&pfd, 1, 0) > 0
        }
        #expect(answered, "the seventeenth client got neither an answer nor a close")
        let closedBefore = silent.filter { Self.closedByPeer($0.fd) }.count
        // Refused (closed without a word) or answered once a place was free: never answered beside sixteen.
        if !Self.closedByPeer(extra.fd) {
            #expect(closedBefore > 0, "a seventeenth client was answered while sixteen others were open")
        }
        let allClosed = await waitUntil(120) { silent.allSatisfy { Self.closedByPeer($0.fd) } }
        #expect(allClosed, "silent clients of the metrics port were never closed")
        #expect(try Self.http(port: metricsPort, "/healthz").status == 200)
    }
}
