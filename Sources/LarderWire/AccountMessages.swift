import Foundation

// Accounts Larder keeps (email and password, `--users`): SIGN_UP, SIGN_IN, SIGN_OUT, PASSWORD_CHANGE and the admin's
// USERS_LIST, USER_SET and USER_DELETE (Protocol.md section 10.5).

/// The limits of password accounts a server announces in HELLO's `limits` (absent on a server without `--users`).
public struct AccountLimits: Sendable, Equatable {
    /// Milliseconds a session lives from SIGN_IN, SIGN_UP or SESSION_REFRESH; it is not extended by use.
    public var sessionTtlMs: Int = 30 * 86_400_000
    /// The shortest password SIGN_UP and PASSWORD_CHANGE accept, in bytes of UTF-8 after NFKC normalization.
    public var minPasswordBytes: Int = 8
    /// The longest password accepted, in bytes of UTF-8 after NFKC normalization.
    public var maxPasswordBytes: Int = 1024
    /// Failed SIGN_INs of one email a server counts within `signInWindowMs` before it refuses that email's SIGN_INs.
    public var signInAttemptsPerAccount: Int = 10
    /// Failed SIGN_INs from one peer address a server counts within `signInWindowMs` before it refuses its SIGN_INs.
    public var signInAttemptsPerAddress: Int = 100
    /// The window, in milliseconds, the failed attempts are counted over.
    public var signInWindowMs: Int = 900_000
    /// Whether anyone may SIGN_UP; otherwise only an admin token creates accounts.
    public var signUpAllowed: Bool = false
    /// How often, in milliseconds, a connection that holds a WATCH has its session checked again: a session that
    /// ended (signed out, revoked, expired, its user disabled or deleted) ends such a connection within this time.
    public var sessionCheckMs: Int = 30_000
    /// On servers sharing one PostgreSQL database: how long, in milliseconds, a server checks users' requests against
    /// the sessions and collection rules it read, without reading them again. A sign-out, a revoked session, a disabled
    /// user or a RULES_SET made through another server holds on this one within this time (through the server that
    /// made it, from its answer on). 0: read them for every request.
    public var accessCacheMs: Int = 1_000

    /// The defaults.
    public init() {}

    /// The members as HELLO's `limits` carries them.
    package var json: JSONObject {
        [
            "sessionTtlMs": .int(Int64(sessionTtlMs)), "minPasswordBytes": .int(Int64(minPasswordBytes)),
            "maxPasswordBytes": .int(Int64(maxPasswordBytes)),
            "signInAttemptsPerAccount": .int(Int64(signInAttemptsPerAccount)),
            "signInAttemptsPerAddress": .int(Int64(signInAttemptsPerAddress)),
            "signInWindowMs": .int(Int64(signInWindowMs)), "signUpAllowed": .bool(signUpAllowed),
            "sessionCheckMs": .int(Int64(sessionCheckMs)), "accessCacheMs": .int(Int64(accessCacheMs)),
        ]
    }

    /// Reads the members from HELLO's `limits`; nil when `sessionTtlMs` is absent (a server without `--users`).
    package init?(limits reader: inout FieldReader) throws(LarderError) {
        guard let ttl = try reader.optionalInt("sessionTtlMs", range: 1...Int64.max) else { return nil }
        sessionTtlMs = Int(clamping: ttl)
        try reader.limit("minPasswordBytes", into: &minPasswordBytes)
        try reader.limit("maxPasswordBytes", into: &maxPasswordBytes)
        try reader.limit("signInAttemptsPerAccount", into: &signInAttemptsPerAccount)
        try reader.limit("signInAttemptsPerAddress", into: &signInAttemptsPerAddress)
        try reader.limit("signInWindowMs", into: &signInWindowMs)
        signUpAllowed = try reader.optionalBool("signUpAllowed") ?? false
        try reader.limit("sessionCheckMs", into: &sessionCheckMs)
        try reader.limit("accessCacheMs", into: &accessCacheMs)
    }
}

/// The prefix of the ids of accounts Larder keeps: `larder|<uuid>`, as an ID token's user is `issuer|subject`.
public let accountIdPrefix = "larder|"

/// `SIGN_UP` and `SIGN_IN`: an email and a password.
package struct AccountCredentials: WireMessage, Equatable {
    package var email: String
    package var password: String

    /// The longest password read from the wire, in bytes; the server's own bound (`maxPasswordBytes`) is lower.
    package static let maxWirePasswordBytes = 4096

    package init(email: String, password: String) {
        self.email = email
        self.password = password
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        email = try r.string("email", maxLength: 254)
        password = try r.string("password", maxLength: Self.maxWirePasswordBytes)
        try r.finish()
    }

    package var json: JSONObject { ["email": .string(email), "password": .string(password)] }
}

/// An account Larder keeps, as USERS_LIST, USER_SET and SIGN_IN answer it (never with its password hash).
public struct AccountUser: Sendable, Equatable {
    /// `larder|<uuid>`: the id the collections' rules and `$owner` know the user by.
    public var id: String
    /// The email, lowercased.
    public var email: String
    /// A disabled account cannot sign in, and its sessions no longer work.
    public var disabled: Bool
    /// When the account was made, in milliseconds since 1970.
    public var createdAt: Int64

