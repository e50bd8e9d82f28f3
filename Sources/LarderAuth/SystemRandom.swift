import COpenSSL

/// Random bytes for salts and session tokens, from libcrypto's generator (`RAND_bytes`), which OpenSSL 3 seeds from
/// the operating system (getrandom(2)) and keeps per thread.
package enum SystemRandom {
    /// `count` random bytes. The generator fails only on a broken system (no entropy source); that ends the process
    /// rather than hand out weak secrets.
    package static func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else { fatalError("libcrypto's RAND_bytes failed") }
        return bytes
    }
}
