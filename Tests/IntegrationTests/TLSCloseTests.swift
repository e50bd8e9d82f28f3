#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderServer
import LarderTLS
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// How a TLS connection ends: the answers the server counted as sent reach a client that reads slowly, and then
/// close_notify, whether the connection closes after an error or because the server shuts down.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TLSCloseTests {
    static var certificates: TestCertificates { .shared }

    /// What reading a TLS stream to its end gave: the frames, and how it ended.
    struct Ending {
        var frames: [Frame] = []
        /// The server sent close_notify (rather than dropping the connection).
        var closeNotify = false
        var failure: String?
    }

    /// A TLS client on a blocking socket with a small receive buffer, which reads 4 KiB at a time with a pause between
    /// reads: the server's socket stays full while it closes.
    final class SlowTLSClient {
        let fd: Int32
        let engine: TLSEngine
        private var encoder = FrameEncoder()
        private var nextID: UInt32 = 1

        init(port: Int) throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            self.fd = fd
            var small: Int32 = 4096
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else { throw ServerTestError("connect failed: errno \(errno)") }
            engine = try TLSEngine(
                context: try TLSContext.client(ca: TLSCloseTests.certificates.caFile), serverName: "127.0.0.1")
            while true {
                let progress = engine.handshake()
                try sendPending()
                switch progress {
                case .done: return
                case .failed(let error): throw ServerTestError("handshake: \(error)")
                case .needsInput: guard try receiveSome() else { throw ServerTestError("closed in the handshake") }
                }
            }
        }

        deinit { Glibc.close(fd) }

        private func sendPending() throws {
            var out: [UInt8] = []
            engine.takeOutput(appendingTo: &out)
            var offset = 0
            while offset < out.count {
                let n = out[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                guard n > 0 else { throw ServerTestError("write failed: errno \(errno)") }
                offset += n
            }
        }

        /// Reads at most 4 KiB of ciphertext into the session; false at the end of the stream.
        private func receiveSome() throws -> Bool {
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return false }
            guard n > 0 else { throw ServerTestError("read failed: errno \(errno)") }
            chunk.withUnsafeBytes { engine.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            return true
        }

        /// Encrypts and sends requests (and then `raw` plaintext, such as a broken frame), without reading.
        func send(_ requests: [(Opcode, JSONObject)], then raw: [UInt8] = []) throws {
            var plaintext: [UInt8] = []
            for (opcode, json) in requests {
                plaintext += encoder.encode(Frame(opcode: opcode, requestID: nextID, json: json.bytes))
                nextID += 1
            }
            plaintext += raw
            _ = plaintext.withUnsafeBytes { engine.write($0) }
            try sendPending()
        }

        /// Reads to the end of the stream, slowly, decoding frames; `firstAnswer` runs once the first GET answer
        /// has arrived (the server has read the requests by then).
        func readToEnd(firstAnswer: () -> Void = {}) -> Ending {
            var answered = false
            var ending = Ending()
            var decoder = FrameDecoder()
            var inbound = ByteBuffer()
            var plain = [UInt8](repeating: 0, count: 16 << 10)
            while true {
                let result = plain.withUnsafeMutableBytes { engine.read(into: $0) }
                switch result {
                case .bytes(let n):
                    inbound.append(plain[0..<n])
                    do {
                        while let frame = try decoder.next(&inbound) {
                            ending.frames.append(frame)
                            if frame.opcode == .get && !answered {
                                answered = true
                                firstAnswer()
                            }
                        }
                    } catch {
                        ending.failure = "undecodable answer: \(error)"
                        return ending
                    }
                    continue
                case .closed:
                    ending.closeNotify = true
                    return ending
                case .failed(let error):
                    ending.failure = "TLS: \(error)"
                    return ending
                case .needsInput:
                    break
                }
                usleep(500)  // a slow reader: the server's socket stays full (the outcome does not depend on it)
                do {
                    guard try receiveSome() else {
                        ending.failure = "the connection ended without close_notify"
                        return ending
                    }
                } catch {
                    ending.failure = "\(error)"
                    return ending
                }
            }
        }
    }

    /// A document of about 640 KB: 24 answers of it are far more than the sockets between client and server hold,
    /// and each answer ends with almost a whole batch of ciphertext (`TLSTransport.encryptBatchBytes`, 64 KiB), the
    /// most a closing connection can hold unwritten. On loopback the server's send buffer grows to megabytes, so these
    /// two tests rarely close with ciphertext left over; `ciphertextTheSocketHasNotTakenAtCloseIsDelivered` makes
    /// sure the connection does.
    static func bigDocument(_ server: ClientTestServer, bytes: Int = 9 * 65_536 + 64_000) async throws -> String {
        let client = LarderClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: server.port), connectTimeout: .seconds(120),
                tls: .init(caFile: certificates.caFile)))
        defer { client.close() }
        let text = String(repeating: "larder tls close ", count: bytes / 17)
        return try await client.create("big", ["text": .string(text)]).id.wireString
    }

    static let requestCount = 24

    static func gets(_ id: String) -> [(Opcode, JSONObject)] {
        Array(repeating: (Opcode.get, ["collection": "big", "id": .string(id)]), count: requestCount)
    }

    /// A connection that the server closes after an error (a broken frame behind the requests) still delivers every
    /// answer before it, the error, and close_notify, however slowly the client reads: the last encrypted bytes are
    /// written as the socket drains, not dropped when the descriptor closes.
    @Test func aClosedConnectionDeliversItsLastAnswersAndCloseNotify() async throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        let id = try await Self.bigDocument(server)
        let client = try SlowTLSClient(port: server.port)
        try client.send([(.hello, HelloRequest(compression: [], client: "tls-close", token: nil).json)] + Self.gets(id),
            then: [0, 0, 0, 24, 0x58, 0x58] + [UInt8](repeating: 0, count: 22))  // a header with bad magic
        let ending = client.readToEnd()
        #expect(ending.failure == nil, "\(ending.failure ?? "")")
        #expect(ending.closeNotify)
        let answers = ending.frames.filter { $0.opcode == .get }
        #expect(answers.count == Self.requestCount && answers.allSatisfy { $0.status == .ok })
        #expect(
            ending.frames.contains { $0.requestID == 0 && $0.status == .protocolError },
            "the error that closed it: \(ending.frames.map { "\($0.opcode.name) \($0.status.name)" })")
    }

    /// The server's end of the TCP connection whose client end is `client`: the server runs in this process, so its
    /// accepted socket is one of this process's descriptors, the one whose addresses are the client's reversed.
    static func serverEnd(of client: Int32, port: Int) throws -> Int32 {
        func portOf(_ fd: Int32, peer: Bool) -> Int? {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let result = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
                }
            }
            guard result == 0, address.sin_family == sa_family_t(AF_INET) else { return nil }
            return Int(UInt16(bigEndian: address.sin_port))
        }
        let clientPort = try #require(portOf(client, peer: false))
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap { Int32($0) }
        for fd in descriptors where fd != client {
            if portOf(fd, peer: false) == port && portOf(fd, peer: true) == clientPort { return fd }
        }
        throw ServerTestError("no descriptor of this process is the server's end of port \(clientPort)")
    }

    /// The case the linger is for, made certain: the server's socket is full when the connection closes, with
    /// ciphertext it has not taken. The test shrinks the send buffer of the server's end of the connection to the
    /// kernel's floor (a few KiB; nothing grows it back once set) before asking for a 48 KB document and sending a
    /// broken frame: the answer is encrypted in one batch, the machine counts it sent and closes, and most of that
    /// batch, then close_notify, still has to be written as the client reads. Closing the descriptor then would cut
    /// the answer short.
    @Test func ciphertextTheSocketHasNotTakenAtCloseIsDelivered() async throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        let id = try await Self.bigDocument(server, bytes: 48_000)
        let client = try SlowTLSClient(port: server.port)
        let serverEnd = try Self.serverEnd(of: client.fd, port: server.port)
        var small: Int32 = 4096
        let shrunk = setsockopt(serverEnd, SOL_SOCKET, SO_SNDBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        #expect(shrunk == 0, "setsockopt: errno \(errno)")
        try client.send(
            [
                (.hello, HelloRequest(compression: [], client: "tls-full-socket", token: nil).json),
                (.get, ["collection": "big", "id": .string(id)]),
            ],
            then: [0, 0, 0, 24, 0x58, 0x58] + [UInt8](repeating: 0, count: 22))  // a header with bad magic
        let ending = client.readToEnd()
        #expect(ending.failure == nil, "\(ending.failure ?? "")")
        #expect(ending.closeNotify)
        let answer = ending.frames.first { $0.opcode == .get }
        #expect(answer?.status == .ok && answer?.replyJSON["id"]?.stringValue == id)
        #expect(
            ending.frames.contains { $0.requestID == 0 && $0.status == .protocolError },
            "the error that closed it: \(ending.frames.map { "\($0.opcode.name) \($0.status.name)" })")
    }

    /// A shutdown waits (within its grace period) for the TLS output of a client that reads slowly: every request
    /// read is answered, then close_notify comes, instead of the connection being cut with answers in its buffers.
    @Test func shutdownWaitsForPendingTLSOutput() async throws {
        let server = try ClientTestServer {
            $0.useTestTLS()
            $0.shutdownGraceMs = 600_000  // a bound, not a wait: the shutdown ends as soon as the client has read
        }
        let stopped = DispatchSemaphore(value: 0)
        var stopping = false
        defer { if !stopping { server.stop() } }
        let id = try await Self.bigDocument(server)
        let client = try SlowTLSClient(port: server.port)
        try client.send(
            [(.hello, HelloRequest(compression: [], client: "tls-shutdown", token: nil).json)] + Self.gets(id))
        let ending = client.readToEnd {
            stopping = true
            Thread {
                server.stop()
                stopped.signal()
            }.start()
        }
        #expect(stopping)
        #expect(stopped.wait(timeout: .now() + 600) == .success, "the shutdown did not end")
        #expect(ending.failure == nil, "\(ending.failure ?? "")")
        #expect(ending.closeNotify)
        let answers = ending.frames.filter { $0.opcode == .get }
        // Requests the server had not read when the shutdown began are answered UNAVAILABLE; each gets an answer.
        #expect(answers.count == Self.requestCount, "\(answers.count) answers")
        #expect(answers.allSatisfy { $0.status == .ok || $0.status == .unavailable })
        #expect(answers.contains { $0.status == .ok })
    }
}
