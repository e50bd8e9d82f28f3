import LarderSync
import LarderIO

/// What one operation (or the run as a whole) measured.
public struct OperationStats: Sendable, Equatable {
    /// Latency of answered requests, from the intended send time (in a closed loop, the actual send time).
    package var latency = Histogram()
    /// Latency from the actual send time; recorded in an open loop only, where it differs.
    package var uncorrected = Histogram()
    /// Requests answered, plus those that failed without an answer (timeouts, broken connections).
    public var count: UInt64 = 0
    /// Requests that did not succeed, by result code.
    public var errorsByCode: [UInt16: UInt64] = [:]

    public init() {}

    public var errors: UInt64 { errorsByCode.values.reduce(0, +) }
    /// Errors as a share of `count`; 0 when nothing ran.
    public var errorRate: Double { count == 0 ? 0 : Double(errors) / Double(count) }
    /// Errors by their status name (`NOT_FOUND`, `TIMEOUT`, Redis `ERR`...), sorted by name.
    public var errorsByName: [(String, UInt64)] {
        errorsByCode.map { (ResultCode.name($0.key), $0.value) }.sorted { $0.0 < $1.0 }
    }

    public mutating func merge(_ other: OperationStats) {
        latency.merge(other.latency)
        uncorrected.merge(other.uncorrected)
        count += other.count
        for (code, n) in other.errorsByCode { errorsByCode[code, default: 0] += n }
    }
}

/// One second of the measured run, summed over every worker.
public struct SecondSample: Sendable, Equatable {
    /// 1 for the first measured second.
    public var second: Int
    /// Seconds this sample covers: 1, or less for the final partial second.
    public var duration: Double
    package var latency = Histogram()
    /// Answers per operation, indexed by `BenchOperation.rawValue`.
    public var counts = [UInt64](repeating: 0, count: BenchOperation.allCases.count)
    public var errors: UInt64 = 0

    public init(second: Int, duration: Double) {
        self.second = second
        self.duration = duration
    }

    public var count: UInt64 { counts.reduce(0, +) }
    public var opsPerSec: Double { duration > 0 ? Double(count) / duration : 0 }

    mutating func merge(_ other: SecondSample) {
        latency.merge(other.latency)
        for i in counts.indices { counts[i] += other.counts[i] }
        errors += other.errors
        duration = max(duration, other.duration)
    }
}

/// What a worker hands back when its load is done.
struct WorkerResult: Sendable {
    var operations = [OperationStats](repeating: OperationStats(), count: BenchOperation.allCases.count)
    /// Monotonic time of the last measured answer; 0 if none.
    var lastCompletion: UInt64 = 0
    /// Requests sent on schedule in an open loop (including any still unanswered).
    var issuedMeasured = 0
    /// Why connections broke, if any did.
    var connectionErrors: [String] = []
}

/// Where workers report: per-second samples as each second ends (for the progress line and the series) and their
/// final results. The one piece of state threads share; a mutex suffices, since each worker reports once a second.
final class Aggregator: Sendable {
    private struct State {
        var seconds: [Int: SecondSample] = [:]
        var reports: [Int: Int] = [:]
        var printed = 0
        var results: [WorkerResult] = []
        var progress: Int = 0
    }

    let workers: Int
    private let state = Locked(State())

    init(workers: Int) { self.workers = workers }

    func publish(_ sample: SecondSample) {
        state.withLock { s in
            s.seconds[sample.second, default: SecondSample(second: sample.second, duration: 0)].merge(sample)
            s.reports[sample.second, default: 0] += 1
        }
    }

    /// Adds to a counter of requests completed (the preload progress line).
    func addProgress(_ n: Int) { state.withLock { $0.progress += n } }
    var progress: Int { state.withLock { $0.progress } }

    func finish(_ result: WorkerResult) { state.withLock { $0.results.append(result) } }

    var finished: Bool { state.withLock { $0.results.count == workers } }

    /// Whole seconds every worker has reported, not handed out before: the progress lines.
    func takeCompleteSeconds() -> [SecondSample] {
        state.withLock { s in
            var out: [SecondSample] = []
            while let sample = s.seconds[s.printed + 1], s.reports[s.printed + 1, default: 0] >= workers,
                sample.duration >= 1
            {
                out.append(sample)
                s.printed += 1
            }
            return out
        }
    }

    /// The whole series, once the workers are done. A final partial second shorter than a quarter of a second (the
    /// answers that arrive after the load stops) is folded into the second before it rather than reported as a
    /// spike of a few answers over a few milliseconds.
    func series() -> [SecondSample] {
        var all = state.withLock { s in s.seconds.keys.sorted().map { s.seconds[$0]! } }
        if all.count >= 2, let last = all.last, last.duration < 0.25 {
            all.removeLast()
            let duration = all[all.count - 1].duration + last.duration
            all[all.count - 1].merge(last)
            all[all.count - 1].duration = duration
        }
        return all
    }

    var results: [WorkerResult] { state.withLock { $0.results } }
}
