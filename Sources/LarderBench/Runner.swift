import Foundation
import LarderWire

/// The version printed in reports and sent in HELLO.
public let benchVersion = LarderVersion.string

/// One operation's share of the results.
public struct OperationResult: Sendable {
    public var operation: BenchOperation
    public var stats: OperationStats
    public var opsPerSec: Double
}

/// Everything a run measured.
public struct BenchResults: Sendable {
    public var options: BenchOptions
    /// The server's name as its handshake gave it.
    public var server: String
    /// Wall-clock start of the measured phase (Unix seconds).
    public var startedAt: Double
    /// Seconds from the start of measuring to the last measured answer.
    public var elapsed: Double
    /// Per operation, in declaration order, only those in the mix.
    public var operations: [OperationResult]
    /// All operations together.
    public var total: OperationStats
    public var opsPerSec: Double
    public var series: [SecondSample]
    /// Open loop: measured answers per second; nil in a closed loop.
    public var achievedRate: Double?
    /// Requests sent on schedule in an open loop.
    public var scheduled: Int
    public var preloadSeconds: Double
    public var connectionErrors: [String]
    public var assertions: [AssertionResult] = []

    public var passed: Bool { assertions.allSatisfy(\.passed) }

    public func stats(for op: BenchOperation?) -> OperationStats {
        guard let op else { return total }
        return operations.first { $0.operation == op }?.stats ?? OperationStats()
    }

    /// Checks every assertion of the options against these results.
    public func evaluate(_ assertions: [Assertion]) -> [AssertionResult] {
        assertions.map { a in
            let stats = stats(for: a.operation)
            let actual: Double
            switch a.metric {
            case .percentile(let p): actual = Double(stats.latency.value(atPercentile: p))
            case .mean: actual = stats.latency.mean
            case .max: actual = Double(stats.latency.max)
            case .count: actual = Double(stats.count)
            case .errorRate: actual = stats.errorRate
            case .opsPerSec: actual = elapsed > 0 ? Double(stats.count) / elapsed : 0
            }
            // An operation that never ran passes no check on its figures.
            let ran = stats.count > 0 || a.metric == .count || a.metric == .opsPerSec
            return AssertionResult(assertion: a, passed: ran && a.comparison.holds(actual, a.threshold), actual: actual)
        }
    }
}

