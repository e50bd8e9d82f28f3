import CGnuTLS

/// One TLS session driven through memory: the owner moves ciphertext between the engine and its socket, so the engine
/// never blocks and never touches a descriptor. A server drives it from its event loop, a client from its reader
/// thread or poll loop alike. Not thread-safe: one owner at a time.
package final class TLSEngine {
    private let tls: UnsafeMutablePointer<larder_tls>
    private var session: gnutls_session_t { tls.pointee.session }
    /// Keeps the context alive as long as the session: GnuTLS points to its credentials, priorities and ticket key.
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
        var made: UnsafeMutablePointer<larder_tls>?
        let code = larder_tls_new(
            &made, context.isServer ? 1 : 0, context.credentials, context.priorities, context.ticketKey,
            context.isServer && context.verifiesPeer ? 1 : 0)
        guard code >= 0, let made else {
            throw TLSError("cannot start a TLS session: " + TLSError.gnuTLS(code))
        }
        if !context.isServer {
            let named =
                context.verifiesPeer
                ? larder_tls_verify_server(made, serverName) : serverName.map { larder_tls_send_name(made, $0) } ?? 0
            guard named >= 0 else {
                larder_tls_free(made)
                throw TLSError("cannot check the server's name \(serverName ?? ""): " + TLSError.gnuTLS(named))
            }
        }
        tls = made
        self.context = context
    }

    deinit { larder_tls_free(tls) }

    /// Ciphertext from the peer.
    package func feed(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = larder_tls_feed(tls, base, bytes.count)
    }

    /// Ciphertext waiting to be sent to the peer.
    package var pendingOutput: Int { larder_tls_pending_output(tls) }

    /// Ciphertext fed and not yet taken in by GnuTLS.
    private var unreadCiphertext: Int { larder_tls_unread_input(tls) }

    /// Ciphertext fed but not yet decrypted, plus plaintext decrypted but not yet read.
    package var pendingInput: Int { larder_tls_pending_input(tls) }

    /// Moves up to `buffer.count` bytes of ciphertext to send into `buffer`; returns how many.
    package func takeOutput(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0, pendingOutput > 0 else { return 0 }
        return larder_tls_take_output(tls, base, buffer.count)
    }

    /// Calls `body` with the pending ciphertext where it lies (valid only during the call; empty when there is none).
    package func withPendingOutput<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        var count = 0
        let start = larder_tls_peek_output(tls, &count)
        return body(UnsafeRawBufferPointer(start: start, count: count))
    }

    /// Drops the first `count` bytes of the pending ciphertext (sent).
    package func consumeOutput(_ count: Int) {
        larder_tls_consume_output(tls, min(count, pendingOutput))
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
        while true {
            let unread = unreadCiphertext
            let code = gnutls_handshake(session)
            switch code {
            case GNUTLS_E_SUCCESS:
                isHandshakeDone = true
                if context.isServer, larder_tls_send_ticket(tls) < 0 {
                    return .failed(TLSError("the TLS handshake failed: cannot send the session ticket"))
                }
                return .done
            case GNUTLS_E_AGAIN:
                if unreadCiphertext > 0 && unreadCiphertext < unread { continue }
                return .needsInput
            case GNUTLS_E_INTERRUPTED, GNUTLS_E_WARNING_ALERT_RECEIVED, GNUTLS_E_GOT_APPLICATION_DATA:
                continue
            default:
                if gnutls_error_is_fatal(code) == 0 { continue }
                // Tells the peer why (GnuTLS leaves the alert to the caller), so that its user reads a reason.
                if code != GNUTLS_E_FATAL_ALERT_RECEIVED { _ = gnutls_alert_send_appropriate(session, code) }
                return .failed(failure(code, during: "the TLS handshake"))
            }
        }
    }

    /// Decrypts into `buffer`.
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .bytes(0) }
        while true {
            let unread = unreadCiphertext
            let count = gnutls_record_recv(session, base, buffer.count)
            if count > 0 { return .bytes(count) }
            if count == 0 { return .closed }
            switch Int32(count) {
            case GNUTLS_E_AGAIN:
                // GnuTLS also says this after a record that carried no data (a TLS 1.3 session ticket, a key update):
                // the records after it are read now.
                if unreadCiphertext > 0 && unreadCiphertext < unread { continue }
                return .needsInput
            case GNUTLS_E_INTERRUPTED, GNUTLS_E_WARNING_ALERT_RECEIVED:
                continue
            case GNUTLS_E_REHANDSHAKE:
                // Larder never renegotiates: the peer is told so, and the session goes on as it was.
                _ = gnutls_alert_send(session, GNUTLS_AL_WARNING, GNUTLS_A_NO_RENEGOTIATION)
                continue
            default:
                if gnutls_error_is_fatal(Int32(count)) == 0 { continue }
                return .failed(failure(Int32(count), during: "reading"))
            }
        }
    }

    /// Encrypts `bytes` (all of them, a record per 16 KiB: the output buffer grows); the ciphertext is then pending.
    package func write(_ bytes: UnsafeRawBufferPointer) -> Result<Int, TLSError> {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .success(0) }
        var sent = 0
        while sent < bytes.count {
            let count = gnutls_record_send(session, base + sent, bytes.count - sent)
            if count > 0 {
                sent += count
            } else if count == Int(GNUTLS_E_INTERRUPTED) || count == Int(GNUTLS_E_AGAIN) {
                // Only when the output buffer could not grow: the caller takes the pending output and calls again.
                return sent > 0 ? .success(sent) : .failure(TLSError("writing failed: out of memory"))
            } else {
                return .failure(failure(Int32(count), during: "writing"))
            }
        }
        return .success(sent)
    }

    /// Queues close_notify (then send `pendingOutput`).
    package func close() {
        if isHandshakeDone { _ = gnutls_bye(session, GNUTLS_SHUT_WR) }
    }

    /// A client's session to offer the server before the handshake, to resume it.
    package func offer(_ session: TLSSession) {
        session.data.withUnsafeBytes { raw in
            _ = gnutls_session_set_data(self.session, raw.baseAddress, raw.count)
        }
    }

    /// The session to offer on a later connection, once the server sent a ticket for it (in TLS 1.3 after the
    /// handshake, with the first records read); nil before.
    package var resumableSession: TLSSession? {
        // Asked before the ticket arrived, GnuTLS would wait for it (reading the transport): the flag says it did.
        guard isHandshakeDone, !context.isServer, larder_tls_has_ticket(tls) == 1 else { return nil }
        var datum = gnutls_datum_t()
        guard gnutls_session_get_data2(session, &datum) >= 0, let data = datum.data else { return nil }
        defer { larder_gnutls_free(data) }
        return TLSSession(data: Array(UnsafeRawBufferPointer(start: data, count: Int(datum.size))))
    }

    /// Whether the handshake resumed an earlier session (no certificate exchanged).
    package var isSessionReused: Bool { gnutls_session_is_resumed(session) != 0 }

    /// Whether ALPN chose `larder/1` (false when the peer offered no ALPN).
    package var negotiatedLarderALPN: Bool { larder_tls_alpn_is_larder(tls) == 1 }

    /// What went wrong, with the certificate check's verdict when that is what failed, in words that name the cause
    /// (the client explains them in terms of its options).
    private func failure(_ code: Int32, during what: String) -> TLSError {
        if code == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR {
            let status = gnutls_session_get_verify_cert_status(session)
            if context.isServer { return TLSError("the client's certificate was refused: \(verdict(status))") }
            return TLSError("the server's certificate was refused: \(verdict(status))")
        }
        if code == GNUTLS_E_FATAL_ALERT_RECEIVED {
            return TLSError("\(what) failed: the peer sent the alert \(TLSEngine.alertName(gnutls_alert_get(session)))")
        }
        if code == GNUTLS_E_NO_CERTIFICATE_FOUND || code == GNUTLS_E_CERTIFICATE_REQUIRED {
            return TLSError("\(what) failed: certificate required (the client sent none)")
        }
        return TLSError("\(what) failed: " + TLSError.gnuTLS(code))
    }

    /// The certificate check's verdict, most telling first.
    private func verdict(_ status: UInt32) -> String {
        func has(_ flag: gnutls_certificate_status_t) -> Bool { status & flag.rawValue != 0 }
        if has(GNUTLS_CERT_SIGNER_NOT_FOUND) { return "unable to get local issuer certificate" }
        if has(GNUTLS_CERT_EXPIRED) { return "certificate has expired" }
        if has(GNUTLS_CERT_NOT_ACTIVATED) { return "certificate is not yet valid" }
        if has(GNUTLS_CERT_REVOKED) { return "certificate revoked" }
        if has(GNUTLS_CERT_INSECURE_ALGORITHM) { return "certificate signed with an insecure algorithm" }
        if has(GNUTLS_CERT_SIGNER_NOT_CA) { return "the issuer is not a CA" }
        if has(GNUTLS_CERT_UNEXPECTED_OWNER) { return "hostname mismatch" }
        if has(GNUTLS_CERT_SIGNATURE_FAILURE) { return "certificate signature failure" }
        var printed = gnutls_datum_t()
        guard gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &printed, 0) >= 0,
            let text = printed.data
        else { return "certificate verify failed" }
        defer { larder_gnutls_free(text) }
        return String(cString: UnsafeRawPointer(text).assumingMemoryBound(to: CChar.self))
    }

    /// An alert's name as RFC 8446 spells it, with spaces ("certificate required").
    static func alertName(_ alert: gnutls_alert_description_t) -> String {
        switch alert {
        case GNUTLS_A_CERTIFICATE_REQUIRED: return "certificate required"
        case GNUTLS_A_UNKNOWN_CA: return "unknown ca"
        case GNUTLS_A_BAD_CERTIFICATE: return "bad certificate"
        case GNUTLS_A_CERTIFICATE_EXPIRED: return "certificate expired"
        case GNUTLS_A_HANDSHAKE_FAILURE: return "handshake failure"
        case GNUTLS_A_PROTOCOL_VERSION: return "protocol version"
        case GNUTLS_A_NO_APPLICATION_PROTOCOL: return "no application protocol"
        case GNUTLS_A_DECODE_ERROR: return "decode error"
        case GNUTLS_A_ILLEGAL_PARAMETER: return "illegal parameter"
        default:
            return gnutls_alert_get_name(alert).map { String(cString: $0).lowercased() } ?? "alert \(alert.rawValue)"
        }
    }
}

/// A TLS session a server issued a ticket for, to resume on a later connection to it: GnuTLS's serialized session
/// (the ticket and the secret it stands for), immutable, so any thread may offer it.
package final class TLSSession: Sendable {
    let data: [UInt8]

    init(data: [UInt8]) { self.data = data }
}
