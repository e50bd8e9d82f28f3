import Foundation
import LarderAuth
import LarderStore
import LarderSync
import LarderWire

/// The settings of the accounts Larder keeps (`larder-server --users`): the limits HELLO announces and the Argon2id
/// parameters new password hashes are made with.
public struct PasswordAccountSettings: Sendable, Equatable {
    /// Session lifetime, password bounds, sign-in rate limits, whether anyone may sign up.
    public var limits = AccountLimits()
    /// The cost of a new hash (`--password-memory-kib`, `--password-iterations`); a stored hash keeps its own, and is
    /// made again under these at its account's next sign-in.
    public var hashParameters: PasswordHasher.Parameters = .recommended

    /// The defaults: sessions of 30 days, passwords of 8 to 1024 bytes, 10 failed sign-ins per email and 100 per
    /// address in 15 minutes, no sign-up but an admin's, and Argon2id at m=19456 KiB, t=2, p=1 (about 50 ms of one
    /// core).
    public init() {}

    /// Checks that the settings fit together; the message names the option to change.
    package func validate() throws(ConfigurationError) {
        let l = limits
        guard l.minPasswordBytes >= PasswordHasher.minimumPasswordBytes,
            l.maxPasswordBytes <= PasswordHasher.maximumPasswordBytes, l.minPasswordBytes <= l.maxPasswordBytes
        else {
            throw ConfigurationError(
                message: "--min-password-bytes and --max-password-bytes must make a range within "
                    + "\(PasswordHasher.minimumPasswordBytes)...\(PasswordHasher.maximumPasswordBytes)")
        }
        let positive = [
            ("--session-ttl-ms", l.sessionTtlMs), ("--sign-in-attempts-per-account", l.signInAttemptsPerAccount),
            ("--sign-in-attempts-per-address", l.signInAttemptsPerAddress), ("--sign-in-window-ms", l.signInWindowMs),
            ("--session-check-ms", l.sessionCheckMs),
        ]
        for (name, value) in positive where value <= 0 {
            throw ConfigurationError(message: "\(name) must be greater than 0")
        }
        let p = hashParameters
        guard p.iterations >= 1, p.memoryKiB >= 8 * p.parallelism, p.parallelism >= 1,
            p.iterations <= PasswordHasher.Parameters.maximum.iterations,
            p.memoryKiB <= PasswordHasher.Parameters.maximum.memoryKiB
        else {
            throw ConfigurationError(
                message: "--password-iterations must be from 1 to 64 and --password-memory-kib from 8 to 1048576")
        }
    }
}

/// Who sent an account request: the user and session HELLO signed the connection in with, whether it holds an admin
/// token, and its peer's address (for the sign-in rate limit).
struct AccountCaller: Sendable {
    var user: String?
    var session: [UInt8]?
    var isAdmin: Bool
    var peer: String
}

