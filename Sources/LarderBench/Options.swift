import Foundation
import LarderIO
import LarderWire

/// A bad command line: printed as `Error: <message>` plus the usage line, exit status 64.
public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Which server speaks at the other end.
public enum Target: String, Sendable, CaseIterable {
    /// A Larder server, over the Larder protocol.
    case larder
    /// A Redis server: GET and SET of the same value sizes, over RESP.
    case redis
    /// A raw loopback sink that answers each 4-byte request with a fixed number of bytes (`tcp-copy`).
    case raw
}

/// Everything a `larder-bench run` is told. Defaults are the reference case: 50 connections, one request in
/// flight each, 250-byte documents.
public struct BenchOptions: Sendable, Equatable {
    public var host = "127.0.0.1"
    /// The TCP port; nil means the target's default (7411 for Larder, 6379 for Redis).
    public var port: Int?
    /// A Unix domain socket path; used instead of host and port when given.
    public var socketPath: String?
    public var target: Target = .larder
    public var connections = 50
    /// Requests in flight per connection (pipeline depth).
    public var pipeline = 1
    /// Load-generator threads; connections are spread over them.
    public var threads = 1
    /// Seconds of measured load; nil when only `requests` bounds the run (10 s when neither is given).
    public var duration: Double?
    /// Measured requests in all; nil for a timed run.
    public var requests: Int?
    /// Seconds of load before measuring starts; their requests are not in the results.
    public var warmup: Double = 0
    /// Documents written before the run (nil: the key space, or 1000, when the mix reads documents, else 0).
    public var preload: Int?
    /// Blobs written before the run (nil: `preload` capped at 32 when the mix has blob-get, else 0).
    public var preloadBlobs: Int?
    /// How many preloaded documents reads choose from (nil: the preload count).
    public var keyspace: Int?
    public var mix = OperationMix([(.get, 100)])
    public var docSize = 250
    /// With `--doc-size MIN-MAX`, the largest document; nil for one size.
    public var docSizeMax: Int?
    public var blobSize = 1 << 20
    public var jpegDirectory: String?
    public var keys: KeyDistribution = .uniform
    /// Where created documents' and blobs' ids come from.
    public var ids: IDSource = .streams
    /// Every write carries a fresh `requestKey`, to measure what the server's exactly-once bookkeeping costs.
    public var requestKeys = false
    /// Every GET carries `afterSeq`, the highest `seq` the run's writes were answered with.
    public var afterSeq = false
    public var zipfTheta = 0.99
    public var seed: UInt64 = 1
    /// Open loop: total requests per second across all connections, sent on schedule.
    public var rate: Double?
    public var json = false
    /// Where to write every operation's latency histogram in HdrHistogram's log format.
    public var hdrOut: String?
    public var assertions: [Assertion] = []
    public var token: String?
    /// An account to sign in as (`--sign-in`), and its password (read from `LARDER_BENCH_PASSWORD`, never from the
    /// command line).
    public var signInEmail: String?
    public var signInPassword: String?
    /// The session every connection's HELLO presents in place of a token (made by signing in as `signInEmail`).
    public var session: String?
    /// TLS to the server, verified against this CA file (PEM); nil: plain.
    public var tlsCA: String?
    public var tls: Bool { tlsCA != nil }
    public var collection = "bench"
    /// Offer zlib in HELLO, as the real client does.
    public var compression = true
    /// Seconds to wait for answers after the load stops, and for connecting.
    public var timeout: Double = 10
    /// No progress lines on stderr.
    public var quiet = false
    /// Bytes each request is answered with by the `raw` target.
    public var rawResponseSize = 1 << 20

    public init() {}

    /// The port actually used.
    public var resolvedPort: Int { port ?? (target == .redis ? 6379 : 7411) }

    /// The servers of `host` (several larder-servers sharing one PostgreSQL as `a:7411,b:7412`); connection i goes to
    /// the i-th, round robin. An item without a port takes `resolvedPort`.
    public var servers: [(host: String, port: Int)] {
        (try? HostList.parse(host, defaultPort: resolvedPort)) ?? [(host, resolvedPort)]
    }
    /// The run's bound when neither `--duration` nor `--requests` is given.
    public var resolvedDuration: Double? { duration ?? (requests == nil ? 10 : nil) }

