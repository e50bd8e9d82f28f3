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

    /// Who a HELLO signed the connection in as.
    package enum Caller {
        /// A role token and what it may do (Protocol.md section 10.2).
        case token(Granted)
        /// A user, by the id a valid ID token proves (`issuer|subject`).
        case user(String)
        /// An account Larder keeps (`larder|<uuid>`), by a session in force, and that session's storage key.
        case account(String, session: [UInt8])
        /// No token on a server that accepts ID tokens and requires no role token: the collections whose rules say
        /// `public` only.
        case anonymous
    }

    package enum Outcome {
        /// `caller` is nil when the server requires no token and accepts no ID token: the connection may do anything.
        case accepted(HelloResponse, compression: Bool, caller: Caller?)
        /// `close`: the connection ends after the error (a wrong token).
        case rejected(LarderError, close: Bool)
        /// The HELLO presented a session, which only the store can check: look it up off the event loop
        /// (`SessionSignIn`), then finish with `negotiated(_:session:configuration:tls:)`.
        case lookUpSession(String, Negotiated)
    }

    /// What a HELLO agreed to before its caller is known: the protocol version and whether replies are compressed.
    package struct Negotiated: Equatable, Sendable {
        package var version: Int
        package var compression: Bool
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
        let negotiated = Negotiated(version: version, compression: request.compression.contains(zlibCompression))
        var caller: Caller?
        if let session = request.session {
            guard configuration.accounts != nil else {
                return .rejected(
                    LarderError(
                        .unauthenticated, "this server keeps no accounts (it runs without --users); sign in with a token",
                        field: "session"),
                    close: true)
            }
            return .lookUpSession(session, negotiated)
        } else if let idToken = request.idToken {
            guard let providers = configuration.identityProviders else {
                let why = "this server accepts no ID tokens (it trusts no identity provider); sign in with a token"
                return .rejected(LarderError(.unauthenticated, why, field: "idToken"), close: true)
            }
            do throws(LarderError) {
                caller = .user(try providers.user(ofIDToken: idToken))
            } catch {
                return .rejected(error, close: true)
            }
        } else if request.token == nil, configuration.accounts != nil {
            // A server that keeps accounts lets a connection without credentials in, to sign up or sign in.
            caller = .anonymous
        } else if let tokens = configuration.tokens {
            guard let presented = request.token else {
                let wanted = configuration.identityProviders == nil ? "a token" : "a token or a user's idToken"
                return .rejected(
                    LarderError(.unauthenticated, "this server requires \(wanted) in HELLO", field: "token"),
                    close: true)
            }
            let (table, generation) = tokens.current
            let token = Array(presented.utf8)
            guard let grant = table.grant(for: token) else {
                return .rejected(LarderError(.unauthenticated, "the token is not valid", field: "token"), close: true)
            }
            caller = .token(Granted(token: token, grant: grant, generation: generation))
        } else if configuration.identityProviders != nil {
            caller = .anonymous
        }
        return accepted(negotiated, caller: caller, configuration: configuration, tls: tls)
    }

    /// The end of a HELLO that presented a session: accepted as the session's user, or refused (and the connection
    /// closed) when the lookup found no session in force.
    package static func negotiated(
        _ negotiated: Negotiated, session: Result<SessionSignIn.Found, LarderError>,
        configuration: ConnectionStateMachine.Configuration, tls: Bool = false
    ) -> Outcome {
        switch session {
        case .success(let (user, key, expiresAt)):
            accepted(
                negotiated, caller: .account(user, session: key), sessionExpiresAt: expiresAt,
                configuration: configuration, tls: tls)
        case .failure(let error):
            .rejected(error, close: true)
        }
    }

    private static func accepted(
        _ negotiated: Negotiated, caller: Caller?, sessionExpiresAt: Int64? = nil,
        configuration: ConnectionStateMachine.Configuration, tls: Bool
    ) -> Outcome {
        let compression = negotiated.compression
        var response = HelloResponse(
            version: negotiated.version, compression: compression ? zlibCompression : "none",
            compressionThreshold: configuration.compressionThreshold, limits: configuration.limits,
            server: configuration.serverName, authRequired: configuration.tokens != nil)
        switch caller {
        case .token(let granted):
            response.role = granted.grant.role.description
            response.collections = granted.grant.collections?.sorted()
        case .user(let id), .account(let id, _):
            response.user = SignedInUser(id: id, sessionExpiresAt: sessionExpiresAt)
        case .anonymous, nil:
            break
        }
        if tls { response.tls = true }
        return .accepted(response, compression: compression, caller: caller)
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
