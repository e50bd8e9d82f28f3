#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderIO
import LarderSync
import LarderWire

/// A TCP proxy on 127.0.0.1 between a client and a server that passes every byte through and decodes the client's
/// frames as they go, so a test sees the requests exactly as they were sent on the wire. A request is noted before
/// the server sees it: once the answer to a later request on the same connection has come back, every request before
/// it is in `requests`.
final class RecordingProxy: Sendable {
    let port: Int
    private let upstream: Int
    private let listener: Int32
    private let state = Locked((requests: [Frame](), stopped: false))

    init(upstream: Int) throws {
        self.upstream = upstream
        (listener, port) = try listenOnLoopback()
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// The client's requests so far, in the order they were sent.
    var requests: [Frame] { state.withLock { $0.requests } }

    /// The JSON parts of the requests of `opcode` so far.
    func sent(_ opcode: Opcode) -> [JSONObject] {
        requests.filter { $0.opcode == opcode }.compactMap { try? $0.jsonObject() }
    }

    /// Forgets the requests noted so far.
    func clear() { state.withLock { $0.requests.removeAll() } }

    /// A client that goes through the proxy, without compression (so what it sent reads as it was).
    func client() -> LarderClient {
        LarderClient(
            configuration: LarderClient.Configuration(
                endpoint: .tcp(host: "127.0.0.1", port: port), requestTimeout: .seconds(300),
                connectTimeout: .seconds(120), compression: false))
    }

    func stop() { state.withLock { $0.stopped = true } }

    private func acceptLoop() {
        defer { Glibc.close(listener) }
        while !state.withLock({ $0.stopped }) {
            var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 100) > 0 else { continue }
            let client = Glibc.accept(listener, nil, nil)
            guard client >= 0 else { continue }
            Thread.detachNewThread { [self] in serve(client) }
        }
    }

    private func serve(_ client: Int32) {
        let server: Int32
        do throws(ConnectFailure) {
            server = try Socket.connect(host: "127.0.0.1", port: upstream, timeoutMs: 120_000)
        } catch {
            Glibc.close(client)
            return
        }
        _ = fcntl(server, F_SETFL, fcntl(server, F_GETFL) & ~O_NONBLOCK)
        let backFinished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            relay(from: server, to: client)
            Glibc.shutdown(client, Int32(SHUT_RDWR))
            Glibc.shutdown(server, Int32(SHUT_RDWR))
            backFinished.signal()
        }
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var buffer = ByteBuffer()
        relay(from: client, to: server, seen: { bytes in
            buffer.append(bytes)
            while let frame = try? decoder.next(&buffer) {
                state.withLock { $0.requests.append(frame) }
            }
        })
        Glibc.shutdown(client, Int32(SHUT_RDWR))
        Glibc.shutdown(server, Int32(SHUT_RDWR))
        backFinished.wait()
        Glibc.close(client)
        Glibc.close(server)
    }
}
