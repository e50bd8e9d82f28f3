import LarderAuth
import LarderSync
import LarderWire

/// One identity provider a server trusts (`--oidc-issuer URL --oidc-audience ID --oidc-jwks FILE`).
public struct OIDCIssuer: Sendable, Equatable {
    /// The `iss` its ID tokens carry, compared exactly.
    public var issuer: String
    /// The client ids its tokens may be for (`aud`); at least one.
    public var audiences: [String]
    /// The JWKS file holding its signing keys, read at start and again on SIGHUP.
    public var jwksFile: String

    /// A provider whose tokens carry `issuer`, are for one of `audiences`, signed by a key of the file `jwksFile`.
    public init(issuer: String, audiences: [String], jwksFile: String) {
        self.issuer = issuer
        self.audiences = audiences
        self.jwksFile = jwksFile
    }
}

/// The ID token verifier in force, shared by every event loop and replaced whole when SIGHUP reads the JWKS files
/// again (a file that does not load keeps the verifier in force).
package final class IdentityProviders: IDTokenSignIn {
    private let verifier: Locked<IDTokenVerifier?>
    private let issuers: [OIDCIssuer]
    private let leewayMs: Int

    /// The providers of `issuers` with `leewayMs` on `exp` and `nbf`, with no keys until `reload` reads them: until
    /// then every ID token is refused.
    package init(issuers: [OIDCIssuer], leewayMs: Int) {
        self.issuers = issuers
        self.leewayMs = leewayMs
        verifier = Locked(nil)
    }

    package func user(ofIDToken idToken: String) throws(LarderError) -> String {
        guard let verifier = current else {
            throw LarderError(
                .unauthenticated, "this server could not load its identity providers' keys (JWKS); try again later",
                field: "idToken")
        }
        do throws(IDTokenError) {
            return try verifier.verify(idToken).userId
        } catch {
            // The error names the check that failed and at most the token's `iss`, `alg` or `kid`, never the token.
            throw LarderError(
                .unauthenticated, "\(error.description); sign in again for a fresh ID token", field: "idToken",
                details: ["reason": .string(error.code)])
        }
    }

    /// The verifier in force; nil while no JWKS file has loaded.
    package var current: IDTokenVerifier? { verifier.withLock { $0 } }

    /// Reads every JWKS file again and swaps the new verifier in; on a failure the one in force stays and the error
    /// says why. Returns the keys skipped in the files (one line each), for the log.
    package func reload() throws(ConfigurationError) -> [String] {
        let (fresh, skipped) = try Self.verifier(issuers, leewayMs: leewayMs)
        verifier.withLock { $0 = fresh }
        return skipped
    }

    /// A verifier of `issuers`, each with the keys its file holds now, and the keys the files' sets left out.
    package static func verifier(_ issuers: [OIDCIssuer], leewayMs: Int) throws(ConfigurationError)
        -> (verifier: IDTokenVerifier, skipped: [String])
    {
        var trusted: [IDTokenVerifier.Issuer] = []
        var skipped: [String] = []
        for issuer in issuers {
            let keys: JWKS
            do throws(JWKSError) {
                keys = try JWKS(contentsOfFile: issuer.jwksFile)
            } catch {
                throw ConfigurationError(message: "--oidc-jwks for \(issuer.issuer): \(error.description)")
            }
            skipped += keys.skipped.map { "\(issuer.jwksFile): skipped \($0)" }
            trusted.append(.init(issuer: issuer.issuer, audiences: issuer.audiences, keys: keys))
        }
        do throws(IDTokenVerifierConfigurationError) {
            let verifier = try IDTokenVerifier(issuers: trusted, leeway: .milliseconds(leewayMs))
            return (verifier, skipped)
        } catch {
            throw ConfigurationError(message: "OpenID Connect: \(error.description)")
        }
    }
}
