import Foundation
import LarderWire

/// Verifies OpenID Connect ID tokens (JWTs in compact form, RFC 7519) from the identity providers a server trusts:
/// Sign in with Apple, Google, Auth0, Keycloak, Firebase Auth, or any provider that signs with RS256 or ES256.
///
/// A token is accepted when, in this order: it is at most `maximumTokenBytes`; its header's `alg` is RS256 or ES256
/// (`none`, HS*, PS* and everything else refused by name, so a public key is never used as an HMAC secret); it has no
/// `crit` header and a `typ`, if any, of JWT (not an access token's "at+jwt"); its `iss` is a configured issuer; that
/// issuer's key set has the key (by `kid`, of the type `alg` needs; without a `kid`, the set's one key of that type);
/// libcrypto verifies the signature; `exp` plus the leeway is still to come and `nbf`, if present, minus the leeway is
/// past; `aud` (a string or an array) names one of the issuer's audiences; and `sub` is a string of 1 to 255 bytes.
/// `iat`, `nonce` and `azp` are not checked: a server verifies tokens a client obtained in its own flow, and Google's
/// tokens name another client in `azp` than in `aud`.
///
/// The verifier is immutable and `Sendable`: many threads verify at once. To reload key sets (on SIGHUP), build a new
/// verifier from the re-read files and swap it in.
///
/// ```swift
/// let verifier = try IDTokenVerifier(issuers: [
///     .init(issuer: "https://accounts.google.com", audiences: ["1234.apps.googleusercontent.com"],
///           keys: try JWKS(contentsOfFile: "/etc/larder/google.jwks")),
/// ])
/// let identity = try verifier.verify(token)
/// // identity.userId == "https://accounts.google.com|10769150350006150715113"
/// ```
public struct IDTokenVerifier: Sendable {
    /// One trusted identity provider.
    public struct Issuer: Sendable {
        /// The `iss` its tokens carry, compared exactly (Google's tokens carry either "https://accounts.google.com" or
        /// "accounts.google.com": configure both).
        public let issuer: String
        /// The client ids its tokens may be for (`aud`); at least one.
        public let audiences: [String]
        /// The keys its tokens are signed with.
        public let keys: JWKS

        /// A provider whose tokens carry `issuer`, are for one of `audiences`, and are signed by one of `keys`.
        public init(issuer: String, audiences: [String], keys: JWKS) {
            self.issuer = issuer
            self.audiences = audiences
            self.keys = keys
        }
    }

    /// The longest token read, in bytes, checked before any parsing (a provider's ID token is one or two kilobytes).
    public static let maximumTokenBytes = 16 * 1024
    /// The default tolerance for clocks that differ, applied to `exp` and `nbf`.
    public static let defaultLeeway: Duration = .seconds(60)
    /// The largest leeway accepted.
    public static let maximumLeeway: Duration = .seconds(600)

    /// The trusted providers, by `iss`.
    private let issuers: [String: Issuer]
    /// The leeway in seconds.
    private let leewaySeconds: Double
    /// The current time in seconds since 1970.
    private let now: @Sendable () -> Double

    /// A verifier for tokens from `issuers`, with `leeway` (at most `maximumLeeway`) on `exp` and `nbf`, reading the
    /// time from `now` (seconds since 1970; the system clock unless a test sets one). Throws when there is no issuer,
    /// an issuer is named twice, is empty or contains "|" (which separates it from the subject in a user id), or has
    /// no audience, or when the leeway is negative or too large.
    public init(
        issuers: [Issuer], leeway: Duration = defaultLeeway,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) throws(IDTokenVerifierConfigurationError) {
        guard !issuers.isEmpty else { throw IDTokenVerifierConfigurationError("no OpenID Connect issuer configured") }
        var byName: [String: Issuer] = [:]
        for issuer in issuers {
            guard !issuer.issuer.isEmpty, !issuer.issuer.contains("|") else {
                throw IDTokenVerifierConfigurationError(
                    "the issuer \(IDTokenError.quoted(issuer.issuer)) is empty or contains \"|\"")
            }
            guard !issuer.audiences.isEmpty, !issuer.audiences.contains("") else {
                throw IDTokenVerifierConfigurationError("the issuer \(issuer.issuer) has no audience (client id)")
            }
            guard byName.updateValue(issuer, forKey: issuer.issuer) == nil else {
                throw IDTokenVerifierConfigurationError("the issuer \(issuer.issuer) is configured twice")
            }
        }
        guard leeway >= .zero, leeway <= Self.maximumLeeway else {
            throw IDTokenVerifierConfigurationError("the leeway must be between 0 and 600 seconds")
        }
        self.issuers = byName
        let parts = leeway.components
        leewaySeconds = Double(parts.seconds) + Double(parts.attoseconds) / 1e18
        self.now = now
    }

    /// The identity `token` proves; throws an `IDTokenError` saying why it proves none.
    public func verify(_ token: String) throws(IDTokenError) -> VerifiedIdentity {
        guard token.utf8.count <= Self.maximumTokenBytes else {
            throw .malformed("longer than \(Self.maximumTokenBytes) bytes")
        }
        let bytes = Array(token.utf8)
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("not three parts separated by dots") }
        let header = try Self.object(parts[0], "header")
        guard let algorithm = header["alg"]?.stringValue else { throw .malformed("the header has no \"alg\"") }
        guard algorithm == "RS256" || algorithm == "ES256" else {
            throw .unsupportedAlgorithm(IDTokenError.quoted(algorithm))
        }
        if header["crit"] != nil { throw .malformed("the header has \"crit\" extensions, which are not supported") }
        if let type = header["typ"] {
            guard let name = type.stringValue?.lowercased(), name == "jwt" || name == "application/jwt" else {
                throw .malformed("the header's \"typ\" is not JWT")
            }
        }
        let claims = try Self.object(parts[1], "claims")

