import LarderWire

// What HELLO asks of the sign-ins a server offers besides role tokens, as protocols: the connection's state machine and
// `HelloNegotiation` stay pure (no store, no key library), so they are built and fuzzed on their own.

/// HELLO's check of an ID token (`IdentityProviders`).
package protocol IDTokenSignIn: Sendable {
    /// The user `idToken` signs the connection in as (`ISSUER|SUBJECT`), or the refusal HELLO answers
    /// (UNAUTHENTICATED, field `idToken`, naming the check that failed and never the token).
    func user(ofIDToken idToken: String) throws(LarderError) -> String
}

/// HELLO's check of a session of an account Larder keeps (`PasswordAccounts`).
package protocol SessionSignIn: Sendable {
    /// The user whose session `text` is, the session's storage key and when it expires (milliseconds since 1970);
    /// or UNAUTHENTICATED.
    func user(ofSession text: String) throws(LarderError) -> SessionSignIn.Found
}

extension SessionSignIn {
    /// A session in force: its user, its storage key, and when it expires (milliseconds since 1970).
    package typealias Found = (user: String, key: [UInt8], expiresAt: Int64)
}
