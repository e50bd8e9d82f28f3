import Foundation
import LarderBench
import LarderTestThreads
import Testing

/// `larder blob get ID -o FILE --range START-END` (both ends included, as HTTP) on a blob stored in chunks.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIBlobRangeTests {
    @Test func rangesOfAChunkedBlob() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let directory = NSTemporaryDirectory() + "larder-range-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let jpeg = Payloads.syntheticJPEG(size: (3 << 20) + 123)
        _ = FileManager.default.createFile(atPath: directory + "/big.jpg", contents: Data(jpeg))
        let port = ["--port", String(server.port)]
        var r = try CLITests.run(["blob", "put", directory + "/big.jpg", "--json"] + port)
        #expect(r.status == 0, "\(r.stderr)")
        let id = try #require(
            r.stdout.split(separator: "\"").drop { $0 != "id" }.dropFirst(2).first.map(String.init))
        func get(_ range: String) throws -> (CLITests.Run, [UInt8]) {
            let out = directory + "/part-\(UUID().uuidString)"
            let run = try CLITests.run(["blob", "get", id, "-o", out, "--range", range] + port)
            return (run, Array(FileManager.default.contents(atPath: out) ?? Data()))
        }
        var (run, bytes) = try get("0-0")
        #expect(run.status == 0 && bytes == [0xFF], "\(run.stderr)")
        (run, bytes) = try get("\(jpeg.count - 1)-\(jpeg.count - 1)")
        #expect(bytes == [0xD9])
        (run, bytes) = try get("1048000-2098000")
        #expect(bytes == Array(jpeg[1_048_000...2_098_000]))
        (run, bytes) = try get("3000000-")
        #expect(bytes == Array(jpeg[3_000_000...]))
        // Past the end: an error naming the size, and no file.
        (run, bytes) = try get("\(jpeg.count)-\(jpeg.count + 10)")
        #expect(run.status == 1 && run.stderr.contains("\(jpeg.count) bytes") && bytes.isEmpty, "\(run.stderr)")
        // Not a range: a usage error.
        (run, _) = try get("10-2")
        #expect(run.status == 64 && run.stderr.contains("--range"), "\(run.stderr)")
        // The whole blob to stdout, read by chunks.
        r = try CLITests.run(["blob", "get", id] + port)
        #expect(r.status == 0 && r.stdoutBytes == jpeg)
    }
}
