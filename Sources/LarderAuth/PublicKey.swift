import COpenSSL

/// A public key held by libcrypto (an `EVP_PKEY`), built from a JWK's numbers, that checks ID token signatures.
///
/// Signatures are checked by libcrypto alone (`EVP_DigestVerify` with SHA-256): this type only hands it the key, the
/// signed bytes and the signature. An `EVP_PKEY` is reference-counted and not changed by verifying, so one key serves
/// many threads at once, each verify with its own `EVP_MD_CTX`.
final class PublicKey: @unchecked Sendable {
    /// The kinds of key Larder accepts, one per algorithm: RSA for RS256, EC on P-256 for ES256.
    enum Kind: Sendable, Equatable {
        /// An RSA key (RS256: RSASSA-PKCS1-v1_5 with SHA-256).
        case rsa
        /// An elliptic-curve key on P-256 (ES256: ECDSA with SHA-256).
        case ecP256
    }

    /// The smallest RSA modulus accepted, in bits (RFC 7518 §3.3 requires 2048).
    static let minimumRSABits = 2048
    /// The largest RSA modulus accepted, in bits: a bound on the work of one verify.
    static let maximumRSABits = 8192

    /// Which kind of key this is.
    let kind: Kind
    private let key: OpaquePointer

    private init(kind: Kind, key: OpaquePointer) {
        self.kind = kind
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    /// An RSA public key from its modulus `n` and exponent `e` (big-endian bytes); the error says why not.
    static func rsa(modulus: [UInt8], exponent: [UInt8]) throws(KeyError) -> PublicKey {
        let n = Array(modulus.drop { $0 == 0 })
        let e = Array(exponent.drop { $0 == 0 })
        let bits = n.isEmpty ? 0 : n.count * 8 - n[0].leadingZeroBitCount
        guard bits >= minimumRSABits else {
            throw KeyError("an RSA key of \(bits) bits, fewer than the \(minimumRSABits) required")
        }
        guard bits <= maximumRSABits else {
            throw KeyError("an RSA key of \(bits) bits, more than the \(maximumRSABits) accepted")
        }
        guard !e.isEmpty, e.count <= 8, e.last! & 1 == 1, e != [1] else {
            throw KeyError("an RSA key whose exponent is not an odd number above 1 of at most 64 bits")
        }
        // The builder keeps pointers to the numbers until it makes the parameters: they are freed after that.
        let bigN = BN_bin2bn(n, Int32(n.count), nil)
        let bigE = BN_bin2bn(e, Int32(e.count), nil)
        defer {
            BN_free(bigN)
            BN_free(bigE)
        }
        guard let bigN, let bigE else { throw KeyError("libcrypto is out of memory") }
        let key = build(kind: .rsa, typeName: "RSA") { builder in
            OSSL_PARAM_BLD_push_BN(builder, larder_param_rsa_n(), bigN) == 1
                && OSSL_PARAM_BLD_push_BN(builder, larder_param_rsa_e(), bigE) == 1
        }
        guard let key else { throw KeyError("libcrypto refused the RSA key's numbers") }
        return key
    }

    /// An EC public key on P-256 from its coordinates `x` and `y` (32 big-endian bytes each); the error says why not.
    /// libcrypto refuses a point that is not on the curve.
    static func ecP256(x: [UInt8], y: [UInt8]) throws(KeyError) -> PublicKey {
        guard x.count == 32, y.count == 32 else {
            throw KeyError("a P-256 key whose coordinates are not 32 bytes each")
        }
        let point = [0x04] + x + y  // SEC 1's uncompressed point
        // The builder keeps a pointer to the point until it makes the parameters, inside this closure.
        let key = point.withUnsafeBufferPointer { point in
            build(kind: .ecP256, typeName: "EC") { builder in
                OSSL_PARAM_BLD_push_utf8_string(builder, larder_param_group_name(), larder_group_p256(), 0) == 1
                    && OSSL_PARAM_BLD_push_octet_string(
                        builder, larder_param_pub_key(), point.baseAddress, point.count) == 1
            }
        }
        guard let key else { throw KeyError("a P-256 key whose point is not on the curve") }
        let check = EVP_PKEY_CTX_new_from_pkey(nil, key.key, nil)
        defer { EVP_PKEY_CTX_free(check) }
        guard let check, EVP_PKEY_public_check(check) == 1 else {
            ERR_clear_error()
            throw KeyError("a P-256 key whose point is not on the curve")
        }
        return key
    }

    /// A key of `typeName` made by `EVP_PKEY_fromdata` from the parameters `push` adds to a builder (true when it
    /// could); nil when libcrypto refuses them. What `push` adds must stay valid until this returns.
    private static func build(kind: Kind, typeName: String, _ push: (OpaquePointer) -> Bool) -> PublicKey? {
        defer { ERR_clear_error() }
        guard let builder = OSSL_PARAM_BLD_new() else { return nil }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard push(builder), let parameters = OSSL_PARAM_BLD_to_param(builder) else { return nil }
        defer { OSSL_PARAM_free(parameters) }
        let context = EVP_PKEY_CTX_new_from_name(nil, typeName, nil)
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard let context, EVP_PKEY_fromdata_init(context) == 1,
            EVP_PKEY_fromdata(context, &key, larder_evp_pkey_public_key(), parameters) == 1, let key
        else { return nil }
        return PublicKey(kind: kind, key: key)
    }

    /// Whether `signature` is this key's signature of `message` under SHA-256: RSASSA-PKCS1-v1_5 for an RSA key, and
    /// for a P-256 key an ECDSA signature in JOSE's raw form (`r` then `s`, 32 bytes each; RFC 7518 §3.4), made DER
    /// for libcrypto here.
    func verify(signature: [UInt8], of message: [UInt8]) -> Bool {
        defer { ERR_clear_error() }
        let der: [UInt8]
        switch kind {
        case .rsa: der = signature
        case .ecP256:
            guard let converted = Self.derECDSASignature(raw: signature) else { return false }
            der = converted
        }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit_ex(context, nil, "SHA256", nil, nil, key, nil) == 1 else { return false }
        return EVP_DigestVerify(context, der, der.count, message, message.count) == 1
    }

    /// The DER form (an `ECDSA-Sig-Value`) of a raw P-256 signature `r || s`; nil unless it is 64 bytes.
    private static func derECDSASignature(raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        guard let r = BN_bin2bn(raw, 32, nil) else { return nil }
        guard let s = raw.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress! + 32, 32, nil) }) else {
            BN_free(r)
            return nil
        }
        // On success the signature owns r and s.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}

/// Why a JWK's numbers make no usable key (a sentence for the JWKS's `skipped` list).
struct KeyError: Error, Sendable {
    /// What is wrong, in a phrase.
    let reason: String

    /// An error saying `reason`.
    init(_ reason: String) { self.reason = reason }
}
