import Foundation
import LarderWire
import LarderIO

/// The percentiles every report gives, in order.
let reportPercentiles: [Double] = [50, 90, 99, 99.9]

/// A latency with a unit that suits it, to three significant digits: `412µs`, `4.12ms`, `1.20s`.
public func formatLatency(_ nanoseconds: UInt64) -> String {
    formatLatency(Double(nanoseconds))
}

public func formatLatency(_ ns: Double) -> String {
    func sig3(_ v: Double) -> String {
        if v >= 100 { return String(format: "%.0f", v) }
        if v >= 10 { return String(format: "%.1f", v) }
        return String(format: "%.2f", v)
    }
    if ns < 1_000 { return "\(Int(ns))ns" }
    if ns < 1_000_000 { return sig3(ns / 1e3) + "µs" }
    if ns < 1_000_000_000 { return sig3(ns / 1e6) + "ms" }
    return sig3(ns / 1e9) + "s"
}

extension BenchResults {
    /// The human report: one line per operation and one for all of them, then the assertions.
    public var text: String {
        var lines: [String] = []
        let o = options
        let endpoint = o.socketPath.map { "unix:\($0)" }
            ?? o.servers.map { "\($0.host.contains(":") ? "[\($0.host)]" : $0.host):\($0.port)" }.joined(separator: ",")
        lines.append("larder-bench \(benchVersion) -> \(server) at \(endpoint)")
        var shape = "\(o.connections) connections x \(o.pipeline) in flight, \(o.threads) thread"
            + (o.threads == 1 ? "" : "s")
        if let rate = o.rate {
            shape = "open loop at \(Int(rate)) ops/s, " + shape
        } else {
            shape = "closed loop, " + shape
        }
        lines.append(shape)
        var bound = String(format: "%.2f s measured", elapsed)
        if o.warmup > 0 { bound += String(format: " after %.1f s of warmup", o.warmup) }
        if let requests = o.requests { bound += ", \(requests) requests" }
        var workload = "\(bound); mix \(o.mix)"
        if o.target != .raw { workload += "; keys \(o.keys.rawValue); ids \(o.ids.rawValue)" }
        if o.mixHasDocuments {
            workload += "; documents of \(o.docSize) B" + (o.docSizeMax.map { "-\($0) B" } ?? "")
        }
        if o.mix.contains(.blobGet) || o.mix.contains(.blobPut) { workload += "; blobs of \(blobDescription)" }
        lines.append(workload)
        lines.append("")
        lines.append(table(uncorrected: false))
        if let achievedRate, let rate = o.rate {
            lines.append("")
            lines.append(
                String(format: "target rate %.0f ops/s, achieved %.1f ops/s (%.1f%%); %d requests sent on schedule",
                       rate, achievedRate, achievedRate / rate * 100, scheduled))
            lines.append("latency above is from each request's intended send time (coordinated omission corrected);")
            lines.append("uncorrected, from the actual send time:")
            lines.append(table(uncorrected: true))
        }
        if !connectionErrors.isEmpty {
            lines.append("")
            lines.append("connections broke: " + connectionErrors.joined(separator: "; "))
        }
        if !assertions.isEmpty {
            lines.append("")
            for a in assertions {
                lines.append("assert \(a.assertion.expression): \(a.passed ? "passed" : "FAILED") "
                    + "(\(a.formattedActual))")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    var blobDescription: String {
        if let dir = options.jpegDirectory { return "JPEGs from \(dir)" }
        return "\(options.blobSize) B"
    }

    func table(uncorrected: Bool) -> String {
        var rows: [[String]] = [
            ["op", "count", "ops/s", "mean ms", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "errors"]
        ]
        func row(_ name: String, _ stats: OperationStats, _ opsPerSec: Double) -> [String] {
            let h = uncorrected ? stats.uncorrected : stats.latency
            let p = h.values(atPercentiles: reportPercentiles)
            let ms = { (v: Double) in String(format: "%.3f", v / 1e6) }
            let errors = stats.errors == 0
                ? "0" : stats.errorsByName.map { "\($0.0)=\($0.1)" }.joined(separator: ",")
            return [name, String(stats.count), String(format: "%.1f", opsPerSec), ms(h.mean)]
                + p.map { ms(Double($0)) } + [ms(Double(h.max)), errors]
        }
        for op in operations { rows.append(row(op.operation.name, op.stats, op.opsPerSec)) }
        if operations.count > 1 { rows.append(row("all", total, opsPerSec)) }
        let widths = (0..<rows[0].count).map { c in rows.map { $0[c].count }.max()! }
        return rows.map { r in
            r.enumerated().map { c, cell in
                let pad = String(repeating: " ", count: widths[c] - cell.count)
                return c == 0 || c == r.count - 1 ? cell + pad : pad + cell
            }.joined(separator: "  ").trimmingTrailing(" ")
        }.joined(separator: "\n")
    }

    /// The `--json` result (schema version 1).
    public var json: JSONObject {
        var root: JSONObject = [:]
        root["schemaVersion"] = 1
        root["tool"] = .string("larder-bench \(benchVersion)")
        root["server"] = .string(server)
        root["configuration"] = .object(configurationJSON)
        root["startedAt"] = .string(ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: startedAt)))
        root["elapsedSeconds"] = .double(rounded(elapsed, 4))
        root["preloadSeconds"] = .double(rounded(preloadSeconds, 3))
        root["count"] = .int(Int64(total.count))
        root["errors"] = .int(Int64(total.errors))
        root["errorRate"] = .double(total.errorRate)
        root["opsPerSec"] = .double(rounded(opsPerSec, 1))
        if let achievedRate, let rate = options.rate {
            root["openLoop"] = [
                "targetRate": .double(rate), "achievedRate": .double(rounded(achievedRate, 1)),
                "scheduled": .int(Int64(scheduled)),
            ]
        } else {
            root["openLoop"] = .null
        }
        root["latencyUs"] = .object(latencyJSON(total.latency))
        if options.rate != nil { root["uncorrectedLatencyUs"] = .object(latencyJSON(total.uncorrected)) }
        var ops: JSONObject = [:]
        for op in operations {
            var o: JSONObject = [:]
            o["count"] = .int(Int64(op.stats.count))
            var errors: JSONObject = [:]
            for (name, n) in op.stats.errorsByName { errors[name] = .int(Int64(n)) }
            o["errors"] = .object(errors)
            o["opsPerSec"] = .double(rounded(op.opsPerSec, 1))
            o["latencyUs"] = .object(latencyJSON(op.stats.latency))
            if options.rate != nil { o["uncorrectedLatencyUs"] = .object(latencyJSON(op.stats.uncorrected)) }
            ops[op.operation.name] = .object(o)
        }
        root["operations"] = .object(ops)
        root["series"] = .array(series.map { s in
            let p = s.latency.values(atPercentiles: [50, 99])
            var perOp: JSONObject = [:]
            for op in BenchOperation.allCases where s.counts[op.rawValue] > 0 {
                perOp[op.name] = .int(Int64(s.counts[op.rawValue]))
            }
            return [
                "second": .int(Int64(s.second)), "durationSeconds": .double(rounded(s.duration, 3)),
                "count": .int(Int64(s.count)), "opsPerSec": .double(rounded(s.opsPerSec, 1)),
                "errors": .int(Int64(s.errors)), "p50Us": .double(micros(p[0])), "p99Us": .double(micros(p[1])),
                "maxUs": .double(micros(s.latency.max)), "operations": .object(perOp),
            ]
        })
        root["connectionErrors"] = .array(connectionErrors.map { .string($0) })
        root["assertions"] = .array(assertions.map { a in
            [
                "expression": .string(a.assertion.expression), "passed": .bool(a.passed),
                "actual": .double(a.assertion.metric.isLatency ? micros(UInt64(a.actual)) : rounded(a.actual, 6)),
                "unit": .string(a.assertion.metric.unit),
            ]
        })
        root["passed"] = .bool(passed)
        return root
    }

    var configurationJSON: JSONObject {
        let o = options
        var c: JSONObject = [:]
        c["target"] = .string(o.target.rawValue)
        c["host"] = .string(o.host)
        c["port"] = .int(Int64(o.resolvedPort))
        c["socket"] = o.socketPath.map { .string($0) } ?? .null
        c["connections"] = .int(Int64(o.connections))
        c["pipeline"] = .int(Int64(o.pipeline))
        c["threads"] = .int(Int64(o.threads))
        c["durationSeconds"] = o.resolvedDuration.map { .double($0) } ?? .null
        c["requests"] = o.requests.map { .int(Int64($0)) } ?? .null
        c["warmupSeconds"] = .double(o.warmup)
        c["rate"] = o.rate.map { .double($0) } ?? .null
        c["preload"] = .int(Int64(o.resolvedPreload))
        c["preloadBlobs"] = .int(Int64(o.resolvedPreloadBlobs))
        c["keyspace"] = .int(Int64(o.resolvedKeyspace))
        var mix: JSONObject = [:]
        for op in o.mix.operations { mix[op.name] = .int(Int64(o.mix[op])) }
        c["mix"] = .object(mix)
        c["docSize"] = .int(Int64(o.docSize))
        if let largest = o.docSizeMax { c["docSizeMax"] = .int(Int64(largest)) }
        c["blobSize"] = .int(Int64(o.blobSize))
        c["jpegDir"] = o.jpegDirectory.map { .string($0) } ?? .null
        c["keys"] = .string(o.keys.rawValue)
        c["ids"] = .string(o.ids.rawValue)
        c["requestKeys"] = .bool(o.requestKeys)
        c["signedIn"] = .bool(o.signInEmail != nil)
        if o.keys == .zipf { c["zipfTheta"] = .double(o.zipfTheta) }
        c["seed"] = .int(Int64(bitPattern: o.seed))
        c["compression"] = .bool(o.compression)
        c["collection"] = .string(o.collection)
        c["timeoutSeconds"] = .double(o.timeout)
        return c
    }

    func latencyJSON(_ h: Histogram) -> JSONObject {
        let p = h.values(atPercentiles: reportPercentiles)
        var o: JSONObject = [:]
        o["min"] = .double(micros(h.min))
        o["mean"] = .double(rounded(h.mean / 1e3, 3))
        for (name, v) in zip(["p50", "p90", "p99", "p99.9"], p) { o[name] = .double(micros(v)) }
        o["max"] = .double(micros(h.max))
        return o
    }
}

extension AssertionResult {
    var formattedActual: String {
        switch assertion.metric {
        case .percentile, .mean, .max: formatLatency(actual)
        case .errorRate: String(format: "%.3f%%", actual * 100)
        case .opsPerSec: String(format: "%.1f ops/s", actual)
        case .count: String(Int(actual))
        }
    }
}

extension Assertion.Metric {
    var unit: String {
        switch self {
        case .percentile, .mean, .max: "us"
        case .errorRate: "fraction"
        case .opsPerSec: "ops/s"
        case .count: "requests"
        }
    }
}

func micros(_ ns: UInt64) -> Double { rounded(Double(ns) / 1e3, 3) }
func rounded(_ v: Double, _ places: Int) -> Double {
    let scale = pow(10, Double(places))
    return (v * scale).rounded() / scale
}
