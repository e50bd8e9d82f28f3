import LarderSync
import LarderWire

#if os(Linux) && !LARDER_PORTABLE
import LarderTLS
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension LarderClient {
    /// TLS to the server (Protocol.md section 10.1). The server's certificate is verified against the system's trust
    /// store, or `caFile`, and must name the host connected to (or `serverName`). On Linux through GnuTLS; on Apple
    /// platforms through Network.framework, which takes no client certificate from files (`certificateFile` is
    /// refused there). A build with neither (the portable configuration) refuses TLS with INVALID_ARGUMENT.
    public struct TLSSettings: Sendable, Hashable {
        /// CA certificates (PEM) to trust instead of the system's store.
        public var caFile: String?
        /// The name the server's certificate must carry, when it is not the host connected to.
        public var serverName: String?
        /// The client's certificate and key (PEM), for a server that requires one.
        public var certificateFile: String?
        /// The key of `certificateFile` (PEM).
        public var keyFile: String?
        /// Accept any certificate: for tests only, since anyone in the path can then read and change everything.
        public var skipVerification: Bool

// A public memberwise initializer, as every public value type of the
// client and the wire has (Messages.swift).
        /// TLS settings; the defaults verify the server against the system's trust store.
        ///
        /// ```swift
        /// let tls = LarderClient.TLSSettings(caFile: "ca.pem", serverName: "larder.internal")
        /// ```
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

/// What the TLS connections of one `LarderClient` share: the settings and the count of handshakes. On Linux (GnuTLS)
/// also the context made from the settings' certificate files, read once by the first connection's I/O thread (never
/// on a caller's thread, and not again per connection), and the session each server last issued a ticket for, which
/// the next connection to it offers: a reconnecting client resumes it and skips the certificate exchange (TLS session
/// resumption). Apple platforms use Network.framework (NetworkTLS.swift), which resumes sessions by itself.
final class ClientTLSShared: Sendable {
    let settings: LarderClient.TLSSettings
    private let state = Locked(State())

    private struct State {
        #if os(Linux) && !LARDER_PORTABLE
        var context: TLSContext?
        var sessions: [String: TLSSession] = [:]
        #endif
        var fullHandshakes = 0
        var resumedHandshakes = 0
    }

    init(settings: LarderClient.TLSSettings) { self.settings = settings }

    #if os(Linux) && !LARDER_PORTABLE
    /// The context, made from the files at the first call; a failure is not kept, so the next connection reads the
    /// files again.
    func context() throws(TLSError) -> TLSContext {
        try state.withLock { (state) throws(TLSError) -> TLSContext in
            if let context = state.context { return context }
            let context = try TLSContext.client(
                ca: settings.caFile, certificate: settings.certificateFile, key: settings.keyFile,
                verify: !settings.skipVerification)
            state.context = context
            return context
        }
    }

    func session(for endpoint: String) -> TLSSession? { state.withLock { $0.sessions[endpoint] } }

    func remember(_ session: TLSSession, for endpoint: String) { state.withLock { $0.sessions[endpoint] = session } }
    #endif

    func handshakeDone(resumed: Bool) {
        state.withLock { resumed ? ($0.resumedHandshakes += 1) : ($0.fullHandshakes += 1) }
    }

    /// Handshakes completed so far: with the certificate exchange, and resumed.
    var handshakes: (full: Int, resumed: Int) { state.withLock { ($0.fullHandshakes, $0.resumedHandshakes) } }
}

#if !os(Linux) || LARDER_PORTABLE
extension ClientTLSShared {
    /// How a connection to `endpoint` with these settings connects, where GnuTLS is not: Network.framework's TLS
    /// behind a relay on Apple platforms (NetworkTLS.swift). The portable configuration (a Linux build of the client
    /// as an Apple platform builds it) has neither and throws INVALID_ARGUMENT (field `tls`), never connecting plain.
    func connector(
        to endpoint: LarderClient.Endpoint, timeoutMs: Int
    ) throws(LarderError) -> () throws(LarderError) -> Int32 {
        guard case .tcp(let host, let port) = endpoint else {
            throw ClientSocket.connectError(endpoint.description, "TLS is for TCP; a Unix socket is always plain")
        }
        #if canImport(Network)
        return { () throws(LarderError) -> Int32 in
            try NetworkTLS.connect(
                host: host, port: port, shared: self, endpoint: endpoint.description, timeoutMs: timeoutMs)
        }
        #else
        throw LarderError(
            .invalidArgument, "TLS is not available in this build of LarderClient (it has neither GnuTLS, as on Linux, "
                + "nor Network.framework, as on Apple platforms): connect to \(host):\(port) without TLS", field: "tls")
        #endif
    }
}
#else
/// A connection's TLS session (Protocol.md section 10.1), driven by its I/O thread's poll loop (IOThread.swift): the
/// thread feeds it what the socket reads and sends what it encrypts, so no caller ever waits on the handshake or on the
/// network. Made and touched only by that thread.
final class ClientTLS {
    let engine: TLSEngine
    let shared: ClientTLSShared
    var settings: LarderClient.TLSSettings { shared.settings }
    let host: String
    let endpoint: String
    /// The first bytes the server sent, to tell a plain Larder server from a TLS one.
    var firstBytes: [UInt8] = []
    /// Whether the session the server issued a ticket for is remembered for the next connection.
    private var rememberedSession = false

    /// A session for `host`, offering the one its server last issued a ticket for; errors say what went wrong in terms
    /// of the options that fix it.
    init(host: String, shared: ClientTLSShared, endpoint: String) throws(LarderError) {
        do throws(TLSError) {
            engine = try TLSEngine(context: try shared.context(), serverName: shared.settings.serverName ?? host)
        } catch {
            throw ClientSocket.connectError(endpoint, error.message)
        }
        if let session = shared.session(for: endpoint) { engine.offer(session) }
        self.shared = shared
        self.host = host
        self.endpoint = endpoint
    }

    /// The handshake is done: counts it, and remembers the session when the server already issued a ticket (TLS 1.2).
    func established() {
        shared.handshakeDone(resumed: engine.isSessionReused)
        rememberSession()
    }

    /// Remembers the session for the next connection once the server issued a ticket for it (in TLS 1.3, with the
    /// first records after the handshake); one check per read until then.
    func rememberSession() {
        guard !rememberedSession, let session = engine.resumableSession else { return }
        rememberedSession = true
        shared.remember(session, for: endpoint)
    }

    /// A connect error for a handshake that could not finish.
    func handshakeError(_ why: String) -> LarderError { ClientSocket.connectError(endpoint, why) }

    /// Records the first bytes the server sent during the handshake.
    func sawDuringHandshake(_ bytes: UnsafeRawBufferPointer) {
        if firstBytes.count < 6 { firstBytes += bytes.prefix(min(bytes.count, 6 - firstBytes.count)) }
    }

    /// Why the server closed the connection during the handshake.
    var closedDuringHandshake: String {
        firstBytes.isEmpty
            ? "the server closed the connection during the TLS handshake"
            : ClientTLS.explain("", firstBytes: firstBytes, settings: settings, host: host)
    }

    /// A handshake failure, explained.
    func handshakeFailed(_ error: TLSError) -> String {
        ClientTLS.explain(error.message, firstBytes: firstBytes, settings: settings, host: host)
    }

    /// A failure after the handshake (reading or writing records), in the words of the option that fixes it.
    static func sessionFailed(_ error: TLSError) -> String {
        if error.message.contains("certificate required") {
            return "the server requires a client certificate: give one with --tls-cert and --tls-key"
        }
        if error.message.contains("unknown ca") || error.message.contains("bad certificate") {
            return "the server refused the client certificate (\(error.message))"
        }
        return "TLS: \(error.message)"
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
        // GnuTLS's words for records that are not TLS (a plain Larder frame, HTTP, anything else).
        if message.contains("unexpected length") || message.contains("unsupported version")
            || message.contains("unexpected TLS packet")
        {
            return "the server did not answer TLS (\(message)): it does not speak TLS on this port"
        }
        return "the TLS handshake failed: \(message)"
    }
}
#endif
