import Foundation
import LarderTestProcess
import LarderWire

/// Keys made for one test run with the `openssl` command (two RSA 2048 keys, a P-256 key, a 1024-bit RSA key and a
/// P-384 key, the last two for the JWKS's refusals), and tokens signed with them by `openssl dgst`, so the verifier
/// is checked against signatures it had no part in making.
public final class TestKeys: Sendable {
    /// The temporary directory holding the keys.
    public let directory: String
    /// The JWK members (`kty`, `n`/`e` or `crv`/`x`/`y`) of each key, by name.
    public let publicMembers: [String: JSONObject]

    /// The moment the tests' verifiers take as now (seconds since 1970).
    public static let now: Int64 = 1_800_000_000
    /// The issuer the tests' tokens come from.
    public static let issuer = "https://issuer.example"
    /// The client id the tests' tokens are for.
    public static let audience = "larder-client"

    /// Made once per test process (a second or so of `openssl`), shared by the suites.
    public static let shared: TestKeys = {
        do {
            return try TestKeys()
        } catch {
            fatalError("cannot make test keys with openssl: \(error)")
        }
    }()

    private init() throws {
        directory = NSTemporaryDirectory() + "larder-auth-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var members: [String: JSONObject] = [:]
        for (name, bits) in [("rsa", 2048), ("rsa2", 2048), ("rsa1024", 1024)] {
            try Self.openssl(
                in: directory, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:\(bits)", "-out",
                "\(name).pem")
            try Self.openssl(in: directory, "pkey", "-in", "\(name).pem", "-pubout", "-out", "\(name).pub")
            let text = String(decoding: try Self.openssl(in: directory, "rsa", "-pubin", "-in", "\(name).pub",
                "-noout", "-modulus"), as: UTF8.self)
            guard let hex = text.split(separator: "=").last?.trimmingCharacters(in: .whitespacesAndNewlines),
                let modulus = Self.bytes(hex: hex)
            else { throw ChildProcessError("no modulus in openssl's output: \(text)") }
            members[name] = ["kty": "RSA", "n": .string(Self.base64url(modulus)), "e": "AQAB"]
        }
        for (name, curve, crv, size) in [("ec", "P-256", "P-256", 32), ("ec384", "P-384", "P-384", 48)] {
            try Self.openssl(
                in: directory, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:\(curve)", "-out",
                "\(name).pem")
            try Self.openssl(
                in: directory, "pkey", "-in", "\(name).pem", "-pubout", "-outform", "DER", "-out", "\(name).der")
            // A SubjectPublicKeyInfo ends with the uncompressed point: 0x04, x, y.
            let der = try Array(Data(contentsOf: URL(fileURLWithPath: directory + "/\(name).der")))
            let x = Array(der.suffix(2 * size).prefix(size))
            let y = Array(der.suffix(size))
            members[name] = ["kty": "EC", "crv": .string(crv), "x": .string(Self.base64url(x)),
                "y": .string(Self.base64url(y))]
        }
        publicMembers = members
    }

    /// The JWK of the key `name` with the `kid` `id` (none when nil) and extra members.
    public func jwk(_ name: String, id: String?, extra: JSONObject = [:]) -> JSON {
        var object = publicMembers[name]!
        if let id { object["kid"] = .string(id) }
        for (key, value) in extra { object[key] = value }
        return .object(object)
    }

    /// The JWKS text of `keys`.
    public static func jwksText(_ keys: [JSON]) -> [UInt8] { JSON.object(["keys": .array(keys)]).bytes }

    /// The claims of a valid token at `now`: issuer, audience, subject, email, issued a minute ago, expiring in an
    /// hour.
    public static func claims(_ changes: JSONObject = [:]) -> JSONObject {
        var claims: JSONObject = [
            "iss": .string(issuer), "aud": .string(audience), "sub": "user-42", "email": "ada@example.com",
            "email_verified": true, "iat": .int(now - 60), "exp": .int(now + 3600),
        ]
        for (key, value) in changes { claims[key] = value }
        return claims
    }

    /// How a test token is signed.
    public enum Signer {
        /// RSASSA-PKCS1-v1_5 with SHA-256 by the key `name` (what RS256 is).
        case rsa(String)
        /// ECDSA with SHA-256 by the key `name`, in JOSE's raw r||s form (what ES256 is).
        case ec(String)
        /// HMAC-SHA256 keyed with the bytes of the file `name` (HS256 with, say, a public key's PEM as the secret).
        case hmac(fileAsKey: String)
        /// No signature (`alg` "none").
        case none
    }

