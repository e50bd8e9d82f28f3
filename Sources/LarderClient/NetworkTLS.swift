#if canImport(Network)
import Foundation
import LarderIO
import LarderSync
import LarderWire
import Network
import Security

/// TLS on Apple platforms, which have no GnuTLS: Network.framework connects and runs TLS, and a relay copies the
/// plaintext to and from one end of a socket pair whose other end the connection's I/O thread reads and writes as it
/// does a plain socket. (No Apple build was compiled where this was written; README's "Platforms" says so.)
///
/// `caFile` (PEM) replaces the system's trust store, `serverName` is the name the certificate must carry (and the SNI),
/// `skipVerification` accepts any certificate. A client certificate is refused: Network.framework takes one only as a
/// keychain identity, not as PEM files.
enum NetworkTLS {
    /// The I/O thread's end of a socket pair relayed to a TLS connection to `host:port` whose handshake finished
    /// within `timeoutMs`; a connect error (UNAVAILABLE, `reason: connect`) saying what failed otherwise.
    static func connect(
        host: String, port: Int, shared: ClientTLSShared, endpoint: String, timeoutMs: Int
    ) throws(LarderError) -> Int32 {
        let settings = shared.settings
        guard settings.certificateFile == nil && settings.keyFile == nil else {
            throw ClientSocket.connectError(
                endpoint, "client certificates are not supported by LarderClient's TLS on Apple platforms: connect "
                    + "without TLSSettings.certificateFile and keyFile")
        }
        guard let serverPort = NWEndpoint.Port(rawValue: UInt16(clamping: port)) else {
            throw ClientSocket.connectError(endpoint, "the port must be 1 to 65535")
        }
        var anchors: [Data]?
        if let caFile = settings.caFile { anchors = try certificates(in: caFile, endpoint: endpoint) }
        let queue = DispatchQueue(label: "larder-client-tls")
        let tls = NWProtocolTLS.Options()
        let security = tls.securityProtocolOptions
        sec_protocol_options_set_min_tls_protocol_version(security, .TLSv12)
        sec_protocol_options_set_tls_server_name(security, settings.serverName ?? host)
        if settings.skipVerification {
            sec_protocol_options_set_verify_block(security, { _, _, complete in complete(true) }, queue)
        } else if let anchors {
            // The chain must lead to a certificate of the CA file (and only there); the name is checked as usual.
            sec_protocol_options_set_verify_block(
                security,
                { _, trust, complete in
                    let chain = sec_trust_copy_ref(trust).takeRetainedValue()
                    let roots = anchors.compactMap { SecCertificateCreateWithData(nil, $0 as CFData) }
                    SecTrustSetAnchorCertificates(chain, roots as CFArray)
                    SecTrustSetAnchorCertificatesOnly(chain, true)
                    SecTrustEvaluateAsyncWithError(chain, queue) { _, trusted, _ in complete(trusted) }
                }, queue)
        }
        let tcp = NWProtocolTCP.Options()
        tcp.noDelay = true
        let connection = NWConnection(
            host: NWEndpoint.Host(host), port: serverPort, using: NWParameters(tls: tls, tcp: tcp))
        let relay = try NetworkTLSRelay(connection: connection, endpoint: endpoint)
        try relay.handshake(queue: queue, timeoutMs: timeoutMs)
        shared.handshakeDone(resumed: false)
        return relay.start()
    }

    /// The DER bytes of each PEM certificate in the file at `path`.
    static func certificates(in path: String, endpoint: String) throws(LarderError) -> [Data] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ClientSocket.connectError(endpoint, "cannot read the CA file \(path)")
        }
        var found: [Data] = []
        var base64: String?
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed == "-----BEGIN CERTIFICATE-----" {
                base64 = ""
            } else if trimmed == "-----END CERTIFICATE-----", let body = base64 {
                guard let der = Data(base64Encoded: body) else {
                    throw ClientSocket.connectError(
                        endpoint, "the CA file \(path) holds a certificate that is not base64")
                }
                found.append(der)
                base64 = nil
            } else if base64 != nil {
                base64! += trimmed
            }
        }
        guard !found.isEmpty else {
            throw ClientSocket.connectError(endpoint, "the CA file \(path) holds no PEM certificate")
        }
        return found
    }

    /// Why a connection or its handshake failed, in words.
    static func describe(_ error: NWError) -> String {
        switch error {
        case .posix(let code):
            return String(cString: strerror(code.rawValue))
        case .dns(let code):
            return "cannot resolve host (DNS error \(code))"
        case .tls(let status):
            let text = SecCopyErrorMessageString(status, nil).map { $0 as String } ?? "OSStatus \(status)"
            return "the TLS handshake failed: \(text) (give the CA that signed the server's certificate in "
                + "TLSSettings.caFile, or the name it carries in TLSSettings.serverName)"
        default:
            return "\(error)"
        }
    }
}

