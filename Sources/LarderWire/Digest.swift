#if canImport(CommonCrypto)
import CommonCrypto
#else
import COpenSSL
#endif

/// SHA-256 (FIPS 180-4) from the platform's crypto library: OpenSSL's libcrypto on Linux, which uses the CPU's SHA
/// instructions, and CommonCrypto on Apple platforms. Incremental: a blob is hashed a chunk at a time as it streams.
/// It lives in the wire module because both ends use it: the client to state a blob's digest, the store to check it.
public struct SHA256: Sendable {
    #if canImport(CommonCrypto)
    private var context = CC_SHA256_CTX()

    public init() { CC_SHA256_Init(&context) }

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        var rest = bytes.count
        var pointer = base
        while rest > 0 {  // CC_LONG is 32 bits
            let n = min(rest, 1 << 30)
            CC_SHA256_Update(&context, pointer, CC_LONG(n))
            pointer += n
            rest -= n
        }
    }

    public mutating func finalize() -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(CC_SHA256_DIGEST_LENGTH))
        CC_SHA256_Final(&digest, &context)
        return digest
    }
    #else
    /// The EVP context, copied before a write when this value shares it (value semantics over a C object).
    private var box = Box()

    private final class Box: @unchecked Sendable {  // owned by one value at a time (copied on write)
        let context: OpaquePointer

        init() {
            guard let context = EVP_MD_CTX_new(), EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
                fatalError("libcrypto cannot start a SHA-256 digest (out of memory?)")
            }
            self.context = context
        }

        init(copying other: Box) {
            guard let context = EVP_MD_CTX_new(), EVP_MD_CTX_copy_ex(context, other.context) == 1 else {
                fatalError("libcrypto cannot copy a SHA-256 digest (out of memory?)")
            }
            self.context = context
        }

        deinit { EVP_MD_CTX_free(context) }
    }

    public init() {}

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        if !isKnownUniquelyReferenced(&box) { box = Box(copying: box) }
        EVP_DigestUpdate(box.context, base, bytes.count)
    }

    public mutating func finalize() -> [UInt8] {
        if !isKnownUniquelyReferenced(&box) { box = Box(copying: box) }
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        EVP_DigestFinal_ex(box.context, &digest, &length)
        return digest
    }
    #endif

    /// The lowercase hex digest of `bytes`.
    public static func hex(_ bytes: [UInt8]) -> String {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalizeHex()
    }

    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    public mutating func update(_ bytes: ArraySlice<UInt8>) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest as 64 lowercase hex digits. The hasher is spent afterwards (start a new one for the next digest).
    public mutating func finalizeHex() -> String {
        SHA256.hexString(finalize())
    }

    /// `digest` as lowercase hex.
    public static func hexString(_ digest: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(digest.count * 2)
        for byte in digest {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
