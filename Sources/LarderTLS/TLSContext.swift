import CGnuTLS

/// A TLS failure: what went wrong, in words a person can act on (never a key or a token).
package struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }

    /// GnuTLS's words for `code`.
    static func gnuTLS(_ code: Int32) -> String {
        gnutls_strerror(code).map { String(cString: $0) } ?? "GnuTLS error \(code)"
    }
}

/// Settings shared by the connections of one side: certificates, trust, TLS versions (1.2 and 1.3), cipher order and
/// ALPN (`larder/1`). Immutable once made; a reload makes a new one, and connections keep the one they started with
/// (each engine holds its context, and with it the credentials, the priorities and the ticket key GnuTLS points to).
package final class TLSContext: @unchecked Sendable {
    let credentials: gnutls_certificate_credentials_t
    let priorities: gnutls_priority_t
    package let isServer: Bool
    /// The server's key for session tickets (made per context: a reload makes a new one, and tickets issued before
    /// then fall back to a full handshake). Nil on a client.
    let ticketKey: UnsafeMutablePointer<gnutls_datum_t>?
    /// Whether the peer's certificate is verified: the server's by a client (unless told not to), a client's by a
    /// server that requires one.
    let verifiesPeer: Bool

    /// TLS 1.2 and 1.3 only; AEAD ciphers only, AES-GCM first (the CPU's AES instructions make it the cheapest), then
    /// ChaCha20-Poly1305 for CPUs without them; the server's order wins; X25519 first among the key-exchange groups,
    /// since it is the one clients send a key share for first (a server that prefers another group costs such a
    /// client a HelloRetryRequest, a round trip); safe renegotiation required of TLS 1.2 peers (and Larder never
    /// renegotiates: TLSEngine refuses a peer's request).
    package static let priorityString =
        "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305"
        + ":-MAC-ALL:+AEAD:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1:+GROUP-SECP521R1"
        + ":%SERVER_PRECEDENCE:%SAFE_RENEGOTIATION"

    private init(server: Bool, verifiesPeer: Bool) throws(TLSError) {
        var credentials: gnutls_certificate_credentials_t?
        var code = gnutls_certificate_allocate_credentials(&credentials)
        guard code >= 0, let credentials else {
            throw TLSError("cannot create a TLS context: " + TLSError.gnuTLS(code))
        }
        var priorities: gnutls_priority_t?
        code = gnutls_priority_init(&priorities, TLSContext.priorityString, nil)
        guard code >= 0, let priorities else {
            gnutls_certificate_free_credentials(credentials)
            throw TLSError("cannot set the TLS priorities: " + TLSError.gnuTLS(code))
        }
        var ticketKey: UnsafeMutablePointer<gnutls_datum_t>?
        if server {
            let key = UnsafeMutablePointer<gnutls_datum_t>.allocate(capacity: 1)
            key.initialize(to: gnutls_datum_t())
            code = gnutls_session_ticket_key_generate(key)
            guard code >= 0 else {
                key.deallocate()
                gnutls_priority_deinit(priorities)
                gnutls_certificate_free_credentials(credentials)
                throw TLSError("cannot make a session ticket key: " + TLSError.gnuTLS(code))
            }
            ticketKey = key
        }
        self.credentials = credentials
        self.priorities = priorities
        self.ticketKey = ticketKey
        self.verifiesPeer = verifiesPeer
        isServer = server
    }

    deinit {
        if let ticketKey {
            if let data = ticketKey.pointee.data {
                // The key is secret: it is wiped before its memory goes back.
                memsetZero(data, Int(ticketKey.pointee.size))
                larder_gnutls_free(data)
            }
            ticketKey.deallocate()
        }
        gnutls_priority_deinit(priorities)
        gnutls_certificate_free_credentials(credentials)
    }

    private func loadIdentity(certificate: String, key: String) throws(TLSError) {
        let code = gnutls_certificate_set_x509_key_file(credentials, certificate, key, GNUTLS_X509_FMT_PEM)
        guard code < 0 else { return }
        switch code {
        case GNUTLS_E_FILE_ERROR:
            throw TLSError(
                "cannot read the certificate \(certificate) or the key \(key) (give a PEM certificate chain and an "
                    + "unencrypted PEM key)")
        case GNUTLS_E_CERTIFICATE_KEY_MISMATCH:
            throw TLSError("the private key \(key) does not belong to the certificate \(certificate)")
        default:
            throw TLSError(
                "cannot use the certificate \(certificate) with the key \(key): " + TLSError.gnuTLS(code)
                    + " (give a PEM file: the certificate, then any intermediates, and an unencrypted PEM key)")
        }
    }

    /// Trusts the CAs of `file` (PEM); false when it holds none or cannot be read.
    private func trust(_ file: String) -> Bool {
        gnutls_certificate_set_x509_trust_file(credentials, file, GNUTLS_X509_FMT_PEM) > 0
    }

    /// A server's context: its certificate chain and key (PEM) and, with `clientCA`, required client certificates
    /// signed by one of those CAs.
    package static func server(certificate: String, key: String, clientCA: String? = nil) throws(TLSError)
        -> TLSContext
    {
        let tls = try TLSContext(server: true, verifiesPeer: clientCA != nil)
        try tls.loadIdentity(certificate: certificate, key: key)
        if let clientCA, !tls.trust(clientCA) {
            throw TLSError("cannot read the client CA file \(clientCA): not a PEM certificate list")
        }
        return tls
    }

    /// A client's context: the server is verified against `ca` (PEM), or the system's trust store when nil, unless
    /// `verify` is false; `certificate` and `key` are the client's own, for servers that require one.
    package static func client(
        ca: String? = nil, certificate: String? = nil, key: String? = nil, verify: Bool = true
    ) throws(TLSError) -> TLSContext {
        let tls = try TLSContext(server: false, verifiesPeer: verify)
        if verify {
            if let ca {
                guard tls.trust(ca) else { throw TLSError("cannot read the CA file \(ca): not a PEM certificate list") }
            } else if gnutls_certificate_set_x509_system_trust(tls.credentials) <= 0 {
                throw TLSError("cannot load the system's trust store: no CA certificates found")
            }
        }
        switch (certificate, key) {
        case (let certificate?, let key?): try tls.loadIdentity(certificate: certificate, key: key)
        case (nil, nil): break
        default: throw TLSError("a client certificate needs its key, and a key its certificate: give both")
        }
        return tls
    }
}

/// Zeroes `count` bytes at `pointer` (a secret about to be freed).
private func memsetZero(_ pointer: UnsafeMutableRawPointer, _ count: Int) {
    pointer.initializeMemory(as: UInt8.self, repeating: 0, count: count)
}
