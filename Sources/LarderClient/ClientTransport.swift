import Dispatch
import LarderSync
import LarderTLS
import LarderWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension LarderClient {
    /// TLS to the server (Protocol.md section 10.1). The server's certificate is verified against the system's trust
    /// store, or `caFile`, and must name the host connected to (or `serverName`).
    public struct TLSSettings: Sendable, Hashable {
        /// CA certificates (PEM) to trust instead of the system's store.
        public var caFile: String?
        /// The name the server's certificate must carry, when it is not the host connected to.
        public var serverName: String?
        /// The client's certificate and key (PEM), for a server that requires one.
        public var certificateFile: String?
        public var keyFile: String?
        /// Accept any certificate: for tests only, since anyone in the path can then read and change everything.
        public var skipVerification: Bool

        public init(
            caFile: String? = nil, serverName: String? = nil, certificateFile: String? = nil, keyFile: String? = nil,
            skipVerification: Bool = false
        ) {
            self.caFile = caFile
            self.serverName = serverName
            self.certificateFile = certificateFile
            self.keyFile = keyFile
            self.skipVerification = skipVerification
        }
    }
}

/// The byte stream a connection reads and writes: a socket, or TLS over one. Reads come from one thread (the reader)
/// and writes from any; a transport orders them itself. Its calls block; a poll-driven client would drive a
/// `TLSEngine` the same way from its loop.
protocol ClientTransport: AnyObject, Sendable {
    /// Reads up to `capacity` bytes: the count, 0 at the end of the stream, or a failure's description.
    func read(_ buffer: UnsafeMutableRawPointer, _ capacity: Int) -> Result<Int, TransportFailure>
    /// Writes every byte; nil, or what stopped it.
    func writeAll(_ bytes: UnsafeRawBufferPointer, progress: ((Int) -> Void)?) -> TransportFailure?
}

/// Why a transport stopped: an errno, or a TLS failure in words.
struct TransportFailure: Error, CustomStringConvertible {
    var errno: Int32?
    var message: String
    var description: String { message }

    static func system(_ code: Int32) -> TransportFailure { TransportFailure(errno: code, message: Socket.errnoText(code)) }
}

/// A plain socket.
final class PlainTransport: ClientTransport {
    let fd: Int32
    init(fd: Int32) { self.fd = fd }

    func read(_ buffer: UnsafeMutableRawPointer, _ capacity: Int) -> Result<Int, TransportFailure> {
        let n = Socket.read(fd, buffer, capacity)
        return n < 0 ? .failure(.system(Int32(-n))) : .success(n)
    }

    func writeAll(_ bytes: UnsafeRawBufferPointer, progress: ((Int) -> Void)?) -> TransportFailure? {
        let code = Socket.writeAll(fd, bytes, progress: progress)
        return code == 0 ? nil : .system(code)
    }
}

/// TLS over a blocking socket. The session is touched under `session` only, never across a system call; ciphertext
/// is taken from it and sent under `sending`, so it leaves in the order it was made, and a writer blocked on a full
/// socket never stops the reader from decrypting the replies that will drain it.
final class TLSClientTransport: ClientTransport, @unchecked Sendable {
    private let fd: Int32
    private let engine: TLSEngine
    private let session = Lock()
    private let sending = Lock()

    private init(fd: Int32, engine: TLSEngine) {
        self.fd = fd
        self.engine = engine
    }

