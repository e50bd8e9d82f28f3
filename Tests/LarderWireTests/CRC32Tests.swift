import Foundation
import LarderTestThreads
import LarderWire
import Testing

/// BLOB_UPLOAD_CHUNK's CRC-32 (libdeflate's on Linux, zlib's on Apple platforms and in the portable configuration)
/// gives zlib's results: a chunk a client checksummed with any zlib-style CRC-32 is accepted, whole or computed in
/// pieces, and an app on an iPhone computes the CRC-32 the server on Linux checks.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CRC32Tests {
    /// The CRC-32 (ISO-HDLC: reflected polynomial 0xEDB88320, initial and final XOR 0xFFFFFFFF) a bit at a time.
    static func reference(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }

    /// Inputs and their CRC-32s, as zlib (and Python's `zlib.crc32`) computes them.
    static let vectors: [(name: String, bytes: [UInt8], crc: UInt32)] = [
        ("empty", [], 0),
        ("a", Array("a".utf8), 0xE8B7_BE43),
        ("abc", Array("abc".utf8), 0x3524_41C2),
        ("123456789", Array("123456789".utf8), 0xCBF4_3926),
        ("the quick brown fox", Array("The quick brown fox jumps over the lazy dog".utf8), 0x414F_A339),
        ("32 zero bytes", [UInt8](repeating: 0, count: 32), 0x190A_55AD),
        ("32 0xFF bytes", [UInt8](repeating: 0xFF, count: 32), 0xFF6C_AB0B),
        ("0 to 255", (0...255).map { UInt8($0) }, 0x2905_8C73),
        ("茶葉蛋", Array("茶葉蛋".utf8), 0xE9D8_3BCD),
        ("100,000 bytes of a pattern", (0..<100_000).map { UInt8(truncatingIfNeeded: $0 * 7 + 3) }, 0xF730_CAA8),
    ]

    /// Every CRC-32 this build has gives the table's values: zlib's always, libdeflate's in the Linux build, and the
    /// one uploads use (libdeflate's there, zlib's in the portable configuration), whole and continued across a cut.
    @Test func zlibAndLibdeflateGiveTheTablesValues() {
        for vector in Self.vectors {
            vector.bytes.withUnsafeBytes { raw in
                var implementations = [("checksum", CRC32.checksum(raw)), ("zlib", CRC32.zlib(raw))]
                #if os(Linux) && !LARDER_PORTABLE
                implementations.append(("libdeflate", CRC32.libdeflate(raw)))
                #endif
                for (name, crc) in implementations {
                    #expect(crc == vector.crc, "\(name) of \(vector.name): \(String(crc, radix: 16))")
                }
                let cut = raw.count / 3
                let head = UnsafeRawBufferPointer(rebasing: raw[..<cut])
                let tail = UnsafeRawBufferPointer(rebasing: raw[cut...])
                #expect(CRC32.zlib(tail, continuing: CRC32.zlib(head)) == vector.crc, "zlib of \(vector.name) in two")
                #expect(CRC32.checksum(tail, continuing: CRC32.checksum(head)) == vector.crc, "\(vector.name) in two")
            }
        }
    }

    #if os(Linux) && !LARDER_PORTABLE
    /// On random inputs of every length around libdeflate's folding widths, continued from random CRCs, the two agree.
    @Test func zlibAndLibdeflateAgreeOnRandomInputs() {
        var rng = SystemRandomNumberGenerator()
        for count in Array(0...300) + [4_095, 4_096, 4_097, 65_537, 1 << 20] {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let start = UInt32.random(in: 0...UInt32.max, using: &rng)
            bytes.withUnsafeBytes { raw in
                let zlib = CRC32.zlib(raw, continuing: start)
                #expect(zlib == CRC32.libdeflate(raw, continuing: start), "\(count) bytes from \(start)")
            }
        }
    }
    #endif

    @Test func knownValues() {
        #expect(CRC32.checksum([]) == 0)
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum(Array("The quick brown fox jumps over the lazy dog".utf8)) == 0x414F_A339)
    }

    @Test func matchesTheReferenceWholeAndInPieces() {
        var rng = SystemRandomNumberGenerator()
        for count in [1, 3, 15, 16, 17, 63, 64, 65, 255, 4096, 65_537, 1 << 20] {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let expected = CRC32Tests.reference(bytes)
            #expect(CRC32.checksum(bytes) == expected, "\(count) bytes")
            let cut = Int.random(in: 0...count, using: &rng)
            let pieces = bytes.withUnsafeBytes { raw in
                CRC32.checksum(
                    UnsafeRawBufferPointer(rebasing: raw[cut...]),
                    continuing: CRC32.checksum(UnsafeRawBufferPointer(rebasing: raw[..<cut])))
            }
            #expect(pieces == expected, "\(count) bytes cut at \(cut)")
        }
    }
}