/// Copies plaintext between a Network.framework connection and the relay's end of a socket pair, each way on its own:
/// what the server sends is written to the socket before the next piece is asked for, and what the I/O thread writes
/// to its end is read by the relay's thread and sent before the next read. Either way ending ends both (the
/// connection is cancelled and the socket shut down); the relay's end is closed once both have stopped.
final class NetworkTLSRelay: @unchecked Sendable {  // the descriptors are set before either direction starts
    private let connection: NWConnection
    private let endpoint: String
    /// The I/O thread's end and the relay's.
    private let ends: (app: Int32, relay: Int32)
    /// Writes what the server sent, off the connection's queue (a write may wait for the I/O thread to read).
    private let writer = DispatchQueue(label: "larder-client-tls-relay")
    /// The directions still running.
    private let running = Locked(2)
    /// Set once by the first state the connection settles in: `.some(nil)` when ready, else why it failed.
    private let settled = Locked<String??>(nil)

    init(connection: NWConnection, endpoint: String) throws(LarderError) {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, SOCK_STREAM, 0, &pair) == 0 else {
            let code = errno
            throw ClientSocket.connectError(endpoint, "socketpair: \(ClientSocket.errnoText(code))", errno: code)
        }
        var one: Int32 = 1
        for fd in pair {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        self.connection = connection
        self.endpoint = endpoint
        ends = (pair[0], pair[1])
    }

    /// Connects and runs the handshake, waiting at most `timeoutMs`; throws a connect error (and closes everything)
    /// when the connection fails, waits for a network, or is not ready in time.
    func handshake(queue: DispatchQueue, timeoutMs: Int) throws(LarderError) {
        let done = DispatchSemaphore(value: 0)
        let settled = self.settled
        connection.stateUpdateHandler = { state in
            let outcome: String??
            switch state {
            case .ready: outcome = .some(nil)
            case .waiting(let error), .failed(let error): outcome = .some(NetworkTLS.describe(error))
            case .cancelled: outcome = .some("the connection was cancelled")
            default: outcome = nil
            }
            guard let outcome else { return }
            let first = settled.withLock { settled in
                guard settled == nil else { return false }
                settled = .some(outcome)
                return true
            }
            if first { done.signal() }
        }
        connection.start(queue: queue)
        let failure: String?
        if done.wait(timeout: .now() + .milliseconds(max(1, timeoutMs))) == .timedOut {
            failure = "no TLS handshake within the connect timeout"
        } else {
            failure = settled.withLock { $0 ?? nil }
        }
        guard let failure else { return }
        connection.stateUpdateHandler = nil
        connection.cancel()
        Socket.close(ends.app)
        Socket.close(ends.relay)
        throw ClientSocket.connectError(endpoint, failure)
    }

    /// Starts both directions and returns the I/O thread's end.
    func start() -> Int32 {
        receive()
        let thread = Thread { [self] in sendLoop() }
        thread.name = "larder-client-tls"
        thread.stackSize = 256 << 10
        thread.start()
        return ends.app
    }

    /// Server to app: each piece received is written to the socket before the next is asked for.
    private func receive() {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 64 << 10) {
            [self] content, _, isComplete, error in
            let ended = isComplete || error != nil
            writer.async { [self] in
                var open = !ended
                if let content, !content.isEmpty, content.withUnsafeBytes({ Socket.sendAll(ends.relay, $0) }) != 0 {
                    open = false
                }
                if open { receive() } else { stopped() }
            }
        }
    }

    /// App to server: what the I/O thread wrote, each piece sent before the next is read, until its end closes.
    private func sendLoop() {
        let capacity = 64 << 10
        let chunk = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        defer { chunk.deallocate() }
        while true {
            let n = Socket.receive(ends.relay, chunk, capacity)
            guard n > 0 else { break }
            let sent = DispatchSemaphore(value: 0)
            let failed = Locked(false)
            connection.send(
                content: Data(bytes: chunk, count: n),
                completion: .contentProcessed { error in
                    if error != nil { failed.withLock { $0 = true } }
                    sent.signal()
                })
            sent.wait()
            if failed.withLock({ $0 }) { break }
        }
        stopped()
    }

    /// One direction has stopped: the other is stopped too (the cancelled connection ends the receive, the shut-down
    /// socket the read), and the second to stop closes the relay's end.
    private func stopped() {
        connection.stateUpdateHandler = nil
        connection.cancel()
        _ = shutdown(ends.relay, Int32(SHUT_RDWR))
        let last = running.withLock { count in
            count -= 1
            return count == 0
        }
        if last { Socket.close(ends.relay) }
    }
}
#endif
