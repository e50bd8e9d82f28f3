import Foundation
import LarderAuth
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Synchronization
import Testing

/// ID tokens made and signed by `openssl` in the test, checked by `IDTokenVerifier`: every way a token is accepted
/// or refused.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct IDTokenVerifierTests {
    let keys = TestKeys.shared

    /// The error `verifier` throws for `token`, checked not to quote the token or any long part of it.
    func refusal(_ token: String, _ verifier: IDTokenVerifier) throws -> IDTokenError {
        do {
            let identity = try verifier.verify(token)
            Issue.record("accepted a token it should refuse: \(identity)")
            throw IDTokenVerifierConfigurationError("accepted")
        } catch let error as IDTokenError {
            let text = error.description
            #expect(!text.contains(token))
            for part in token.split(separator: ".") where part.count >= 8 {
                #expect(!text.contains(part), "the message quotes part of the token: \(text)")
            }
            return error
        }
    }

    @Test func acceptsAValidRS256TokenAndSaysWhoItProves() throws {
        let identity = try keys.verifier().verify(try keys.token())
        #expect(identity.issuer == TestKeys.issuer)
        #expect(identity.subject == "user-42")
        #expect(identity.userId == "https://issuer.example|user-42")
        #expect(identity.audience == TestKeys.audience)
        #expect(identity.email == "ada@example.com")
        #expect(identity.emailVerified)
        #expect(identity.expiresAt == TestKeys.now + 3600)
    }

    @Test func acceptsAValidES256Token() throws {
        let identity = try keys.verifier().verify(try keys.token(key: "ec", id: "ec-1", ["sub": "auth0|abc"]))
        #expect(identity.userId == "https://issuer.example|auth0|abc")
    }

    @Test func emailClaimsAreOptionalAndVerifiedMayBeAString() throws {
        let verifier = try keys.verifier()
        let bare = try verifier.verify(try keys.token(["email": nil, "email_verified": nil]))
        #expect(bare.email == nil)
        #expect(!bare.emailVerified)
        #expect(try verifier.verify(try keys.token(["email_verified": "true"])).emailVerified)
        #expect(try !verifier.verify(try keys.token(["email_verified": false])).emailVerified)
    }

    @Test func refusesAnExpiredToken() throws {
        let token = try keys.token(["exp": .int(TestKeys.now - 3600)])
        #expect(try refusal(token, keys.verifier()) == .expired(at: TestKeys.now - 3600))
    }

    @Test func refusesATokenNotYetValid() throws {
        let token = try keys.token(["nbf": .int(TestKeys.now + 600)])
        #expect(try refusal(token, keys.verifier()) == .notYetValid(until: TestKeys.now + 600))
    }

    @Test func leewayEdges() throws {
        let now = TestKeys.now
        let verifier = try keys.verifier(leeway: .seconds(60))
        // Valid while now < exp + leeway, and once now + leeway >= nbf.
        _ = try verifier.verify(try keys.token(["exp": .int(now - 59)]))
        #expect(try refusal(try keys.token(["exp": .int(now - 60)]), verifier) == .expired(at: now - 60))
        _ = try verifier.verify(try keys.token(["nbf": .int(now + 60)]))
        #expect(try refusal(try keys.token(["nbf": .int(now + 61)]), verifier) == .notYetValid(until: now + 61))
        // Fractional NumericDates count as they are.
        _ = try verifier.verify(try keys.token(["exp": .double(Double(now) - 59.5)]))
        let strict = try keys.verifier(leeway: .zero)
        #expect(try refusal(try keys.token(["exp": .int(now)]), strict) == .expired(at: now))
        _ = try strict.verify(try keys.token(["exp": .int(now + 1), "nbf": .int(now)]))
    }

    @Test func refusesAWrongIssuerAndQuotesIt() throws {
        let token = try keys.token(["iss": "https://evil.example"])
        #expect(try refusal(token, keys.verifier()) == .wrongIssuer("\"https://evil.example\""))
    }

    @Test func refusesAWrongAudience() throws {
        #expect(try refusal(try keys.token(["aud": "someone-else"]), keys.verifier()) == .wrongAudience)
        #expect(try refusal(try keys.token(["aud": ["a", "b"]]), keys.verifier()) == .wrongAudience)
    }

    @Test func acceptsAnAudienceArrayNamingThisServer() throws {
        let identity = try keys.verifier().verify(try keys.token(["aud": ["other-app", .string(TestKeys.audience)]]))
        #expect(identity.audience == TestKeys.audience)
        #expect(try refusal(try keys.token(["aud": []]), keys.verifier()).code == "malformed")
        #expect(try refusal(try keys.token(["aud": [1]]), keys.verifier()).code == "malformed")
    }

    @Test func refusesABadSignature() throws {
        // Signed by another RSA key under the set's kid.
        #expect(try refusal(try keys.token(key: "rsa2"), keys.verifier()) == .badSignature)
        // Claims changed after signing.
        let parts = try keys.token().split(separator: ".").map(String.init)
        let forged = TestKeys.base64url(JSON.object(TestKeys.claims(["sub": "admin"])).bytes)
        #expect(try refusal([parts[0], forged, parts[2]].joined(separator: "."), keys.verifier()) == .badSignature)
        // An ES256 signature that is not 64 bytes, and one flipped bit.
        let ec = try keys.token(key: "ec", id: "ec-1").split(separator: ".").map(String.init)
        var signature = Base64URL.decode(ec[2])!
        let short = ec[0] + "." + ec[1] + "." + TestKeys.base64url(Array(signature.dropLast()))
        #expect(try refusal(short, keys.verifier()) == .badSignature)
        signature[10] ^= 1
        let flipped = ec[0] + "." + ec[1] + "." + TestKeys.base64url(signature)
        #expect(try refusal(flipped, keys.verifier()) == .badSignature)
    }

    @Test func refusesAlgNone() throws {
        let token = try keys.token(header: ["alg": "none"], claims: TestKeys.claims(), signer: .none)
        #expect(try refusal(token, keys.verifier()) == .unsupportedAlgorithm("\"none\""))
    }

    @Test func refusesHS256SignedWithThePublicKeyAsSecret() throws {
        // The classic confusion: a verifier that lets the token pick the algorithm checks an HMAC keyed with the RSA
        // key's public PEM, which anyone has.
        for id in ["rsa-1", nil] {
            var header: JSONObject = ["alg": "HS256", "typ": "JWT"]
            if let id { header["kid"] = .string(id) }
            let token = try keys.token(header: header, claims: TestKeys.claims(), signer: .hmac(fileAsKey: "rsa.pub"))
            #expect(try refusal(token, keys.verifier()) == .unsupportedAlgorithm("\"HS256\""))
        }
    }

    @Test func refusesEveryOtherAlgorithmByName() throws {
        for alg in ["PS256", "RS512", "ES384", "EdDSA", "rs256", "HS512"] {
            let token = try keys.token(header: ["alg": .string(alg), "kid": "rsa-1"], claims: TestKeys.claims(),
                signer: .rsa("rsa"))
            #expect(try refusal(token, keys.verifier()) == .unsupportedAlgorithm("\"\(alg)\""))
        }
    }

    @Test func refusesAKeyIdNotInTheSet() throws {
        let error = try refusal(try keys.token(id: "rotated-away"), keys.verifier())
        #expect(error.code == "unknownKey")
        #expect(error.description.contains("\"rotated-away\""))
    }

    @Test func refusesES256NamingAnRSAKey() throws {
        // Signed with the EC key, but the kid names the RSA key: the RSA key is never used for ES256.
        let token = try keys.token(header: ["alg": "ES256", "kid": "rsa-1"], claims: TestKeys.claims(),
            signer: .ec("ec"))
        let error = try refusal(token, keys.verifier())
        #expect(error.code == "unknownKey")
        #expect(error.description.contains("RS256 key"))
        let reverse = try keys.token(header: ["alg": "RS256", "kid": "ec-1"], claims: TestKeys.claims(),
            signer: .rsa("rsa"))
        #expect(try refusal(reverse, keys.verifier()).code == "unknownKey")
    }

    @Test func aTokenWithoutKidUsesTheOneKeyOfItsType() throws {
        _ = try keys.verifier().verify(try keys.token(id: nil))
        _ = try keys.verifier().verify(try keys.token(key: "ec", id: nil))
        let twoRSA = try JWKS(json: TestKeys.jwksText([keys.jwk("rsa", id: "a"), keys.jwk("rsa2", id: "b")]))
        let error = try refusal(try keys.token(id: nil), keys.verifier(keys: twoRSA))
        #expect(error.code == "unknownKey")
        let onlyEC = try JWKS(json: TestKeys.jwksText([keys.jwk("ec", id: "e")]))
        #expect(try refusal(try keys.token(id: nil), keys.verifier(keys: onlyEC)).code == "unknownKey")
    }

    @Test func refusesAnOversizeTokenBeforeParsing() throws {
        let padding = String(repeating: "A", count: IDTokenVerifier.maximumTokenBytes)
        let error = try refusal(try keys.token(["padding": .string(padding)]), keys.verifier())
        #expect(error == .malformed("longer than 16384 bytes"))
        // Just under the bound, a large but valid token passes.
        _ = try keys.verifier().verify(try keys.token(["padding": .string(String(padding.prefix(11_000)))]))
    }

    @Test func refusesMalformedTokens() throws {
        let valid = try keys.token()
        let parts = valid.split(separator: ".").map(String.init)
        let header = TestKeys.base64url(#"{"alg":"RS256","kid":"rsa-1"}"#)
        let cases = [
            "", "abc", parts[0] + "." + parts[1], valid + ".x", parts[0] + "=." + parts[1] + "." + parts[2],
            TestKeys.base64url("not json") + "." + parts[1] + "." + parts[2],
            TestKeys.base64url("[1]") + "." + parts[1] + "." + parts[2],
            TestKeys.base64url(#"{"kid":"rsa-1"}"#) + "." + parts[1] + "." + parts[2],
            TestKeys.base64url(#"{"alg":"RS256","crit":["b64"]}"#) + "." + parts[1] + "." + parts[2],
            TestKeys.base64url(#"{"alg":"RS256","typ":"at+jwt"}"#) + "." + parts[1] + "." + parts[2],
            TestKeys.base64url(#"{"alg":"RS256","kid":7}"#) + "." + parts[1] + "." + parts[2],
            header + "." + TestKeys.base64url(#"{"iss":"https://issuer.example""#) + "." + parts[2],
            parts[0] + "." + parts[1] + "." + parts[2] + "!",
        ]
        for token in cases {
            #expect(try refusal(token, keys.verifier()).code == "malformed", "\(token.prefix(40))")
        }
        // Required claims, checked once the signature holds.
        for changes: JSONObject in [["exp": nil], ["exp": "soon"], ["nbf": "soon"], ["sub": nil], ["sub": ""],
            ["sub": .string(String(repeating: "s", count: 256))], ["aud": nil], ["iss": nil]]
        {
            #expect(try refusal(try keys.token(changes), keys.verifier()).code == "malformed", "\(changes)")
        }
    }

    @Test func aReloadedSetAcceptsTheNewKeyAndRefusesTheOld() throws {
        let file = keys.directory + "/reload-\(UUID().uuidString).jwks"
        func verifier() throws -> IDTokenVerifier { try keys.verifier(keys: try JWKS(contentsOfFile: file)) }
        try Data(TestKeys.jwksText([keys.jwk("rsa", id: "current")])).write(to: URL(fileURLWithPath: file))
        let old = try keys.token(id: "current")
        let new = try keys.token(key: "rsa2", id: "current")
        let before = try verifier()
        _ = try before.verify(old)
        #expect(try refusal(new, before) == .badSignature)
        // The provider rotated its key under the same kid; the operator rewrote the file and sent SIGHUP.
        try Data(TestKeys.jwksText([keys.jwk("rsa2", id: "current"), keys.jwk("ec", id: "next")]))
            .write(to: URL(fileURLWithPath: file))
        let after = try verifier()
        _ = try after.verify(new)
        _ = try after.verify(try keys.token(key: "ec", id: "next"))
        #expect(try refusal(old, after) == .badSignature)
        #expect(try refusal(try keys.token(id: "rsa-1"), after).code == "unknownKey")
        // The verifier built before the reload keeps its own keys.
        _ = try before.verify(old)
    }

    @Test func severalIssuersEachWithTheirOwnKeysAndAudiences() throws {
        let google = try JWKS(json: TestKeys.jwksText([keys.jwk("rsa2", id: "g")]))
        let verifier = try IDTokenVerifier(
            issuers: [
                .init(issuer: TestKeys.issuer, audiences: [TestKeys.audience], keys: try keys.standardSet()),
                .init(issuer: "https://accounts.google.com", audiences: ["web", "ios"], keys: google),
            ], now: { Double(TestKeys.now) })
        let fromGoogle = try keys.token(key: "rsa2", id: "g", ["iss": "https://accounts.google.com", "aud": "ios"])
        #expect(try verifier.verify(fromGoogle).userId == "https://accounts.google.com|user-42")
        // A key of one issuer does not sign for another.
        let crossed = try keys.token(key: "rsa", id: "rsa-1", ["iss": "https://accounts.google.com", "aud": "web"])
        #expect(try refusal(crossed, verifier).code == "unknownKey")
        #expect(try refusal(try keys.token(["aud": "web"]), verifier) == .wrongAudience)
    }

    @Test func verifiesFromManyThreadsAtOnce() throws {
        let verifier = try keys.verifier()
        let tokens = [try keys.token(), try keys.token(key: "ec", id: "ec-1"), try keys.token(key: "rsa2")]
        let failures = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 300) { index in
            let valid = (try? verifier.verify(tokens[index % 3])) != nil
            if valid != (index % 3 != 2) { failures.withLock { $0 += 1 } }
        }
        #expect(failures.withLock { $0 } == 0)
    }

    @Test func refusesABadConfiguration() throws {
        let set = try keys.standardSet()
        #expect(throws: IDTokenVerifierConfigurationError.self) { try IDTokenVerifier(issuers: []) }
        #expect(throws: IDTokenVerifierConfigurationError.self) {
            try IDTokenVerifier(issuers: [.init(issuer: "a|b", audiences: ["x"], keys: set)])
        }
        #expect(throws: IDTokenVerifierConfigurationError.self) {
            try IDTokenVerifier(issuers: [.init(issuer: "a", audiences: [], keys: set)])
        }
        #expect(throws: IDTokenVerifierConfigurationError.self) {
            try IDTokenVerifier(issuers: [.init(issuer: "a", audiences: ["x"], keys: set)], leeway: .seconds(601))
        }
        #expect(throws: IDTokenVerifierConfigurationError.self) {
            try IDTokenVerifier(issuers: [
                .init(issuer: "a", audiences: ["x"], keys: set), .init(issuer: "a", audiences: ["y"], keys: set),
            ])
        }
    }
}
