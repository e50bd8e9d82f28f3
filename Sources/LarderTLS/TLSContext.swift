import COpenSSL

/// A TLS failure: what went wrong, in words a person can act on (never a key or a token).
package struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }

    /// The oldest error OpenSSL queued on this thread (the queue is cleared), or `fallback`.
    static func openSSL(_ fallback: String) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        larder_error_text(&buffer, buffer.count)
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.isEmpty ? fallback : text
    }
}

/// Settings shared by the connections of one side: certificates, trust, TLS versions (1.2 and 1.3) and ALPN
/// (`larder/1`). Immutable once made; a reload makes a new one, and connections keep the one they started with.
package final class TLSContext: @unchecked Sendable {
    let context: OpaquePointer
    package let isServer: Bool

    private init(server: Bool) throws(TLSError) {
        guard let context = larder_ctx_new(server ? 1 : 0) else {
            throw TLSError("cannot create a TLS context: " + TLSError.openSSL("out of memory"))
        }
        self.context = context
        isServer = server
    }

    deinit { SSL_CTX_free(context) }

    private func loadIdentity(certificate: String, key: String) throws(TLSError) {
        guard SSL_CTX_use_certificate_chain_file(context, certificate) == 1 else {
            throw TLSError(
                "cannot use the certificate \(certificate): " + TLSError.openSSL("not a PEM certificate")
                    + " (give a PEM file: the certificate, then any intermediates)")
        }
        guard SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1 else {
            throw TLSError(
                "cannot use the private key \(key): " + TLSError.openSSL("not a PEM private key")
                    + " (give an unencrypted PEM key)")
        }
        guard SSL_CTX_check_private_key(context) == 1 else {
            throw TLSError("the private key \(key) does not belong to the certificate \(certificate)")
        }
    }

    /// A server's context: its certificate chain and key (PEM) and, with `clientCA`, required client certificates
    /// signed by one of those CAs.
    package static func server(certificate: String, key: String, clientCA: String? = nil) throws(TLSError)
        -> TLSContext
    {
        let tls = try TLSContext(server: true)
        try tls.loadIdentity(certificate: certificate, key: key)
        if let clientCA, larder_ctx_require_client_certs(tls.context, clientCA) != 1 {
            throw TLSError(
                "cannot read the client CA file \(clientCA): " + TLSError.openSSL("not a PEM certificate list"))
        }
        return tls
    }

    /// A client's context: the server is verified against `ca` (PEM), or the system's trust store when nil, unless
    /// `verify` is false; `certificate` and `key` are the client's own, for servers that require one.
    package static func client(
        ca: String? = nil, certificate: String? = nil, key: String? = nil, verify: Bool = true
    ) throws(TLSError) -> TLSContext {
        let tls = try TLSContext(server: false)
        guard larder_ctx_verify_server(tls.context, ca, verify ? 1 : 0) == 1 else {
            throw TLSError(
                ca.map { "cannot read the CA file \($0): " + TLSError.openSSL("not a PEM certificate list") }
                    ?? "cannot load the system's trust store: " + TLSError.openSSL("no CA certificates found"))
        }
        switch (certificate, key) {
        case (let certificate?, let key?): try tls.loadIdentity(certificate: certificate, key: key)
        case (nil, nil): break
        default: throw TLSError("a client certificate needs its key, and a key its certificate: give both")
        }
        return tls
    }
}
