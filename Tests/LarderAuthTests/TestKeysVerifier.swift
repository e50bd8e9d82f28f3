import LarderAuth
import LarderTestSupport

/// The verifiers the suites build over the test keys.
extension TestKeys {
    /// The standard set: "rsa-1" (key rsa) and "ec-1" (key ec).
    func standardSet() throws -> JWKS {
        try JWKS(json: Self.jwksText([jwk("rsa", id: "rsa-1"), jwk("ec", id: "ec-1")]))
    }

    /// A verifier of the tests' issuer and audience with `keys` (the standard set when nil), its clock at `now`.
    func verifier(keys: JWKS? = nil, leeway: Duration = .seconds(60), now: Int64 = TestKeys.now) throws
        -> IDTokenVerifier
    {
        try IDTokenVerifier(
            issuers: [.init(issuer: Self.issuer, audiences: [Self.audience], keys: try keys ?? standardSet())],
            leeway: leeway, now: { Double(now) })
    }
}