/// Runs the benchmark the options describe: preloads, then the measured phase. `log` receives the progress lines
/// (stderr in the tool); results come back whole.
public func runBenchmark(
    _ options: BenchOptions, log: @escaping @Sendable (String) -> Void = { _ in }
) throws(BenchError) -> BenchResults {
    var options = options
    if let email = options.signInEmail {
        options.session = try Handshake.signIn(options, email: email, password: options.signInPassword ?? "")
    }
    let port = options.resolvedPort
    var blobs: [[UInt8]] = []
    if options.target == .larder {
        if let dir = options.jpegDirectory {
            do throws(UsageError) {
                blobs = try Payloads.loadJPEGs(from: dir)
            } catch {
                throw BenchError(error.message)
            }
        } else {
            blobs = [Payloads.syntheticJPEG(size: options.blobSize, seed: UInt64(options.blobSize))]
        }
    }
    let payloads = Payloads(
        docSize: options.docSize, docSizeMax: options.docSizeMax, blobs: blobs,
        runNonce: UInt32.random(in: 0...UInt32.max), ids: options.ids, requestKeys: options.requestKeys,
        afterSeq: options.afterSeq)

    // The first connection checks the server and prepares it; it stays open (idle) for the run.
    let (control, info) = try Handshake.open(options, port: port)
    defer { Handshake.close(control) }
    if options.pipeline > info.maxInFlight {
        throw BenchError("--pipeline \(options.pipeline) exceeds the server's maxInFlight of \(info.maxInFlight)")
    }
    if options.target == .larder && options.session == nil
        && (options.mix.contains(.search) || options.mix.contains(.count))
    {
        for field in ["n", "group"] {
            _ = try Handshake.larderCall(
                control, .index, ["collection": .string(options.collection), "field": .string(field)],
                timeout: options.timeout)
        }
    }

    var base = Phase(
        kind: .measure, connections: options.connections, pipeline: options.pipeline, threads: options.threads,
        mix: options.mix, keys: options.keys, keyspace: UInt64(max(1, options.resolvedKeyspace)),
        blobKeyspace: UInt64(max(1, options.resolvedPreloadBlobs)), rate: options.rate, requests: options.requests,
        duration: options.resolvedDuration, warmup: options.warmup, timeout: options.timeout, seed: options.seed)
    if options.keys == .zipf {
        base.zipf = Zipf(n: base.keyspace, theta: options.zipfTheta)
        base.blobZipf = Zipf(n: base.blobKeyspace, theta: options.zipfTheta)
    }

    let preloadStart = Sys.now()
    if options.target != .raw {
        for (kind, count, what) in [
            (Phase.Kind.preloadDocuments, options.resolvedPreload, "documents"),
            (.preloadBlobs, options.target == .larder ? options.resolvedPreloadBlobs : 0, "blobs"),
        ] where count > 0 {
            var phase = base
            phase.kind = kind
            phase.connections = min(options.connections, 8)
            phase.threads = 1
            phase.pipeline = min(info.maxInFlight, kind == .preloadBlobs ? 4 : 32)
            phase.requests = count
            phase.duration = nil
            phase.rate = nil
            phase.warmup = 0
            phase.tolerated = options.target == .larder ? Status.conflict.rawValue : nil
            let started = Sys.now()
            let outcome = try runPhase(
                phase, options, port: port, payloads: payloads, info: info,
                preloadProgress: { done in if !options.quiet { log("preloading \(what): \(done)/\(count)") } })
            let failed = outcome.workers.reduce(0) { $0 + $1.operations.reduce(0) { $0 + $1.errors } }
            if failed > 0 {
                let reasons = outcome.workers.flatMap(\.operations).reduce(into: OperationStats()) { $0.merge($1) }
                throw BenchError(
                    "preloading \(what) failed for \(failed) of \(count): "
                        + reasons.errorsByName.map { "\($0.0) \($0.1)" }.joined(separator: ", ")
                        + (outcome.workers.flatMap(\.connectionErrors).first.map { " (\($0))" } ?? ""))
            }
            if !options.quiet {
                log(String(format: "preloaded %d %@ in %.1f s", count, what, Double(Sys.now() - started) / 1e9))
            }
        }
    }
    let preloadSeconds = Double(Sys.now() - preloadStart) / 1e9

    let startedAt = Date().timeIntervalSince1970 + options.warmup
    if !options.quiet && options.warmup > 0 { log(String(format: "warming up for %.1f s", options.warmup)) }
    let outcome = try runPhase(base, options, port: port, payloads: payloads, info: info, progress: { sample in
        if !options.quiet { log(progressLine(sample)) }
    })
    var perOp = [OperationStats](repeating: OperationStats(), count: BenchOperation.allCases.count)
    for worker in outcome.workers {
        for i in perOp.indices { perOp[i].merge(worker.operations[i]) }
    }
    let last = outcome.workers.map(\.lastCompletion).max() ?? 0
    var elapsed = last > outcome.measureStart ? Double(last - outcome.measureStart) / 1e9 : 0
    if elapsed == 0 { elapsed = base.duration ?? 0 }
    var total = OperationStats()
    var operations: [OperationResult] = []
    for op in BenchOperation.allCases where options.mix.contains(op) || perOp[op.rawValue].count > 0 {
        let stats = perOp[op.rawValue]
        total.merge(stats)
        operations.append(
            OperationResult(operation: op, stats: stats, opsPerSec: elapsed > 0 ? Double(stats.count) / elapsed : 0))
    }
    let opsPerSec = elapsed > 0 ? Double(total.count) / elapsed : 0
    var results = BenchResults(
        options: options, server: info.name, startedAt: startedAt, elapsed: elapsed, operations: operations,
        total: total, opsPerSec: opsPerSec, series: outcome.seconds,
        achievedRate: options.rate == nil ? nil : Double(total.latency.count) / max(elapsed, 1e-9),
        scheduled: outcome.workers.reduce(0) { $0 + $1.issuedMeasured }, preloadSeconds: preloadSeconds,
        connectionErrors: Array(outcome.workers.flatMap(\.connectionErrors).prefix(10)))
    results.assertions = results.evaluate(options.assertions)
    return results
}

