import LarderWire

/// What a HELLO agrees to (protocol version, compression, the token's grant) or why it is refused: pure, so it is
/// tested without sockets.
package enum HelloNegotiation {
    /// The token a HELLO presented, what it may do, and the token table's generation it was checked against.
    package struct Granted {
        package var token: [UInt8]
        package var grant: Grant
        package var generation: Int
    }

    package enum Outcome {
        /// `granted` is nil when the server requires no token.
        case accepted(HelloResponse, compression: Bool, granted: Granted?)
        /// `close`: the connection ends after the error (a wrong token).
        case rejected(LarderError, close: Bool)
    }

    package static func negotiate(
        _ frame: Frame, configuration: ConnectionStateMachine.Configuration, tls: Bool = false
    ) -> Outcome {
        let request: HelloRequest
        do throws(LarderError) {
            request = try HelloRequest(json: try frame.jsonObject())
        } catch {
            return .rejected(error, close: false)
        }
        guard let version = request.versions.filter({ ProtocolVersions.supported.contains($0) }).max() else {
            let offered = request.versions.map(String.init).joined(separator: ", ")
            return .rejected(
                LarderError(
                    .unsupportedVersion,
                    "none of the offered protocol versions (\(offered)) is supported; this server speaks "
                        + ProtocolVersions.supported.map(String.init).joined(separator: ", "),
                    field: "versions",
                    details: ["supported": .array(ProtocolVersions.supported.map { .int(Int64($0)) })]),
                close: false)
        }
        var granted: Granted?
        if let tokens = configuration.tokens {
            guard let presented = request.token else {
                return .rejected(
                    LarderError(.unauthenticated, "this server requires a token in HELLO", field: "token"), close: true)
            }
            let (table, generation) = tokens.current
            let token = Array(presented.utf8)
            guard let grant = table.grant(for: token) else {
                return .rejected(LarderError(.unauthenticated, "the token is not valid", field: "token"), close: true)
            }
            granted = Granted(token: token, grant: grant, generation: generation)
        }
        let compression = request.compression.contains(zlibCompression)
        var response = HelloResponse(
            version: version, compression: compression ? zlibCompression : "none",
            compressionThreshold: configuration.compressionThreshold, limits: configuration.limits,
            server: configuration.serverName, authRequired: configuration.tokens != nil)
        if let granted {
            response.role = granted.grant.role.description
            response.collections = granted.grant.collections?.sorted()
        }
        if tls { response.tls = true }
        return .accepted(response, compression: compression, granted: granted)
    }

    /// Compares without an early exit, so the time taken does not reveal how much of a guess was right.
    package static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(truncatingIfNeeded: a.count ^ b.count)
        let n = max(a.count, b.count)
        for i in 0..<n {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= x ^ y
        }
        return difference == 0 && a.count == b.count
    }
}
