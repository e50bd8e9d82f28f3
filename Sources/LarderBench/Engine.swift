#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CEpoll
import LarderIO

/// One phase of load (the preloads, then the measured run): read-only, shared by its workers.
struct Phase: Sendable {
    enum Kind: Sendable { case measure, preloadDocuments, preloadBlobs }
    var kind: Kind
    var connections: Int
    var pipeline: Int
    var threads: Int
    var mix: OperationMix
    var keys: KeyDistribution
    var keyspace: UInt64
    var blobKeyspace: UInt64
    var zipf: Zipf?
    var blobZipf: Zipf?
    /// Open loop: requests per second across all connections.
    var rate: Double?
    /// Measured requests across all workers; nil for a timed phase.
    var requests: Int?
    var duration: Double?
    var warmup: Double
    var timeout: Double
    var seed: UInt64
    /// A status that counts as success (CONFLICT while preloading: the data is already there).
    var tolerated: UInt16?

    var openLoop: Bool { rate != nil }
}

/// The requests in flight on one connection: a slot per request, at most `pipeline`.
struct Slot {
    var intended: UInt64 = 0
    var sent: UInt64 = 0
    var key: UInt64 = 0
    var id: UInt32 = 0
    var op = BenchOperation.get
    var idKind = IDKind.created
    var rev: Int64 = 0
    var measured = false
    var active = false
}

/// One connection of a worker: the socket, its protocol state, output not yet written, and the requests in flight.
final class Connection<D: Driver> {
    let fd: Int32
    /// Position among all connections of the phase (staggers the open-loop schedule).
    let globalIndex: Int
    var driver: D
    var out: [UInt8] = []
    var outOffset = 0
    /// Bytes of an answer's header that arrived without the rest (never more than a header or a RESP line).
    var partial: [UInt8] = []
    var slots: [Slot]
    var free: [Int]
    /// Slots in send order, for in-order protocols: a ring of `slots.count`.
    var order: [Int]
    var orderHead = 0
    var orderCount = 0
    var sequence: UInt32 = 0
    var inflight = 0
    var nextIntended: UInt64 = 0
    var alive = true
    /// The TLS session, when the run uses TLS (`BenchTLS`).
    let tls: BenchTLS?

    init(fd: Int32, globalIndex: Int, driver: D, pipeline: Int) {
        self.fd = fd
        tls = BenchTLS.take(fd)
        self.globalIndex = globalIndex
        self.driver = driver
        slots = [Slot](repeating: Slot(), count: pipeline)
        free = Array((0..<pipeline).reversed())
        order = [Int](repeating: 0, count: pipeline)
        out.reserveCapacity(4096)
    }

    var hasOutput: Bool { out.count > outOffset || tls?.hasCiphertext == true }
}

/// A load-generator thread: a poll(2) loop over its share of the connections. Everything here is confined to the
/// thread that runs it; the only shared state is the `Aggregator`.
final class Worker<D: Driver> {
    let index: Int
    let workers: Int
    let phase: Phase
    let aggregator: Aggregator
    let connections: [Connection<D>]
    var rng: SplitMix64
    var stats = [OperationStats](repeating: OperationStats(), count: BenchOperation.allCases.count)
    var second: SecondSample
    var result = WorkerResult()
    /// Documents this run created and has not deleted: what `delete` removes.
    var deletable: [UInt64] = []
    /// Documents this run created, with the revision each is at: what `patchRev` patches (one request at a time each).
    var revisable: [(key: UInt64, rev: Int64)] = []
    var createdCounter: UInt64 = 0
    var sequential: UInt64 = 0
    var quota: Int?
    var issuedMeasured = 0
    var measureStart: UInt64 = 0
    var issueEnd: UInt64 = .max
    var inflight = 0
    let readBuffer: UnsafeMutableRawBufferPointer
    var completions: [(UInt32, UInt16)] = []
    let operationTable: [BenchOperation]
    /// Whether the mix has `patchRev`: documents created then go to `revisable` rather than `deletable`.
    let tracksRevisions: Bool
    let slotMask: UInt32 = 1023
    var progressPending = 0

