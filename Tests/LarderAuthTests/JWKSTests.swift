import Foundation
import LarderAuth
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Key sets read from JWKS text and files: which keys are used, which are skipped and why, which sets are refused.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct JWKSTests {
    let keys = TestKeys.shared

    @Test func readsRSAAndP256Keys() throws {
        let set = try keys.standardSet()
        #expect(set.keys.map(\.id) == ["rsa-1", "ec-1"])
        #expect(set.keys.map(\.algorithm) == ["RS256", "ES256"])
        #expect(set.skipped.isEmpty)
    }

    @Test func skipsOtherKeysAndSaysWhy() throws {
        let set = try JWKS(json: TestKeys.jwksText([
            ["kty": "oct", "kid": "hmac", "k": "c2VjcmV0"],
            keys.jwk("ec384", id: "p384"),
            keys.jwk("rsa1024", id: "small"),
            keys.jwk("rsa", id: "encryption", extra: ["use": "enc"]),
            keys.jwk("rsa", id: "pss", extra: ["alg": "PS256"]),
            keys.jwk("ec", id: "no-verify", extra: ["key_ops": ["encrypt"]]),
            ["kty": "EC", "crv": "P-256", "kid": "off-curve", "x": .string(TestKeys.base64url([UInt8](repeating: 1,
                count: 32))), "y": .string(TestKeys.base64url([UInt8](repeating: 2, count: 32)))],
            ["kty": "RSA", "kid": "no-n", "e": "AQAB"],
            "not an object",
            keys.jwk("rsa", id: "good", extra: ["alg": "RS256", "use": "sig", "key_ops": ["verify"]]),
            keys.jwk("rsa2", id: "good"),
            keys.jwk("ec", id: "good"),
        ]))
        #expect(set.keys.map(\.id) == ["good", "good"])
        #expect(set.keys.map(\.algorithm) == ["RS256", "ES256"])
        let reasons = set.skipped
        #expect(reasons.count == 10)
        let expected = [
            "key 1 (kid \"hmac\"): kty \"oct\" is neither RSA nor EC",
            "key 2 (kid \"p384\"): an EC key on a curve other than P-256",
            "key 3 (kid \"small\"): an RSA key of 1024 bits, fewer than the 2048 required",
            "key 4 (kid \"encryption\"): its \"use\" is not \"sig\"",
            "key 5 (kid \"pss\"): its \"alg\" is not RS256, the one algorithm of its key type",
            "key 6 (kid \"no-verify\"): its \"key_ops\" lacks \"verify\"",
            "key 7 (kid \"off-curve\"): a P-256 key whose point is not on the curve",
            "key 8 (kid \"no-n\"): an RSA key without base64url \"n\" and \"e\"",
            "key 9: not a JSON object",
            "key 11 (kid \"good\"): its kid is taken by an earlier RS256 key",
        ]
        #expect(reasons == expected)
    }

    @Test func refusesASetWithNoUsableKey() throws {
        #expect(throws: JWKSError.self) { try JWKS(json: TestKeys.jwksText([])) }
        do {
            _ = try JWKS(json: TestKeys.jwksText([["kty": "oct", "k": "c2VjcmV0"]]))
            Issue.record("a set of one HMAC key was accepted")
        } catch {
            #expect(error.description == "no usable RS256 or ES256 key: key 1: kty \"oct\" is neither RSA nor EC")
        }
        #expect(throws: JWKSError.self) { try JWKS(json: Array("not json".utf8)) }
        #expect(throws: JWKSError.self) { try JWKS(json: Array(#"{"keys": {}}"#.utf8)) }
        #expect(throws: JWKSError.self) { try JWKS(json: Array("[]".utf8)) }
    }

    @Test func readsAFileAndRefusesAMissingOrOversizeOne() throws {
        let file = keys.directory + "/set-\(UUID().uuidString).jwks"
        try Data(TestKeys.jwksText([keys.jwk("ec", id: "e")])).write(to: URL(fileURLWithPath: file))
        #expect(try JWKS(contentsOfFile: file).keys.count == 1)
        do {
            _ = try JWKS(contentsOfFile: keys.directory + "/missing.jwks")
            Issue.record("a missing file was read")
        } catch {
            #expect(error.description.contains("cannot open the JWKS file"))
        }
        try Data(repeating: 0x20, count: JWKS.maximumFileBytes + 1).write(to: URL(fileURLWithPath: file))
        do {
            _ = try JWKS(contentsOfFile: file)
            Issue.record("an oversize file was read")
        } catch {
            #expect(error.description.contains("larger than"))
        }
    }
}
