import LarderWire

/// A session of an account Larder keeps: 32 random bytes (`SystemRandom`, seeded by the operating system), given to
/// the client as 43 characters of base64url and kept by the store only as `storageKey`, their SHA-256, so a copy of
/// the database holds no live session.
///
/// Its `description` never shows the token; only `text` does.
///
/// ```swift
/// let session = SessionToken()
/// store.saveSession(key: session.storageKey, account: id, expires: now + 30 * 86_400)
/// reply(token: session.text)
/// // later, from the client's text:
/// guard let presented = SessionToken(text: received) else { refuse() }
/// store.findSession(key: presented.storageKey)
/// ```
public struct SessionToken: Sendable, Hashable, CustomStringConvertible {
    /// The random bytes in a token.
    public static let byteCount = 32

    /// The token as the client holds it: 43 characters of base64url.
    public let text: String

    /// A new token of `byteCount` random bytes.
    public init() { text = Base64URL.encode(SystemRandom.bytes(Self.byteCount)) }

    /// The token a client presents; nil unless `text` is the base64url of exactly `byteCount` bytes.
    public init?(text: String) {
        guard text.utf8.count == 43, let bytes = Base64URL.decode(text), bytes.count == Self.byteCount else {
            return nil
        }
        self.text = text
    }

    /// What the store keeps and looks sessions up by: the SHA-256 of the token's text (its 43 ASCII bytes), 32
    /// bytes.
    public var storageKey: [UInt8] {
        var hasher = SHA256()
        hasher.update(Array(text.utf8))
        return hasher.finalize()
    }

    /// `storageKey` in lowercase hexadecimal, 64 characters.
    public var storageKeyHex: String { SHA256.hex(Array(text.utf8)) }

    /// "SessionToken(…)", without the token.
    public var description: String { "SessionToken(…)" }
}
