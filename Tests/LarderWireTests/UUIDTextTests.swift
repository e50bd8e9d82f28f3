import Foundation
import LarderTestThreads
import Testing

@testable import LarderWire

/// A UUID's text on the wire: 36 characters, lowercase when written, hex digits of either case and four hyphens when
/// read, and nothing else accepted.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct UUIDTextTests {
    /// The text as a plain loop writes it, digit by digit.
    static func reference(_ id: UUID) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        withUnsafeBytes(of: id.uuid) { raw in
            for (i, byte) in raw.enumerated() {
                if i == 4 || i == 6 || i == 8 || i == 10 { text.append(UInt8(ascii: "-")) }
                text.append(digits[Int(byte >> 4)])
                text.append(digits[Int(byte & 0xF)])
            }
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func parse(_ bytes: [UInt8]) -> UUID? {
        bytes.withUnsafeBufferPointer { UUID(wireUTF8: $0) }
    }

    @Test func everyByteValueInEveryPlaceIsWrittenAndReadBack() {
        for place in 0..<16 {
            for value in 0...255 {
                var bytes = [UInt8](repeating: 0x5A, count: 16)
                bytes[place] = UInt8(value)
                let id = bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
                let text = id.wireString
                #expect(text == Self.reference(id))
                #expect(UUID(wireString: text) == id)
                #expect(UUID(wireString: text.uppercased()) == id)
            }
        }
        let known = UUID(uuidString: "0190F3A2-7C1E-7D4A-9B2E-5F6A7B8C9D0E")!
        #expect(known.wireString == "0190f3a2-7c1e-7d4a-9b2e-5f6a7b8c9d0e")
        #expect(UUID(wireString: "0190f3a2-7C1E-7d4a-9B2e-5f6a7b8c9d0e") == known)
    }

    /// Each of the 36 places refuses every byte that is not what belongs there: a hex digit (either case) or, at 8,
    /// 13, 18 and 23, a hyphen.
    @Test func everyOtherByteInAnyPlaceIsRefused() {
        let good = Array("0190f3a2-7c1e-7d4a-9b2e-5f6a7b8c9d0e".utf8)
        let hex = Set("0123456789abcdefABCDEF".utf8)
        for place in 0..<36 {
            for value in 0...255 {
                var bytes = good
                bytes[place] = UInt8(value)
                let hyphen = [8, 13, 18, 23].contains(place)
                let allowed = hyphen ? value == 0x2D : hex.contains(UInt8(value))
                #expect((Self.parse(bytes) != nil) == allowed, "byte \(value) at \(place)")
            }
        }
        #expect(Self.parse(Array(good.dropLast())) == nil)
        #expect(Self.parse(good + [0x30]) == nil)
        #expect(UUID(wireString: "{0190f3a2-7c1e-7d4a-9b2e-5f6a7b8c9d0e}") == nil)
        #expect(UUID(wireString: "0x90f3a2-7c1e-7d4a-9b2e-5f6a7b8c9d0e") == nil)
        #expect(UUID(wireString: " 190f3a2-7c1e-7d4a-9b2e-5f6a7b8c9d0e") == nil)
    }

    @Test func randomIdsRoundTrip() {
        for _ in 0..<10_000 {
            let id = UUID()
            #expect(id.wireString == id.uuidString.lowercased())
            #expect(UUID(wireString: id.uuidString) == id)
        }
    }
}
