import Foundation
import LarderTestProcess
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderBench

/// `--hdr-out`: HdrHistogram's own Python library (PyPI `hdrhistogram`, installed by scripts/bootstrap) reads the log,
/// and its counts and percentiles are the bench's.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct HdrLogTests {
    /// Reads every interval of the log at `path` with `hdrh` and prints one JSON object per tag: total count, and
    /// the value at each percentile of the bench's report taken at the bench's rank (the smallest count at or
    /// above p% of the values; HdrHistogram rounds to the nearest instead, which differs in a sparse tail).
    static let reader = """
        import json, math, sys
        from hdrh.histogram import HdrHistogram
        from hdrh.log import HistogramLogReader
        reader = HistogramLogReader(sys.argv[1], HdrHistogram(1, 2**40 - 1, 3))
        out = {}
        while True:
            h = reader.get_next_interval_histogram()
            if h is None:
                break
            n = h.get_total_count()
            values = {}
            for p in (50, 90, 99):
                rank = max(1, math.ceil(p / 100 * n))
                values["p%d" % p] = h.get_value_at_percentile(100.0 * rank / n) / 1000.0
            out[h.get_tag()] = {"count": n, "max": h.get_max_value() / 1000.0, **values}
        print(json.dumps(out))
        """

    static func python(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3"] + arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    @Test func pythonHdrHistogramReadsTheLogAndAgreesWithTheReport() throws {
        let directory = NSTemporaryDirectory() + "larder-hdr-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = directory + "/run.hlog"
        let report = try withLarderServer { port in
            try runBench([
                "run", "--port", "\(port)", "--connections", "2", "--rate", "400", "--requests", "600",
                "--mix", "get=3,create=1", "--preload", "100", "--hdr-out", log, "--json", "--quiet",
            ])
        }
        #expect(report.status == 0, "\(report.stderr)")
        let bench = try #require(try JSONParser.parse(Array(report.stdout.utf8)).objectValue)
        let read = try Self.python(["-c", Self.reader, log])
        #expect(read.status == 0, "python hdrh: \(read.output)")
        let tags = try #require(try JSONParser.parse(Array(read.output.utf8)).objectValue)
        #expect(Set(tags.keys) == ["get", "get-uncorrected", "create", "create-uncorrected"])
        for op in ["get", "create"] {
            let stats = try #require(bench["operations"]?[op]?.objectValue)
            for (tag, key) in [(op, "latencyUs"), (op + "-uncorrected", "uncorrectedLatencyUs")] {
                let decoded = try #require(tags[tag]?.objectValue)
                #expect(decoded["count"]?.intValue == stats["count"]?.intValue, "\(tag) count")
                for p in ["p50", "p90", "p99"] {
                    let mine = try #require(stats[key]?[p]?.doubleValue)
                    let theirs = try #require(decoded[p]?.doubleValue)
                    // The same bucket: HdrHistogram reports its highest value, the bench caps it at the exact
                    // maximum; a bucket is under 0.1% wide.
                    #expect(
                        abs(mine - theirs) <= mine * 0.001 + 0.001, "\(tag) \(p): bench \(mine) us, hdrh \(theirs) us")
                }
            }
        }
    }

    /// scripts/percentile-chart (what scripts/bench-vs-redis draws its charts with) on the logs of a run against a real
    /// Larder server and one against a (fake) Redis: one panel per case, each with a Larder and a Redis line of
    /// points rising with the percentile, in an SVG that parses as XML.
    @Test func percentileChartDrawsLarderAgainstRedis() throws {
        let directory = NSTemporaryDirectory() + "larder-chart-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let larder = directory + "/larder.hlog", redis = directory + "/redis.hlog", svg = directory + "/chart.svg"
        let common = [
            "--connections", "2", "--requests", "300", "--mix", "get=1,create=1", "--preload", "50", "--quiet",
        ]
        let larderRun = try withLarderServer { port in
            try runBench(["run", "--port", "\(port)", "--hdr-out", larder] + common)
        }
        #expect(larderRun.status == 0, "\(larderRun.stderr)")
        let fake = try FakeRedis()
        defer { fake.stop() }
        let redisRun = try runBench(["run", "--target", "redis", "--port", "\(fake.port)", "--hdr-out", redis] + common)
        #expect(redisRun.status == 0, "\(redisRun.stderr)")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/percentile-chart").path
        let drawn = try Self.python([
            script, svg, "GET", larder + "#get", redis + "#get", "CREATE", larder + "#create", redis + "#create",
        ])
        #expect(drawn.status == 0, "percentile-chart: \(drawn.output)")
        let check = """
            import sys, xml.etree.ElementTree as ET
            root = ET.parse(sys.argv[1]).getroot()
            ns = "{http://www.w3.org/2000/svg}"
            lines = root.findall(".//" + ns + "polyline")
            names = [l.get("data-name") for l in lines]
            rising = all(
                all(float(b.split(",")[1]) <= float(a.split(",")[1]) for a, b in zip(pts, pts[1:]))
                for pts in (l.get("points").split() for l in lines))
            titles = [t.text for t in root.iter(ns + "text")]
            print(len(lines), ",".join(names), rising, "GET" in titles and "CREATE" in titles)
            """
        let checked = try Self.python(["-c", check, svg])
        let summary = checked.output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(summary == "4 Larder,Redis,Larder,Redis True True")
    }

    /// HdrHistogram's varint: ZigZag, then LEB128 with a ninth byte of 8 bits.
    @Test func zigzagLEB128() {
        func encode(_ v: Int64) -> [UInt8] {
            var out: [UInt8] = []
            HdrLog.zigzag(v, into: &out)
            return out
        }
        #expect(encode(0) == [0x00])
        #expect(encode(-1) == [0x01])
        #expect(encode(1) == [0x02])
        #expect(encode(63) == [0x7e])
        #expect(encode(64) == [0x80, 0x01])
        #expect(encode(-300) == [0xd7, 0x04])
        #expect(encode(Int64.max).count == 9)
    }
}
