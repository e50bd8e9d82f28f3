import Dispatch
import LarderIO
import LarderStore
import LarderWire

/// The Prometheus text exposition format (version 0.0.4) of the server's counters: what `/metrics` serves.
/// `promtool check metrics` accepts it (IntegrationTests/MetricsTests).
struct MetricsText {
    private(set) var text = ""

    /// Latency buckets' upper bounds in seconds, from 50 µs to 10 s.
    static let bucketBounds: [Double] = [
        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]

    mutating func family(_ name: String, _ type: String, _ help: String) {
        text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
    }

    mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
        text += name
        if !labels.isEmpty {
            text += "{" + labels.map { "\($0.0)=\"\(MetricsText.escape($0.1))\"" }.joined(separator: ",") + "}"
        }
        text += " " + MetricsText.format(value) + "\n"
    }

    mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Int) {
        sample(name, labels, Double(value))
    }

    mutating func sample(_ name: String, _ value: Int) { sample(name, [], Double(value)) }
    mutating func sample(_ name: String, _ value: Double) { sample(name, [], value) }

    static func format(_ value: Double) -> String {
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    /// A histogram family's samples for one opcode: cumulative buckets at `bucketBounds`. A value counts in a bucket
    /// when its log-linear bucket (`Histogram.latencyMicros`, within 12.5%) ends at or below the bound.
    mutating func histogram(_ name: String, opcode: String, _ h: Histogram) {
        var index = 0
        var cumulative: UInt64 = 0
        let counts = h.bucketCounts
        for bound in MetricsText.bucketBounds {
            let micros = UInt64(bound * 1_000_000)
            while index < counts.count, Histogram.highestEquivalent(index, bits: h.precisionBits) <= micros {
                cumulative += counts[index]
                index += 1
            }
            sample("\(name)_bucket", [("opcode", opcode), ("le", MetricsText.format(bound))], Double(cumulative))
        }
        sample("\(name)_bucket", [("opcode", opcode), ("le", "+Inf")], Double(h.count))
        sample("\(name)_sum", [("opcode", opcode)], h.sum / 1_000_000)
        sample("\(name)_count", [("opcode", opcode)], Double(h.count))
    }
}

