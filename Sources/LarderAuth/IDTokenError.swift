/// Why an ID token was refused: one stable case per reason, for the server's answer and its logs.
///
/// No message contains the token, nor any part of it but short claims an operator needs to see a misconfiguration
/// (the `alg`, the `iss`, the `kid`), and those only as printable ASCII cut to 64 characters.
public enum IDTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not a JWT this verifier can read: not three base64url parts, a header or claims that are not a JSON object, a
    /// required claim missing or of the wrong type, a `crit` header, a `typ` other than JWT, or longer than
    /// `IDTokenVerifier.maximumTokenBytes`.
    case malformed(String)
    /// The header's `alg` is not RS256 or ES256 (`none`, HS256, PS256 and every other are refused by name).
    case unsupportedAlgorithm(String)
    /// The `iss` claim is not one of the configured issuers (quoted in the message, cut short).
    case wrongIssuer(String)
    /// The `aud` claim names none of the issuer's configured audiences.
    case wrongAudience
    /// The issuer's key set has no key to check this token with: its `kid` is unknown or belongs to a key of another
    /// type than `alg` needs, or the token has no `kid` and the set has not exactly one key of that type.
    case unknownKey(String)
    /// The signature is not the key's signature of the token's header and claims.
    case badSignature
    /// The `exp` claim (seconds since 1970) plus the leeway is past.
    case expired(at: Int64)
    /// The `nbf` claim (seconds since 1970) minus the leeway is still to come.
    case notYetValid(until: Int64)

    /// The case's stable name, for logs and metrics: "malformed", "unsupportedAlgorithm", "wrongIssuer",
    /// "wrongAudience", "unknownKey", "badSignature", "expired" or "notYetValid".
    public var code: String {
        switch self {
        case .malformed: "malformed"
        case .unsupportedAlgorithm: "unsupportedAlgorithm"
        case .wrongIssuer: "wrongIssuer"
        case .wrongAudience: "wrongAudience"
        case .unknownKey: "unknownKey"
        case .badSignature: "badSignature"
        case .expired: "expired"
        case .notYetValid: "notYetValid"
        }
    }

    /// A sentence for a log or an error answer, without the token.
    public var description: String {
        switch self {
        case .malformed(let reason): "malformed ID token: \(reason)"
        case .unsupportedAlgorithm(let name):
            "ID token algorithm \(name) is not accepted (only RS256 and ES256)"
        case .wrongIssuer(let issuer): "ID token issuer \(issuer) is not one this server accepts"
        case .wrongAudience: "ID token audience is not this server's"
        case .unknownKey(let reason): "ID token signing key unknown: \(reason)"
        case .badSignature: "ID token signature does not verify"
        case .expired(let at): "ID token expired (exp \(at))"
        case .notYetValid(let until): "ID token not valid yet (nbf \(until))"
        }
    }

    /// The longest claim quoted in a message, in characters.
    static let quotedLength = 64

    /// `text` in double quotes for a message: printable ASCII only (anything else becomes `?`), cut to
    /// `quotedLength` characters with `…` when longer.
    static func quoted(_ text: String) -> String {
        let printable = text.unicodeScalars.prefix(quotedLength).map { scalar -> Character in
            (0x20...0x7E).contains(scalar.value) && scalar != "\"" && scalar != "\\" ? Character(scalar) : "?"
        }
        return "\"" + String(printable) + (text.unicodeScalars.count > quotedLength ? "…" : "") + "\""
    }
}
