#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import LarderSync
import LarderTLS

/// The TLS session of one benchmark connection (`--tls-ca`): the workers' poll loops encrypt their output into it
/// and decrypt what they read, on the same thread, as the server's event loops do.
/// read(2), named apart from the methods called `read` here.
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int { read(fd, buffer, count) }

final class BenchTLS: @unchecked Sendable {
    let engine: TLSEngine
    private var ciphertext: [UInt8] = []
    private var ciphertextOffset = 0
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)

    private init(engine: TLSEngine) { self.engine = engine }
    deinit { scratch.deallocate() }

    /// Sessions by descriptor, from the handshake until the worker (or the control connection) takes its own.
    private static let sessions = Locked<[Int32: BenchTLS]>([:])

    static func take(_ fd: Int32) -> BenchTLS? { sessions.withLock { $0.removeValue(forKey: fd) } }
    static func peek(_ fd: Int32) -> BenchTLS? { sessions.withLock { $0[fd] } }
    /// Sessions handshaken and not yet taken: none once a run is over.
    static var held: Int { sessions.withLock { $0.count } }

    var hasCiphertext: Bool { ciphertextOffset < ciphertext.count || engine.pendingOutput > 0 }
    var hasBufferedInput: Bool { engine.pendingInput > 0 }

    /// The handshake on a connected blocking socket; the session is then found by `take(fd)`.
    static func handshake(_ fd: Int32, _ options: BenchOptions, host: String, deadline: UInt64) throws(BenchError) {
        let session: BenchTLS
        do throws(TLSError) {
            let context = try TLSContext.client(ca: options.tlsCA)
            session = BenchTLS(engine: try TLSEngine(context: context, serverName: host))
        } catch {
            throw BenchError("TLS: \(error.message)")
        }
        while true {
            let progress = session.engine.handshake()
            var out: [UInt8] = []
            session.engine.takeOutput(appendingTo: &out)
            if !out.isEmpty { try Sys.writeAll(fd, out) }
            switch progress {
            case .done:
                sessions.withLock { $0[fd] = session }
                return
            case .failed(let error):
                throw BenchError("TLS handshake with \(host): \(error.message)")
            case .needsInput:
                guard try Sys.waitReadable(fd, until: deadline) else { throw BenchError("no TLS handshake in time") }
                let outcome = try Sys.call("read") { systemRead(fd, session.scratch.baseAddress!, session.scratch.count) }
                guard case .done(let n) = outcome else { continue }
                if n == 0 { throw BenchError("the server closed the connection during the TLS handshake") }
                session.engine.feed(UnsafeRawBufferPointer(rebasing: session.scratch[0..<n]))
            }
        }
    }

    /// Plaintext into `buffer`: what the session holds, else what the socket has (`.wouldBlock` when it has none).
    func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(BenchError) -> Sys.Outcome {
        // With nothing buffered, decrypting could only say so: read the socket first.
        var decrypt = engine.pendingInput > 0
        while true {
            if !decrypt {
                let scratch = self.scratch
                let outcome = try Sys.call("read") { systemRead(fd, scratch.baseAddress!, scratch.count) }
                guard case .done(let n) = outcome else { return .wouldBlock }
                if n == 0 { return .done(0) }
                engine.feed(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
            }
            decrypt = false
            switch engine.read(into: buffer) {
            case .bytes(let n): return .done(n)
            case .closed: return .done(0)
            case .failed(let error): throw BenchError("TLS: \(error.message)")
            case .needsInput: continue  // a partial record: read more
            }
        }
    }

    /// Encrypts the output not yet sent (once the ciphertext before it is written) and writes what the socket takes.
    func flush(_ fd: Int32, _ out: inout [UInt8], _ outOffset: inout Int) throws(BenchError) {
        if !hasCiphertext && out.count > outOffset {
            let result = out.withUnsafeBytes { engine.write(UnsafeRawBufferPointer(rebasing: $0[outOffset...])) }
            switch result {
            case .failure(let error): throw BenchError("TLS: \(error.message)")
            case .success(let n): outOffset += n
            }
            if outOffset == out.count {
                out.removeAll(keepingCapacity: out.capacity <= 4 << 20)
                outOffset = 0
            }
        }
        if ciphertextOffset >= ciphertext.count {
            ciphertext.removeAll(keepingCapacity: true)
            ciphertextOffset = 0
            engine.takeOutput(appendingTo: &ciphertext)
        }
        guard ciphertextOffset < ciphertext.count else { return }
        let offset = ciphertextOffset
        let outcome = try Sys.call("write") {
            ciphertext.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        }
        if case .done(let n) = outcome { ciphertextOffset += n }
    }

    /// Encrypts and writes all of `bytes` on a blocking socket (the control connection's requests).
    func writeAllBlocking(_ fd: Int32, _ bytes: [UInt8]) throws(BenchError) {
        let result = bytes.withUnsafeBytes { engine.write($0) }
        if case .failure(let error) = result { throw BenchError("TLS: \(error.message)") }
        var out: [UInt8] = []
        engine.takeOutput(appendingTo: &out)
        try Sys.writeAll(fd, out)
    }
}

/// How many TLS sessions are waiting to be taken by their connections: zero once a run is over (a session left behind
/// would be picked up by the next connection that reuses its descriptor number, a plain one included).
package func benchTLSSessionsHeld() -> Int { BenchTLS.held }
