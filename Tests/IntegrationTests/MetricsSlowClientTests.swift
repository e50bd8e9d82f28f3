#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// Slow clients of `--metrics-port`: one trickling a request in a byte at a time is cut at
/// `--metrics-request-timeout-ms`, and slow clients filling every slot do not keep `/healthz` from answering.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct MetricsSlowClientTests {
    /// A client that writes a request a byte at a time and never finishes it.
    final class Trickler {
        let client: RawClient
        private let request = Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Padding: ".utf8)
        private var sent = 0

        init(port: Int) throws { client = try RawClient.tcp(port: port) }

        /// Sends the next byte; false once the server has closed the connection.
        func drip() -> Bool {
            guard sendByte() else { return false }
            return !isClosed
        }

        /// Sends the next byte; false when it cannot be sent.
        @discardableResult func sendByte() -> Bool {
            var byte = sent < request.count ? request[sent] : UInt8(ascii: "a")
            sent += 1
            return send(client.fd, &byte, 1, Int32(MSG_NOSIGNAL)) == 1
        }

        /// Whether the server has ended the connection (end of stream, or a reset).
        var isClosed: Bool {
            var pollfd = Glibc.pollfd(fd: client.fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pollfd, 1, 0) == 1 else { return false }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(client.fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)
        }
    }

    /// Drips a byte into each of its slow clients every 50 ms from a thread of its own, so that none falls silent for
    /// the port's 10 s inactivity timeout however long the test's tasks wait for a turn on a busy machine.
    final class Dripper: @unchecked Sendable {
        private let lock = NSLock()
        private var tricklers: [Trickler] = []
        private let stopped = StopFlag()

        init() {
            Thread.detachNewThread { [self] in
                while !stopped.isStopped {
                    lock.withLock { for trickler in tricklers { trickler.sendByte() } }
                    usleep(50_000)
                }
            }
        }

        func add(_ trickler: Trickler) { lock.withLock { tricklers.append(trickler) } }
        func remove(_ trickler: Trickler) { lock.withLock { tricklers.removeAll { $0 === trickler } } }
        func stop() { stopped.stop() }
    }

    /// `GET /healthz` on a fresh connection, answered with the body's first line, while the slow clients go on
    /// dripping (`Dripper`). A probe still unanswered after ten minutes is a failure rather than a hang.
    static func probe(port: Int) async throws -> String {
        let answered = StopFlag()
        async let answer = offThePool { () throws -> String in
            defer { answered.stop() }
            let client = try RawClient.tcp(port: port)
            var timeout = timeval(tv_sec: 600, tv_usec: 0)
            setsockopt(client.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            try client.writeAll(Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8))
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = recv(client.fd, &buffer, buffer.count, 0)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                bytes += buffer[0..<n]
            }
            let text = String(decoding: bytes, as: UTF8.self)
            guard text.hasPrefix("HTTP/1.1 200"), let body = text.range(of: "\r\n\r\n") else {
                return "no answer: \(text.prefix(100))"
            }
            return String(text[body.upperBound...].prefix { $0 != "\n" })
        }
        // Ten minutes: in a whole run on a busy machine another test may hold the process's descriptors or its cores
        // for minutes, and the answer is what matters here, not how soon it comes.
        #expect(await waitUntil(600) { answered.isStopped })
        return try await answer
    }

    static func withMetricsServer(
        _ configure: (inout ServerConfiguration) -> Void, _ body: (Int) async throws -> Void
    ) async throws {
        let directory = temporaryTestDirectory("larder-metrics-slow")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.metricsPort = 0
        configure(&configuration)
        let server = try LarderServer(configuration: configuration)
        _ = try server.start()
        defer { server.shutdown() }
        try await body(try #require(server.metricsPort))
    }

    @Test func aRequestTricklingInIsCutAtTheDeadline() async throws {
        try await Self.withMetricsServer({ $0.metricsRequestTimeoutMs = 500 }) { metricsPort in
            let trickler = try Trickler(port: metricsPort)
            let started = monotonicSeconds()
            // A byte every 50 ms: never silent long enough for the 10 s inactivity timeout.
            let cut = await waitUntil(120) { !trickler.drip() }
            #expect(cut, "a client trickling a request in was never cut")
            #expect(monotonicSeconds() - started >= 0.5, "cut before the deadline")
            // The port still serves.
            #expect(try MetricsTests.http(port: metricsPort, "/healthz").status == 200)
        }
    }

    @Test func healthzAnswersWhileSlowClientsTakeEverySlot() async throws {
        try await Self.withMetricsServer({ $0.metricsRequestTimeoutMs = 600_000 }) { metricsPort in
            let dripper = Dripper()
            defer { dripper.stop() }
            var slow = try (0..<16).map { _ in try Trickler(port: metricsPort) }
            for trickler in slow { #expect(trickler.drip()) }
            for trickler in slow { dripper.add(trickler) }
            // Each probe takes the slot of the slow client that has waited longest; another slow one fills it again.
            for round in 0..<3 {
                let answer = try await Self.probe(port: metricsPort)
                try #require(answer == "ok", "round \(round)")
                let oldest = slow.removeFirst()
                dripper.remove(oldest)
                #expect(await waitUntil(120) { oldest.isClosed }, "the oldest slow client kept its slot")
                for trickler in slow { #expect(!trickler.isClosed) }
                let next = try Trickler(port: metricsPort)
                #expect(next.drip())
                dripper.add(next)
                slow.append(next)
            }
        }
    }
}