    /// Runs the handshake on the connected socket `fd`, within `timeoutMs`. Errors say what went wrong in terms of
    /// the options that fix it.
    static func handshake(
        fd: Int32, host: String, settings: LarderClient.TLSSettings, endpoint: String, timeoutMs: Int
    ) throws(LarderError) -> TLSClientTransport {
        func fail(_ why: String) -> LarderError { Socket.connectError(endpoint, why) }
        let engine: TLSEngine
        do throws(TLSError) {
            let context = try TLSContext.client(
                ca: settings.caFile, certificate: settings.certificateFile, key: settings.keyFile,
                verify: !settings.skipVerification)
            engine = try TLSEngine(context: context, serverName: settings.serverName ?? host)
        } catch {
            throw fail(error.message)
        }
        let transport = TLSClientTransport(fd: fd, engine: engine)
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutMs) * 1_000_000
        var firstBytes: [UInt8] = []
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 << 10, alignment: 16)
        defer { chunk.deallocate() }
        while true {
            let progress = engine.handshake()
            if let failure = transport.sendPending() {
                throw fail("the TLS handshake broke while sending: \(failure)")
            }
            switch progress {
            case .done:
                return transport
            case .failed(let error):
                throw fail(explain(error.message, firstBytes: firstBytes, settings: settings, host: host))
            case .needsInput:
                let now = DispatchTime.now().uptimeNanoseconds
                guard now < deadline else { throw fail("no TLS handshake within the connect timeout") }
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&poller, 1, Int32(min(Int(Int32.max), Int((deadline - now) / 1_000_000) + 1)))
                if ready < 0 && errno != EINTR { throw fail("the TLS handshake broke: \(Socket.errnoText(errno))") }
                guard ready > 0 else { continue }
                let n = Socket.read(fd, chunk.baseAddress!, chunk.count)
                if n < 0 { throw fail("the TLS handshake broke: \(Socket.errnoText(Int32(-n)))") }
                if n == 0 {
                    let why = firstBytes.isEmpty
                        ? "the server closed the connection during the TLS handshake"
                        : explain("", firstBytes: firstBytes, settings: settings, host: host)
                    throw fail(why)
                }
                if firstBytes.count < 6 { firstBytes += chunk.prefix(min(n, 6 - firstBytes.count)) }
                engine.feed(UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
            }
        }
    }

    /// A handshake failure in the words of the option that fixes it.
    private static func explain(
        _ message: String, firstBytes: [UInt8], settings: LarderClient.TLSSettings, host: String
    ) -> String {
        if firstBytes.count >= 6 && firstBytes[4] == 0x4C && firstBytes[5] == 0x52 {
            return "the server answered in plain Larder, not TLS: it does not speak TLS on this port (drop --tls, or "
                + "use its TLS port)"
        }
        if message.contains("certificate was refused") {
            var hint = ""
            if message.contains("mismatch") {
                hint = "; it does not name \(settings.serverName ?? host): connect by a name it carries, or give that "
                    + "name with --tls-server-name"
            } else if message.contains("issuer") || message.contains("self-signed") || message.contains("self signed") {
                hint = settings.caFile == nil
                    ? "; give the CA that signed it with --ca FILE"
                    : "; it was not signed by a CA of \(settings.caFile!)"
            } else if message.contains("expired") {
                hint = "; the server must renew it"
            }
            return message + hint
        }
        if message.contains("wrong version number") || message.contains("packet length too long")
            || message.contains("record layer failure")
        {
            return "the server did not answer TLS (\(message)): it does not speak TLS on this port"
        }
        return "the TLS handshake failed: \(message)"
    }

    /// Sends the ciphertext the session holds. Call without `session` held.
    private func sendPending() -> TransportFailure? {
        sending.withLock { () -> TransportFailure? in
            var output: [UInt8] = []
            while true {
                output.removeAll(keepingCapacity: true)
                session.withLock { engine.takeOutput(appendingTo: &output) }
                guard !output.isEmpty else { return nil }
                let code = output.withUnsafeBytes { Socket.writeAll(fd, $0) }
                if code != 0 { return .system(code) }
            }
        }
    }

    func read(_ buffer: UnsafeMutableRawPointer, _ capacity: Int) -> Result<Int, TransportFailure> {
        while true {
            let result = session.withLock { engine.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: capacity)) }
            switch result {
            case .bytes(let count):
                return .success(count)
            case .closed:
                return .success(0)
            case .failed(let error):
                var message = "TLS: \(error.message)"
                if error.message.contains("certificate required") {
                    message = "the server requires a client certificate: give one with --tls-cert and --tls-key"
                } else if error.message.contains("unknown ca") || error.message.contains("bad certificate") {
                    message = "the server refused the client certificate (\(error.message))"
                }
                return .failure(TransportFailure(errno: nil, message: message))
            case .needsInput:
                // Anything the session wants to send first (a reply to a key update) goes from another thread: a
                // blocked send here would stop the replies that unblock it.
                if session.withLock({ engine.pendingOutput }) > 0 {
                    DispatchQueue.global().async { _ = self.sendPending() }
                }
                let n = Socket.read(fd, buffer, capacity)
                if n <= 0 { return n == 0 ? .success(0) : .failure(.system(Int32(-n))) }
                session.withLock { engine.feed(UnsafeRawBufferPointer(start: buffer, count: n)) }
            }
        }
    }

    func writeAll(_ bytes: UnsafeRawBufferPointer, progress: ((Int) -> Void)?) -> TransportFailure? {
        sending.withLock { () -> TransportFailure? in
            var offset = 0
            var output: [UInt8] = []
            while offset < bytes.count {
                // Records of at most 16 KiB each; 256 KiB of them per send, so progress moves on large blobs.
                let chunk = UnsafeRawBufferPointer(rebasing: bytes[offset..<min(bytes.count, offset + (256 << 10))])
                let encrypted = session.withLock { () -> Result<Int, TLSError> in
                    let result = engine.write(chunk)
                    output.removeAll(keepingCapacity: true)
                    engine.takeOutput(appendingTo: &output)
                    return result
                }
                switch encrypted {
                case .failure(let error): return TransportFailure(errno: nil, message: "TLS: \(error.message)")
                case .success(let count): offset += count
                }
                let code = output.withUnsafeBytes { Socket.writeAll(fd, $0) }
                if code != 0 { return .system(code) }
                progress?(offset)
            }
            return nil
        }
    }
}
