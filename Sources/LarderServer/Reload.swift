import LarderSync
import LarderTLS
import LarderWire

/// What SIGHUP reads again without dropping a connection: the token file, and the TLS certificate and key.
extension LarderServer {
    /// The tokens `configuration` asks for: `--token` as one admin token, then the lines of `--token-file`.
    static func tokenTable(_ configuration: ServerConfiguration) throws(ConfigurationError) -> TokenTable? {
        var table = configuration.token.map { TokenTable(adminToken: $0) }
        if let path = configuration.tokenFile {
            let file = try TokenTable.load(path: path)
            table = table?.merging(file) ?? file
        }
        return table
    }

    /// The token table at start-up. A token file that cannot be read leaves a server that accepts no token (the
    /// throwing initializer refuses to start instead; this one serves a store it was handed, and fails closed).
    static func initialTokens(_ configuration: ServerConfiguration, logger: Logger) -> Tokens? {
        do throws(ConfigurationError) {
            return try tokenTable(configuration).map(Tokens.init)
        } catch {
            logger.error("\(error.message); no token is accepted until it is fixed and the server reloaded (SIGHUP)")
            return Tokens(TokenTable())
        }
    }

    /// The identity providers `configuration` trusts, their keys read from their JWKS files; nil without
    /// `--oidc-issuer`.
    static func identityProviders(_ configuration: ServerConfiguration) throws(ConfigurationError)
        -> IdentityProviders?
    {
        guard !configuration.oidcIssuers.isEmpty else { return nil }
        let providers = IdentityProviders(issuers: configuration.oidcIssuers, leewayMs: configuration.oidcLeewayMs)
        _ = try providers.reload()
        return providers
    }

    /// The identity providers at start-up. When a JWKS file cannot be read, the server accepts no ID token until it
    /// is fixed and reloaded (the throwing initializer refuses to start instead; this one fails closed).
    static func initialIdentityProviders(_ configuration: ServerConfiguration, logger: Logger) -> IdentityProviders? {
        guard !configuration.oidcIssuers.isEmpty else { return nil }
        let providers = IdentityProviders(issuers: configuration.oidcIssuers, leewayMs: configuration.oidcLeewayMs)
        do throws(ConfigurationError) {
            for line in try providers.reload() { logger.warn("JWKS: \(line)") }
        } catch {
            logger.error("\(error.message); no ID token is accepted until it is fixed and the server reloaded (SIGHUP)")
        }
        return providers
    }

    /// The TLS context `configuration` asks for, or nil without `--tls-cert`.
    static func tlsContexts(_ configuration: ServerConfiguration) throws(TLSError) -> TLSContexts? {
        guard let certificate = configuration.tlsCertificate, let key = configuration.tlsKey else { return nil }
        return try TLSContexts(certificate: certificate, key: key, clientCA: configuration.tlsClientCA)
    }

    /// The TLS context at start-up; one that fails to load leaves a TLS port that closes every connection (the
    /// throwing initializer refuses to start instead).
    static func initialTLS(_ configuration: ServerConfiguration, logger: Logger) -> TLSContexts? {
        do throws(TLSError) {
            return try tlsContexts(configuration)
        } catch {
            logger.error("TLS: \(error.message); the TLS port refuses every connection")
            return nil
        }
    }

    /// Reads the TLS certificate and key and the token file again (SIGHUP). Open connections keep their TLS session;
    /// new ones get the new certificate. Every open connection then looks its token up again, on its own event loop
    /// (`recheckConnections`). A file that does not load changes nothing: the error is logged and what is in force
    /// stays.
    public func reload() {
        context.logger.info("SIGHUP received: reloading")
        if let tlsContexts {
            do throws(TLSError) {
                try tlsContexts.reload()
                context.logger.info("TLS certificate \(tlsContexts.certificate) reloaded")
            } catch {
                context.logger.error("TLS: \(error.message); the certificate in force is kept")
            }
        }
        if let identityProviders {
            do throws(ConfigurationError) {
                let skipped = try identityProviders.reload()
                for line in skipped { context.logger.warn("JWKS: \(line)") }
                context.logger.info("JWKS reloaded for \(configuration.oidcIssuers.count) identity provider(s)")
            } catch {
                context.logger.error("\(error.message); the keys in force are kept")
            }
        }
        guard let tokens, configuration.tokenFile != nil else { return }
        do throws(ConfigurationError) {
            guard let table = try LarderServer.tokenTable(configuration) else { return }
            tokens.replace(with: table)
            context.logger.info("token file reloaded: \(table.entries.count) token(s)")
            recheckConnections()
        } catch {
            context.logger.error("\(error.message); the tokens in force are kept")
        }
    }

    /// Holds every open connection to the token table now in force, without waiting for its next request (a
    /// subscriber may send none): a removed token's connection gets UNAUTHENTICATED and closes, a narrowed token's
    /// subscriptions on what it lost end. Each shard does its own connections on its loop, where their state lives;
    /// this thread only posts the work, and the last shard to finish logs the sum.
    private func recheckConnections() {
        let tally = Locked((shardsLeft: shards.count, sum: TokenRecheck()))
        let logger = context.logger
        for shard in shards {
            shard.loop.async {
                let done = shard.tokensReloaded()
                let finished: TokenRecheck? = tally.withLock {
                    $0.sum = $0.sum + done
                    $0.shardsLeft -= 1
                    return $0.shardsLeft == 0 ? $0.sum : nil
                }
                guard let finished else { return }
                logger.info(
                    "tokens checked again on \(finished.checked) connection(s): \(finished.closed) closed (token "
                        + "removed), \(finished.subscriptionsEnded) subscription(s) ended (collections narrowed)")
            }
        }
    }
}