/// The accounts Larder keeps: SIGN_UP, SIGN_IN, SIGN_OUT, PASSWORD_CHANGE, the admin's USERS_LIST, USER_SET and
/// USER_DELETE, and the sessions HELLO presents (Protocol.md section 10.5). Requests run on work-pool threads (a hash
/// is tens of milliseconds of CPU); their writes go through the store's writer.
package final class PasswordAccounts: SessionSignIn {
    let store: any DocumentStore
    let limits: AccountLimits
    let hasher: PasswordHasher
    private let failures = SignInFailures()
    /// A hash of a random password, checked against when no account has the email given, so that a wrong email
    /// costs the time a wrong password does.
    private let decoy: Locked<String?> = Locked(nil)

    package init(store: any DocumentStore, settings: PasswordAccountSettings) {
        self.store = store
        limits = settings.limits
        hasher = PasswordHasher(parameters: settings.hashParameters)
    }

    /// The requests this type answers.
    static let opcodes: Set<Opcode> = [
        .signUp, .signIn, .signOut, .passwordChange, .sessionRefresh, .usersList, .userSet, .userDelete,
    ]

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// The refusal of a session that is not (or no longer) in force, the same for every reason.
    static let sessionEnded = LarderError(
        .unauthenticated,
        "the session is not valid: it expired, was signed out or revoked, or its user was disabled; sign in again",
        field: "session", details: ["reason": .string("sessionEnded")])

    /// The user whose session `text` is (HELLO's `session`), or UNAUTHENTICATED. One indexed read of the store (a
    /// round trip on PostgreSQL), on the work pool (`ServerConnection.lookUpSession`).
    package func user(ofSession text: String) throws(LarderError) -> SessionSignIn.Found {
        guard let token = SessionToken(text: text) else { throw Self.sessionEnded }
        let key = token.storageKey
        guard let found = try store.sessionAccount(key: key, now: Self.now()) else { throw Self.sessionEnded }
        return (found.user, key, found.expiresAt)
    }

    /// UNAUTHENTICATED unless the session `key` of `user` is still in force, read from the store (a request checks
    /// its session through `AccessCache`; this is for the checks that bound how long a copy may be trusted).
    static func checkSession(_ key: [UInt8], of user: String?, in store: any DocumentStore) throws(LarderError) {
        guard let current = try store.sessionAccount(key: key, now: now()), current.user == user else {
            throw sessionEnded
        }
    }

    /// Runs one account request and calls `done` exactly once, on any thread.
    func handle(
        _ frame: Frame, _ caller: AccountCaller,
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) {
        do throws(LarderError) {
            let object = try frame.jsonObject()
            switch frame.opcode {
            case .signUp: try signUp(AccountCredentials(json: object), caller, done)
            case .signIn: try signIn(AccountCredentials(json: object), caller, done)
            case .signOut: try signOut(SignOutRequest(json: object), caller, done)
            case .passwordChange: try passwordChange(PasswordChangeRequest(json: object), caller, done)
            case .sessionRefresh: try sessionRefresh(SessionRefreshRequest(json: object), caller, done)
            case .usersList:
                let request = try UsersListRequest(json: object)
                let page = try store.accounts(after: request.cursor, limit: request.limit + 1)
                let users = page.prefix(request.limit).map(\.user)
                let next = page.count > request.limit ? users.last?.id : nil
                done(.success((UsersPage(users: users, nextCursor: next).json.bytes, [])))
            case .userSet:
                let request = try UserRequest(json: object)
                guard let disabled = request.disabled else {
                    throw LarderError(.invalidArgument, "disabled is required: true or false", field: "disabled")
                }
                let id = try existing(request.user).id
                write({ (c) throws(LarderError) in
                    JSON.object(try c.setAccountDisabled(id, disabled).user.json).bytes
                }, done)
            case .userDelete:
                let id = try existing(UserRequest(json: object).user).id
                write({ (c) throws(LarderError) in
                    let sessions = try c.deleteAccount(id)
                    return JSON.object(["id": .string(id), "sessionsDeleted": .int(Int64(sessions))]).bytes
                }, done)
            default:
                throw LarderError(.unknownOpcode, "opcode \(frame.opcode.name) is not an account request")
            }
        } catch {
            done(.failure(error))
        }
    }

    /// The account named by `name` (an id or an email), or NOT_FOUND.
    private func existing(_ name: String) throws(LarderError) -> StoredAccount {
        let key = StoredAccount.isId(name) ? name : Self.normalizedEmail(name)
        guard let account = try store.account(key) else { throw StoredAccount.notFound(name) }
        return account
    }

    /// Runs `body` in the store's writer and answers what it returns.
    private func write(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> [UInt8],
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) {
        store.submitWrite(body) { result in done(result.map { ($0, []) }) }
    }

    /// A session for `account`, made in the writer with what `extra` writes first; answers SIGN_IN's answer.
    private func newSession(
        _ account: StoredAccount, _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void,
        before extra: @escaping @Sendable (any WriteContext) throws(LarderError) -> Void
    ) {
        let token = SessionToken()
        let now = Self.now()
        let expiresAt = now + Int64(limits.sessionTtlMs)
        let key = token.storageKey
        write({ (c) throws(LarderError) in
            try extra(c)
            try c.createSession(key: key, account: account.id, expiresAt: expiresAt, now: now)
            return AccountSession(user: account.user, session: token.text, expiresAt: expiresAt).json.bytes
        }, done)
    }

    private func signUp(
        _ request: AccountCredentials, _ caller: AccountCaller,
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) throws(LarderError) {
        guard caller.isAdmin || limits.signUpAllowed else {
            throw LarderError(
                .permissionDenied,
                "this server lets only an admin token create users (larder users create); it was started without "
                    + "--allow-sign-up")
        }
        let email = try Self.validEmail(request.email)
        let hash = try newHash(request.password, field: "password")
        let account = StoredAccount(
            id: accountIdPrefix + UUID().uuidString.lowercased(), email: email, passwordHash: hash, createdAt: Self.now())
        if caller.isAdmin {
            return write({ (c) throws(LarderError) in
                try c.createAccount(account)
                return AccountSession(user: account.user, session: nil, expiresAt: nil).json.bytes
            }, done)
        }
        newSession(account, done) { (c) throws(LarderError) in try c.createAccount(account) }
    }

    private func signIn(
        _ request: AccountCredentials, _ caller: AccountCaller,
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) throws(LarderError) {
        let email = Self.normalizedEmail(request.email)
        let address = Self.address(caller.peer)
        let now = Self.now()
        let window = Int64(limits.signInWindowMs)
        let keys = [("account:" + email, limits.signInAttemptsPerAccount), ("address:" + address, limits.signInAttemptsPerAddress)]
        for (key, limit) in keys {
            if let wait = try retryAfter(key, limit: limit, window: window, now: now) {
                throw LarderError(
                    .resourceExhausted,
                    "too many failed sign-ins \(key.hasPrefix("account:") ? "for this email" : "from this address"); "
                        + "try again in \((wait + 999) / 1000) s",
                    details: ["retryAfterMs": .int(wait), "limit": .int(Int64(limit))])
            }
        }
        let account = try store.account(email)
        let right = try check(request.password, against: account?.passwordHash)
        guard right, let account else {
            for (key, _) in keys {
                failures.failed(key, window: window, now: now)
                try? store.countSharedSignInFailure(key, now: now, window: window)
            }
            throw LarderError(.unauthenticated, "the email or the password is wrong", field: "password")
        }
        guard !account.disabled else {
            throw LarderError(.permissionDenied, "this user is disabled; ask the app's administrator")
        }
        // A hash made under other parameters is made again, now that the password is at hand.
        let rehash = hasher.needsRehash(account.passwordHash) ? try? hasher.hash(request.password) : nil
        newSession(account, done) { (c) throws(LarderError) in
            if let rehash { try c.setPasswordHash(account: account.id, rehash) }
        }
    }

    /// Milliseconds until `key` may sign in again, or nil when it may now: from this server's count, and on a shared
    /// store from the count of every server of the database.
    private func retryAfter(_ key: String, limit: Int, window: Int64, now: Int64) throws(LarderError) -> Int64? {
        if let wait = failures.retryAfter(key, limit: limit, window: window, now: now) { return wait }
        guard let shared = try store.sharedSignInFailures(key, now: now, window: window), shared.failures >= limit
        else { return nil }
        return shared.start + window - now
    }

    private func signOut(
        _ request: SignOutRequest, _ caller: AccountCaller,
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) throws(LarderError) {
        let key: [UInt8]
        if let text = request.session {
            guard let token = SessionToken(text: text) else {
                throw LarderError(.invalidArgument, "session is not a session token", field: "session")
            }
            key = token.storageKey
        } else if let own = caller.session {
            key = own
        } else {
            throw LarderError(
                .invalidArgument, "this connection was not signed in with a session; name the session to sign out",
                field: "session")
        }
        write({ (c) throws(LarderError) in
            JSON.object(["signedOut": .bool(try c.deleteSession(key: key))]).bytes
        }, done)
    }

    /// A new session for the user of the connection's session, which stays in force until its own expiry or a
    /// SIGN_OUT: a client that lost this answer refreshes again with it.
    private func sessionRefresh(
        _ request: SessionRefreshRequest, _ caller: AccountCaller,
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) throws(LarderError) {
        let (session, user) = try Self.signedInWithSession(caller, .sessionRefresh)
        try Self.checkSession(session, of: user, in: store)
        guard let account = try store.account(user), !account.disabled else { throw Self.sessionEnded }
        // Checked again in the transaction that makes the new session: a sign-out, a password change or a disabling
        // that commits after the check above either comes first there (and the refresh is refused) or revokes the new
        // session with the others.
        let now = Self.now()
        newSession(account, done) { (c) throws(LarderError) in
            guard try c.lockSessionInForce(key: session, account: account.id, now: now) else { throw Self.sessionEnded }
        }
    }

    /// The session key and user of a caller signed in with a session, or PERMISSION_DENIED naming `opcode`.
    private static func signedInWithSession(_ caller: AccountCaller, _ opcode: Opcode) throws(LarderError)
        -> (session: [UInt8], user: String)
    {
        guard let session = caller.session, let user = caller.user else {
            throw LarderError(
                .permissionDenied, "\(opcode.name) needs a connection signed in with a session (HELLO's session)")
        }
        return (session, user)
    }

    private func passwordChange(
        _ request: PasswordChangeRequest, _ caller: AccountCaller,
        _ done: @escaping @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void
    ) throws(LarderError) {
        let (session, user) = try Self.signedInWithSession(caller, .passwordChange)
        try Self.checkSession(session, of: user, in: store)
        guard let account = try store.account(user) else { throw Self.sessionEnded }
        guard try check(request.oldPassword, against: account.passwordHash) else {
            throw LarderError(.unauthenticated, "the old password is wrong", field: "oldPassword")
        }
        let hash = try newHash(request.newPassword, field: "newPassword")
        write({ (c) throws(LarderError) in
            try c.setPasswordHash(account: user, hash)
            let revoked = try c.deleteSessions(account: user, keeping: session)
            return JSON.object(["sessionsRevoked": .int(Int64(revoked))]).bytes
        }, done)
    }

    /// Whether `password` matches `stored`; with no stored hash, the password is checked against a decoy and is
    /// wrong, in the same time.
    private func check(_ password: String, against stored: String?) throws(LarderError) -> Bool {
        let hash = stored ?? decoyHash()
        do throws(PasswordError) {
            let matches = try hasher.verify(password, against: hash)
            return matches && stored != nil
        } catch {
            throw LarderError(.internal, "the stored password hash cannot be checked: \(error.description)")
        }
    }

    private func decoyHash() -> String {
        if let hash = decoy.withLock({ $0 }) { return hash }
        let hash = (try? hasher.hash(SessionToken().text)) ?? "$argon2id$v=19$m=8,t=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$AA"
        decoy.withLock { $0 = hash }
        return hash
    }

    /// A new hash of `password`, within the server's bounds (INVALID_ARGUMENT naming `field` otherwise).
    private func newHash(_ password: String, field: String) throws(LarderError) -> String {
        let bytes = password.precomposedStringWithCompatibilityMapping.utf8.count
        guard bytes >= limits.minPasswordBytes, bytes <= limits.maxPasswordBytes else {
            throw LarderError(
                .invalidArgument,
                "\(field) must be \(limits.minPasswordBytes) to \(limits.maxPasswordBytes) bytes of UTF-8",
                field: field,
                details: ["min": .int(Int64(limits.minPasswordBytes)), "max": .int(Int64(limits.maxPasswordBytes))])
        }
        do throws(PasswordError) {
            return try hasher.hash(password)
        } catch {
            throw LarderError(.invalidArgument, error.description, field: field)
        }
    }

    /// `email` trimmed and lowercased: the form accounts are kept and looked up by.
    static func normalizedEmail(_ email: String) -> String {
        email.trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// `email` normalized, or INVALID_ARGUMENT unless it is `local@domain` without spaces or control characters.
    static func validEmail(_ email: String) throws(LarderError) -> String {
        let normalized = normalizedEmail(email)
        let parts = normalized.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, normalized.utf8.count <= 254,
            !normalized.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 })
        else {
            throw LarderError(.invalidArgument, "email must be an address such as name@example.com", field: "email")
        }
        return normalized
    }

    /// The address part of a peer name (`127.0.0.1:54321`, `[::1]:54321`): what the per-address limit counts by.
    static func address(_ peer: String) -> String {
        guard let colon = peer.lastIndex(of: ":"), !peer.hasSuffix("]") else { return peer }
        return String(peer[..<colon])
    }
}

