import Foundation
import LarderWire

// Accounts the server keeps (email and password, on a server started with `--users`): sign up, sign in and out. A
// session signs in every connection the client opens afterwards (HELLO's `session`); save `session` to sign in again
// at the app's next launch without the password.
extension LarderClient {
    /// The session this client presents in HELLO: from `signIn`, `signUp` or `Configuration.session`; nil when
    /// signed out.
    public var session: String? { currentSession.withLock { $0 } }

    /// Signs in with an account the server keeps. The open connections close, and every connection opened after
    /// (at the next request) presents the new session, so the client acts as the account's user (`user`,
    /// `larder|<uuid>`) under the collections' rules.
    ///
    /// - Returns: the account and its session, with when the session ends (`expiresAt`, milliseconds since 1970).
    /// - Throws: `UNAUTHENTICATED` when the email or the password is wrong (the server does not say which);
    ///   `PERMISSION_DENIED` for a disabled user; `RESOURCE_EXHAUSTED` after too many failed sign-ins (its
    ///   `details["retryAfterMs"]` says when to try again); and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    @discardableResult
    public func signIn(email: String, password: String) async throws(LarderError) -> AccountSession {
        try await startSession(.signIn, email: email, password: password)
    }

    /// Creates an account and signs in with it, as `signIn` does. The server must allow sign-up
    /// (`larder-server --users --allow-sign-up`); otherwise only an admin creates users.
    ///
    /// - Throws: `CONFLICT` when the email has an account; `INVALID_ARGUMENT` for an email that is not an address
    ///   or a password outside the server's bounds (HELLO's `limits.minPasswordBytes`, `maxPasswordBytes`);
    ///   `PERMISSION_DENIED` on a server that allows no sign-up; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any
    ///   request.
    @discardableResult
    public func signUp(email: String, password: String) async throws(LarderError) -> AccountSession {
        try await startSession(.signUp, email: email, password: password)
    }

    /// Signs in with an OpenID Connect ID token from the app's sign-in SDK (Sign in with Apple, Google, Auth0...):
    /// the open connections close, and every connection opened after presents this token in HELLO, so the client
    /// acts as the token's user under the collections' rules until `signOut()` or another sign-in. A connection stays
    /// signed in until it ends; when the token expires, sign in again with a fresh one, or give the client
    /// `Configuration.idTokenProvider` to ask for one at each connect instead.
    ///
    /// ```swift
    /// let me = try await client.signIn(idToken: idToken)  // "https://appleid.apple.com|001234.5678abcd"
    /// ```
    ///
    /// - Returns: the user's id (`ISSUER|SUBJECT`), as the server checked it at once.
    /// - Throws: `UNAUTHENTICATED` when the server refuses the token (the message says why: expired, wrong audience,
    ///   unknown issuer...) or accepts no ID tokens; the client is then signed out. `UNAVAILABLE` or
    ///   `DEADLINE_EXCEEDED` as any request.
    @discardableResult
    public func signIn(idToken: String) async throws(LarderError) -> String {
        currentSession.withLock { $0 = nil }
        sessionLife.withLock { $0 = SessionLife() }
        currentIDToken.withLock { $0 = idToken }
        close()
        do throws(LarderError) {
            guard let user = try await serverHello().user?.id else {
                throw LarderError(
                    .unauthenticated,
                    "the server signed the connection in as no user: it accepts no ID tokens (its operator starts "
                        + "it with --oidc-issuer, --oidc-audience and --oidc-jwks)", field: "idToken")
            }
            return user
        } catch {
            currentIDToken.withLock { if $0 == idToken { $0 = nil } }
            close()
            throw error
        }
    }

    /// Signs out: the server revokes the session (and the one it replaced at its last refresh, if the client
    /// refreshed), the open connections close, and the client connects without one from then on; after
    /// `signIn(idToken:)`, the client forgets the token and its connections close (an ID token is the identity
    /// provider's to revoke). Does nothing when not signed in.
    ///
    /// - Throws: `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request (the client is signed out all the same).
    public func signOut() async throws(LarderError) {
        if currentIDToken.withLock({ t -> Bool in defer { t = nil }; return t != nil }) { close() }
        guard let old = currentSession.withLock({ s -> String? in defer { s = nil }; return s }) else { return }
        let replaced = sessionLife.withLock { life -> String? in
            defer { life = SessionLife() }
            return life.replaced
        }
        close()
        if let replaced { _ = try await call(.signOut, SignOutRequest(session: replaced).json) }
        _ = try await call(.signOut, SignOutRequest(session: old).json)
    }

