import LarderTestThreads
import LarderWire
import Testing

/// SHA-256 gives FIPS 180-4's digests in every build: libcrypto's on Linux, and in the portable configuration
/// (scripts/test) the digest an Apple platform's build stands CommonCrypto in for. Whole, and fed in pieces cut across
/// the 64-byte blocks and the padding's boundaries (55 and 56 bytes: the length still fits in the last block, or not).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DigestTests {
    /// FIPS 180-4's examples (NIST's one-block, two-block and million-byte messages) and messages around the block.
    static let vectors: [(name: String, bytes: [UInt8], digest: String)] = [
        ("empty", [], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", Array("abc".utf8), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            "448 bits", Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        ),
        (
            "896 bits",
            Array(
                ("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                    + "mnopqrstnopqrstu").utf8),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"
        ),
        (
            "a million a", [UInt8](repeating: 0x61, count: 1_000_000),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        ),
        ("55 a", Array(repeating: 0x61, count: 55), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"),
        ("56 a", Array(repeating: 0x61, count: 56), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"),
        ("63 a", Array(repeating: 0x61, count: 63), "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"),
        ("64 a", Array(repeating: 0x61, count: 64), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"),
        ("65 a", Array(repeating: 0x61, count: 65), "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"),
        ("茶葉蛋", Array("茶葉蛋".utf8), "20a30509b4e2131a5d165e40205461c3321d6d2b672e784aa6a48fe7ee105c24"),
        (
            "100,000 bytes of a pattern", (0..<100_000).map { UInt8(truncatingIfNeeded: $0 * 7 + 3) },
            "d96bab6a55ee326ba206dd4a85a6e95e14360d7fabbf448f03e689c24382b7d0"
        ),
    ]

    @Test func knownDigestsWholeAndInPieces() {
        for vector in Self.vectors {
            #expect(SHA256.hex(vector.bytes) == vector.digest, "\(vector.name)")
            // The long messages in large pieces only: the digest a stand-in computes in Swift is slow in a debug build.
            let cuts = vector.bytes.count > 100_000 ? [65_537] : [1, 3, 55, 56, 63, 64, 65, 129, 4_097]
            for cut in cuts where cut < vector.bytes.count {
                var hasher = SHA256()
                var start = 0
                while start < vector.bytes.count {
                    let end = min(vector.bytes.count, start + cut)
                    hasher.update(vector.bytes[start..<end])
                    start = end
                }
                #expect(hasher.finalizeHex() == vector.digest, "\(vector.name) in pieces of \(cut)")
            }
        }
    }

    /// A copy of a hasher goes on by itself: both continue from the bytes they shared.
    @Test func aCopyContinuesOnItsOwn() {
        var first = SHA256()
        first.update(Array("ab".utf8))
        var second = first
        first.update(Array("c".utf8))
        second.update(Array("d".utf8))
        #expect(first.finalizeHex() == SHA256.hex(Array("abc".utf8)))
        #expect(second.finalizeHex() == SHA256.hex(Array("abd".utf8)))
    }
}