/// The one-line summary of a second, printed on stderr while the run goes.
public func progressLine(_ s: SecondSample) -> String {
    let p = s.latency.values(atPercentiles: [50, 99])
    return String(
        format: "[%3ds] %9.0f ops/s  p50 %@  p99 %@  errors %llu", s.second, s.opsPerSec, formatLatency(p[0]),
        formatLatency(p[1]), s.errors)
}

struct PhaseOutcome {
    var workers: [WorkerResult]
    var seconds: [SecondSample]
    var measureStart: UInt64
}

/// Opens the phase's connections, runs one worker thread per `threads`, prints progress, and gathers the results.
func runPhase(
    _ phase: Phase, _ options: BenchOptions, port: Int, payloads: Payloads, info: ServerInfo,
    progress: (SecondSample) -> Void = { _ in }, preloadProgress: ((Int) -> Void)? = nil
) throws(BenchError) -> PhaseOutcome {
    var fds: [Int32] = []
    do throws(BenchError) {
        for index in 0..<phase.connections { fds.append(try Handshake.open(options, port: port, index: index).0) }
    } catch {
        for fd in fds { Handshake.close(fd) }
        throw error
    }
    for fd in fds { Sys.setNonBlocking(fd) }
    let threads = min(phase.threads, fds.count)
    let aggregator = Aggregator(workers: threads)
    let start = Sys.now() + 20_000_000
    let target = options.target
    let collection = options.collection
    let compression = info.compression && options.compression
    let threshold = info.compressionThreshold
    let rawSize = options.rawResponseSize
    for w in 0..<threads {
        let mine = stride(from: w, to: fds.count, by: threads).map { ($0, fds[$0]) }
        let thread = Thread {
            switch target {
            case .larder:
                runWorker(w, threads, phase, aggregator, mine, start) {
                    LarderDriver(
                        payloads: payloads, worker: w, collection: collection,
                        encoder: FrameEncoder(compressionEnabled: compression, threshold: threshold))
                }
            case .redis:
                runWorker(w, threads, phase, aggregator, mine, start) { RedisDriver(payloads: payloads, worker: w) }
            case .raw:
                runWorker(w, threads, phase, aggregator, mine, start) { RawDriver(responseSize: rawSize) }
            }
        }
        thread.name = "larder-bench worker \(w)"
        thread.start()
    }
    var lastProgress = Sys.now()
    while !aggregator.finished {
        usleep(50_000)
        for sample in aggregator.takeCompleteSeconds() { progress(sample) }
        if let preloadProgress, Sys.now() - lastProgress >= 1_000_000_000 {
            lastProgress = Sys.now()
            preloadProgress(aggregator.progress)
        }
    }
    let seconds = aggregator.series()
    return PhaseOutcome(
        workers: aggregator.results, seconds: seconds, measureStart: start + UInt64(phase.warmup * 1e9))
}

private func runWorker<D: Driver>(
    _ index: Int, _ workers: Int, _ phase: Phase, _ aggregator: Aggregator, _ fds: [(Int, Int32)],
    _ start: UInt64, _ makeDriver: () -> D
) {
    let connections = fds.map {
        Connection(fd: $0.1, globalIndex: $0.0, driver: makeDriver(), pipeline: phase.pipeline)
    }
    let worker = Worker(index: index, workers: workers, phase: phase, aggregator: aggregator, connections: connections)
    let now = Sys.now()
    if start > now { usleep(UInt32((start - now) / 1000)) }
    aggregator.finish(worker.run(start: start))
}