    var mixReadsDocuments: Bool { mix.operations.contains { $0.readsPreloadedDocuments } }
    var mixHasDocuments: Bool { mix.operations.contains { $0 != .blobGet && $0 != .blobPut } }
    /// Documents are preloaded only when the mix has document operations; blobs only when it reads blobs.
    public var resolvedPreload: Int {
        guard mixHasDocuments else { return 0 }
        return preload ?? (mixReadsDocuments ? (keyspace ?? 1000) : 0)
    }
    public var resolvedPreloadBlobs: Int {
        preloadBlobs ?? (mix.contains(.blobGet) ? min(preload ?? 32, 32) : 0)
    }
    public var resolvedKeyspace: Int { keyspace ?? resolvedPreload }

    /// Checks the combination of options (each option's own range is checked while parsing).
    public func validate() throws(UsageError) {
        if target == .redis {
            let unsupported = mix.operations.filter { !BenchOperation.redisOperations.contains($0) }
            if !unsupported.isEmpty {
                throw UsageError(
                    "--target redis runs GET and SET only: use get, create (SET of a new key) or replace (SET of an "
                        + "existing key), not \(unsupported.map(\.name).joined(separator: ", "))")
            }
            if jpegDirectory != nil { throw UsageError("--jpeg-dir has no meaning with --target redis") }
        }
        if requestKeys && target != .larder { throw UsageError("--request-keys needs --target larder") }
        if afterSeq && target != .larder { throw UsageError("--after-seq needs --target larder") }
        if signInEmail != nil {
            if target != .larder { throw UsageError("--sign-in needs --target larder") }
            if token != nil { throw UsageError("--sign-in and --token are two ways in: give one") }
            if signInPassword == nil {
                throw UsageError("--sign-in reads the account's password from LARDER_BENCH_PASSWORD, which is not set")
            }
        }
        if ids == .server && target == .larder {
            let readdressing = mix.operations.filter { $0 == .delete || $0 == .patchRev }
            if !readdressing.isEmpty {
                throw UsageError(
                    "--ids server: \(readdressing.map(\.name).joined(separator: " and ")) address the documents the "
                        + "run creates, whose server-made ids the bench does not read back; use --ids random or streams")
            }
        }
        if mixReadsDocuments && resolvedKeyspace == 0 {
            let readers = mix.operations.filter(\.readsPreloadedDocuments).map(\.name).joined(separator: ", ")
            throw UsageError("the mix reads existing documents (\(readers)): give --preload N so that reads hit")
        }
        if mix.contains(.blobGet) && resolvedPreloadBlobs == 0 {
            throw UsageError("the mix has blob-get: give --preload N or --preload-blobs N so that reads hit")
        }
        // --preload 0 --keyspace N trusts that an earlier run loaded the documents.
        if let preload, preload > 0, let keyspace, keyspace > preload {
            throw UsageError("--keyspace (\(keyspace)) exceeds --preload (\(preload)): reads would miss")
        }
        if let rate, rate < Double(connections) / 3600 {
            throw UsageError("--rate \(rate) is too low for \(connections) connections")
        }
        if threads > connections { throw UsageError("--threads (\(threads)) cannot exceed --connections") }
    }
}

/// What the command line asked for.
public enum BenchCommand: Sendable, Equatable {
    case help
    case run(BenchOptions)
}

/// The `larder-bench run` command line, parsed by hand in swift-argument-parser's shape.
public enum BenchArguments {
    public static let usageLine =
        "Usage: larder-bench run [--target larder|redis] [--host H] [--port N | --socket PATH] [--connections N] "
        + "[--pipeline N] [--duration S | --requests N] [--rate OPS] [--mix OP=W,...] [--json] [--assert EXPR] ..."

