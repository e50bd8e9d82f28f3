#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderIO
import LarderSync
import LarderWire

/// A Unix-socket proxy in front of a server's TCP port that notes every request frame a client sends (decoded,
/// uncompressed: the client must not offer compression) before passing it on, so a test reads exactly what went on
/// the wire. A request is noted before the server sees it: once the answer to a later request on the same
/// connection has come back, every request before it is in `requests`.
final class RecordingProxy: Sendable {
    struct Request: Sendable {
        var opcode: Opcode
        var json: JSONObject
    }

    let path: String
    private let upstreamPort: Int
    private let listener: Int32
    private let state = Locked<(requests: [Request], stopped: Bool)>(([], false))

    init(upstreamPort: Int) throws {
        path = NSTemporaryDirectory() + "larder-proxy-\(UUID().uuidString.prefix(8)).sock"
        self.upstreamPort = upstreamPort
        do throws(IOError) {
            listener = try Socket.listenUnix(path: path, backlog: 16)
        } catch {
            throw ServerTestError("proxy listen on \(path): \(error)")
        }
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// Every request so far, in the order sent.
    var requests: [Request] { state.withLock { $0.requests } }

    /// The requests of `opcode` so far.
    func requests(_ opcode: Opcode) -> [JSONObject] { requests.filter { $0.opcode == opcode }.map(\.json) }

    /// Forgets the requests noted so far.
    func clear() { state.withLock { $0.requests.removeAll() } }

    /// A client that goes through the proxy, without compression (so the proxy reads the JSON as sent).
    func client() -> LarderClient {
        LarderClient(
            configuration: LarderClient.Configuration(
                endpoint: .unix(path: path), requestTimeout: .seconds(300), connectTimeout: .seconds(120),
                compression: false))
    }

    func stop() {
        state.withLock { $0.stopped = true }
        unlink(path)
    }

    private func acceptLoop() {
        defer { Glibc.close(listener) }
        while !state.withLock({ $0.stopped }) {
            var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 100) > 0 else { continue }
            let client = Glibc.accept(listener, nil, nil)
            guard client >= 0 else { continue }
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) & ~O_NONBLOCK)
            Thread.detachNewThread { [self] in serve(client) }
        }
    }

    private func serve(_ client: Int32) {
        let server: Int32
        do throws(ConnectFailure) {
            server = try Socket.connect(host: "127.0.0.1", port: upstreamPort, timeoutMs: 120_000)
        } catch {
            Glibc.close(client)
            return
        }
        _ = fcntl(server, F_SETFL, fcntl(server, F_GETFL) & ~O_NONBLOCK)
        let backFinished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            RecordingProxy.pump(from: server, to: client) { _ in }
            Glibc.shutdown(client, Int32(SHUT_RDWR))
            Glibc.shutdown(server, Int32(SHUT_RDWR))
            backFinished.signal()
        }
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var buffer = ByteBuffer()
        RecordingProxy.pump(from: client, to: server) { bytes in
            buffer.append(bytes)
            while let frame = try? decoder.next(&buffer) {
                let json = (try? frame.jsonObject()) ?? [:]
                state.withLock { $0.requests.append(Request(opcode: frame.opcode, json: json)) }
            }
        }
        Glibc.shutdown(client, Int32(SHUT_RDWR))
        Glibc.shutdown(server, Int32(SHUT_RDWR))
        backFinished.wait()
        Glibc.close(client)
        Glibc.close(server)
    }

    /// Copies `from` to `to` until either end closes, giving each read to `note` before passing it on.
    private static func pump(from: Int32, to: Int32, _ note: ([UInt8]) -> Void) {
        var chunk = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(from, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            note(Array(chunk[0..<n]))
            let code = chunk.withUnsafeBytes { Socket.sendAll(to, UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            guard code == 0 else { return }
        }
    }
}
