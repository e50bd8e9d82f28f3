import LarderWire

extension ConnectionStateMachine {
    /// What every connection of a server shares: limits, tokens, compression and the high-water marks.
    package struct Configuration: Sendable {
        package var limits: Limits
        /// The tokens HELLO accepts and what each may do; nil: no token is required and every client is an admin.
        package var tokens: (any TokenSource)?
        /// The identity providers whose ID tokens HELLO accepts (`idToken`); nil: none.
        package var identityProviders: (any IDTokenSignIn)?
        /// The accounts Larder keeps, whose sessions HELLO accepts (`session`); nil: none (no `--users`).
        package var accounts: (any SessionSignIn)?
        package var compressionThreshold: Int
        package var zlibLevel: Int32
        /// Unsent output at which reading pauses; it resumes below half of it.
        package var outputHighWaterBytes: Int
        /// Bytes of requests read and not yet answered (JSON parts inflated, plus binary parts) at which reading
        /// pauses; it resumes below half of it. Without it, 128 pipelined frames of 4 KiB that each inflate to
        /// 4 MiB would hold half a gigabyte.
        package var inputHighWaterBytes: Int
        package var serverName: String

        package init(
            limits: Limits = .default, token: String? = nil, compressionThreshold: Int = FrameEncoder.defaultThreshold,
            zlibLevel: Int32 = FrameEncoder.defaultLevel, outputHighWaterBytes: Int = 4 << 20,
            inputHighWaterBytes: Int = 16 << 20, serverName: String = "larder-server", tokens: (any TokenSource)? = nil
        ) {
            self.limits = limits
            self.tokens = tokens ?? token.map { FixedTokens(TokenTable(adminToken: $0)) }
            self.compressionThreshold = compressionThreshold
            self.zlibLevel = zlibLevel
            self.outputHighWaterBytes = outputHighWaterBytes
            self.inputHighWaterBytes = inputHighWaterBytes
            self.serverName = serverName
        }
    }
}