    /// Parses the options after `run` (or after the program name when the first argument is an option);
    /// `environment` holds `LARDER_BENCH_PASSWORD` for `--sign-in`.
    public static func parse(
        _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(UsageError) -> BenchCommand {
        var options = BenchOptions()
        var scanner = ArgumentScanner(arguments)
        while let parsed = scanner.next() {
            let argument = parsed.text
            let name = parsed.name
            let inline = parsed.inline
            func value(_ name: String, _ inline: String?) throws(UsageError) -> String {
                guard let value = scanner.value(for: parsed) else { throw UsageError("\(name) needs a value") }
                return value
            }
            func flag() throws(UsageError) {
                if inline != nil { throw UsageError("\(name) takes no value") }
            }
            switch name {
            case "-h", "--help", "help":
                return .help
            case "--host":
                options.host = try value(name, inline)
                do throws(LarderError) {
                    _ = try HostList.parse(options.host, defaultPort: 7411)
                } catch {
                    throw UsageError("--host: \(error.message)")
                }
            case "--port": options.port = try integer(name, try value(name, inline), 1...65535)
            case "--socket": options.socketPath = try value(name, inline)
            case "--target":
                let text = try value(name, inline)
                guard let target = Target(rawValue: text), target != .raw else {
                    throw UsageError("--target must be larder or redis, not '\(text)'")
                }
                options.target = target
            case "--connections", "-c": options.connections = try integer(name, try value(name, inline), 1...10_000)
            case "--pipeline", "-P": options.pipeline = try integer(name, try value(name, inline), 1...1024)
            case "--threads": options.threads = try integer(name, try value(name, inline), 1...256)
            case "--duration", "-d": options.duration = try seconds(name, try value(name, inline), allowZero: false)
            case "--requests", "-n": options.requests = try integer(name, try value(name, inline), 1...Int(Int32.max))
            case "--warmup": options.warmup = try seconds(name, try value(name, inline), allowZero: true)
            case "--preload": options.preload = try integer(name, try value(name, inline), 0...100_000_000)
            case "--preload-blobs": options.preloadBlobs = try integer(name, try value(name, inline), 0...1_000_000)
            case "--keyspace": options.keyspace = try integer(name, try value(name, inline), 1...100_000_000)
            case "--mix": options.mix = try OperationMix.parse(try value(name, inline))
            case "--doc-size":
                let text = try value(name, inline)
                let parts = text.split(separator: "-", maxSplits: 1).map(String.init)
                options.docSize = try size(name, parts[0], 64...(1 << 20))
                options.docSizeMax = nil
                if parts.count == 2 {
                    let largest = try size(name, parts[1], 64...(1 << 20))
                    guard largest >= options.docSize else {
                        throw UsageError("--doc-size MIN-MAX needs MIN <= MAX, not '\(text)'")
                    }
                    options.docSizeMax = largest
                }
            case "--blob-size": options.blobSize = try size(name, try value(name, inline), 32...(32 << 20))
            case "--jpeg-dir": options.jpegDirectory = try value(name, inline)
            case "--keys":
                let text = try value(name, inline)
                guard let keys = KeyDistribution(rawValue: text) else {
                    throw UsageError("--keys must be uniform, zipf or sequential, not '\(text)'")
                }
                options.keys = keys
            case "--request-keys":
                try flag()
                options.requestKeys = true
            case "--after-seq":
                try flag()
                options.afterSeq = true
            case "--ids":
                let text = try value(name, inline)
                guard let ids = IDSource(rawValue: text) else {
                    throw UsageError("--ids must be server, random or streams, not '\(text)'")
                }
                options.ids = ids
            case "--zipf-theta":
                let text = try value(name, inline)
                guard let theta = Double(text), theta > 0, theta < 1 else {
                    throw UsageError("--zipf-theta must be a number between 0 and 1 (exclusive), not '\(text)'")
                }
                options.zipfTheta = theta
            case "--seed":
                let text = try value(name, inline)
                guard let seed = UInt64(text) else { throw UsageError("--seed must be a non-negative integer") }
                options.seed = seed
            case "--rate":
                let text = try value(name, inline)
                guard let rate = Double(text), rate.isFinite, rate > 0, rate <= 100_000_000 else {
                    throw UsageError("--rate must be a number of operations per second above 0, not '\(text)'")
                }
                options.rate = rate
            case "--json":
                try flag()
                options.json = true
            case "--hdr-out": options.hdrOut = try value(name, inline)
            case "--quiet", "-q":
                try flag()
                options.quiet = true
            case "--no-compression":
                try flag()
                options.compression = false
            case "--assert": options.assertions.append(try Assertion.parse(try value(name, inline)))
            case "--max-error-rate":
                let text = try value(name, inline)
                options.assertions.append(try Assertion.parse("errors<=" + text, as: "--max-error-rate \(text)"))
            case "--token": options.token = try value(name, inline)
            case "--sign-in":
                options.signInEmail = try value(name, inline)
                options.signInPassword = environment["LARDER_BENCH_PASSWORD"]
            case "--tls-ca": options.tlsCA = try value(name, inline)
            case "--collection":
                let text = try value(name, inline)
                guard isCollectionName(text) else {
                    throw UsageError("--collection must match ^[A-Za-z][A-Za-z0-9_-]{0,63}$, not '\(text)'")
                }
                options.collection = text
            case "--timeout": options.timeout = try seconds(name, try value(name, inline), allowZero: false)
            default:
                if argument.hasPrefix("-") { throw UsageError("unknown option '\(name)'") }
                throw UsageError("unexpected argument '\(argument)'")
            }
        }
        try options.validate()
        return .run(options)
    }

    static func integer(_ name: String, _ text: String, _ range: ClosedRange<Int>) throws(UsageError) -> Int {
        guard let n = Int(text.replacingUnderscores), range.contains(n) else {
            throw UsageError("\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), "
                + "not '\(text)'")
        }
        return n
    }

    /// Seconds: `10`, `2.5`, `10s`, `500ms`, `2m`.
    static func seconds(_ name: String, _ text: String, allowZero: Bool) throws(UsageError) -> Double {
        let units: [(String, Double)] = [("ms", 0.001), ("us", 0.000_001), ("s", 1), ("m", 60)]
        var number = Substring(text)
        var scale = 1.0
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            number = number.dropLast(suffix.count)
            scale = factor
            break
        }
        guard let value = Double(number), value.isFinite, value > 0 || (allowZero && value == 0),
            value * scale <= 86_400
        else {
            throw UsageError("\(name) must be a duration such as 10, 2.5s or 500ms, not '\(text)'")
        }
        return value * scale
    }

