#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import Testing

/// Slow clients of `--metrics-port`: one trickling a request in a byte at a time is cut at
/// `--metrics-request-timeout-ms`, and slow clients filling every slot do not keep `/healthz` from answering.
@Suite(.timeLimit(.minutes(20))) struct MetricsSlowClientTests {
    /// A client that writes a request a byte at a time and never finishes it.
    final class Trickler {
        let client: RawClient
        private let request = Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Padding: ".utf8)
        private var sent = 0

        init(port: Int) throws { client = try RawClient.tcp(port: port) }

        /// Sends the next byte; false once the server has closed the connection.
        func drip() -> Bool {
            var byte = sent < request.count ? request[sent] : UInt8(ascii: "a")
            sent += 1
            guard send(client.fd, &byte, 1, Int32(MSG_NOSIGNAL)) == 1 else { return false }
            return !isClosed
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
            var slow = try (0..<16).map { _ in try Trickler(port: metricsPort) }
            for trickler in slow { #expect(trickler.drip()) }
            // Each probe takes the slot of the slow client that has waited longest; another slow one fills it again.
            for round in 0..<3 {
                let answer = try MetricsTests.http(port: metricsPort, "/healthz")
                #expect(answer.status == 200 && answer.body == "ok\n", "round \(round)")
                let oldest = slow.removeFirst()
                #expect(await waitUntil(120) { oldest.isClosed }, "the oldest slow client kept its slot")
                for trickler in slow { #expect(!trickler.isClosed) }
                let next = try Trickler(port: metricsPort)
                #expect(next.drip())
                slow.append(next)
            }
        }
    }
}
