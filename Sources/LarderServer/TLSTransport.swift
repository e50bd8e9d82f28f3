import LarderIO
import LarderSync
import LarderTLS
import LarderWire

/// The TLS layer of one connection, between its socket and its `ConnectionStateMachine`: ciphertext read from the
/// socket goes in, plaintext for the machine comes out, and the machine's output is encrypted into the session's
/// output buffer, which the connection writes from where it lies when the socket takes it. Everything runs on the
/// connection's event loop, without blocking.
final class TLSTransport {
    let engine: TLSEngine
    /// When the connection was accepted: the handshake must end within the frame timeout from then.
    let openedAt: UInt64
    private var sawFirstBytes = false
    /// The stream's first bytes, until they reach the type of the first handshake message (`checkOpening`).
    private var opening: [UInt8] = []
    /// Plaintext encrypted per turn: with the ciphertext buffer empty before each batch, a connection holds at most
    /// about this much ciphertext, however large the answer it is sending.
    static let encryptBatchBytes = 64 << 10

    init(engine: TLSEngine, openedAt: UInt64) {
        self.engine = engine
        self.openedAt = openedAt
    }

    var isEstablished: Bool { engine.isHandshakeDone }

    /// Whether ciphertext waits to be written.
    var hasOutput: Bool { engine.pendingOutput > 0 }

    /// Ciphertext not yet written.
    var unwrittenBytes: Int { engine.pendingOutput }

    enum Received {
        /// Read the plaintext (`read`) and send what the session produced (`flush`).
        case proceed
        /// Not a TLS client: a Larder frame in clear (answered in clear, then closed) or other bytes (closed).
        case plainLarderClient
        case notTLS
        case failed(String)
    }

    /// Ciphertext from the socket: checks that a TLS client is speaking, then advances the handshake.
    func received(_ bytes: UnsafeRawBufferPointer) -> Received {
        if !sawFirstBytes {
            sawFirstBytes = true
            // A TLS connection starts with a handshake record (content type 22).
            if bytes[0] != 0x16 {
                let larder = bytes.count >= 6 && bytes[4] == 0x4C && bytes[5] == 0x52
                return larder ? .plainLarderClient : .notTLS
            }
        }
        if opening.count < 6, let refusal = checkOpening(bytes) { return refusal }
        engine.feed(bytes)
        if engine.isHandshakeDone { return .proceed }
        if case .failed(let error) = engine.handshake() { return .failed(error.message) }
        return .proceed
    }

    /// A TLS client's first handshake message is a ClientHello: a record header (type 22, version 3.x, length) and
    /// then message type 1. Anything else is refused as soon as its sixth byte arrives, however the bytes are split
    /// across reads: the session would otherwise wait for the rest of a message that may declare megabytes, until
    /// the handshake deadline.
    private func checkOpening(_ bytes: UnsafeRawBufferPointer) -> Received? {
        opening += bytes.prefix(6 - opening.count)
        guard opening.count == 6, opening[1] != 0x03 || opening[5] != 0x01 else { return nil }
        return .failed("the first handshake message is not a ClientHello")
    }

    /// Decrypts into `buffer` (what the session answers by itself, such as an alert, is then pending output).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> TLSEngine.ReadResult {
        engine.read(into: buffer)
    }

    /// Encrypts the start of `plaintext` (at most `encryptBatchBytes`) once the ciphertext before it is written;
    /// returns how many plaintext bytes the session took.
    func encrypt(_ plaintext: UnsafeRawBufferPointer) -> Result<Int, TLSError> {
        guard isEstablished, !hasOutput else { return .success(0) }
        let batch = UnsafeRawBufferPointer(rebasing: plaintext.prefix(TLSTransport.encryptBatchBytes))
        return engine.write(batch)
    }

    /// Writes pending ciphertext to `fd`; returns the bytes written, or nil when the socket is full.
    func flush(_ fd: Int32) throws(IOError) -> Int? {
        var written = 0
        while engine.pendingOutput > 0 {
            let attempt: Result<IOResult, IOError> = engine.withPendingOutput { bytes in
                do throws(IOError) {
                    return .success(try Socket.write(fd, bytes))
                } catch {
                    return .failure(error)
                }
            }
            switch try attempt.get() {
            case .wouldBlock:
                return written > 0 ? written : nil
            case .done(let count):
                written += count
                engine.consumeOutput(count)
            }
        }
        return written
    }

    /// Queues close_notify and writes what the socket takes now; the rest is pending (`hasOutput`).
    func finish(_ fd: Int32) {
        engine.close()
        _ = try? flush(fd)
    }

    /// What a plain Larder client on a TLS port reads before the connection closes.
    static let plainClientRefusal: [UInt8] = {
        let error = LarderError(
            .protocolError, "this port speaks TLS: connect with TLS (larder --tls; LarderClient's tls setting)")
        var bytes: [UInt8] = []
        FrameEncoder().encode(
            Frame(opcode: Opcode(rawValue: 0), requestID: 0, status: error.status, flags: .response,
                json: error.json.bytes),
            into: &bytes)
        return bytes
    }()
}

/// The server's TLS context, replaced on SIGHUP: connections accepted later get the new certificate.
final class TLSContexts: Sendable {
    private let current: Locked<TLSContext>
    let certificate: String
    let key: String
    let clientCA: String?

    init(certificate: String, key: String, clientCA: String?) throws(TLSError) {
        self.certificate = certificate
        self.key = key
        self.clientCA = clientCA
        current = Locked(try TLSContext.server(certificate: certificate, key: key, clientCA: clientCA))
    }

    var context: TLSContext { current.withLock { $0 } }

    /// Reads the files again; on failure the context in force stays and the error is thrown.
    func reload() throws(TLSError) {
        let fresh = try TLSContext.server(certificate: certificate, key: key, clientCA: clientCA)
        current.withLock { $0 = fresh }
    }
}