    /// An account with these members.
    public init(id: String, email: String, disabled: Bool, createdAt: Int64) {
        self.id = id
        self.email = email
        self.disabled = disabled
        self.createdAt = createdAt
    }

    package init(json: JSONObject, path: String) throws(LarderError) {
        var r = FieldReader(json, path: path)
        id = try r.string("id")
        email = try r.string("email")
        disabled = try r.optionalBool("disabled") ?? false
        createdAt = try r.optionalInt("createdAt", range: 0...Int64.max) ?? 0
    }

    package var json: JSONObject {
        ["id": .string(id), "email": .string(email), "disabled": .bool(disabled), "createdAt": .int(createdAt)]
    }
}

/// The answer to SIGN_IN and SIGN_UP: the account, and (except for an account an admin made) a new session.
public struct AccountSession: WireMessage, Equatable {
    /// The account.
    public var user: AccountUser
    /// The session to present in HELLO's `session`; nil when an admin token made the account.
    public var session: String?
    /// When the session ends, in milliseconds since 1970.
    public var expiresAt: Int64?

    /// An answer with these members.
    public init(user: AccountUser, session: String?, expiresAt: Int64?) {
        self.user = user
        self.session = session
        self.expiresAt = expiresAt
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        user = try AccountUser(json: try r.object("user"), path: "user")
        session = try r.optionalString("session")
        expiresAt = try r.optionalInt("expiresAt", range: 0...Int64.max)
    }

    package var json: JSONObject {
        var o: JSONObject = ["user": .object(user.json)]
        if let session { o["session"] = .string(session) }
        if let expiresAt { o["expiresAt"] = .int(expiresAt) }
        return o
    }
}

/// `SIGN_OUT`: revokes `session`, or the connection's own when absent.
package struct SignOutRequest: WireMessage, Equatable {
    package var session: String?

    package init(session: String? = nil) { self.session = session }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        session = try r.optionalString("session", maxLength: 256)
        try r.finish()
    }

    package var json: JSONObject { session.map { ["session": .string($0)] } ?? [:] }
}

/// `SESSION_REFRESH`: no members; the session refreshed is the connection's (answered with an `AccountSession`).
package struct SessionRefreshRequest: WireMessage, Equatable {
    package init() {}

    package init(json: JSONObject) throws(LarderError) {
        try FieldReader(json).finish()
    }

    package var json: JSONObject { [:] }
}

/// `PASSWORD_CHANGE`: the signed-in account's password, and its new one.
package struct PasswordChangeRequest: WireMessage, Equatable {
    package var oldPassword: String
    package var newPassword: String

    package init(oldPassword: String, newPassword: String) {
        self.oldPassword = oldPassword
        self.newPassword = newPassword
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        oldPassword = try r.string("oldPassword", maxLength: AccountCredentials.maxWirePasswordBytes)
        newPassword = try r.string("newPassword", maxLength: AccountCredentials.maxWirePasswordBytes)
        try r.finish()
    }

    package var json: JSONObject { ["oldPassword": .string(oldPassword), "newPassword": .string(newPassword)] }
}

/// `USERS_LIST`: a page of accounts by id; `cursor` is the previous page's `nextCursor`.
package struct UsersListRequest: WireMessage, Equatable {
    package var limit: Int
    package var cursor: String?

    package init(limit: Int = defaultPageLimit, cursor: String? = nil) {
        self.limit = limit
        self.cursor = cursor
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        limit = Int(try r.optionalInt("limit", range: 1...Int64(maxPageLimit)) ?? Int64(defaultPageLimit))
        cursor = try r.optionalString("cursor", maxLength: 256)
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["limit": .int(Int64(limit))]
        if let cursor { o["cursor"] = .string(cursor) }
        return o
    }
}

/// The answer to `USERS_LIST`.
public struct UsersPage: WireMessage, Equatable {
    /// The accounts, by id.
    public var users: [AccountUser]
    /// Pass back for the next page; nil on the last.
    public var nextCursor: String?

    /// A page with these members.
    public init(users: [AccountUser], nextCursor: String?) {
        self.users = users
        self.nextCursor = nextCursor
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        var users: [AccountUser] = []
        for (n, user) in (try r.optionalArray("users", maxCount: maxPageLimit) ?? []).enumerated() {
            guard let object = user.objectValue else { throw .invalid("users.\(n)", "users.\(n) must be an object") }
            users.append(try AccountUser(json: object, path: "users.\(n)"))
        }
        self.users = users
        nextCursor = try r.optionalString("nextCursor")
    }

    package var json: JSONObject {
        ["users": .array(users.map { .object($0.json) }), "nextCursor": nextCursor.map { .string($0) } ?? .null]
    }
}

/// `USER_SET` (`disabled`) and `USER_DELETE` (without it): the account, by id (`larder|<uuid>`) or email.
package struct UserRequest: WireMessage, Equatable {
    package var user: String
    package var disabled: Bool?

    package init(user: String, disabled: Bool? = nil) {
        self.user = user
        self.disabled = disabled
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        user = try r.string("user", maxLength: 256)
        disabled = try r.optionalBool("disabled")
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["user": .string(user)]
        if let disabled { o["disabled"] = .bool(disabled) }
        return o
    }
}