    init(index: Int, workers: Int, phase: Phase, aggregator: Aggregator, connections: [Connection<D>]) {
        self.index = index
        self.workers = workers
        self.phase = phase
        self.aggregator = aggregator
        self.connections = connections
        rng = SplitMix64(seed: phase.seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
        // Sparse seeds make nearby streams; burn a few values so worker 0 and 1 diverge at once.
        for _ in 0..<4 { _ = rng.next() }
        second = SecondSample(second: 1, duration: 1)
        if let requests = phase.requests {
            quota = requests / workers + (index < requests % workers ? 1 : 0)
        }
        readBuffer = .allocate(byteCount: 256 << 10, alignment: 16)
        // A lookup table of 1000 entries in proportion to the weights: one random draw per request.
        var table: [BenchOperation] = []
        let total = phase.mix.total
        for op in phase.mix.operations {
            let share = max(1, Int((Double(phase.mix[op]) / Double(total) * 1000).rounded()))
            table += [BenchOperation](repeating: op, count: share)
        }
        operationTable = table
        tracksRevisions = phase.mix.contains(.patchRev)
        completions.reserveCapacity(256)
    }

    deinit {
        readBuffer.deallocate()
        for c in connections where c.alive { close(c.fd) }
    }

    // MARK: The loop

    /// Sets the measured window from `start` and, in open loop, each connection's first intended send (staggered
    /// across all the phase's connections); returns the time between one connection's sends (0 in closed loop).
    func schedule(start: UInt64) -> UInt64 {
        measureStart = start + UInt64(phase.warmup * 1e9)
        if let duration = phase.duration { issueEnd = measureStart + UInt64(duration * 1e9) }
        guard let rate = phase.rate else { return 0 }
        for c in connections { c.nextIntended = start + UInt64(Double(c.globalIndex) / rate * 1e9) }
        return UInt64(Double(phase.connections) / rate * 1e9)
    }

    /// How long before a send is due the loop stops sleeping and polls without waiting: a wake-up from ppoll comes a
    /// few to tens of microseconds late on a busy machine, and that lateness would be counted as latency.
    static var spinNanoseconds: UInt64 { 50_000 }

    func run(start: UInt64) -> WorkerResult {
        let interval = schedule(start: start)
        // Sleeps end when asked (1 us), not up to 50 us later: the open loop's sends are due to the microsecond.
        if phase.openLoop { _ = larder_set_timer_slack_ns(1_000) }
        var nextTick = measureStart + 1_000_000_000
        var issuing = quota.map { $0 > 0 } ?? true
        var drainDeadline: UInt64 = .max
        var pollfds = [pollfd](repeating: pollfd(), count: connections.count)
        var firstPass = true
        while true {
            let now = Sys.now()
            if issuing && (now >= issueEnd || (quota.map { issuedMeasured >= $0 } ?? false)) {
                issuing = false
                drainDeadline = now + UInt64(phase.timeout * 1e9)
            }
            if issuing && (phase.openLoop || firstPass) {
                for c in connections where c.alive {
                    fill(c, now: now, interval: interval)
                    flush(c)
                }
                firstPass = false
            }
            // Whole seconds while the load runs; what comes after it stops goes into the final partial sample.
            while now >= nextTick && issuing {
                publishSecond(endingAt: nextTick)
                nextTick += 1_000_000_000
            }
            if progressPending > 0 {
                aggregator.addProgress(progressPending)
                progressPending = 0
            }
            if !issuing && inflight == 0 { break }
            if !issuing && now >= drainDeadline {
                failInflight(code: ResultCode.timeout)
                break
            }
            if !connections.contains(where: \.alive) { break }

            var wake = issuing ? min(nextTick, issueEnd) : drainDeadline
            var sendDue = false
            if issuing && phase.openLoop {
                for c in connections where c.alive && !c.free.isEmpty && c.nextIntended < wake {
                    wake = c.nextIntended
                    sendDue = true
                }
            }
            // Nanoseconds (ppoll), not poll's milliseconds rounded up, which sent requests up to a millisecond late
            // and counted the lateness as latency. Just before a send is due, polls without sleeping.
            let margin = sendDue ? Self.spinNanoseconds : 0
            let timeoutNs = wake > now + margin ? Int64(min(wake - now - margin, 1_000_000_000)) : 0
            for (i, c) in connections.enumerated() {
                pollfds[i].fd = c.alive ? c.fd : -1
                pollfds[i].events = Int16(POLLIN) | (c.hasOutput ? Int16(POLLOUT) : 0)
                pollfds[i].revents = 0
            }
            let ready = larder_poll_ns(&pollfds, UInt(pollfds.count), timeoutNs)
            if ready <= 0 { continue }
            for (i, c) in connections.enumerated() where pollfds[i].revents != 0 && c.alive {
                let events = pollfds[i].revents
                if events & Int16(POLLOUT) != 0 { flush(c) }
                if events & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0 {
                    readAnswers(c)
                    if issuing && c.alive && !phase.openLoop {
                        fill(c, now: Sys.now(), interval: interval)
                    }
                    if c.alive { flush(c) }
                }
            }
        }
        let end = Sys.now()
        if end > nextTick - 1_000_000_000 && second.count + second.errors > 0 {
            second.duration = Double(end - (nextTick - 1_000_000_000)) / 1e9
            aggregator.publish(second)
        }
        aggregator.addProgress(progressPending)
        result.operations = stats
        result.issuedMeasured = issuedMeasured
        return result
    }
}
