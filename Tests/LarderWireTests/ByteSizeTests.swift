import Foundation
import LarderTestThreads
import LarderWire
import Testing

/// Byte sizes as people write them in options and read them in output.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ByteSizeTests {
    @Test func parsesNumbersAndBinaryUnits() {
        #expect(ByteSize.parse("0") == 0)
        #expect(ByteSize.parse("4194304") == 4 << 20)
        #expect(ByteSize.parse("1_048_576") == 1 << 20)
        #expect(ByteSize.parse("512B") == 512)
        #expect(ByteSize.parse("64KiB") == 64 << 10)
        #expect(ByteSize.parse("40MiB") == 40 << 20)
        #expect(ByteSize.parse("40 MiB") == 40 << 20)
        #expect(ByteSize.parse("2GiB") == 2 << 30)
        #expect(ByteSize.parse("1.5KiB") == 1536)
        #expect(ByteSize.parse("0.5GiB") == 1 << 29)
        #expect(ByteSize.parse("64k") == 64 << 10)
        #expect(ByteSize.parse("1M") == 1 << 20)
        #expect(ByteSize.parse("3G") == 3 << 30)
    }

    @Test func refusesWhatItWouldHaveToGuess() {
        for text in ["", "MiB", "-1", "40MB", "40mb", "1e6", "1.1B", "1.0001KiB", "_1", "1_", "40 Mi", "0x10", "1..5KiB",
            "99999999999999999999", "9000000000GiB"]
        {
            #expect(ByteSize.parse(text) == nil, "\(text)")
        }
    }

    @Test func formatsWithTheLargestWholeUnit() {
        #expect(ByteSize.format(0) == "0 B")
        #expect(ByteSize.format(1023) == "1023 B")
        #expect(ByteSize.format(1024) == "1 KiB")
        #expect(ByteSize.format(1536) == "1.5 KiB")
        #expect(ByteSize.format(32 << 20) == "32 MiB")
        #expect(ByteSize.format(Int64(2) << 30 + (1 << 28)) == "2.25 GiB")
        #expect(ByteSize.format(366_141) == "357.56 KiB")
        // What format prints, parse reads back (to the precision shown).
        for size in [1024, 1536, 40 << 20, 3 << 30] {
            #expect(ByteSize.parse(ByteSize.format(size).replacingOccurrences(of: " ", with: "")) == size)
        }
    }

    @Test func versionLine() {
        #expect(LarderVersion.line("larder") == "larder \(LarderVersion.string) (protocol 1)")
    }
}
