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

    // MARK: Sending

    /// Sends what the connection may: up to the pipeline depth (closed loop) or what the schedule has made due.
    @inline(__always)
    func fill(_ c: Connection<D>, now: UInt64, interval: UInt64) {
        if phase.openLoop {
            while !c.free.isEmpty && c.nextIntended <= now && c.nextIntended < issueEnd && quotaLeft {
                issue(c, intended: c.nextIntended, now: now)
                c.nextIntended += interval
            }
        } else {
            while !c.free.isEmpty && now < issueEnd && quotaLeft {
                issue(c, intended: now, now: now)
            }
        }
    }

    var quotaLeft: Bool { quota.map { issuedMeasured < $0 } ?? true }

    @inline(__always)
    func issue(_ c: Connection<D>, intended: UInt64, now: UInt64) {
        let request = nextRequest()
        let slot = c.free.removeLast()
        let id = (c.sequence << 10) | UInt32(slot)
        c.sequence &+= 1
        c.driver.encode(request, requestID: id, into: &c.out)
        let measured = intended >= measureStart
        c.slots[slot] = Slot(
            intended: intended, sent: now, key: request.key, id: id, op: request.op, idKind: request.idKind,
            rev: request.rev,
            measured: measured, active: true)
        if D.inOrder {
            c.order[(c.orderHead + c.orderCount) % c.order.count] = slot
            c.orderCount += 1
        }
        c.inflight += 1
        inflight += 1
        if measured { issuedMeasured += 1 }
    }

    func nextRequest() -> Request {
        switch phase.kind {
        case .preloadDocuments: return Request(op: .create, key: nextSequential(), idKind: .preloaded)
        case .preloadBlobs: return Request(op: .blobPut, key: nextSequential(), idKind: .preloaded)
        case .measure: break
        }
        let op = operationTable[Int(rng.below(UInt64(operationTable.count)))]
        switch op {
        case .get, .replace, .patch, .search, .count:
            return Request(op: op, key: nextKey(phase.keyspace, phase.zipf), idKind: .preloaded)
        case .blobGet:
            return Request(op: op, key: nextKey(phase.blobKeyspace, phase.blobZipf), idKind: .preloaded)
        case .delete:
            if let key = deletable.popLast() { return Request(op: .delete, key: key, idKind: .created) }
            createdCounter += 1
            return Request(op: .create, key: createdCounter, idKind: .created)
        case .patchRev:
            if let (key, rev) = revisable.popLast() {
                return Request(op: .patchRev, key: key, idKind: .created, rev: rev)
            }
            createdCounter += 1
            return Request(op: .create, key: createdCounter, idKind: .created)
        case .create, .blobPut:
            createdCounter += 1
            return Request(op: op, key: createdCounter, idKind: .created)
        }
    }

    @inline(__always)
    func nextKey(_ n: UInt64, _ zipf: Zipf?) -> UInt64 {
        switch phase.keys {
        case .uniform: return rng.below(n)
        case .zipf: return zipf!.next(&rng)
        case .sequential: return nextSequential() % n
        }
    }

    /// Worker w of W takes w, w+W, w+2W...: together the workers cover 0, 1, 2... exactly once.
    @inline(__always)
    func nextSequential() -> UInt64 {
        defer { sequential += 1 }
        return sequential &* UInt64(workers) &+ UInt64(index)
    }

    /// Writes pending output; what the socket does not take now waits for POLLOUT.
    func flush(_ c: Connection<D>) {
        guard c.hasOutput else { return }
        if let tls = c.tls {
            do throws(BenchError) {
                try tls.flush(c.fd, &c.out, &c.outOffset)
            } catch {
                broken(c, error.message)
            }
            return
        }
        do throws(BenchError) {
            let offset = c.outOffset
            let outcome = try Sys.call("write") {
                c.out.withUnsafeBytes { write(c.fd, $0.baseAddress! + offset, $0.count - offset) }
            }
            if case .done(let n) = outcome {
                c.outOffset += n
                if c.outOffset == c.out.count {
                    c.out.removeAll(keepingCapacity: c.out.capacity <= 4 << 20)
                    c.outOffset = 0
                }
            }
        } catch {
            broken(c, error.message)
        }
    }

    // MARK: Receiving

    func readAnswers(_ c: Connection<D>) {
        while c.alive {
            let carried = c.partial.count
            if carried > 0 {
                c.partial.withUnsafeBytes { readBuffer.copyMemory(from: $0) }
                c.partial.removeAll(keepingCapacity: true)
            }
            let room = readBuffer.count - carried
            let outcome: Sys.Outcome
            do throws(BenchError) {
                let buffer = readBuffer
                if let tls = c.tls {
                    outcome = try tls.read(c.fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[carried...]))
                } else {
                    outcome = try Sys.call("read") { read(c.fd, buffer.baseAddress! + carried, room) }
                }
            } catch {
                broken(c, error.message)
                return
            }
            guard case .done(let n) = outcome else {
                if carried > 0 {
                    c.partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: readBuffer[0..<carried]))
                }
                return
            }
            if n == 0 {
                broken(c, "the server closed the connection")
                return
            }
            let total = carried + n
            let consumed: Int
            do throws(BenchError) {
                consumed = try c.driver.consume(
                    UnsafeRawBufferPointer(rebasing: readBuffer[0..<total]), into: &completions)
            } catch {
                completeAll(c, now: Sys.now())
                broken(c, error.message)
                return
            }
            if consumed < total {
                c.partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: readBuffer[consumed..<total]))
            }
            completeAll(c, now: Sys.now())
            // The socket is drained; poll says when there is more (but not of what a TLS session already holds).
            if n < room && (c.tls?.hasBufferedInput ?? false) == false { return }
        }
    }

    func completeAll(_ c: Connection<D>, now: UInt64) {
        for (id, code) in completions {
            let slot: Int
            if D.inOrder {
                guard c.orderCount > 0 else {
                    completions.removeAll(keepingCapacity: true)
                    return broken(c, "the server answered a request that was not sent")
                }
                slot = c.order[c.orderHead]
                c.orderHead = (c.orderHead + 1) % c.order.count
                c.orderCount -= 1
            } else {
                slot = Int(id & slotMask)
                guard slot < c.slots.count, c.slots[slot].active, c.slots[slot].id == id else {
                    completions.removeAll(keepingCapacity: true)
                    return broken(c, "the server answered request id \(id), which is not in flight")
                }
            }
            complete(c, slot: slot, code: code, now: now)
        }
        completions.removeAll(keepingCapacity: true)
    }

    @inline(__always)
    func complete(_ c: Connection<D>, slot: Int, code: UInt16, now: UInt64, answered: Bool = true) {
        let s = c.slots[slot]
        c.slots[slot].active = false
        c.free.append(slot)
        c.inflight -= 1
        inflight -= 1
        progressPending += 1
        let ok = code == ResultCode.ok || code == phase.tolerated
        if ok && s.idKind == .created {
            // A document goes to one list: a patch and a delete of it in flight together would collide.
            if s.op == .patchRev {
                revisable.append((s.key, s.rev + 1))
            } else if s.op == .create {
                if tracksRevisions { revisable.append((s.key, 1)) } else { deletable.append(s.key) }
            }
        }
        guard s.measured else { return }
        let op = s.op.rawValue
        stats[op].count += 1
        second.counts[op] += 1
        if !ok {
            stats[op].errorsByCode[code, default: 0] += 1
            second.errors += 1
        }
        guard answered else { return }
        let latency = now &- s.intended
        stats[op].latency.record(latency)
        if phase.openLoop { stats[op].uncorrected.record(now &- s.sent) }
        second.latency.record(latency)
        result.lastCompletion = now
    }

    /// Fails every request in flight with `code` (no answer: no latency is recorded).
    func failInflight(code: UInt16) {
        let now = Sys.now()
        for c in connections { failInflight(c, code: code, now: now) }
    }

    func failInflight(_ c: Connection<D>, code: UInt16, now: UInt64) {
        for slot in c.slots.indices where c.slots[slot].active {
            complete(c, slot: slot, code: code, now: now, answered: false)
        }
        c.orderCount = 0
    }

    func broken(_ c: Connection<D>, _ why: String) {
        guard c.alive else { return }
        c.alive = false
        close(c.fd)
        failInflight(c, code: ResultCode.connectionClosed, now: Sys.now())
        if result.connectionErrors.count < 10 { result.connectionErrors.append(why) }
    }

    func publishSecond(endingAt tick: UInt64) {
        guard tick > measureStart else { return }
        second.second = Int((tick - measureStart) / 1_000_000_000)
        second.duration = 1
        aggregator.publish(second)
        second = SecondSample(second: second.second + 1, duration: 1)
    }
}
