import Foundation
import LarderWire

/// Who a connection speaks for: the token its HELLO presented and what that token may do, looked up again when the
/// token table is reloaded (and, should a request come first, at that request), so that a removed token ends the
/// connection and a changed grant applies from then on.
struct ConnectionIdentity {
    /// What the token may do (nil: the server requires no token). A revoked token keeps its last grant, which still
    /// screens the answers to the requests it had in flight.
    private(set) var grant: Grant?
    /// The token is no longer in the table: the connection is ending, and nothing more of it runs.
    private(set) var revoked = false
    /// The user a valid ID token signed the connection in as (`issuer|subject`); nil for a role token or none.
    private(set) var user: String?
    /// The storage key of the session HELLO signed the connection in with; checked again at each request.
    private(set) var session: [UInt8]?
    /// No token on a server that accepts ID tokens: only what the collections' rules make `public`.
    private(set) var isAnonymous = false
    /// Held to the collections' rules (a user or an anonymous connection), not to a role token's grant.
    var followsRules: Bool { user != nil || isAnonymous }
    private var token: [UInt8] = []
    /// The token table's generation the grant was checked against.
    private var generation = 0
    /// Who this connection's uploads count against, for each one's share of the upload quota: its token, by a
    /// digest (the same on every server sharing a database, and never the token itself), or on a server without
    /// tokens this connection alone.
    private(set) var uploader: String

    init() {
        uploader = "connection:" + UUID().uuidString.lowercased()
    }

    init(_ granted: HelloNegotiation.Granted) {
        grant = granted.grant
        token = granted.token
        generation = granted.generation
        uploader = "token:" + SHA256.hex(Array("larder upload owner\u{0}".utf8) + granted.token)
    }

    /// The identity of a connection HELLO signed in as `caller` (nil: a server that requires nothing).
    init(_ caller: HelloNegotiation.Caller?) {
        switch caller {
        case .token(let granted)?:
            self.init(granted)
        case .user(let id)?:
            self.init()
            user = id
            uploader = "user:" + SHA256.hex(Array("larder upload owner\u{0}".utf8) + Array(id.utf8))
        case .account(let id, let key)?:
            self.init(.user(id))
            session = key
        case .anonymous?:
            self.init()
            isAnonymous = true
        case nil:
            self.init()
        }
    }

    /// Looks the token up again if the table changed since it was checked; false once the token was revoked.
    mutating func renew(from tokens: (any TokenSource)?) -> Bool {
        // A user's or an anonymous connection holds no role token: a reload of the token table leaves it alone.
        guard !revoked, !followsRules, let tokens, tokens.generation != generation else { return !revoked }
        let current = tokens.current
        generation = current.generation
        guard let renewed = current.table.grant(for: token) else {
            revoked = true
            return false
        }
        grant = renewed
        return true
    }
}