/// Failed sign-ins counted per key (an email, an address) over a fixed window: past the limit, SIGN_IN for that key
/// is refused until the window that started with its first failure ends. This server's own count; servers sharing a
/// database also count together in it (`DocumentStore.countSharedSignInFailure`).
final class SignInFailures: Sendable {
    private struct Window {
        var start: Int64
        var failures: Int
    }

    private let windows = Locked<[String: Window]>([:])
    /// Keys kept before the ended windows are swept out.
    private static let sweepAt = 100_000

    /// Milliseconds until `key` may try again, or nil when it may now.
    func retryAfter(_ key: String, limit: Int, window: Int64, now: Int64) -> Int64? {
        windows.withLock { w -> Int64? in
            guard let current = w[key], now < current.start + window, current.failures >= limit else { return nil }
            return current.start + window - now
        }
    }

    /// Counts a failure of `key`.
    func failed(_ key: String, window: Int64, now: Int64) {
        windows.withLock { w in
            if w.count >= Self.sweepAt { w = w.filter { now < $0.value.start + window } }
            if let current = w[key], now < current.start + window {
                w[key]?.failures = current.failures + 1
            } else {
                w[key] = Window(start: now, failures: 1)
            }
        }
    }
}

extension Router {
    /// Runs an account request on the work pool and calls `completion` exactly once; on a server without `--users`
    /// (`accounts` nil) it is UNKNOWN_OPCODE, an opcode this server does not serve.
    func submitAccount(
        _ frame: Frame, accounts: PasswordAccounts?, caller: AccountCaller,
        completion: @escaping @Sendable (Reply) -> Void
    ) {
        guard let accounts else {
            let error = LarderError(
                .unknownOpcode,
                "this server keeps no accounts of its own: \(frame.opcode.name) needs a server started with --users")
            return completion(reply(to: frame, .failure(error)))
        }
        let accepted = pool.submit { [self] in
            accounts.handle(frame, caller) { [self] result in completion(reply(to: frame, result)) }
        }
        if !accepted { completion(Router.poolFull(frame, pool)) }
    }
}
