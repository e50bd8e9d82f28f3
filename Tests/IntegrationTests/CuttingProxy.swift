#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderEventLoop
import LarderIO
import LarderSync
import LarderTestSupport
import LarderWire

/// A Unix-socket proxy between a client and a server that cuts the first connection once `cutAfter` bytes of upload
/// chunks have gone through it, and holds every later connection until `release()`: meanwhile the test sees what the
/// server committed. It decodes the client's frames to note each `BLOB_UPLOAD_CHUNK` (connection, offset, bytes).
final class CuttingProxy: Sendable {
    struct Chunk: Sendable {
        /// 1 for the first connection, then 2, 3, ...
        var connection: Int
        var offset: Int64
        var bytes: Int
    }

    private struct State {
        var connections = 0
        var chunks: [Chunk] = []
        var upload: UUID?
        var cut = false
        var released = false
        var stopped = false
    }

    let path: String
    private let upstream: String
    private let cutAfter: Int
    private let listener: Int32
    private let state = Locked(State())
    /// Held from the start until `release` or `stop`: connections after the first wait on it.
    private let gate = DispatchGroup()

    init(path: String, upstream: String, cutAfter: Int) throws {
        self.path = path
        self.upstream = upstream
        self.cutAfter = cutAfter
        gate.enter()
        do throws(IOError) {
            listener = try Socket.listenUnix(path: path, backlog: 16)
        } catch {
            throw ServerTestError("proxy listen on \(path): \(error)")
        }
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// Whether the first connection was cut.
    var wasCut: Bool { state.withLock { $0.cut } }
    /// The upload the chunks named.
    var upload: UUID? { state.withLock { $0.upload } }
    var chunks: [Chunk] { state.withLock { $0.chunks } }
    var connections: Int { state.withLock { $0.connections } }

    /// Lets the connections after the cut through to the server.
    func release() { open() }

    /// Opens the gate once, whichever of `release` and `stop` comes first.
    private func open() {
        let first = state.withLock { s in
            defer { s.released = true }
            return !s.released
        }
        if first { gate.leave() }
    }

    func stop() {
        state.withLock { $0.stopped = true }
        open()
    }

    private func acceptLoop() {
        defer { Glibc.close(listener) }
        while !state.withLock({ $0.stopped }) {
            var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 100) > 0 else { continue }
            let client = Glibc.accept(listener, nil, nil)
            guard client >= 0 else { continue }
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) & ~O_NONBLOCK)
            let number = state.withLock { (s: inout State) -> Int in
                s.connections += 1
                return s.connections
            }
            Thread.detachNewThread { [self] in serve(client, number) }
        }
    }

    private func serve(_ client: Int32, _ number: Int) {
        // A later connection waits (its client waiting for its HELLO's answer) until the test has looked.
        if number > 1 { gate.wait() }
        let server: Int32
        do throws(ConnectFailure) {
            server = try Socket.connect(unixPath: upstream, timeoutMs: 120_000)
        } catch {
            Glibc.close(client)
            return
        }
        _ = fcntl(server, F_SETFL, fcntl(server, F_GETFL) & ~O_NONBLOCK)
        let backFinished = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [self] in
            relay(from: server, to: client)
            cut(client, server)
            backFinished.signal()
        }
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var buffer = ByteBuffer()
        var chunkBytes = 0
        relay(from: client, to: server, forwarded: { bytes in
            buffer.append(bytes)
            while let frame = try? decoder.next(&buffer) {
                guard frame.opcode == .blobUploadChunk,
                    let request = try? BlobUploadChunkRequest(json: frame.jsonObject())
                else { continue }
                chunkBytes += frame.binary.count
                state.withLock {
                    $0.upload = request.upload
                    $0.chunks.append(Chunk(connection: number, offset: request.offset, bytes: frame.binary.count))
                }
            }
            return !(number == 1 && chunkBytes >= cutAfter)
        })
        cut(client, server)
        if number == 1 { state.withLock { $0.cut = true } }
        backFinished.wait()
        Glibc.close(client)
        Glibc.close(server)
    }

    /// Ends both sides of a connection at once: each end sees it closed.
    private func cut(_ client: Int32, _ server: Int32) {
        Glibc.shutdown(client, Int32(SHUT_RDWR))
        Glibc.shutdown(server, Int32(SHUT_RDWR))
    }
}
