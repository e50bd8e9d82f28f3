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
    private var token: [UInt8] = []
    /// The token table's generation the grant was checked against.
    private var generation = 0
    /// Who this connection's uploads count against, for each one's share of the upload quota: its token, by a
    /// digest (the same on every server sharing a database, and never the token itself), or on a server without
    /// tokens this connection alone.
    let uploader: String

    init() {
        uploader = "connection:" + UUID().uuidString.lowercased()
    }

    init(_ granted: HelloNegotiation.Granted) {
        grant = granted.grant
        token = granted.token
        generation = granted.generation
        uploader = "token:" + SHA256.hex(Array("larder upload owner\u{0}".utf8) + granted.token)
    }

    /// Looks the token up again if the table changed since it was checked; false once the token was revoked.
    mutating func renew(from tokens: (any TokenSource)?) -> Bool {
        guard !revoked, let tokens, tokens.generation != generation else { return !revoked }
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
