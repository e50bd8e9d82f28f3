import CArgon2
import Foundation

/// Hashes and checks the passwords of the accounts Larder keeps, with Argon2id (RFC 9106) from libargon2.
///
/// A hash is the PHC string libargon2 writes, which records its parameters and salt:
/// `$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>` (a 16-byte random salt, a 32-byte hash). Checking reads the
/// parameters from the string, so hashes made under older parameters still verify; `needsRehash` says when one should
/// be replaced (after a successful sign-in, with the password just given). The comparison of hashes is libargon2's, in
/// constant time.
///
/// The default parameters, `Parameters.recommended`, are 19 MiB of memory, 2 passes and 1 lane: OWASP's recommended
/// Argon2id setting, and about 50 to 60 ms of CPU per hash on the 2-core machine Larder's tests run on (measured in
/// an optimized build: see `Parameters.recommended`). One lane, because a server hashes for many clients at once and
/// gains nothing from spreading one hash over its cores; each hash in progress holds its 19 MiB.
///
/// Passwords are normalized to Unicode NFKC first (NIST SP 800-63B §5.1.1.2), so the same password typed on two
/// keyboards that compose characters differently matches, and are then 8 to 1024 bytes of UTF-8 (see
/// `minimumPasswordBytes` and `maximumPasswordBytes`).
///
/// ```swift
/// let hasher = PasswordHasher()
/// let stored = try hasher.hash("correct horse battery staple")
/// if try hasher.verify("correct horse battery staple", against: stored), hasher.needsRehash(stored) {
///     store.replaceHash(try hasher.hash("correct horse battery staple"))
/// }
/// ```
public struct PasswordHasher: Sendable {
    /// Argon2id's cost parameters, as a PHC string records them.
    public struct Parameters: Sendable, Equatable, CustomStringConvertible {
        /// Passes over the memory (`t`).
        public var iterations: UInt32
        /// Memory in KiB (`m`).
        public var memoryKiB: UInt32
        /// Lanes (`p`).
        public var parallelism: UInt32

        /// Parameters of `iterations` passes over `memoryKiB` KiB in `parallelism` lanes.
        public init(iterations: UInt32, memoryKiB: UInt32, parallelism: UInt32) {
            self.iterations = iterations
            self.memoryKiB = memoryKiB
            self.parallelism = parallelism
        }

        /// m=19456 (19 MiB), t=2, p=1: OWASP's recommendation for Argon2id. Measured with libargon2 from Debian 12
        /// (0~20171227) on this project's 2-core test machine, this type in an optimized build, 15 hashes: 50 ms of
        /// CPU at best, 62 ms median (and 90 to 140 ms of wall clock while other builds kept both cores busy).
        public static let recommended = Parameters(iterations: 2, memoryKiB: 19456, parallelism: 1)

        /// The largest parameters a stored hash may ask for before it is refused as malformed rather than computed:
        /// 1 GiB, 64 passes, 64 lanes (a bound on the work a damaged or forged hash can cause).
        public static let maximum = Parameters(iterations: 64, memoryKiB: 1 << 20, parallelism: 64)

        /// "m=19456,t=2,p=1", as in a PHC string.
        public var description: String { "m=\(memoryKiB),t=\(iterations),p=\(parallelism)" }
    }

    /// The shortest password accepted for a new hash, in bytes of UTF-8 after normalization: NIST SP 800-63B's
    /// minimum for a password the user chose.
    public static let minimumPasswordBytes = 8
    /// The longest password accepted, in bytes of UTF-8 after normalization: far above any passphrase, and a bound on
    /// the bytes a sign-in request makes the server hash (Argon2 reads all of them before its memory-hard part).
    public static let maximumPasswordBytes = 1024
    /// The salt's length in bytes (RFC 9106 recommends 16).
    public static let saltBytes = 16
    /// The hash's length in bytes.
    public static let hashBytes = 32

    /// The parameters new hashes are made with.
    public let parameters: Parameters

    /// A hasher making new hashes with `parameters`.
    public init(parameters: Parameters = .recommended) { self.parameters = parameters }

