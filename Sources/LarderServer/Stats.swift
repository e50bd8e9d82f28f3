import LarderSync
import LarderWire
import Synchronization
import LarderIO

extension Histogram {
    /// The server's request latencies in microseconds, one per opcode: 8 buckets per power of two (12.5%), small
    /// enough to copy for every STATS.
    static func latencyMicros() -> Histogram { Histogram(precisionBits: 3) }
}

/// Server-wide counters, shared by every shard.
package final class ServerStats: Sendable {
    struct Operation {
        var count = 0
        var errors = 0
        /// Answers other than OK, by status (OK ones are `count - errors`): no hashing for a successful request.
        var errorsByStatus: [Status: Int] = [:]
        var latency = Histogram.latencyMicros()

        var byStatus: [(Status, Int)] {
            (count > errors ? [(Status.ok, count - errors)] : [])
                + errorsByStatus.sorted(by: { $0.key.rawValue < $1.key.rawValue }).map { ($0.key, $0.value) }
        }

        mutating func record(_ status: Status, latencyMicros: UInt64?) {
            count += 1
            if status != .ok {
                errors += 1
                errorsByStatus[status, default: 0] += 1
            }
            if let latencyMicros { latency.record(latencyMicros) }
        }

        /// Records `requests` from `index` while they have the opcode found there; `index` ends past them.
        mutating func record(run requests: [Batch.Request], from index: inout Int) {
            let opcode = requests[index].opcode
            while index < requests.count && requests[index].opcode == opcode {
                record(requests[index].status, latencyMicros: requests[index].latencyMicros)
                index += 1
            }
        }
    }

    /// The counters, under the lock.
    struct State {
        var connectionsOpen = 0
        var connectionsTotal = 0
        var connectionsRefused = 0
        var operations: [Opcode: Operation] = [:]
        var bytesInWire = 0
        var bytesOutWire = 0
        var bytesInUncompressed = 0
        var bytesOutUncompressed = 0
        var peakUnsentBytes = 0
        var watchesOpen = 0
        var watchesTotal = 0
        var watchEvents = 0
        var watchGaps = 0
        var watchResyncs = 0
    }

    private let state = Locked(State())
    private let cacheHits = Atomic<Int>(0)
    private let cacheMisses = Atomic<Int>(0)
    private let thumbnailsMade = Atomic<Int>(0)
    private let thumbnailsFromCache = Atomic<Int>(0)
    let startedAt: UInt64

    private let afterSeqWaits = Atomic<Int>(0)
    private let afterSeqFallThroughs = Atomic<Int>(0)

    /// GETs answered from an event loop's read cache, and those that read the store; GETs with `afterSeq` that waited
    /// for the change log, and those of them that then read the database (added once per loop turn).
    package func readCache(hits: Int, misses: Int, waits: Int = 0, fellThrough: Int = 0) {
        cacheHits.add(hits, ordering: .relaxed)
        cacheMisses.add(misses, ordering: .relaxed)
        if waits | fellThrough != 0 {
            afterSeqWaits.add(waits, ordering: .relaxed)
            afterSeqFallThroughs.add(fellThrough, ordering: .relaxed)
        }
    }

    /// GETs with `afterSeq` that waited for the change log, and those that then read the database.
    package var afterSeq: (waits: Int, fellThrough: Int) {
        (afterSeqWaits.load(ordering: .relaxed), afterSeqFallThroughs.load(ordering: .relaxed))
    }

    package init(now: UInt64) { startedAt = now }

    /// A thumbnail answered: made from the photo, or read from the store's cache.
    package func thumbnailServed(fromCache: Bool) {
        if fromCache {
            thumbnailsFromCache.add(1, ordering: .relaxed)
        } else {
            thumbnailsMade.add(1, ordering: .relaxed)
        }
    }

    /// STATS' `thumbnails` member: those made, those served from the cache, and how many the store holds.
    package func thumbnailsJSON(stored: Int) -> JSONObject {
        [
            "made": .int(Int64(thumbnailsMade.load(ordering: .relaxed))),
            "fromCache": .int(Int64(thumbnailsFromCache.load(ordering: .relaxed))), "stored": .int(Int64(stored)),
        ]
    }

    package func connectionOpened() {
        state.withLock {
            $0.connectionsOpen += 1
            $0.connectionsTotal += 1
        }
    }

    package func connectionClosed() { state.withLock { $0.connectionsOpen -= 1 } }
    package func connectionRefused() { state.withLock { $0.connectionsRefused += 1 } }

    package func request(_ opcode: Opcode, _ status: Status, latencyMicros: UInt64?) {
        // In place: copying the operation out and back copied its histogram (4 KB) on every request.
        state.withLock { $0.operations[opcode, default: Operation()].record(status, latencyMicros: latencyMicros) }
    }

    /// Requests and traffic counted by one event loop, added together under one lock (`add`).
    struct Batch {
        struct Request {
            var opcode: Opcode
            var status: Status
            var latencyMicros: UInt64?
        }
        var requests: [Request] = []
        var wireIn = 0
        var wireOut = 0
        var uncompressedIn = 0
        var uncompressedOut = 0
        var peakUnsent = 0

        var isEmpty: Bool { requests.isEmpty && wireIn | wireOut | uncompressedIn | uncompressedOut | peakUnsent == 0 }

        mutating func addTraffic(
            wireIn: Int, wireOut: Int, uncompressedIn: Int, uncompressedOut: Int, peakUnsent: Int
        ) {
            self.wireIn += wireIn
            self.wireOut += wireOut
            self.uncompressedIn += uncompressedIn
            self.uncompressedOut += uncompressedOut
            self.peakUnsent = Swift.max(self.peakUnsent, peakUnsent)
        }

        mutating func removeAll() {
            requests.removeAll(keepingCapacity: requests.capacity <= 4096)
            (wireIn, wireOut, uncompressedIn, uncompressedOut, peakUnsent) = (0, 0, 0, 0, 0)
        }
    }

    /// Adds a loop's batch: what `request` and `traffic` would add one by one.
    func add(_ batch: Batch) {
        state.withLock { state in
            // A run of one opcode (a burst of GETs) is one dictionary lookup.
            var index = 0
            let requests = batch.requests
            while index < requests.count {
                let opcode = requests[index].opcode
                state.operations[opcode, default: Operation()].record(run: requests, from: &index)
            }
            state.bytesInWire += batch.wireIn
            state.bytesOutWire += batch.wireOut
            state.bytesInUncompressed += batch.uncompressedIn
            state.bytesOutUncompressed += batch.uncompressedOut
            state.peakUnsentBytes = Swift.max(state.peakUnsentBytes, batch.peakUnsent)
        }
    }

    package func traffic(wireIn: Int, wireOut: Int, uncompressedIn: Int, uncompressedOut: Int, peakUnsent: Int) {
        guard wireIn | wireOut | uncompressedIn | uncompressedOut != 0 || peakUnsent > 0 else { return }
        state.withLock {
            $0.bytesInWire += wireIn
            $0.bytesOutWire += wireOut
            $0.bytesInUncompressed += uncompressedIn
            $0.bytesOutUncompressed += uncompressedOut
            $0.peakUnsentBytes = Swift.max($0.peakUnsentBytes, peakUnsent)
        }
    }

    package func watchStarted() {
        state.withLock {
            $0.watchesOpen += 1
            $0.watchesTotal += 1
        }
    }

    package func watchesEnded(_ count: Int) { state.withLock { $0.watchesOpen -= count } }

    /// Events pushed; counted per delivery, not per event, to keep the lock off the hot path.
    package func watchDelivered(events: Int, gaps: Int, resyncs: Int) {
        guard events | gaps | resyncs != 0 else { return }
        state.withLock {
            $0.watchEvents += events
            $0.watchGaps += gaps
            $0.watchResyncs += resyncs
        }
    }

    package var openWatches: Int { state.withLock { $0.watchesOpen } }

    /// Every counter as it is now, and the read cache's (for /metrics).
    var current: (state: State, cacheHits: Int, cacheMisses: Int) {
        (state.withLock { $0 }, cacheHits.load(ordering: .relaxed), cacheMisses.load(ordering: .relaxed))
    }

    package var openConnections: Int { state.withLock { $0.connectionsOpen } }
    package var peakUnsentBytes: Int { state.withLock { $0.peakUnsentBytes } }

    /// The STATS answer, without the store's part.
    package func json(now: UInt64, server: String) -> JSONObject {
        let s = state.withLock { $0 }
        var byOpcode = JSONObject()
        var totalRequests = 0
        var totalErrors = 0
        var byStatusAll: [Status: Int] = [:]
        for (opcode, operation) in s.operations.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            totalRequests += operation.count
            totalErrors += operation.errors
            var byStatus = JSONObject()
            for (status, count) in operation.byStatus {
                byStatus[status.name] = .int(Int64(count))
                byStatusAll[status, default: 0] += count
            }
            let h = operation.latency
            byOpcode[opcode.name] = .object([
                "count": .int(Int64(operation.count)), "errors": .int(Int64(operation.errors)),
                "byStatus": .object(byStatus),
                "latencyMicros": .object([
                    "count": .int(Int64(h.count)), "p50": .int(Int64(h.value(atPercentile: 50))),
                    "p90": .int(Int64(h.value(atPercentile: 90))), "p99": .int(Int64(h.value(atPercentile: 99))),
                    "max": .int(Int64(h.max)),
                ]),
            ])
        }
        var byStatusJSON = JSONObject()
        for (status, count) in byStatusAll.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            byStatusJSON[status.name] = .int(Int64(count))
        }
        let ratio = s.bytesOutWire > 0 ? Double(s.bytesOutUncompressed) / Double(s.bytesOutWire) : 1
        return [
            "server": .string(server),
            "uptimeMs": .int(Int64((now &- startedAt) / 1_000_000)),
            "connections": .object([
                "open": .int(Int64(s.connectionsOpen)), "total": .int(Int64(s.connectionsTotal)),
                "refused": .int(Int64(s.connectionsRefused)), "peakUnsentBytes": .int(Int64(s.peakUnsentBytes)),
            ]),
            "requests": .object([
                "total": .int(Int64(totalRequests)), "errors": .int(Int64(totalErrors)),
                "byStatus": .object(byStatusJSON), "byOpcode": .object(byOpcode),
            ]),
            "readCache": .object([
                "hits": .int(Int64(cacheHits.load(ordering: .relaxed))),
                "misses": .int(Int64(cacheMisses.load(ordering: .relaxed))),
                "afterSeqWaits": .int(Int64(afterSeqWaits.load(ordering: .relaxed))),
                "afterSeqFellThrough": .int(Int64(afterSeqFallThroughs.load(ordering: .relaxed))),
            ]),
            "watch": .object([
                "subscriptions": .int(Int64(s.watchesOpen)), "started": .int(Int64(s.watchesTotal)),
                "events": .int(Int64(s.watchEvents)), "gaps": .int(Int64(s.watchGaps)),
                "resyncs": .int(Int64(s.watchResyncs)),
            ]),
            "bytes": .object([
                "inWire": .int(Int64(s.bytesInWire)), "outWire": .int(Int64(s.bytesOutWire)),
                "inUncompressed": .int(Int64(s.bytesInUncompressed)),
                "outUncompressed": .int(Int64(s.bytesOutUncompressed)),
                "compressionRatio": .double((ratio * 1000).rounded() / 1000),
            ]),
        ]
    }
}
