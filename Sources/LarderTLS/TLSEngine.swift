import COpenSSL

#if canImport(Glibc)
import Glibc
#endif

/// One TLS session driven through memory: the owner moves ciphertext between the engine and its socket, so the engine
/// never blocks and never touches a descriptor. A server drives it from its event loop, a client from its reader
/// thread or poll loop alike. Not thread-safe: one owner at a time.
package final class TLSEngine {
    private let ssl: OpaquePointer
    /// Keeps the context alive as long as the session (OpenSSL counts its references too).
    package let context: TLSContext
    package private(set) var isHandshakeDone = false

    package enum Progress: Equatable {
        /// The handshake is complete.
        case done
        /// More ciphertext from the peer is needed (send `pendingOutput` first).
        case needsInput
        case failed(TLSError)
    }

    package enum ReadResult: Equatable {
        case bytes(Int)
        /// No whole record is buffered: feed more ciphertext.
        case needsInput
        /// The peer sent close_notify.
        case closed
        case failed(TLSError)
    }

    /// `serverName`: for a client, the name the server's certificate must carry (a DNS name or an IP address; also
    /// sent as SNI when a DNS name).
    package init(context: TLSContext, serverName: String? = nil) throws(TLSError) {
        guard let ssl = larder_ssl_new(context.context, context.isServer ? 1 : 0) else {
            throw TLSError("cannot start a TLS session: " + TLSError.openSSL("out of memory"))
        }
        self.ssl = ssl
        self.context = context
        if let serverName, !context.isServer {
            guard larder_ssl_expect_name(ssl, serverName, TLSEngine.isIPAddress(serverName) ? 1 : 0) == 1 else {
                throw TLSError("cannot check the server's name \(serverName): " + TLSError.openSSL("invalid name"))
            }
        }
    }

    deinit { SSL_free(ssl) }

    static func isIPAddress(_ name: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, name, &v4) == 1 || inet_pton(AF_INET6, name, &v6) == 1
    }

    /// Ciphertext from the peer.
    package func feed(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = larder_ssl_feed(ssl, base, Int32(bytes.count))
    }

    /// Ciphertext waiting to be sent to the peer.
    package var pendingOutput: Int { larder_ssl_pending_output(ssl) }

    /// Ciphertext fed but not yet decrypted, plus plaintext decrypted but not yet read.
    package var pendingInput: Int { larder_ssl_pending_input(ssl) }

    /// Moves up to `buffer.count` bytes of ciphertext to send into `buffer`; returns how many.
    package func takeOutput(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0, pendingOutput > 0 else { return 0 }
        return max(0, Int(larder_ssl_take_output(ssl, base, Int32(min(buffer.count, Int(Int32.max))))))
    }

    /// Moves all the pending ciphertext to the end of `output`.
    package func takeOutput(appendingTo output: inout [UInt8]) {
        let count = pendingOutput
        guard count > 0 else { return }
        let start = output.count
        output += repeatElement(0, count: count)
        let taken = output.withUnsafeMutableBytes { takeOutput(into: UnsafeMutableRawBufferPointer(rebasing: $0[start...])) }
        output.removeLast(count - taken)
    }

    /// Advances the handshake with what was fed.
    package func handshake() -> Progress {
        if isHandshakeDone { return .done }
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            isHandshakeDone = true
            // A client has few connections, each busy while it lives; a server decides per connection (`keepBuffers`).
            if !context.isServer { larder_ssl_keep_buffers(ssl, 1) }
            return .done
        }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .needsInput
        default:
            return .failed(failure(during: "the TLS handshake"))
        }
    }

    /// Decrypts into `buffer`.
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .bytes(0) }
        let count = SSL_read(ssl, base, Int32(min(buffer.count, Int(Int32.max))))
        if count > 0 { return .bytes(Int(count)) }
        switch SSL_get_error(ssl, count) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .needsInput
        case SSL_ERROR_ZERO_RETURN: return .closed
        default: return .failed(failure(during: "reading"))
        }
    }

    /// Encrypts `bytes` (all of them: the output BIO grows); the ciphertext is then pending.
    package func write(_ bytes: UnsafeRawBufferPointer) -> Result<Int, TLSError> {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .success(0) }
        let count = SSL_write(ssl, base, Int32(min(bytes.count, Int(Int32.max))))
        if count > 0 { return .success(Int(count)) }
        return .failure(failure(during: "writing"))
    }

    /// Whether the session keeps its record buffers (about 34 KB) between records: yes for a busy connection, since
    /// allocating and freeing them around every record costs more than encrypting a small answer; no for an idle one,
    /// which then gives them back (at once when they hold no partial record, else after it).
    package func keepBuffers(_ keep: Bool) {
        larder_ssl_keep_buffers(ssl, keep ? 1 : 0)
    }

    /// Queues close_notify (then send `pendingOutput`).
    package func close() {
        if isHandshakeDone { _ = SSL_shutdown(ssl) }
    }

    /// A client's session to offer the server before the handshake, to resume it.
    package func offer(_ session: TLSSession) {
        _ = SSL_set_session(ssl, session.session)
    }

    /// The session to offer on a later connection, once the server sent a ticket for it (in TLS 1.3 after the
    /// handshake, with the first records read); nil before.
    package var resumableSession: TLSSession? {
        larder_ssl_resumable_session(ssl).map(TLSSession.init)
    }

    /// Whether the handshake resumed an earlier session (no certificate exchanged).
    package var isSessionReused: Bool { SSL_session_reused(ssl) == 1 }

    /// Whether ALPN chose `larder/1` (false when the peer offered no ALPN).
    package var negotiatedLarderALPN: Bool { larder_ssl_alpn_is_larder(ssl) == 1 }

    /// What went wrong, with the certificate check's verdict when that is what failed.
    private func failure(during what: String) -> TLSError {
        let detail = TLSError.openSSL("the peer closed the connection")
        let verify = SSL_get_verify_result(ssl)
        if verify != Int(X509_V_OK), !context.isServer {
            let text = String(cString: X509_verify_cert_error_string(verify))
            return TLSError("the server's certificate was refused: \(text)")
        }
        return TLSError("\(what) failed: \(detail)")
    }
}

/// A TLS session a server issued a ticket for, to resume on a later connection to it. OpenSSL counts its references
/// and never changes it once made, so any thread may offer it.
package final class TLSSession: @unchecked Sendable {
    let session: OpaquePointer

    init(_ session: OpaquePointer) { self.session = session }

    deinit { SSL_SESSION_free(session) }
}
