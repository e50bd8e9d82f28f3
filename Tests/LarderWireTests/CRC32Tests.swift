import Foundation
import LarderWire
import Testing

/// BLOB_UPLOAD_CHUNK's CRC-32 (libdeflate's) gives zlib's results: a chunk a client checksummed with any zlib-style
/// CRC-32 is accepted, whole or computed in pieces.
@Suite(.timeLimit(.minutes(20))) struct CRC32Tests {
    /// The CRC-32 (ISO-HDLC: reflected polynomial 0xEDB88320, initial and final XOR 0xFFFFFFFF) a bit at a time.
    static func reference(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }

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
