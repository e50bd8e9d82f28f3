/// A check on the results, e.g. `get.p99<5ms`, `ops>=20000` or `errors<1%`; a failed one makes the exit status 1.
public struct Assertion: Sendable, Equatable, CustomStringConvertible {
    public enum Metric: Sendable, Equatable {
        /// A latency percentile, 0...100.
        case percentile(Double)
        case mean
        case max
        /// Completed operations per second.
        case opsPerSec
        /// Completed operations.
        case count
        /// Errors as a share of completed operations, 0...1.
        case errorRate

        var isLatency: Bool {
            switch self {
            case .percentile, .mean, .max: true
            default: false
            }
        }
    }

    public enum Comparison: String, Sendable, CaseIterable {
        case lessOrEqual = "<=", greaterOrEqual = ">=", less = "<", greater = ">"

        func holds(_ actual: Double, _ threshold: Double) -> Bool {
            switch self {
            case .less: actual < threshold
            case .lessOrEqual: actual <= threshold
            case .greater: actual > threshold
            case .greaterOrEqual: actual >= threshold
            }
        }
    }

    /// The text as the user wrote it.
    public var expression: String
    /// The operation checked; nil for the run as a whole.
    public var operation: BenchOperation?
    public var metric: Metric
    public var comparison: Comparison
    /// Nanoseconds for latencies, a fraction for the error rate, a plain number otherwise.
    public var threshold: Double

    public var description: String { expression }

    /// Parses `[OP.]METRIC(<|<=|>|>=)VALUE`; `label` names the expression in error messages.
    public static func parse(_ text: String, as label: String? = nil) throws(UsageError) -> Assertion {
        let label = label ?? "--assert '\(text)'"
        let compact = String(text.filter { $0 != " " })
        guard let (comparison, range) = Comparison.allCases.lazy.compactMap({ c in
            compact.range(of: c.rawValue).map { (c, $0) }
        }).min(by: { $0.1.lowerBound < $1.1.lowerBound }) else {
            throw UsageError("\(label): no comparison; write e.g. 'get.p99<5ms' (one of <, <=, >, >=)")
        }
        let left = String(compact[..<range.lowerBound])
        let right = String(compact[range.upperBound...])
        var operation: BenchOperation?
        var metricName = left
        if Assertion.metric(left) == nil, let dot = left.firstIndex(of: ".") {
            let opName = String(left[..<dot])
            metricName = String(left[left.index(after: dot)...])
            if opName != "all" {
                guard let op = BenchOperation(name: opName) else {
                    throw UsageError("\(label): unknown operation '\(opName)'")
                }
                operation = op
            }
        }
        guard let metric = Assertion.metric(metricName) else {
            throw UsageError(
                "\(label): unknown metric '\(metricName)'; use p50, p90, p99, p99.9 (any pN), mean, max, ops, "
                    + "count or errors")
        }
        let threshold = try Assertion.threshold(right, for: metric, label: label)
        return Assertion(
            expression: text, operation: operation, metric: metric, comparison: comparison, threshold: threshold)
    }

    static func metric(_ name: String) -> Metric? {
        switch name {
        case "mean", "avg": return .mean
        case "max": return .max
        case "ops", "opsPerSec", "rps": return .opsPerSec
        case "count": return .count
        case "errors", "errorRate", "error-rate": return .errorRate
        default:
            guard name.hasPrefix("p"), let p = Double(name.dropFirst()), p > 0, p <= 100 else { return nil }
            return .percentile(p)
        }
    }

    static func threshold(_ text: String, for metric: Metric, label: String) throws(UsageError) -> Double {
        if metric.isLatency {
            let units: [(String, Double)] = [("ns", 1), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)]
            for (suffix, scale) in units where text.hasSuffix(suffix) {
                if let v = Double(text.dropLast(suffix.count)), v.isFinite, v >= 0 { return v * scale }
            }
            throw UsageError("\(label): a latency needs a number and a unit (ns, us, ms or s), e.g. 5ms")
        }
        if metric == .errorRate {
            if text.hasSuffix("%"), let v = Double(text.dropLast()), v >= 0, v <= 100 { return v / 100 }
            if let v = Double(text), v >= 0, v <= 1 { return v }
            throw UsageError("\(label): an error rate is a percentage (0.5%) or a fraction from 0 to 1 (0.005)")
        }
        guard let v = Double(text), v.isFinite, v >= 0 else {
            throw UsageError("\(label): '\(text)' is not a non-negative number")
        }
        return v
    }
}

/// The outcome of one assertion.
public struct AssertionResult: Sendable, Equatable {
    public var assertion: Assertion
    public var passed: Bool
    /// The measured value, in the assertion's unit (nanoseconds for latencies).
    public var actual: Double
}