    /// The PHC string of `password` under a new random salt; throws when the password is too short or too long.
    public func hash(_ password: String) throws(PasswordError) -> String {
        let bytes = Self.normalized(password)
        guard bytes.count >= Self.minimumPasswordBytes else { throw .tooShort(minimum: Self.minimumPasswordBytes) }
        guard bytes.count <= Self.maximumPasswordBytes else { throw .tooLong(maximum: Self.maximumPasswordBytes) }
        let salt = SystemRandom.bytes(Self.saltBytes)
        let length = argon2_encodedlen(
            parameters.iterations, parameters.memoryKiB, parameters.parallelism, UInt32(Self.saltBytes),
            UInt32(Self.hashBytes), Argon2_id)
        var encoded = [CChar](repeating: 0, count: length + 1)
        let result = argon2id_hash_encoded(
            parameters.iterations, parameters.memoryKiB, parameters.parallelism, bytes, bytes.count, salt, salt.count,
            Self.hashBytes, &encoded, encoded.count)
        guard result == ARGON2_OK.rawValue else {
            throw .libraryFailure(String(cString: argon2_error_message(result)))
        }
        return String(decoding: encoded.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether `password` is the one `encoded` (a PHC string from `hash`) was made from. A password longer than
    /// `maximumPasswordBytes` is false without hashing; throws when `encoded` is not an Argon2id hash within
    /// `Parameters.maximum`.
    public func verify(_ password: String, against encoded: String) throws(PasswordError) -> Bool {
        guard let stored = Self.parameters(of: encoded) else {
            throw encoded.hasPrefix("$argon2id$") ? .malformedHash : .notArgon2id
        }
        let maximum = Parameters.maximum
        guard stored.iterations <= maximum.iterations, stored.memoryKiB <= maximum.memoryKiB,
            stored.parallelism <= maximum.parallelism
        else { throw .malformedHash }
        let bytes = Self.normalized(password)
        guard bytes.count <= Self.maximumPasswordBytes else { return false }
        let result = argon2id_verify(encoded, bytes, bytes.count)
        switch result {
        case ARGON2_OK.rawValue: return true
        case ARGON2_VERIFY_MISMATCH.rawValue: return false
        case ARGON2_DECODING_FAIL.rawValue, ARGON2_INCORRECT_TYPE.rawValue: throw .malformedHash
        default: throw .libraryFailure(String(cString: argon2_error_message(result)))
        }
    }

    /// Whether `encoded` should be replaced by a hash under this hasher's parameters: it was made with others, or is
    /// not an Argon2id PHC string at all.
    public func needsRehash(_ encoded: String) -> Bool { Self.parameters(of: encoded) != parameters }

    /// The parameters an Argon2id PHC string (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`) records; nil when it is not
    /// one (another variant, another version than 19, or a damaged string).
    public static func parameters(of encoded: String) -> Parameters? {
        let fields = encoded.split(separator: "$", omittingEmptySubsequences: false)
        guard fields.count == 6, fields[0].isEmpty, fields[1] == "argon2id", fields[2] == "v=19",
            !fields[4].isEmpty, !fields[5].isEmpty
        else { return nil }
        var values: [Substring: UInt32] = [:]
        for pair in fields[3].split(separator: ",", omittingEmptySubsequences: false) {
            let parts = pair.split(separator: "=", omittingEmptySubsequences: false)
            guard parts.count == 2, let value = UInt32(parts[1]), values.updateValue(value, forKey: parts[0]) == nil
            else { return nil }
        }
        guard values.count == 3, let m = values["m"], let t = values["t"], let p = values["p"] else { return nil }
        return Parameters(iterations: t, memoryKiB: m, parallelism: p)
    }

    /// `password` in Unicode NFKC, as UTF-8.
    private static func normalized(_ password: String) -> [UInt8] {
        Array(password.precomposedStringWithCompatibilityMapping.utf8)
    }
}

/// Why a password could not be hashed or checked. No description contains the password or the hash.
public enum PasswordError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The password has fewer bytes than `minimum`.
    case tooShort(minimum: Int)
    /// The password has more bytes than `maximum`.
    case tooLong(maximum: Int)
    /// The stored hash is not an Argon2id PHC string (another algorithm, or another Argon2 variant).
    case notArgon2id
    /// The stored hash is an Argon2id string that cannot be read, or asks for more than `Parameters.maximum`.
    case malformedHash
    /// libargon2 failed (for instance, out of memory); its message.
    case libraryFailure(String)

    /// A sentence for a log or an error answer.
    public var description: String {
        switch self {
        case .tooShort(let minimum): "the password is shorter than \(minimum) bytes"
        case .tooLong(let maximum): "the password is longer than \(maximum) bytes"
        case .notArgon2id: "the stored password hash is not an Argon2id hash"
        case .malformedHash: "the stored password hash is damaged or asks for too much work"
        case .libraryFailure(let message): "Argon2id failed: \(message)"
        }
    }
}