    /// Bytes: `250`, `64KiB`, `1MiB`, `1GiB` (`ByteSize`; the short forms `64k` and `1M` too).
    static func size(_ name: String, _ text: String, _ range: ClosedRange<Int>) throws(UsageError) -> Int {
        guard let n = ByteSize.parse(text), range.contains(n) else {
            throw UsageError(
                "\(name) must be a size from \(ByteSize.format(range.lowerBound)) to \(ByteSize.format(range.upperBound)): "
                    + "\(ByteSize.grammar), not '\(text)'")
        }
        return n
    }

    static func isCollectionName(_ s: String) -> Bool {
        let bytes = Array(s.utf8)
        guard (1...64).contains(bytes.count), let first = bytes.first, isLetter(first) else { return false }
        return bytes.allSatisfy {
            isLetter($0) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: "_")
                || $0 == UInt8(ascii: "-")
        }
    }

    static func isLetter(_ b: UInt8) -> Bool {
        (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
    }

    public static let helpText = """
        larder-bench run: load-test a Larder server (or Redis, with the same engine)

        \(usageLine)

        Target:
          --target larder|redis   what to load (default larder); redis runs GET and SET of the same value sizes
          --host H                server address, or several as a:7411,b:7412 (connections spread round
                                  robin; default 127.0.0.1)
          --port N                TCP port (default 7411 for larder, 6379 for redis)
          --socket PATH           a Unix domain socket instead of TCP
          --token T               the server's auth token (Redis: sent with AUTH)
          --sign-in EMAIL         sign in as this account of a server run with --users (the password is read
                                  from the environment variable LARDER_BENCH_PASSWORD) and load the server as
                                  that user, held to the collection's rules: every connection presents the
                                  session; INDEX is left to an admin
          --tls-ca FILE           connect with TLS, verifying the server against the CA of FILE (PEM)
          --collection NAME       the collection to use (default bench)
          --no-compression        do not offer zlib in HELLO

        Load:
          --connections N, -c N   connections (default 50)
          --pipeline N, -P N      requests in flight per connection (default 1)
          --threads N             generator threads sharing the connections (default 1)
          --rate OPS              open loop: send OPS requests/s in all, each at its scheduled time; latency is
                                  measured from the scheduled time (coordinated omission corrected), the
                                  uncorrected figures are shown beside it, and the achieved rate is reported
          --duration S, -d S      seconds of measured load (default 10; also 500ms, 2m)
          --requests N, -n N      stop after N measured requests (with --duration, whichever comes first)
          --warmup S              seconds of load before measuring (excluded from results; default 0)
          --timeout S             seconds to wait for the last answers and for connecting (default 10)

        Workload:
          --mix OP=W,...          operation weights (default get=100); operations: get, create, replace, patch,
                                  patch-rev, delete, search, count, blob-put, blob-get. delete removes documents this
                                  run created (a create is sent instead while there are none); patch-rev patches a
                                  document this run created, naming the revision it is at (a create is sent instead
                                  while none is free); search finds a document by its number field "n"; count counts
                                  one of 100 groups
          --preload N             documents written before the run so that reads hit (default 1000 when the mix
                                  reads documents), and blobs for blob-get (up to 32 unless --preload-blobs says)
          --preload-blobs N       blobs written before the run
          --keyspace N            reads choose among the first N preloaded documents (default: all)
          --doc-size SIZE         the JSON size of a document's data (default 250; units KiB, MiB allowed);
                                  MIN-MAX (e.g. 100-16KiB) mixes sizes, each document's drawn uniformly
          --blob-size SIZE        the size of synthetic JPEG blobs (default 1MiB)
          --jpeg-dir DIR          upload the *.jpg files of DIR instead of synthetic blobs
          --keys uniform|zipf|sequential
                                  how reads choose a key (default uniform; zipf uses --zipf-theta, default 0.99)
          --ids server|random|streams
                                  the ids of created documents and blobs: made by the server (time-ordered; not
                                  with delete or patch-rev), random v4 UUIDs as apps make them, or one ordered
                                  stream per worker (default streams)
          --request-keys          every write carries a fresh requestKey (what exactly-once writes cost the server)
          --after-seq             every GET carries afterSeq, the highest seq the run's writes were answered with,
                                  as LarderClient sends it (a server behind on the change log waits, then reads
                                  the database)
          --seed N                seed of every random choice (default 1)

        Results (stdout; progress lines every second on stderr unless --quiet):
          --json                  one JSON object: schemaVersion, configuration, per-second series,
                                  per-operation counts, errors, opsPerSec and latency percentiles
          --assert EXPR           a check on the results; the exit status is 1 when one fails. EXPR is
                                  [OP.]METRIC(<|<=|>|>=)VALUE: METRIC is p50, p90, p99, p99.9 (any pN), mean, max
                                  (with a unit: ns, us, ms, s), ops (per second), count, or errors (a share of
                                  requests: 0.5% or 0.005). Examples: 'get.p99<5ms', 'ops>=20000', 'errors<1%'
          --max-error-rate R      the same as --assert 'errors<=R'
          --hdr-out FILE          every operation's full latency histogram in HdrHistogram's log format
                                  (Tag=get; in an open loop also get-uncorrected), for HdrHistogram's tools

        Exit status: 0 success, 1 an assertion failed, 2 the run could not be made (cannot connect, the server
        broke the protocol), 64 bad options.
        """
}

extension String {
    var replacingUnderscores: String { String(filter { $0 != "_" }) }
}
