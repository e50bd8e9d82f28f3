import LarderWire

/// What SIGHUP reads again without dropping a connection: the token file (and, with TLS, the certificate and key).
extension LarderServer {
    /// The tokens `configuration` asks for: `--token` as one admin token, then the lines of `--token-file`.
    static func tokenTable(_ configuration: ServerConfiguration) throws(ServerOptions.UsageError) -> TokenTable? {
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
        do throws(ServerOptions.UsageError) {
            return try tokenTable(configuration).map(Tokens.init)
        } catch {
            logger.error("\(error.message); no token is accepted until it is fixed and the server reloaded (SIGHUP)")
            return Tokens(TokenTable())
        }
    }

    /// Reads the token file again (SIGHUP). Connections stay open; each looks its token up again at its next request.
    /// A file that does not parse changes nothing: the error is logged and the tokens in force stay.
    public func reload() {
        context.logger.info("SIGHUP received: reloading")
        guard let tokens, configuration.tokenFile != nil else { return }
        do throws(ServerOptions.UsageError) {
            guard let table = try LarderServer.tokenTable(configuration) else { return }
            tokens.replace(with: table)
            context.logger.info("token file reloaded: \(table.entries.count) token(s)")
        } catch {
            context.logger.error("\(error.message); the tokens in force are kept")
        }
    }
}