    /// Changes the signed-in user's password; the user's other sessions are revoked, this client's stays.
    ///
    /// - Throws: `UNAUTHENTICATED` when `old` is wrong or the session ended; `INVALID_ARGUMENT` for a new password
    ///   outside the server's bounds; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    public func changePassword(old: String, new: String) async throws(LarderError) {
        _ = try await call(.passwordChange, PasswordChangeRequest(oldPassword: old, newPassword: new).json)
    }

    /// SIGN_IN or SIGN_UP on a connection without a session, then the session for every later connection.
    private func startSession(_ opcode: Opcode, email: String, password: String) async throws(LarderError)
        -> AccountSession
    {
        // An ended session (or an ID token) would sign in the connection this request needs.
        let hadIDToken = currentIDToken.withLock { t -> Bool in defer { t = nil }; return t != nil }
        if currentSession.withLock({ s -> Bool in defer { s = nil }; return s != nil }) || hadIDToken { close() }
        let answer = try await message(
            AccountSession.self, opcode, AccountCredentials(email: email, password: password).json)
        currentSession.withLock { $0 = answer.session }
        sessionLife.withLock { $0 = SessionLife(expiresAt: answer.expiresAt) }
        close()
        return answer
    }

    /// Asks the server for a new session for the signed-in user, with a full lifetime (the server's `sessionTtlMs`),
    /// which every connection opened afterwards presents; `Configuration.sessionRefreshed` hears of it. The open
    /// connections go on, and the old session stays in force until its own expiry. The client calls this by itself
    /// (see `Configuration.sessionRefreshed`); an app may call it too.
    ///
    /// - Throws: `PERMISSION_DENIED` on a client without a session; `UNAUTHENTICATED` when the session has ended (sign
    ///   in again); and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    @discardableResult
    public func refreshSession() async throws(LarderError) -> AccountSession {
        guard let old = session else {
            throw LarderError(.permissionDenied, "this client has no session to refresh; sign in first")
        }
        let answer = try await message(AccountSession.self, .sessionRefresh, SessionRefreshRequest().json)
        let replaced = currentSession.withLock { current -> Bool in
            guard current == old else { return false }
            current = answer.session
            return true
        }
        // A sign-in or sign-out meanwhile decided the session: this answer's is revoked, unused.
        guard replaced else {
            if let made = answer.session { _ = try? await call(.signOut, SignOutRequest(session: made).json) }
            return answer
        }
        sessionLife.withLock { life in
            life.expiresAt = answer.expiresAt
            life.replaced = old
        }
        configuration.sessionRefreshed?(answer)
        return answer
    }

    /// Refreshes the session in the background when `connection` presented one and less than half of the server's
    /// session lifetime is left of it; a refresh that failed is tried again a minute later.
    func refreshSessionIfDue(_ connection: Connection) {
        guard let ttl = connection.hello?.limits.accounts?.sessionTtlMs,
            let announced = connection.hello?.user?.sessionExpiresAt, session != nil
        else { return }
        let now = Timestamp.milliseconds(Date())
        let due = sessionLife.withLock { life -> Bool in
            guard !life.refreshing, now >= life.notBefore else { return false }
            if (life.expiresAt ?? announced) - now > Int64(ttl) / 2 { return false }
            life.refreshing = true
            return true
        }
        guard due else { return }
        Task { [weak self] in
            guard let self else { return }
            let refreshed = (try? await self.refreshSession()) != nil
            // Not again within a minute after a failure, nor within a quarter of the lifetime after a success (a clock
            // far ahead of the server's would otherwise find every new session half spent).
            let pause = refreshed ? max(60_000, Int64(ttl) / 4) : 60_000
            self.sessionLife.withLock { life in
                life.refreshing = false
                life.notBefore = Timestamp.milliseconds(Date()) + pause
            }
        }
    }
}

/// What the client knows of its session's life.
struct SessionLife: Sendable {
    /// When the session expires, in milliseconds since 1970, from the answer that made it; nil for a session from the
    /// configuration, whose expiry its connections' HELLO announces.
    var expiresAt: Int64?
    /// Whether a refresh is under way.
    var refreshing = false
    /// No refresh by itself before this time (after one that failed, or soon after one that succeeded).
    var notBefore: Int64 = 0
    /// The session the last refresh replaced, still in force until its own expiry: `signOut()` revokes it too.
    var replaced: String?
}

// The accounts the server keeps, for an admin token.
extension LarderClient {
    /// A page of the accounts the server keeps, by id; pass `nextCursor` back for the next.
    ///
    /// - Throws: `PERMISSION_DENIED` for a token that is not `admin`, for every user and on a server without
    ///   `--users`; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    public func users(limit: Int = defaultPageLimit, cursor: String? = nil) async throws(LarderError) -> UsersPage {
        try await message(UsersPage.self, .usersList, UsersListRequest(limit: limit, cursor: cursor).json)
    }

    /// Creates an account without signing in with it (an admin token's SIGN_UP, allowed without `--allow-sign-up`).
    ///
    /// - Throws: `CONFLICT` when the email has an account; `INVALID_ARGUMENT` for a bad email or password; and what
    ///   `users` throws.
    @discardableResult
    public func createUser(email: String, password: String) async throws(LarderError) -> AccountUser {
        try await message(AccountSession.self, .signUp, AccountCredentials(email: email, password: password).json).user
    }

    /// Disables (`true`) or enables an account, by id (`larder|<uuid>`) or email. A disabled user cannot sign in,
    /// and their sessions are revoked: each of their connections is refused at its next request.
    ///
    /// - Throws: `NOT_FOUND` when no account matches; and what `users` throws.
    @discardableResult
    public func setUserDisabled(_ user: String, _ disabled: Bool) async throws(LarderError) -> AccountUser {
        let answer = try await call(.userSet, UserRequest(user: user, disabled: disabled).json).jsonObject()
        return try AccountUser(json: answer, path: "")
    }

    /// Deletes an account, by id or email, with its sessions; answers how many sessions went. Its records stay
    /// (their `$owner` names a user no one signs in as).
    ///
    /// - Throws: `NOT_FOUND` when no account matches; and what `users` throws.
    @discardableResult
    public func deleteUser(_ user: String) async throws(LarderError) -> Int {
        let answer = try await call(.userDelete, UserRequest(user: user).json).jsonObject()
        return Int(answer["sessionsDeleted"]?.intValue ?? 0)
    }
}
