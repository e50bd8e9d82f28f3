#if canImport(CommonCrypto)
import CommonCrypto
#elseif os(Linux) && !LARDER_PORTABLE
import COpenSSL
#endif

/// SHA-256 (FIPS 180-4) from the platform's crypto library: OpenSSL's libcrypto on Linux, which uses the CPU's SHA
/// instructions, and CommonCrypto on Apple platforms. The portable configuration (a Linux build of the client as an
/// Apple platform builds it, without libcrypto) computes it in Swift. Incremental: a blob is hashed a chunk at a time
/// as it streams. It lives in the wire module because both ends use it: the client to state a blob's digest, the
/// store to check it.
///
/// ```swift
/// var hasher = SHA256()
/// hasher.update(Array("ab".utf8))
/// hasher.update(Array("c".utf8))
/// hasher.finalizeHex()  // "ba7816bf…15ad", as SHA256.hex(Array("abc".utf8))
/// ```
package struct SHA256: Sendable {
    #if canImport(CommonCrypto)
    private var context = CC_SHA256_CTX()

    /// A hasher that has seen no bytes yet.
    package init() { CC_SHA256_Init(&context) }

    /// Hashes `bytes`, after those given before.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
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

    /// The 32-byte digest of every byte given. The hasher is spent afterwards (start a new one for the next digest).
    package mutating func finalize() -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(CC_SHA256_DIGEST_LENGTH))
        CC_SHA256_Final(&digest, &context)
        return digest
    }
    #elseif os(Linux) && !LARDER_PORTABLE
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

    /// A hasher that has seen no bytes yet.
    package init() {}

    /// Hashes `bytes`, after those given before.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        if !isKnownUniquelyReferenced(&box) { box = Box(copying: box) }
        EVP_DigestUpdate(box.context, base, bytes.count)
    }

    /// The 32-byte digest of every byte given. The hasher is spent afterwards (start a new one for the next digest).
    package mutating func finalize() -> [UInt8] {
        if !isKnownUniquelyReferenced(&box) { box = Box(copying: box) }
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        EVP_DigestFinal_ex(box.context, &digest, &length)
        return digest
    }
    #else
    /// The eight working words between blocks (FIPS 180-4 section 6.2), starting from the initial hash value.
    private var state: [UInt32] = [
        0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19,
    ]
    /// Bytes given but not yet hashed: fewer than a block.
    private var pending: [UInt8] = []
    /// Bytes given so far.
    private var length: UInt64 = 0

    /// A hasher that has seen no bytes yet.
    package init() {}

    /// Hashes `bytes`, after those given before.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        length &+= UInt64(bytes.count)
        var offset = 0
        if !pending.isEmpty {
            offset = min(64 - pending.count, bytes.count)
            pending += bytes[0..<offset]
            guard pending.count == 64 else { return }
            let block = pending
            pending.removeAll(keepingCapacity: true)
            block.withUnsafeBytes { compress($0) }
        }
        while bytes.count - offset >= 64 {
            compress(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 64]))
            offset += 64
        }
        pending += bytes[offset...]
    }

    /// The 32-byte digest of every byte given. The hasher is spent afterwards (start a new one for the next digest).
    package mutating func finalize() -> [UInt8] {
        let bits = length &* 8
        // Padding: 0x80, zeros up to 56 bytes into a block, then the length in bits, big-endian.
        var tail: [UInt8] = [0x80] + [UInt8](repeating: 0, count: (119 - pending.count) % 64)
        for shift in stride(from: UInt64(56), through: 0, by: -8) {
            tail.append(UInt8(truncatingIfNeeded: bits >> shift))
        }
        tail.withUnsafeBytes { update($0) }
        return state.flatMap { word in [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: word >> UInt32($0)) } }
    }

    /// The round constants: the first 32 bits of the fractional parts of the cube roots of the first 64 primes.
    private static let rounds: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    /// Hashes one 64-byte block into `state` (FIPS 180-4 section 6.2.2).
    private mutating func compress(_ block: UnsafeRawBufferPointer) {
        func rotate(_ x: UInt32, _ n: UInt32) -> UInt32 { (x >> n) | (x << (32 - n)) }
        var w = [UInt32](repeating: 0, count: 64)
        for t in 0..<16 {
            w[t] = (0..<4).reduce(0) { word, i in word << 8 | UInt32(block[t * 4 + i]) }
        }
        for t in 16..<64 {
            let s0 = rotate(w[t - 15], 7) ^ rotate(w[t - 15], 18) ^ (w[t - 15] >> 3)
            let s1 = rotate(w[t - 2], 17) ^ rotate(w[t - 2], 19) ^ (w[t - 2] >> 10)
            w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
        }
        var (a, b, c, d, e, f, g, h) = (state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7])
        for t in 0..<64 {
            let choice = (e & f) ^ (~e & g)
            let t1 = h &+ (rotate(e, 6) ^ rotate(e, 11) ^ rotate(e, 25)) &+ choice &+ Self.rounds[t] &+ w[t]
            let t2 = (rotate(a, 2) ^ rotate(a, 13) ^ rotate(a, 22)) &+ ((a & b) ^ (a & c) ^ (b & c))
            (h, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
        }
        for (i, word) in [a, b, c, d, e, f, g, h].enumerated() { state[i] &+= word }
    }
    #endif

    /// The lowercase hex digest of `bytes`.
    package static func hex(_ bytes: [UInt8]) -> String {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalizeHex()
    }

    /// Hashes `bytes`, after those given before.
    package mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// Hashes `bytes`, after those given before.
    package mutating func update(_ bytes: ArraySlice<UInt8>) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest as 64 lowercase hex digits. The hasher is spent afterwards (start a new one for the next digest).
    package mutating func finalizeHex() -> String {
        SHA256.hexString(finalize())
    }

    /// `digest` as lowercase hex.
    package static func hexString(_ digest: [UInt8]) -> String {
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
