import Foundation
import LarderWire

/// Who a connection speaks for: the token its HELLO presented and what that token may do, looked up again after the
/// token table is reloaded, so that a revoked token ends the connection at its next request.
struct ConnectionIdentity {
    /// What the token may do (nil: the server requires no token).
    private(set) var grant: Grant?
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

    init(_ granted: Handshake.Granted) {
        grant = granted.grant
        token = granted.token
        generation = granted.generation
        uploader = "token:" + SHA256.hex(Array("larder upload owner\u{0}".utf8) + granted.token)
    }

    /// Looks the token up again if the table changed since it was checked; false when the token was revoked.
    mutating func renew(from tokens: (any TokenSource)?) -> Bool {
        guard let tokens, tokens.generation != generation else { return true }
        let current = tokens.current
        generation = current.generation
        grant = current.table.grant(for: token)
        return grant != nil
    }
}