extension ServerStats {
    /// Everything STATS reports, as Prometheus metrics. `store` is nil when the store did not answer;
    /// `watchLagChanges` is how many committed changes wait for the event loops to push them; `pool` is the work
    /// pool's state.
// One family and its samples per counter of STATS, in the order of
// Protocol.md's STATS answer.
    func prometheus(
        now: UInt64, store: StoreStats?, watchLagChanges: Int, pool: WorkPool.Snapshot, version: String,
        schemaWarnings: [String: Int] = [:], followerLag: FollowerLag? = nil
    ) -> String {
        let (s, hits, misses) = current
        var m = MetricsText()
        m.family("larder_build_info", "gauge", "The server's version.")
        m.sample("larder_build_info", [("version", version)], 1)
        m.family("larder_uptime_seconds", "gauge", "Seconds since the server started.")
        m.sample("larder_uptime_seconds", Double((now &- startedAt) / 1_000_000) / 1000)

        let operations = s.operations.sorted { $0.key.rawValue < $1.key.rawValue }
        m.family("larder_requests_total", "counter", "Requests answered, by opcode and status.")
        for (opcode, operation) in operations {
            for (status, count) in operation.byStatus {
                m.sample("larder_requests_total", [("opcode", opcode.name), ("status", status.name)], count)
            }
        }
        m.family("larder_request_errors_total", "counter", "Requests answered with a status other than OK, by opcode.")
        for (opcode, operation) in operations {
            m.sample("larder_request_errors_total", [("opcode", opcode.name)], operation.errors)
        }
        m.family(
            "larder_request_duration_seconds", "histogram",
            "Time from a request's decoding to its answer being queued, by opcode (every request is timed).")
        for (opcode, operation) in operations {
            m.histogram("larder_request_duration_seconds", opcode: opcode.name, operation.latency)
        }

        m.family("larder_connections_open", "gauge", "Client connections open now.")
        m.sample("larder_connections_open", s.connectionsOpen)
        m.family("larder_connections_total", "counter", "Client connections accepted since start.")
        m.sample("larder_connections_total", s.connectionsTotal)
        m.family("larder_connections_refused_total", "counter", "Connections refused at the connection limit.")
        m.sample("larder_connections_refused_total", s.connectionsRefused)
        m.family("larder_connection_peak_unsent_bytes", "gauge", "The most unsent output one connection has held.")
        m.sample("larder_connection_peak_unsent_bytes", s.peakUnsentBytes)

        m.family("larder_received_bytes_total", "counter", "Bytes received: on the wire, and JSON after inflation.")
        m.sample("larder_received_bytes_total", [("form", "wire")], s.bytesInWire)
        m.sample("larder_received_bytes_total", [("form", "uncompressed")], s.bytesInUncompressed)
        m.family("larder_sent_bytes_total", "counter", "Bytes sent: on the wire, and JSON before compression.")
        m.sample("larder_sent_bytes_total", [("form", "wire")], s.bytesOutWire)
        m.sample("larder_sent_bytes_total", [("form", "uncompressed")], s.bytesOutUncompressed)

        m.family("larder_read_cache_hits_total", "counter", "GETs answered from the event loops' read cache.")
        m.sample("larder_read_cache_hits_total", hits)
        m.family("larder_read_cache_misses_total", "counter", "GETs that read the store.")
        m.sample("larder_read_cache_misses_total", misses)
        let waits = afterSeq
        m.family(
            "larder_after_seq_waits_total", "counter",
            "GETs with afterSeq that waited for this server to apply the change log that far.")
        m.sample("larder_after_seq_waits_total", waits.waits)
        m.family(
            "larder_after_seq_fell_through_total", "counter",
            "GETs with afterSeq that read the database because the change log was not applied that far in time.")
        m.sample("larder_after_seq_fell_through_total", waits.fellThrough)
        if let followerLag {
            m.family(
                "larder_follower_lag_changes", "gauge",
                "Changes other servers committed to the shared log that this server has not applied yet.")
            m.sample("larder_follower_lag_changes", Double(followerLag.changes))
            m.family(
                "larder_follower_lag_seconds", "gauge",
                "Seconds since this server first knew of a change in the shared log it has not applied yet.")
            m.sample("larder_follower_lag_seconds", Double(followerLag.ms) / 1000)
        }

        m.family("larder_watch_subscriptions", "gauge", "Change-feed subscriptions open now.")
        m.sample("larder_watch_subscriptions", s.watchesOpen)
        m.family("larder_watch_started_total", "counter", "Change-feed subscriptions started since start.")
        m.sample("larder_watch_started_total", s.watchesTotal)
        m.family("larder_watch_events_total", "counter", "Change-feed events pushed, by kind.")
        m.sample("larder_watch_events_total", [("kind", "change")], s.watchEvents)
        m.sample("larder_watch_events_total", [("kind", "gap")], s.watchGaps)
        m.sample("larder_watch_events_total", [("kind", "resync")], s.watchResyncs)
        m.family(
            "larder_watch_lag_changes", "gauge",
            "Committed changes not yet pushed to the live subscriptions (waiting for an event loop).")
        m.sample("larder_watch_lag_changes", watchLagChanges)

        m.family("larder_work_pool_threads", "gauge", "The most jobs the work pool runs at once (--work-threads).")
        m.sample("larder_work_pool_threads", pool.threads)
        m.family("larder_work_pool_max_queued", "gauge", "The most requests that may wait for it (--max-queued-work).")
        m.sample("larder_work_pool_max_queued", pool.maxWaiting)
        m.family("larder_work_pool_busy", "gauge", "Jobs the work pool runs now.")
        m.sample("larder_work_pool_busy", pool.busy)
        m.family("larder_work_pool_queued", "gauge", "Jobs waiting for the work pool now.")
        m.sample("larder_work_pool_queued", pool.waiting)
        m.family("larder_work_pool_refused_total", "counter", "Requests refused RESOURCE_EXHAUSTED because it was full.")
        m.sample("larder_work_pool_refused_total", pool.refused)

        m.family(
            "larder_schema_warnings_total", "counter",
            "Writes accepted in warn mode whose record did not match its collection's schema, by collection.")
        for (collection, count) in schemaWarnings.sorted(by: { $0.key < $1.key }) {
            m.sample("larder_schema_warnings_total", [("collection", collection)], count)
        }

        m.family("larder_store_up", "gauge", "1 when the store answered this scrape, else 0.")
        m.sample("larder_store_up", store == nil ? 0 : 1)
        if let store {
            m.family("larder_store_documents", "gauge", "Documents stored.")
            m.sample("larder_store_documents", store.documents)
            m.family("larder_store_blobs", "gauge", "Blobs stored.")
            m.sample("larder_store_blobs", store.blobs)
            m.family("larder_store_database_bytes", "gauge", "Size of the database files (main file and WAL).")
            m.sample("larder_store_database_bytes", Double(store.databaseBytes))
            m.family("larder_store_changes", "gauge", "Changes the change log holds.")
            m.sample("larder_store_changes", store.changes)
            m.family("larder_store_last_change_seq", "gauge", "Sequence number of the last committed change.")
            m.sample("larder_store_last_change_seq", Double(store.lastChangeSeq))
        }
        return m.text
    }
}
