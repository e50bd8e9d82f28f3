import Foundation
import LarderWire

/// A JSON Web Key Set (RFC 7517): the public keys an identity provider signs its ID tokens with, read from a file
/// (servers may have no outbound network, so the set is fetched by the operator and reloaded on SIGHUP).
///
/// Usable keys are RSA keys of 2048 to 8192 bits (`kty` "RSA", from `n` and `e`) for RS256 and EC keys on P-256 (`kty`
/// "EC", `crv` "P-256", from `x` and `y`) for ES256. Any other key is left out and named in `skipped` with the reason:
/// another `kty` or curve, a `use` other than "sig", an `alg` other than the key type's one, numbers libcrypto refuses,
/// or a `kid` already taken by a key of the same type. A set with no usable key is refused.
///
/// ```swift
/// let keys = try JWKS(contentsOfFile: "/etc/larder/google.jwks")
/// for reason in keys.skipped { log("JWKS: skipped \(reason)") }
/// ```
public struct JWKS: Sendable {
    /// One usable key of the set.
    public struct Key: Sendable {
        /// Its `kid`, if it has one.
        public let id: String?
        /// The algorithm it verifies: "RS256" for an RSA key, "ES256" for a P-256 key.
        public let algorithm: String
        /// The key itself, in libcrypto.
        let publicKey: PublicKey
    }

    /// The largest JWKS file read, in bytes (a provider's set is a few kilobytes).
    public static let maximumFileBytes = 1 << 20

    /// The usable keys, in the file's order.
    public let keys: [Key]
    /// One line per key left out: its position, its `kid` if any, and why.
    public let skipped: [String]

    /// The set read from the file at `path`; throws when it cannot be read, is not a JWKS, or has no usable key.
    public init(contentsOfFile path: String) throws(JWKSError) {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw JWKSError("cannot open the JWKS file \(path)")
        }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: Self.maximumFileBytes + 1) ?? Data()
        } catch {
            throw JWKSError("cannot read the JWKS file \(path): \(error)")
        }
        guard data.count <= Self.maximumFileBytes else {
            throw JWKSError("the JWKS file \(path) is larger than \(Self.maximumFileBytes) bytes")
        }
        do {
            try self.init(json: Array(data))
        } catch {
            throw JWKSError("the JWKS file \(path): \(error.description)")
        }
    }

    /// The set in the JSON text `json`; throws when it is not a JWKS or has no usable key.
    public init(json: [UInt8]) throws(JWKSError) {
        let object: JSONObject
        do {
            object = try JSONParser.parseObject(json)
        } catch {
            throw JWKSError("not a JSON object: \(error.message)")
        }
        guard let entries = object["keys"]?.arrayValue else {
            throw JWKSError("no \"keys\" array (a JWKS is {\"keys\": [...]})")
        }
        var keys: [Key] = []
        var skipped: [String] = []
        for (index, entry) in entries.enumerated() {
            let kid = entry["kid"]?.stringValue
            let name = "key \(index + 1)" + (kid.map { " (kid \(IDTokenError.quoted($0)))" } ?? "")
            do throws(KeyError) {
                let key = try Self.key(entry, id: kid)
                if keys.contains(where: { $0.id != nil && $0.id == kid && $0.algorithm == key.algorithm }) {
                    throw KeyError("its kid is taken by an earlier \(key.algorithm) key")
                }
                keys.append(key)
            } catch {
                skipped.append("\(name): \(error.reason)")
            }
        }
        guard !keys.isEmpty else {
            let reasons = skipped.isEmpty ? "the set is empty" : skipped.joined(separator: "; ")
            throw JWKSError("no usable RS256 or ES256 key: \(reasons)")
        }
        self.keys = keys
        self.skipped = skipped
    }

    /// The usable key `entry` describes; the error says why it is not one.
    private static func key(_ entry: JSON, id: String?) throws(KeyError) -> Key {
        guard entry.objectValue != nil else { throw KeyError("not a JSON object") }
        if let use = entry["use"], use.stringValue != "sig" {
            throw KeyError("its \"use\" is not \"sig\"")
        }
        if let operations = entry["key_ops"], !(operations.arrayValue ?? []).contains("verify") {
            throw KeyError("its \"key_ops\" lacks \"verify\"")
        }
        let declared = entry["alg"]
        let key: PublicKey
        let algorithm: String
        switch entry["kty"]?.stringValue {
        case "RSA":
            algorithm = "RS256"
            guard let n = number(entry, "n"), let e = number(entry, "e") else {
                throw KeyError("an RSA key without base64url \"n\" and \"e\"")
            }
            key = try PublicKey.rsa(modulus: n, exponent: e)
        case "EC":
            algorithm = "ES256"
            guard entry["crv"]?.stringValue == "P-256" else {
                throw KeyError("an EC key on a curve other than P-256")
            }
            guard let x = number(entry, "x"), let y = number(entry, "y") else {
                throw KeyError("an EC key without base64url \"x\" and \"y\"")
            }
            key = try PublicKey.ecP256(x: x, y: y)
        case let other?:
            throw KeyError("kty \(IDTokenError.quoted(other)) is neither RSA nor EC")
        case nil:
            throw KeyError("no \"kty\"")
        }
        if let declared, declared.stringValue != algorithm {
            throw KeyError("its \"alg\" is not \(algorithm), the one algorithm of its key type")
        }
        return Key(id: id, algorithm: algorithm, publicKey: key)
    }

    /// The bytes of the base64url member `name` of `entry`.
    private static func number(_ entry: JSON, _ name: String) -> [UInt8]? {
        entry[name]?.stringValue.flatMap { Base64URL.decode($0) }
    }
}

/// Why a JWKS was refused: a sentence for the operator.
public struct JWKSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong.
    public let description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}