        guard let issuerName = claims["iss"]?.stringValue else { throw .malformed("no \"iss\" claim") }
        guard let issuer = issuers[issuerName] else { throw .wrongIssuer(IDTokenError.quoted(issuerName)) }
        let key = try Self.key(in: issuer.keys, id: header["kid"], algorithm: algorithm)
        guard let signature = Base64URL.decode(parts[2]) else { throw .malformed("the signature is not base64url") }
        let signed = Array(bytes[..<parts[1].endIndex])
        guard key.verify(signature: signature, of: signed) else { throw .badSignature }

        guard let expiry = claims["exp"]?.doubleValue else { throw .malformed("no numeric \"exp\" claim") }
        let time = now()
        guard time < expiry + leewaySeconds else { throw .expired(at: Self.seconds(expiry)) }
        if let notBefore = claims["nbf"] {
            guard let notBefore = notBefore.doubleValue else { throw .malformed("the \"nbf\" claim is not a number") }
            guard time + leewaySeconds >= notBefore else { throw .notYetValid(until: Self.seconds(notBefore)) }
        }
        let audiences: [String]
        switch claims["aud"] {
        case .string(let one)?: audiences = [one]
        case .array(let many)? where !many.isEmpty && many.allSatisfy({ $0.stringValue != nil }):
            audiences = many.compactMap(\.stringValue)
        default: throw .malformed("no \"aud\" claim that is a string or an array of strings")
        }
        guard let audience = audiences.first(where: issuer.audiences.contains) else { throw .wrongAudience }
        guard let subject = claims["sub"]?.stringValue, (1...255).contains(subject.utf8.count) else {
            throw .malformed("no \"sub\" claim of 1 to 255 bytes")
        }
        let emailVerified: Bool
        switch claims["email_verified"] {
        case .bool(let value)?: emailVerified = value
        case .string("true")?: emailVerified = true  // some providers send it as a string
        default: emailVerified = false
        }
        return VerifiedIdentity(
            issuer: issuerName, subject: subject, audience: audience, email: claims["email"]?.stringValue,
            emailVerified: emailVerified, expiresAt: Self.seconds(expiry))
    }

    /// The JSON object in the base64url part `part` (named `name` in errors).
    private static func object(_ part: ArraySlice<UInt8>, _ name: String) throws(IDTokenError) -> JSONObject {
        guard let json = Base64URL.decode(part) else { throw .malformed("the \(name) is not base64url") }
        do {
            return try JSONParser.parseObject(json, maxDepth: 16)
        } catch {
            throw .malformed("the \(name) is not a JSON object")
        }
    }

    /// The key of `keys` to check a token of `algorithm` with, by the header's `kid` (`id`).
    private static func key(in keys: JWKS, id: JSON?, algorithm: String) throws(IDTokenError) -> PublicKey {
        guard let id else {
            let candidates = keys.keys.filter { $0.algorithm == algorithm }
            guard candidates.count == 1 else {
                throw .unknownKey("the token has no \"kid\" and the issuer has \(candidates.count) \(algorithm) keys")
            }
            return candidates[0].publicKey
        }
        guard let kid = id.stringValue else { throw .malformed("the header's \"kid\" is not a string") }
        let named = keys.keys.filter { $0.id == kid }
        guard let key = named.first(where: { $0.algorithm == algorithm }) else {
            let quotedKid = IDTokenError.quoted(kid)
            if let other = named.first {
                throw .unknownKey("the key \(quotedKid) is an \(other.algorithm) key, the token says \(algorithm)")
            }
            throw .unknownKey("the issuer has no key \(quotedKid)")
        }
        return key.publicKey
    }

    /// `seconds`, a claim's NumericDate, as whole seconds (rounded down, clamped to Int64).
    private static func seconds(_ seconds: Double) -> Int64 {
        seconds >= 9.2e18 ? .max : seconds <= -9.2e18 ? .min : Int64(seconds.rounded(.down))
    }
}

/// Who a verified ID token says its bearer is.
public struct VerifiedIdentity: Sendable, Equatable {
    /// The issuer (`iss`), one of the configured ones.
    public let issuer: String
    /// The subject (`sub`): the user's id at that issuer, stable and never reassigned (OpenID Connect Core §2).
    public let subject: String
    /// The configured audience the token's `aud` names.
    public let audience: String
    /// The `email` claim, if present (providers may return an address the user has not proved; see `emailVerified`).
    public let email: String?
    /// Whether `email_verified` is true (false when absent).
    public let emailVerified: Bool
    /// When the token expires (`exp`, seconds since 1970, rounded down).
    public let expiresAt: Int64

    /// Larder's id for the user: the issuer, "|", then the subject, as in
    /// "https://accounts.google.com|10769150350006150715113". Issuers never contain "|" (the verifier refuses such
    /// an issuer), so the first "|" separates the two even when the subject has its own (Auth0's "auth0|…").
    public var userId: String { issuer + "|" + subject }
}

/// Why an `IDTokenVerifier` cannot be built from its configuration: a sentence for the operator.
public struct IDTokenVerifierConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong.
    public let description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}
