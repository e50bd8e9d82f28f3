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

// Parallel table (`duplicates` pairs these on purpose): a public memberwise initializer, as every public value type of the
// client and the wire has (Messages.swift).
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

/// A connection's TLS session (Protocol.md section 10.1), driven by its I/O thread's poll loop (IOThread.swift): the
/// thread feeds it what the socket reads and sends what it encrypts, so no caller ever waits on the handshake or on the
/// network. Touched only by that thread once the thread starts.
final class ClientTLS: @unchecked Sendable {
    let engine: TLSEngine
    let settings: LarderClient.TLSSettings
    let host: String
    let endpoint: String
    /// The first bytes the server sent, to tell a plain Larder server from a TLS one.
    var firstBytes: [UInt8] = []

    /// A session for `host`; errors say what went wrong in terms of the options that fix it.
    init(host: String, settings: LarderClient.TLSSettings, endpoint: String) throws(LarderError) {
        do throws(TLSError) {
            let context = try TLSContext.client(
                ca: settings.caFile, certificate: settings.certificateFile, key: settings.keyFile,
                verify: !settings.skipVerification)
            engine = try TLSEngine(context: context, serverName: settings.serverName ?? host)
        } catch {
            throw ClientSocket.connectError(endpoint, error.message)
        }
        self.settings = settings
        self.host = host
        self.endpoint = endpoint
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
        if message.contains("wrong version number") || message.contains("packet length too long")
            || message.contains("record layer failure")
        {
            return "the server did not answer TLS (\(message)): it does not speak TLS on this port"
        }
        return "the TLS handshake failed: \(message)"
    }
}
