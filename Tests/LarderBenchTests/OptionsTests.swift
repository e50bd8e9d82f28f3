import LarderTestThreads
import Testing

@testable import LarderBench

/// Option parsing and validation of `larder-bench run` and `tcp-copy`.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct OptionsTests {
    func parse(_ arguments: [String]) throws -> BenchOptions {
        guard case .run(let options) = try BenchArguments.parse(arguments) else {
            Issue.record("expected options, got help")
            return BenchOptions()
        }
        return options
    }

    func usageError(_ arguments: [String]) -> String? {
        do {
            _ = try BenchArguments.parse(arguments)
            return nil
        } catch {
            return error.message
        }
    }

    @Test func defaults() throws {
        let o = try parse([])
        #expect(o.target == .larder && o.resolvedPort == 7411 && o.host == "127.0.0.1")
        #expect(o.connections == 50 && o.pipeline == 1 && o.threads == 1)
        #expect(o.resolvedDuration == 10 && o.requests == nil && o.rate == nil)
        #expect(o.mix == OperationMix([(.get, 100)]))
        #expect(o.resolvedPreload == 1000 && o.resolvedKeyspace == 1000 && o.resolvedPreloadBlobs == 0)
        #expect(o.docSize == 250 && o.blobSize == 1 << 20 && o.keys == .uniform && o.seed == 1)
        #expect(try parse(["--target", "redis"]).resolvedPort == 6379)
    }

    @Test func everyOptionOfTheIssueInBothSpellings() throws {
        let pairs: [(String, String)] = [
            ("--host", "localhost"), ("--port", "17411"), ("--socket", "/tmp/l.sock"), ("--target", "larder"),
            ("--connections", "8"), ("--pipeline", "16"), ("--duration", "2.5"), ("--requests", "1000"),
            ("--warmup", "1"), ("--preload", "500"), ("--mix", "get=80,create=20"), ("--doc-size", "1k"),
            ("--blob-size", "64KiB"), ("--jpeg-dir", "/tmp"), ("--keys", "zipf"), ("--seed", "42"),
            ("--rate", "5000"), ("--assert", "get.p99<5ms"),
        ]
        let separate = try parse(pairs.flatMap { [$0.0, $0.1] } + ["--json"])
        let joined = try parse(pairs.map { "\($0.0)=\($0.1)" } + ["--json"])
        #expect(separate == joined)
        #expect(separate.host == "localhost" && separate.port == 17411 && separate.socketPath == "/tmp/l.sock")
        #expect(separate.connections == 8 && separate.pipeline == 16 && separate.duration == 2.5)
        #expect(separate.requests == 1000 && separate.warmup == 1 && separate.preload == 500)
        #expect(separate.mix[.get] == 80 && separate.mix[.create] == 20 && separate.mix.total == 100)
        #expect(separate.docSize == 1024 && separate.blobSize == 65536 && separate.jpegDirectory == "/tmp")
        #expect(separate.keys == .zipf && separate.seed == 42 && separate.rate == 5000 && separate.json)
        #expect(separate.assertions.count == 1 && separate.assertions[0].operation == .get)
    }

    @Test func durationsSizesAndMix() throws {
        #expect(try parse(["--duration", "500ms"]).duration == 0.5)
        #expect(try parse(["--duration", "2m"]).duration == 120)
        #expect(try parse(["--warmup", "0"]).warmup == 0)
        #expect(try parse(["--blob-size", "1M"]).blobSize == 1 << 20)
        #expect(try parse(["--requests", "1_000"]).requests == 1000)
        #expect(try parse(["--requests", "1000"]).resolvedDuration == nil)
        let mix = try parse(["--mix", "get=5, blob-put=1,blob-get=2,delete,search=1,count=1", "--preload", "10"]).mix
        #expect(mix.operations == [.get, .delete, .search, .count, .blobPut, .blobGet])
        #expect(mix[.delete] == 1 && mix.description == "get=5,delete=1,search=1,count=1,blob-put=1,blob-get=2")
        let blobs = try parse(["--mix", "blob-get", "--preload", "20"])
        #expect(blobs.resolvedPreloadBlobs == 20 && blobs.resolvedPreload == 0)
        #expect(try parse(["--mix", "create"]).resolvedPreload == 0)
    }

    @Test func rejectsBadValues() {
        let cases: [([String], String)] = [
            (["--connections", "0"], "--connections must be a whole number from 1"),
            (["--connections"], "--connections needs a value"),
            (["--pipeline", "x"], "--pipeline must be"),
            (["--port", "70000"], "--port must be"),
            (["--duration", "-1"], "--duration must be a duration"),
            (["--duration", "0"], "--duration must be a duration"),
            (["--rate", "0"], "--rate must be"),
            (["--doc-size", "10"], "--doc-size must be a size from 64"),
            (["--blob-size", "64M"], "--blob-size must be a size"),
            (["--keys", "random"], "--keys must be uniform, zipf or sequential"),
            (["--target", "memcached"], "--target must be larder or redis"),
            (["--target", "raw"], "--target must be larder or redis"),
            (["--mix", "get=80,fetch=20"], "unknown operation 'fetch'"),
            (["--mix", "get=-1"], "weight of get"),
            (["--mix", "get=0"], "at least one weight"),
            (["--mix", "get=1,get=2"], "get is given twice"),
            (["--seed", "-3"], "--seed must be"),
            (["--collection", "9lives"], "--collection must match"),
            (["--json=yes"], "--json takes no value"),
            (["--frobnicate"], "unknown option '--frobnicate'"),
            (["extra"], "unexpected argument 'extra'"),
            (["--target", "redis", "--mix", "get=1,search=1"], "--target redis runs GET and SET only"),
            (["--target", "redis", "--jpeg-dir", "/tmp"], "--jpeg-dir has no meaning"),
            (["--preload", "0"], "give --preload N so that reads hit"),
            (["--mix", "blob-get", "--preload", "0"], "give --preload N or --preload-blobs N"),
            (["--preload", "10", "--keyspace", "20"], "--keyspace (20) exceeds --preload (10)"),
            (["--threads", "4", "--connections", "2"], "--threads (4) cannot exceed --connections"),
            (["--assert", "get.p99"], "no comparison"),
            (["--assert", "get.p99<5"], "needs a number and a unit"),
            (["--assert", "fetch.p99<5ms"], "unknown operation 'fetch'"),
            (["--assert", "get.p101<5ms"], "unknown metric"),
            (["--assert", "errors<200%"], "an error rate is a percentage"),
            (["--max-error-rate", "abc"], "--max-error-rate abc"),
        ]
        for (arguments, expected) in cases {
            let message = usageError(arguments)
            #expect(message?.contains(expected) == true, "\(arguments): \(message ?? "accepted")")
        }
    }

    @Test func trustsAnEarlierPreloadWithKeyspace() throws {
        let o = try parse(["--preload", "0", "--keyspace", "5000"])
        #expect(o.resolvedPreload == 0 && o.resolvedKeyspace == 5000)
        #expect(try parse(["--keyspace", "300"]).resolvedPreload == 300)
    }

    @Test func help() throws {
        #expect(try BenchArguments.parse(["--help"]) == .help)
        #expect(try BenchArguments.parse(["--connections", "3", "-h"]) == .help)
        for option in ["--host", "--port", "--socket", "--target", "--connections", "--pipeline", "--duration",
                       "--requests", "--warmup", "--preload", "--mix", "--doc-size", "--blob-size", "--jpeg-dir",
                       "--keys", "--seed", "--rate", "--json", "--assert"] {
            #expect(BenchArguments.helpText.contains(option), "help does not mention \(option)")
        }
    }

    @Test func assertions() throws {
        let a = try Assertion.parse("get.p99<5ms")
        #expect(a.operation == .get && a.metric == .percentile(99) && a.comparison == .less && a.threshold == 5e6)
        let b = try Assertion.parse("p99.9 <= 250us")
        #expect(b.operation == nil && b.metric == .percentile(99.9))
        #expect(b.comparison == .lessOrEqual && b.threshold == 250e3)
        let c = try Assertion.parse("blob-get.p99.9<1s")
        #expect(c.operation == .blobGet && c.metric == .percentile(99.9) && c.threshold == 1e9)
        let d = try Assertion.parse("ops>=20000")
        #expect(d.metric == .opsPerSec && d.comparison == .greaterOrEqual && d.threshold == 20000)
        let e = try Assertion.parse("create.errors<0.5%")
        #expect(e.operation == .create && e.metric == .errorRate && e.threshold == 0.005)
        let f = try Assertion.parse("all.mean>1ns")
        #expect(f.operation == nil && f.metric == .mean && f.comparison == .greater && f.threshold == 1)
        let g = try parse(["--max-error-rate", "1%"]).assertions[0]
        #expect(g.metric == .errorRate && g.comparison == .lessOrEqual && g.threshold == 0.01)
        #expect(try Assertion.parse("errors<0.01").threshold == 0.01)
    }

    @Test func tcpCopyOptions() throws {
        let o = try #require(try TCPCopyOptions.parse(["--size", "256k", "--connections=4", "-P", "2", "--json"]))
        #expect(o.size == 256 << 10 && o.connections == 4 && o.pipeline == 2 && o.json && o.duration == 5)
        #expect(try TCPCopyOptions.parse(["--help"]) == nil)
        #expect(throws: UsageError.self) { try TCPCopyOptions.parse(["--mix", "get"]) }
        #expect(throws: UsageError.self) { try TCPCopyOptions.parse(["--size", "0"]) }
    }
}