    /// A compact JWT of `header` and `claims` signed by `signer`.
    public func token(header: JSONObject, claims: JSONObject, signer: Signer) throws -> String {
        let input = Self.base64url(JSON.object(header).bytes) + "." + Self.base64url(JSON.object(claims).bytes)
        let name = "input-\(UUID().uuidString)"
        try Data(input.utf8).write(to: URL(fileURLWithPath: directory + "/" + name))
        defer { try? FileManager.default.removeItem(atPath: directory + "/" + name) }
        let signature: [UInt8]
        switch signer {
        case .rsa(let key):
            signature = try Self.openssl(in: directory, "dgst", "-sha256", "-sign", "\(key).pem", "-binary", name)
        case .ec(let key):
            let der = try Self.openssl(in: directory, "dgst", "-sha256", "-sign", "\(key).pem", "-binary", name)
            signature = try Self.rawECDSA(der: der)
        case .hmac(let file):
            let secret = try Array(Data(contentsOf: URL(fileURLWithPath: directory + "/" + file)))
            signature = try Self.openssl(
                in: directory, "dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:" + Self.hex(secret), "-binary",
                name)
        case .none: signature = []
        }
        return input + "." + Self.base64url(signature)
    }

    /// A valid token signed by the key `key` (RSA unless it starts with "ec") with the `kid` `id`, its claims changed
    /// by `changes`.
    public func token(key: String = "rsa", id: String? = "rsa-1", _ changes: JSONObject = [:]) throws -> String {
        let ec = key.hasPrefix("ec")
        var header: JSONObject = ["alg": ec ? "ES256" : "RS256", "typ": "JWT"]
        if let id { header["kid"] = .string(id) }
        return try token(header: header, claims: Self.claims(changes), signer: ec ? .ec(key) : .rsa(key))
    }

    /// The raw r||s (32 bytes each) of a DER ECDSA-Sig-Value: SEQUENCE { INTEGER r, INTEGER s }.
    private static func rawECDSA(der: [UInt8]) throws -> [UInt8] {
        var index = 2  // the SEQUENCE's tag and one-byte length (a P-256 signature is under 128 bytes)
        var raw: [UInt8] = []
        for _ in 0..<2 {
            guard der.count > index + 2, der[index] == 0x02 else { throw ChildProcessError("not a DER signature") }
            let length = Int(der[index + 1])
            var integer = Array(der[(index + 2)..<(index + 2 + length)])
            while integer.count > 32 && integer.first == 0 { integer.removeFirst() }
            raw += [UInt8](repeating: 0, count: 32 - integer.count) + integer
            index += 2 + length
        }
        return raw
    }

    /// Runs openssl with `arguments` in `directory`; its standard output.
    @discardableResult
    public static func openssl(in directory: String, _ arguments: String...) throws -> [UInt8] {
        let output = directory + "/openssl-\(UUID().uuidString).out"
        let errors = directory + "/openssl.log"
        for file in [output, errors] where !FileManager.default.fileExists(atPath: file) {
            _ = FileManager.default.createFile(atPath: file, contents: nil)
        }
        defer { try? FileManager.default.removeItem(atPath: output) }
        let outputHandle = FileHandle(forWritingAtPath: output)
        let errorHandle = FileHandle(forWritingAtPath: errors)
        errorHandle?.seekToEndOfFile()
        defer {
            try? outputHandle?.close()
            try? errorHandle?.close()
        }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardOutput = outputHandle
        process.standardError = errorHandle
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            throw ChildProcessError("openssl \(arguments.joined(separator: " ")) failed: \(text.suffix(500))")
        }
        return try Array(Data(contentsOf: URL(fileURLWithPath: output)))
    }

    /// Unpadded base64url of `bytes`, made with Foundation's base64 (not the module's own encoder).
    public static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// Unpadded base64url of `text`'s UTF-8.
    public static func base64url(_ text: String) -> String { base64url(Array(text.utf8)) }

    /// The bytes of the hexadecimal `hex`; nil when it is not.
    public static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                return nil
            }
            out.append(byte)
        }
        return out
    }

    /// Lowercase hexadecimal of `bytes`.
    public static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}
