import LarderBench
import LarderTestThreads
import Testing

/// larder-bench's sizes take the same units as every Larder executable.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ByteSizeOptionTests {
    func options(_ arguments: [String]) throws -> BenchOptions {
        guard case .run(let options) = try BenchArguments.parse(arguments) else { throw UsageError("help") }
        return options
    }

    @Test func sizesTakeUnits() throws {
        #expect(try options(["--blob-size", "2MiB"]).blobSize == 2 << 20)
        #expect(try options(["--blob-size", "1.5 MiB"]).blobSize == 3 << 19)
        #expect(try options(["--doc-size", "1KiB"]).docSize == 1024)
        #expect(try options(["--blob-size", "64k"]).blobSize == 64 << 10)
        #expect(try TCPCopyOptions.parse(["--size", "256MiB"])?.size == 256 << 20)
        let refused = #expect(throws: UsageError.self) { try BenchArguments.parse(["--blob-size", "40MB"]) }
        #expect(refused?.message.hasPrefix("--blob-size must be a size from 32 B to 32 MiB") == true)
        #expect(refused?.message.hasSuffix("KiB, MiB or GiB (such as 64KiB or 40MiB), not '40MB'") == true)
        #expect(throws: UsageError.self) { try TCPCopyOptions.parse(["--size", "1GiB"]) }
    }
}
