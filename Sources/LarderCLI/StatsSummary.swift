import Foundation
import LarderClient

extension Commands {
    /// `larder stats`: the whole STATS answer as JSON, or on a terminal a summary a person can read at a glance.
    static func stats(_ c: Context) async throws -> Int32 {
        let out = c.output
        if out.json {
            out.json(.object(try await c.client.stats()))
            return 0
        }
        let interval = try c.seconds("interval", range: 0...3600) ?? 1
        let first = try await c.client.stats()
        var rate: (perSecond: Double, over: String)?
        var stats = first
        if interval > 0 {
            try await Task.sleep(for: .milliseconds(Int64(interval * 1000)))
            stats = try await c.client.stats()
            let elapsed = Double((stats["uptimeMs"]?.intValue ?? 0) - (first["uptimeMs"]?.intValue ?? 0)) / 1000
            let before = first["requests"]?["total"]?.intValue ?? 0
            let after = stats["requests"]?["total"]?.intValue ?? 0
            // The first STATS is among the requests counted between the two samples; it is not load.
            if elapsed > 0 { rate = (Double(max(0, after - before - 1)) / elapsed, StatsSummary.seconds(elapsed)) }
        }
        let rows = StatsSummary.rows(stats, rate: rate)
        let width = rows.map { Output.width($0.0) }.max() ?? 0
        for (label, value) in rows {
            out.vertical(out.bold(Output.pad(label, width)), keyWidth: width, value: value, maxLines: 4)
        }
        let operations = StatsSummary.operations(stats)
        if !operations.isEmpty {
            out.line("")
            out.table(["operation", "requests", "errors", "p50", "p99"], operations)
        }
        return 0
    }
}

/// The terminal summary of a STATS answer.
enum StatsSummary {
    /// The summary's rows, label and value: server and uptime, connections, requests, change feed, store, read cache.
    static func rows(_ stats: JSONObject, rate: (perSecond: Double, over: String)?) -> [(String, String)] {
        func int(_ path: String...) -> Int64 {
            var value: JSON? = .object(stats)
            for key in path { value = value?[key] }
            return value?.intValue ?? 0
        }
        let server = stats["server"]?.stringValue ?? "larder-server"
        let total = int("requests", "total")
        let since = total > 0 && int("uptimeMs") > 0 ? Double(total) / (Double(int("uptimeMs")) / 1000) : 0
        var requests = rate.map { String(format: "%.1f", $0.perSecond) + "/s over the last \($0.over), " } ?? ""
        requests += "\(count(total)) since start (\(String(format: "%.1f", since))/s on average), "
            + "\(count(int("requests", "errors"))) errors"
        let hits = int("readCache", "hits")
        let gets = hits + int("readCache", "misses")
        var rows: [(String, String)] = [
            ("server", "\(server), up \(uptime(int("uptimeMs")))"),
            (
                "connections",
                "\(count(int("connections", "open"))) open, \(count(int("connections", "total"))) since start, "
                    + "\(count(int("connections", "refused"))) refused"
            ),
            ("requests", requests),
            (
                "watch",
                "\(count(int("watch", "subscriptions"))) subscriptions, \(count(int("watch", "events"))) events sent, "
                    + "\(count(int("watch", "gaps"))) gaps"
            ),
            (
                "store",
                "\(count(int("store", "documents"))) documents, \(count(int("store", "blobs"))) blobs, "
                    + "\(ByteSize.format(int("store", "databaseBytes"))) on disk"
            ),
            (
                "change log",
                "\(count(int("store", "changes"))) changes kept, the last #\(int("store", "lastChangeSeq"))"
            ),
        ]
        if gets > 0 {
            let share = String(format: "%.1f%%", 100 * Double(hits) / Double(gets))
            rows.append(("read cache", "\(share) of \(count(gets)) GETs answered from memory"))
        }
        return rows
    }

    /// One row per operation, busiest first: name, requests, errors, p50 and p99 latency.
    static func operations(_ stats: JSONObject) -> [[String]] {
        guard case .object(let byOpcode)? = stats["requests"]?["byOpcode"] else { return [] }
        let rows = byOpcode.map { name, value -> (Int64, [String]) in
            let requests = value["count"]?.intValue ?? 0
            let latency = value["latencyMicros"]
            return (
                requests,
                [
                    name, count(requests), count(value["errors"]?.intValue ?? 0),
                    micros(latency?["p50"]?.intValue ?? 0), micros(latency?["p99"]?.intValue ?? 0),
                ]
            )
        }
        return rows.sorted { $0.0 != $1.0 ? $0.0 > $1.0 : $0.1[0] < $1.1[0] }.map(\.1)
    }

    /// `12,345`.
    static func count(_ value: Int64) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (n, digit) in digits.enumerated() {
            if n > 0 && (digits.count - n) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return (value < 0 ? "-" : "") + out
    }

    /// `45 µs`, `1.2 ms`, `3.4 s`.
    static func micros(_ value: Int64) -> String {
        if value < 1000 { return "\(value) µs" }
        if value < 1_000_000 { return String(format: "%.1f ms", Double(value) / 1000) }
        return String(format: "%.1f s", Double(value) / 1_000_000)
    }

    /// `1`, `0.5`: a number as a person writes it.
    static func decimal(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    /// `1 s`, `2.5 s`.
    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : String(format: "%.1f s", value)
    }

    /// `45s`, `12m 03s`, `5h 12m 03s`, `3d 5h 12m`.
    static func uptime(_ milliseconds: Int64) -> String {
        let total = milliseconds / 1000
        let (days, hours, minutes, seconds) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60)
        if days > 0 { return "\(days)d \(hours)h \(String(format: "%02d", minutes))m" }
        if hours > 0 { return "\(hours)h \(String(format: "%02d", minutes))m \(String(format: "%02d", seconds))s" }
        if minutes > 0 { return "\(minutes)m \(String(format: "%02d", seconds))s" }
        return "\(seconds)s"
    }
}
