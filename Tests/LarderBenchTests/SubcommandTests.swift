import Foundation
import LarderTestThreads
import LarderWire
import Testing

/// `larder-bench wire`, `store` and `watch`, each in a short run of the executable: every measurement is made and
/// reported, and the run ends well (the figures themselves are for BENCHMARKS.md, on a quiet machine).
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct SubcommandTests {
    @Test func wireMeasuresEveryCase() throws {
        let r = try runBench(["wire", "0.02"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("encode+decode GET response: ") && r.stdout.contains(" frames/s"))
        for line in ["typed GET answer decode", "typed CREATE request encode", "server: CREATE request to stored"] {
            #expect(r.stdout.contains(line), "\(line)")
        }
        // A row per zlib level, each smaller than the 100-record page it compressed.
        let page = try #require(
            r.stdout.split(separator: "\n").first { $0.hasPrefix("SEARCH response, 100 records: ") }
                .flatMap { Int($0.split(separator: " ")[4]) })
        for level in [1, 3, 6, 9] {
            let rows = r.stdout.split(separator: "\n")
            let row = try #require(rows.first { $0.split(separator: " ").first == "\(level)" }, "level \(level)")
            let compressed = try #require(Int(row.split(separator: " ")[1]))
            #expect(compressed > 0 && compressed < page, "level \(level): \(compressed) of \(page)")
        }
        #expect(try runBench(["wire", "0"]).status == 64)
    }

    @Test func storeQuickRunsEveryMeasurement() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-bench-store-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let r = try runBench(["store", "--quick", "--dir", directory.path])
        #expect(r.status == 0, "\(r.stderr)")
        for measurement in [
            "create, 1 caller", "create, 16 concurrent callers", "get by id, store", "get by id, raw SQLite statement",
            "load 1,000 documents", "two filters + sort, no index", "two filters + sort, indexed",
            "substring 4 chars (common), indexed, backlog of", "blob put, 1 MiB JPEG", "blob get, 1 MiB JPEG",
            "SHA-256 alone",
        ] {
            #expect(r.stdout.contains("| \(measurement)"), "\(measurement) missing from the table")
        }
        #expect(!r.stdout.contains("failed creates"))
        // Its store was made under --dir and removed at the end.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
        #expect(try runBench(["store", "--documents", "10"]).status == 64)
    }

    @Test func watchDeliversEveryEventToEverySubscriber() throws {
        try withLarderServer { port in
            let r = try runBench(
                ["watch", "--port", "\(port)", "--subscribers", "20", "--writes", "200", "--threads", "2"])
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.stdout.contains("events delivered: 4000 of 4000"), "\(r.stdout)")
            #expect(r.stdout.contains("gaps: 0"))
            #expect(r.stdout.contains("write-to-delivery (µs): p50 ") && r.stdout.contains("(4000 events)"))
        }
        let refused = try runBench(["watch", "--port", "1", "--subscribers", "1", "--writes", "1"])
        #expect(refused.status == 2 && refused.stderr.contains("cannot connect"), "\(refused.stderr)")
    }

    /// `thumb-server` against a real server: every photo's first request makes a thumbnail and each later one is
    /// served from the cache (STATS' counters say so), at each size, with latencies and the server's CPU reported.
    @Test func thumbServerMeasuresColdAndCachedThumbnails() throws {
        let photo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("IntegrationTests/Fixtures/rocket.jpg").path
        try withLarderServer { port in
            let r = try runBench([
                "thumb-server", "--port", "\(port)", "--photo", photo, "--photos", "3", "--cached-rounds", "2",
                "--sizes", "64,256", "--server-pid", "\(getpid())", "--json",
            ])
            #expect(r.status == 0, "\(r.stderr)")
            let result = try JSONParser.parse(Array(r.stdout.utf8))
            let phases = try #require(result["phases"]?.arrayValue)
            let rows = phases.map { phase in
                [phase["size"], phase["phase"], phase["requests"], phase["made"], phase["fromCache"]]
            }
            #expect(
                rows == [
                    [.int(64), .string("cold"), .int(3), .int(3), .int(0)],
                    [.int(64), .string("cached"), .int(6), .int(0), .int(6)],
                    [.int(256), .string("cold"), .int(3), .int(3), .int(0)],
                    [.int(256), .string("cached"), .int(6), .int(0), .int(6)],
                ], "\(r.stdout)")
            for phase in phases {
                #expect(phase["p99Ms"]?.doubleValue.map { $0 > 0 } == true, "\(phase)")
                #expect(phase["serverCPUMsPerRequest"]?.doubleValue.map { $0 >= 0 } == true, "\(phase)")
            }
            let wrongSize = try runBench(["thumb-server", "--port", "\(port)", "--photo", photo, "--sizes", "300"])
            #expect(wrongSize.status == 2 && wrongSize.stderr.contains("not 300"), "\(wrongSize.stderr)")
        }
        #expect(try runBench(["thumb-server", "--photos", "0"]).status == 64)
    }
}
