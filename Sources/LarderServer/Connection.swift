#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Synchronization
import LarderStore
import LarderSync
import LarderWire

/// Monotonic milliseconds for the state machines.
@inline(__always)
func monotonicMs() -> UInt64 { DispatchTime.now().uptimeNanoseconds / 1_000_000 }

/// An event loop thread that owns a set of connections, their read buffer and their timer tick.
final class IOShard: EventLoopHandler, @unchecked Sendable {
    let loop: EventLoop
    /// Only touched on `loop`.
    var connections: [ObjectIdentifier: Connection] = [:]
    /// One read buffer for every connection of the shard: connections never read at the same time on one loop, and
    /// 10,000 idle connections then cost no buffer memory.
    let readBuffer: UnsafeMutableRawBufferPointer
    /// Only used on `loop`.
    let encoders: SharedEncoders
    /// The connections holding a subscription (only on `loop`).
    var watchers: [ObjectIdentifier: Connection] = [:]
    /// The newest change published to this shard (only on `loop`). Changes reach a shard in commit order, so every
    /// change up to it has either reached the live subscriptions or is in the log for those catching up.
    var publishedSeq: Int64

    /// The point reads (GET, BLOB_HEAD) answered on `loop` during one turn share one read snapshot of the store while
    /// nothing commits; it is given back at the end of the turn, before the loop waits again.
    private let store: Router.Store
    private var turnReads: (any PointReads)?
    var turnReadsOpen = false

    /// Only on `loop`.
    var pointReads: any PointReads {
        if !turnReadsOpen {
            turnReadsOpen = true
            loop.flushAtEndOfTurn(self)
        }
        if let turnReads { return turnReads }
        let reads: any PointReads =
            readCache.isEnabled ? CachedPointReads(shard: self, reads: store.pointReads()) : store.pointReads()
        turnReads = reads
        return reads
    }

    private let stats: ServerStats
    /// Recent GET answers (only on `loop`); see `ReadCache`.
    var readCache: ReadCache
    /// Counted on `loop`, summed for STATS.
    var cacheHits = 0
    var cacheMisses = 0
    /// Change batches published to this shard so far (writer thread), and applied to the read cache (loop).
    private let published = Atomic<Int>(0)
    private var applied = 0
    var publishedBatches: Int { published.load(ordering: .acquiring) }

    /// Applies to the read cache every change published so far (and pushes it to the subscriptions, as the scheduled
    /// drain would); returns the batch count it is current with. On `loop`.
    func applyPublishedChanges() -> Int {
        let current = published.load(ordering: .acquiring)
        if current != applied { drain() }
        return current
    }

    func readable() {}
    func writable() {}
    func endOfTurn() {
        turnReadsOpen = false
        turnReads?.end()
        if cacheHits | cacheMisses != 0 {
            stats.readCache(hits: cacheHits, misses: cacheMisses)
            cacheHits = 0
            cacheMisses = 0
        }
    }

    init(
        index: Int, configuration: ConnectionStateMachine.Configuration, store: Router.Store, stats: ServerStats,
        readCacheBytes: Int = 0, publishedSeq: Int64 = 0, maxInboxChanges: Int = IOShard.defaultMaxInboxChanges
    ) {
        self.maxInboxChanges = max(1, maxInboxChanges)
        self.store = store
        self.stats = stats
        readCache = ReadCache(maxBytes: readCacheBytes)
        encoders = SharedEncoders(configuration: configuration)
        loop = EventLoop(name: "larder.io.\(index)")
        readBuffer = .allocate(byteCount: 64 << 10, alignment: 16)
        self.publishedSeq = publishedSeq
    }

    /// Committed changes waiting for `loop`, whether a drain is scheduled, and the last change dropped since the
    /// last drain (under the mutex: the writer queue appends, `loop` drains).
    private let inbox = Locked<(pending: [ChangeEntry], scheduled: Bool, droppedThrough: Int64?)>(([], false, nil))
    /// The most changes the inbox holds for a loop that has fallen behind (an overloaded server): past it they are
    /// dropped, and the next drain ends the shard's live subscriptions with a gap (each resumes from its own last
    /// change with `since`) and empties its read cache, instead of the inbox growing without bound.
    let maxInboxChanges: Int
    static let defaultMaxInboxChanges = 100_000
    /// Times the inbox overflowed (for tests and STATS).
    let inboxOverflows = Atomic<Int>(0)

    /// Called on the store's writer queue: queues a batch and schedules a drain unless one is pending. Batches that
    /// arrive while the shard is busy are pushed together, so a connection gets one write for many commits when the
    /// fan-out falls behind, rather than one per commit.
    func publish(_ entries: [ChangeEntry]) {
        let limit = maxInboxChanges
        let schedule = inbox.withLock { inbox -> Bool in
            if inbox.droppedThrough != nil || inbox.pending.count + entries.count > limit {
                // Fallen too far behind: what is pending goes too; the drain makes up for it (see `drain`).
                let last = entries.last?.seq ?? inbox.pending.last?.seq
                if inbox.droppedThrough == nil { inboxOverflows.add(1, ordering: .relaxed) }
                inbox.droppedThrough = max(inbox.droppedThrough ?? 0, last ?? 0)
                inbox.pending = []
            } else {
                inbox.pending += entries
            }
            defer { inbox.scheduled = true }
            return !inbox.scheduled
        }
        // After the entries are in the inbox, before the writer acknowledges the write (see `ReadCache`).
        published.add(1, ordering: .releasing)
        if schedule { loop.async { self.drain() } }
    }

    /// On `loop`: every change published so far, in commit order, to every live subscription of the shard.
    private func drain() {
        let current = published.load(ordering: .acquiring)
        let (entries, dropped) = inbox.withLock { inbox -> ([ChangeEntry], Int64?) in
            inbox.scheduled = false
            defer {
                inbox.pending = []
                inbox.droppedThrough = nil
            }
            return (inbox.pending, inbox.droppedThrough)
        }
        // Every batch counted in `current` was in the inbox before it was counted, so it is in `entries` (or was
        // dropped, and `dropped` says so).
        applied = current
        if let dropped {
            // Which documents changed is lost: no cached answer can be trusted, and no live subscription can be fed.
            readCache.removeAll()
            publishedSeq = max(publishedSeq, dropped)
            for connection in watchers.values { connection.endLiveSubscriptionsWithGap() }
        }
        guard let last = entries.last?.seq else { return }
        for entry in entries { readCache.apply(entry) }
        publishedSeq = max(publishedSeq, last)
        guard !watchers.isEmpty else { return }
        let changes = PreparedChanges(entries)
        for connection in watchers.values { connection.deliver(changes) }
    }

    deinit { readBuffer.deallocate() }

    func startTimer(intervalMs: Int) {
        loop.async { [self] in
            loop.setTick(intervalMs: intervalMs) { [unowned self] in
                let now = monotonicMs()
                for connection in connections.values { connection.tick(now: now) }
            }
        }
    }

    /// On `loop`.
    func stopTimer() {
        loop.cancelTick()
    }
}

/// What connections share: the router, the counters, the log and the in-flight total.
final class ServerContext: Sendable {
    let router: Router
    let stats: ServerStats
    let logger: Logger
    let machineConfiguration: ConnectionStateMachine.Configuration
    /// Requests in flight on every connection (for shutdown).
    let inFlight = AtomicCounter()

    init(router: Router, stats: ServerStats, logger: Logger, machineConfiguration: ConnectionStateMachine.Configuration) {
        self.router = router
        self.stats = stats
        self.logger = logger
        self.machineConfiguration = machineConfiguration
    }
}

/// The side-effect shell around one `ConnectionStateMachine`: a non-blocking socket watched by its shard's event
/// loop. Every member is touched only on that loop's thread.
final class Connection: EventLoopHandler, @unchecked Sendable {
    let fd: Int32
    let id: Int
    let peer: String
    private let shard: IOShard
    private let context: ServerContext
    private var machine: ConnectionStateMachine
    /// What the loop watches for.
    private var wantsRead = true
    private var wantsWrite = false
    private var closing = false
    private var reportedOut = 0
    private var reportedIn = 0
    private var wireIn = 0
    private var wireOut = 0
    private var reportedPeak = 0
    /// Point reads seen, for timing one in 16.
    private var untimedPointReads = 0
    /// A flush is asked for at the end of the loop's turn: the answers produced in one turn share a `write(2)`.
    private var flushPending = false
    /// Where this connection's writes are parsed and handed to the store, in order (made at the first write).
    private var writeLaneStorage: DispatchQueue?
    private var writeLane: DispatchQueue {
        if let writeLaneStorage { return writeLaneStorage }
        let lane = context.router.makeWriteLane()
        writeLaneStorage = lane
        return lane
    }
    /// The change feed's subscriptions, by id.
    private var subscriptions: [UInt32: Subscription] = [:]
    private var lastSubscriptionID: UInt32 = 0
    /// Changes read from the log per catch-up page.
    static let catchUpPageSize = 256
    /// Output of at least this many bytes (a blob) is written by a sender thread instead of the loop, which goes on
    /// serving its other connections: on loopback the writer of a large send also does most of the receiver's TCP work.
    static let offloadBytes = 256 << 10
    static let senders = DispatchQueue(label: "larder.server.send", qos: .userInitiated, attributes: .concurrent)
    /// Whether a sender is writing this connection's output (the loop neither writes nor closes the descriptor then),
    /// and how many of the unsent bytes it holds (not counted against a subscription's buffer).
    private var sending = false
    private var bytesWithSender = 0
    /// Who closes the descriptor: set (under its lock) when `close` ran while a sender was writing; the sender then
    /// closes it as it finishes, whether or not the loop still runs.
    private let descriptor = Locked(DescriptorState())
    private struct DescriptorState {
        var senderActive = false
        var closeWhenSenderEnds = false
    }

    /// The TLS layer between the socket and the machine, on a TLS port (TLSTransport.swift).
    private let tls: TLSTransport?

    init(fd: Int32, id: Int, peer: String, shard: IOShard, context: ServerContext, tls: TLSTransport? = nil) {
        self.fd = fd
        self.id = id
        self.peer = peer
        self.shard = shard
        self.context = context
        self.tls = tls
        machine = ConnectionStateMachine(
            configuration: context.machineConfiguration, now: monotonicMs(), encoders: shard.encoders)
        machine.isTLS = tls != nil
    }

    /// Starts reading; call on the shard's loop.
    func start() {
        shard.connections[ObjectIdentifier(self)] = self
        shard.loop.register(fd, handler: self)
    }

    var unsentBytes: Int { machine.unsentBytes }

    func tick(now: UInt64) {
        if let tls, !tls.isEstablished, !closing,
            now >= tls.openedAt + UInt64(context.machineConfiguration.limits.frameTimeoutMs)
        {
            return perform(machine.forceClose(.frameTimeout))  // the handshake is held to the frame deadline
        }
        perform(machine.timerFired(now: now))
    }

    func beginShutdown() {
        machine.beginShutdown()
    }

    func forceClose(_ reason: CloseReason) {
        perform(machine.forceClose(reason))
    }

    func readable() {
        guard !closing else { return }
        let result: IOResult
        do throws(IOError) {
            result = try Socket.read(fd, into: shard.readBuffer)
        } catch {
            return perform(machine.forceClose(.ioError(error.description)))
        }
        switch result {
        case .wouldBlock:
            return
        case .done(0):
            perform(machine.readEOF(now: shard.loop.now))
        case .done(let count) where tls != nil:
            wireIn += count
            tlsReceived(count)
        case .done(let count):
            wireIn += count
            perform(machine.bytesReceived(UnsafeRawBufferPointer(rebasing: shard.readBuffer[0..<count]), now: shard.loop.now))
        }
        reportTraffic()
    }

    /// `count` bytes of ciphertext in the read buffer: the handshake, then the plaintext to the machine.
    private func tlsReceived(_ count: Int) {
        guard let tls else { return }
        switch tls.received(UnsafeRawBufferPointer(rebasing: shard.readBuffer[0..<count])) {
        case .proceed:
            if tls.isEstablished { readPlaintext() }
            flush()
        case .plainLarderClient:
            _ = TLSTransport.plainClientRefusal.withUnsafeBytes { try? Socket.write(fd, $0) }
            perform(machine.forceClose(.protocolError(.protocolError)))
        case .notTLS:
            perform(machine.forceClose(.ioError("not a TLS client (no handshake record)")))
        case .failed(let message):
            _ = try? tls.flush(fd)  // the alert, so the client learns why
            perform(machine.forceClose(.ioError(message)))
        }
    }

    /// Hands the machine the plaintext the TLS session holds, while it reads.
    private func readPlaintext() {
        guard let tls else { return }
        while !closing && !machine.readingPaused {
            switch tls.engine.read(into: shard.readBuffer) {
            case .bytes(let count):
                perform(machine.bytesReceived(UnsafeRawBufferPointer(rebasing: shard.readBuffer[0..<count]), now: shard.loop.now))
                // Nothing more to decrypt: another SSL_read would only set up and free its buffers to say so.
                if tls.engine.pendingInput == 0 { return }
            case .needsInput:
                return
            case .closed:
                return perform(machine.readEOF(now: shard.loop.now))
            case .failed(let error):
                return perform(machine.forceClose(.ioError(error.message)))
            }
        }
    }

    func writable() { flush() }

    func endOfTurn() {
        flushPending = false
        flush()
    }

    private func flush() {
        guard !sending else { return }  // the sender's completion flushes what queued meanwhile
        if machine.unsentBytes >= Connection.offloadBytes && !closing && tls == nil { return offload() }
        var actions: [ConnectionStateMachine.Action] = []
        writeNow(&actions)
        if machine.unsentBytes == 0 && tls?.hasOutput != true { setWriting(false) }
        perform(actions)
        reportTraffic()
        // Output drained: subscriptions replaying the log may read their next page.
        continueCatchUps()
    }

    /// Writes what the socket takes now; the machine's resulting actions are appended to `actions`, not performed.
    private func writeNow(_ actions: inout [ConnectionStateMachine.Action]) {
        if let tls { return writeEncrypted(tls, &actions) }
        while !closing && !sending && machine.unsentBytes > 0 {
            let result: Result<IOResult, IOError> = machine.withUnsentBuffers { buffers in
                do throws(IOError) {
                    return .success(try Socket.writev(fd, buffers))
                } catch {
                    return .failure(error)
                }
            }
            switch result {
            case .failure(let error):
                actions += machine.forceClose(.ioError(error.description))
                return
            case .success(.wouldBlock):
                setWriting(true)
                return
            case .success(.done(let count)):
                wireOut += count
                actions += machine.writeCompleted(count, now: shard.loop.now)
            }
        }
    }

    /// `writeNow` through TLS: the ciphertext waiting goes first, then the next batch of output is encrypted.
    private func writeEncrypted(_ tls: TLSTransport, _ actions: inout [ConnectionStateMachine.Action]) {
        while !closing && (tls.hasOutput || (machine.unsentBytes > 0 && tls.isEstablished)) {
            if tls.hasOutput {
                let written: Int?
                do throws(IOError) {
                    written = try tls.flush(fd)
                } catch {
                    actions += machine.forceClose(.ioError(error.description))
                    return
                }
                wireOut += written ?? 0
                if tls.hasOutput {
                    setWriting(true)
                    return
                }
            }
            guard machine.unsentBytes > 0 else { return }
            switch machine.withUnsentOutput({ tls.encrypt($0) }) {
            case .failure(let error):
                actions += machine.forceClose(.ioError(error.message))
                return
            case .success(let count):
                actions += machine.writeCompleted(count, now: shard.loop.now)
            }
        }
    }

    /// Hands the output queued so far to a sender thread, which writes until it is all written or the socket is full,
    /// then reports back to the loop (`sent`). The machine keeps queueing answers after it meanwhile.
    private func offload() {
        sending = true
        setWriting(false)
        let (buffers, offset) = machine.unsentSnapshot()
        let total = buffers.reduce(0) { $0 + $1.count } - offset
        bytesWithSender = total
        let fd = self.fd
        descriptor.withLock { $0.senderActive = true }
        Connection.senders.async { [self] in
            var written = 0
            var failure: IOError?
            var full = false
            // Stops early once the connection is closed: its descriptor is only waiting for this sender.
            while written < total && failure == nil && !full && !descriptor.withLock({ $0.closeWhenSenderEnds }) {
                do throws(IOError) {
                    switch try Socket.writev(fd, buffers, offsetBy: offset + written) {
                    case .wouldBlock: full = true
                    case .done(let count): written += count
                    }
                } catch {
                    failure = error
                }
            }
            let closeNow = descriptor.withLock { state -> Bool in
                state.senderActive = false
                return state.closeWhenSenderEnds
            }
            if closeNow { Socket.close(fd) }
            shard.loop.async { [self, written, failure, full] in sent(written, failure: failure, full: full) }
        }
    }

    /// A sender's report, on the loop.
    private func sent(_ count: Int, failure: IOError?, full: Bool) {
        sending = false
        bytesWithSender = 0
        guard !closing else { return }
        wireOut += count
        var actions = count > 0 ? machine.writeCompleted(count, now: shard.loop.now) : []
        if let failure {
            actions += machine.forceClose(.ioError(failure.description))
        } else if full {
            setWriting(true)
        }
        perform(actions)
        if !full && failure == nil && !closing { flush() } else { reportTraffic() }
    }

    private func setWriting(_ on: Bool) {
        guard !closing, wantsWrite != on else { return }
        wantsWrite = on
        shard.loop.setInterest(fd, read: wantsRead, write: wantsWrite)
    }

    private func setReading(_ on: Bool) {
        guard !closing, wantsRead != on else { return }
        wantsRead = on
        shard.loop.setInterest(fd, read: wantsRead, write: wantsWrite)
    }

    private func execute(_ frame: Frame) {
        if frame.opcode == .watch || frame.opcode == .unwatch { return executeWatch(frame) }
        // A point read answered here takes a few microseconds, and two clock reads were a noticeable share of it:
        // one in 16 is timed for STATS (all are counted). Everything else is timed.
        var timed = true
        if Router.isInline(frame.opcode) {
            untimedPointReads &+= 1
            timed = untimedPointReads & 15 == 0
        }
        let started = timed ? DispatchTime.now().uptimeNanoseconds : 0
        context.inFlight.add(1)
        let logger = context.logger
        logger.debug("conn \(id) request \(frame.requestID) \(frame.opcode.name)")
        if let reply = context.router.handleInline(frame, reads: shard.pointReads) { return completed(reply, started: started) }
        context.router.handle(frame, writes: writeLane) { [self] reply in
            shard.loop.async { [self] in completed(reply, started: started) }
        }
    }

    /// A request's answer is ready; on the shard's loop.
    private func completed(_ reply: Reply, started: UInt64) {
        let reply = machine.grant?.screen(reply) ?? reply
        let micros = started == 0 ? nil : (DispatchTime.now().uptimeNanoseconds &- started) / 1000
        context.stats.request(reply.opcode, reply.status, latencyMicros: micros)
        context.inFlight.add(-1)
        if reply.status != .ok {
            context.logger.debug("conn \(id) request \(reply.requestID) \(reply.opcode.name) -> \(reply.status.name)")
        }
        perform(machine.requestCompleted(reply, now: shard.loop.now))
    }

    /// The one place where the state machine's actions become side effects.
    private func perform(_ actions: [ConnectionStateMachine.Action]) {
        for action in actions {
            switch action {
            case .execute(let frame):
                execute(frame)
            case .flush:
                if !flushPending && !closing {
                    flushPending = true
                    shard.loop.flushAtEndOfTurn(self)
                }
            case .pauseReading, .resumeReading:
                // The machine's own flag decides, not the action's order: a nested flush may already have resumed.
                setReading(!machine.readingPaused)
                // Plaintext the TLS session already holds wakes no epoll: read it now.
                if let tls, !machine.readingPaused, tls.engine.pendingInput > 0 {
                    shard.loop.async { [self] in readPlaintext() }
                }
            case .record(let opcode, let status):
                context.stats.request(opcode, status, latencyMicros: nil)
            case .close(let reason):
                close(reason)
            }
        }
    }

    /// Adds this connection's traffic since the last report to STATS: once per read and per flush (and at close),
    /// not per request, since it takes the counters' lock.
    private func reportTraffic() {
        let peak = machine.peakUnsentBytes > reportedPeak ? machine.peakUnsentBytes : 0
        context.stats.traffic(
            wireIn: wireIn, wireOut: wireOut, uncompressedIn: machine.uncompressedBytesIn - reportedIn,
            uncompressedOut: machine.uncompressedBytesOut - reportedOut, peakUnsent: peak)
        wireIn = 0
        wireOut = 0
        reportedIn = machine.uncompressedBytesIn
        reportedOut = machine.uncompressedBytesOut
        reportedPeak = max(reportedPeak, machine.peakUnsentBytes)
    }

    private func close(_ reason: CloseReason) {
        guard !closing else { return }
        closing = true
        let level: LogLevel
        switch reason {
        case .peerClosed, .shutdown: level = .debug
        default: level = .info
        }
        context.logger.log(level, "conn \(id) from \(peer) closed: \(reason)")
        reportTraffic()
        // Out of the loop before the number can be reused by the next accepted connection; nothing touches the
        // descriptor after this (every I/O path checks `closing`).
        shard.loop.deregister(fd)
        // A sender still writing keeps the descriptor; it closes it as it ends.
        let senderHasIt = descriptor.withLock { state -> Bool in
            if state.senderActive { state.closeWhenSenderEnds = true }
            return state.senderActive
        }
        if !senderHasIt {
            tls?.finish(fd)
            Socket.close(fd)
        }
        shard.connections[ObjectIdentifier(self)] = nil
        if !subscriptions.isEmpty {
            context.stats.watchesEnded(subscriptions.count)
            subscriptions.removeAll()
            watchingChanged()
        }
        context.stats.connectionClosed()
    }

    // MARK: The change feed

    private var limits: Limits { context.machineConfiguration.limits }

    /// WATCH and UNWATCH are answered here, on the shard's loop, because they change this connection's subscriptions:
    /// the answer is queued before any event of the subscription can be.
    private func executeWatch(_ frame: Frame) {
        let started = DispatchTime.now().uptimeNanoseconds
        let reply = frame.opcode == .watch ? watch(frame) : unwatch(frame)
        context.stats.request(
            reply.opcode, reply.status, latencyMicros: (DispatchTime.now().uptimeNanoseconds &- started) / 1000)
        if reply.status != .ok {
            context.logger.debug("conn \(id) request \(reply.requestID) \(reply.opcode.name) -> \(reply.status.name)")
        }
        perform(machine.requestCompleted(reply, now: shard.loop.now))
        continueCatchUps()
    }

    private func watch(_ frame: Frame) -> Reply {
        do throws(LarderError) {
            guard frame.binary.isEmpty else { throw LarderError(.invalidArgument, "WATCH takes no binary part") }
            let request = try WatchRequest(json: frame.jsonObject())
            if let collection = request.collection { try SQLiteStore.validateCollection(collection) }
            guard subscriptions.count < limits.maxWatches else {
                throw LarderError(
                    .resourceExhausted, "this connection already holds \(limits.maxWatches) subscriptions; "
                        + "UNWATCH one or open another connection", details: ["limit": .int(Int64(limits.maxWatches))])
            }
            // Read before the subscription exists: every change after it is either published to this shard later
            // (and pushed live) or, with `since`, read from the log.
            let last = context.router.store.lastChangeSeq
            lastSubscriptionID = lastSubscriptionID == UInt32.max ? 1 : lastSubscriptionID + 1
            let subscriptionID = lastSubscriptionID
            subscriptions[subscriptionID] = Subscription(
                id: subscriptionID, collection: request.collection, filter: request.filter, idsOnly: request.idsOnly,
                lastSeq: request.since ?? last, state: request.since == nil ? .live : .catchingUp,
                checkResync: request.since != nil, allowed: machine.grant?.collections)
            watchingChanged()
            context.stats.watchStarted()
            return Reply(
                opcode: .watch, requestID: frame.requestID,
                json: WatchResponse(subscription: subscriptionID, seq: last).json.bytes)
        } catch {
            return Reply(opcode: .watch, requestID: frame.requestID, error: error)
        }
    }

    private func unwatch(_ frame: Frame) -> Reply {
        do throws(LarderError) {
            guard frame.binary.isEmpty else { throw LarderError(.invalidArgument, "UNWATCH takes no binary part") }
            let request = try UnwatchRequest(json: frame.jsonObject())
            guard subscriptions.removeValue(forKey: request.subscription) != nil else {
                throw LarderError(
                    .notFound, "no subscription \(request.subscription) on this connection", field: "subscription")
            }
            watchingChanged()
            context.stats.watchesEnded(1)
            return Reply(
                opcode: .unwatch, requestID: frame.requestID,
                json: UnwatchResponse(subscription: request.subscription).json.bytes)
        } catch {
            return Reply(opcode: .unwatch, requestID: frame.requestID, error: error)
        }
    }

    /// Keeps the shard's list of watching connections and the machine's idle rule in step with `subscriptions`.
    private func watchingChanged() {
        let watching = !subscriptions.isEmpty
        machine.isWatching = watching
        shard.watchers[ObjectIdentifier(self)] = watching && !closing ? self : nil
    }

    /// Committed changes, on the shard's loop: pushed to each live subscription they concern, in commit order. A
    /// subscription whose connection holds more than `maxWatchBufferBytes` unsent when an event is due gets a gap
    /// event and ends; the writer and the other connections never wait for it.
    func deliver(_ changes: PreparedChanges) {
        guard !closing, machine.canPush else { return }
        let bound = limits.maxWatchBufferBytes
        var actions: [ConnectionStateMachine.Action] = []
        var sent = 0
        var gaps = 0
        subscriptions: for subscriptionID in subscriptions.keys.sorted() {
            guard var subscription = subscriptions[subscriptionID], subscription.state == .live else { continue }
            var overflowed = false
            for index in changes.entries.indices where changes.entries[index].seq > subscription.lastSeq {
                let match = changes.match(index, subscription)
                if match != .no {
                    // Offer the socket what is queued before calling the buffer full (not while a sender writes:
                    // what it holds is on its way and does not count).
                    if machine.unsentBytes - bytesWithSender > bound { writeNow(&actions) }
                    guard machine.canPush else { break subscriptions }
                    if machine.unsentBytes - bytesWithSender > bound {
                        overflowed = true
                        break
                    }
                    let json = changes.event(
                        index, for: subscriptionID, idsOnly: subscription.idsOnly, matches: match == .yes)
                    actions += machine.push(opcode: .event, requestID: subscriptionID, json: json)
                    sent += 1
                }
                subscription.lastSeq = changes.entries[index].seq
            }
            if overflowed {
                subscriptions[subscriptionID] = nil
                let json = EventEncoder.gap(subscription: subscriptionID, seq: subscription.lastSeq)
                actions += machine.push(opcode: .event, requestID: subscriptionID, json: json)
                gaps += 1
                context.logger.info("conn \(id) subscription \(subscriptionID) fell behind its buffer of \(bound) bytes: gap")
            } else {
                subscriptions[subscriptionID] = subscription
            }
        }
        if gaps > 0 {
            watchingChanged()
            context.stats.watchesEnded(gaps)
        }
        context.stats.watchDelivered(events: sent, gaps: gaps, resyncs: 0)
        perform(actions)
    }

    /// Ends every live subscription with a gap at the last change it handled (its shard dropped changes it was owed:
    /// `IOShard.publish`). Subscriptions replaying the log go on: they read it up to what the shard has seen.
    func endLiveSubscriptionsWithGap() {
        guard !closing else { return }
        var actions: [ConnectionStateMachine.Action] = []
        var gaps = 0
        for subscriptionID in subscriptions.keys.sorted() {
            guard let subscription = subscriptions[subscriptionID], subscription.state == .live else { continue }
            subscriptions[subscriptionID] = nil
            gaps += 1
            guard machine.canPush else { continue }
            actions += machine.push(
                opcode: .event, requestID: subscriptionID,
                json: EventEncoder.gap(subscription: subscriptionID, seq: subscription.lastSeq))
        }
        guard gaps > 0 else { return }
        context.logger.warn("conn \(id): the server fell behind its change feed; \(gaps) subscriptions ended with a gap")
        watchingChanged()
        context.stats.watchesEnded(gaps)
        context.stats.watchDelivered(events: 0, gaps: gaps, resyncs: 0)
        perform(actions)
    }

    /// Starts a log read for each subscription replaying it, while the output is below half the watch buffer (the
    /// replay is paced by the subscriber's reading, so it never overflows).
    private func continueCatchUps() {
        for id in subscriptions.keys.sorted() where subscriptions[id]?.state == .catchingUp {
            guard !closing, machine.canPush, machine.unsentBytes <= limits.maxWatchBufferBytes / 2 else { return }
            readLog(id)
        }
    }

    private func readLog(_ subscriptionID: UInt32) {
        guard var subscription = subscriptions[subscriptionID] else { return }
        subscription.state = .reading
        subscriptions[subscriptionID] = subscription
        let store = context.router.store
        let maxBytes = max(16 << 10, limits.maxWatchBufferBytes / 4)
        let shard = self.shard
        let wanted = subscription
        context.router.workQueue.async { [self] in
            let result: Result<LogPage, LarderError>
            do throws(LarderError) {
                let page = try store.changes(
                    after: wanted.lastSeq, collection: wanted.collection, limit: Connection.catchUpPageSize,
                    maxBytes: maxBytes)
                result = .success(LogPage(page, for: wanted))
            } catch {
                result = .failure(error)
            }
            shard.loop.async { self.logRead(subscriptionID, result) }
        }
    }

    /// A page of the log arrived for a subscription catching up: check `since` against the retention (first page),
    /// push the page's events, and go live once the log has been read past everything published to this shard.
    private func logRead(_ subscriptionID: UInt32, _ result: Result<LogPage, LarderError>) {
        guard !closing, machine.canPush, var subscription = subscriptions[subscriptionID], subscription.state == .reading
        else { return }
        var actions: [ConnectionStateMachine.Action] = []
        switch result {
        case .failure(let error):
            context.logger.warn("conn \(id) subscription \(subscriptionID): the change log failed to read: \(error)")
            subscriptions[subscriptionID] = nil
            watchingChanged()
            context.stats.watchesEnded(1)
            context.stats.watchDelivered(events: 0, gaps: 1, resyncs: 0)
            actions += machine.push(
                opcode: .event, requestID: subscriptionID,
                json: EventEncoder.gap(subscription: subscriptionID, seq: subscription.lastSeq))
        case .success(let page):
            var exhausted = !page.more
            var events = page.events
            var resyncs = 0
            if subscription.checkResync {
                subscription.checkResync = false
                if subscription.lastSeq < page.prunedThrough || subscription.lastSeq > page.lastSeq {
                    // Never a silent gap: the subscriber must reload, then follows the changes after `lastSeq`.
                    actions += machine.push(
                        opcode: .event, requestID: subscriptionID,
                        json: EventEncoder.resync(
                            subscription: subscriptionID, seq: page.lastSeq, oldestSeq: page.prunedThrough + 1))
                    subscription.lastSeq = page.lastSeq
                    events = []
                    exhausted = true
                    resyncs = 1
                }
            }
            if resyncs == 0 {
                subscription.lastSeq = page.more ? page.lastEntrySeq : max(subscription.lastSeq, page.lastSeq)
            }
            for json in events { actions += machine.push(opcode: .event, requestID: subscriptionID, json: json) }
            subscription.state = exhausted && shard.publishedSeq <= subscription.lastSeq ? .live : .catchingUp
            subscriptions[subscriptionID] = subscription
            context.stats.watchDelivered(events: events.count, gaps: 0, resyncs: resyncs)
        }
        perform(actions)
        continueCatchUps()
    }
}

/// A page of the change log prepared off the I/O loop for one subscription: its matching events already encoded.
struct LogPage: Sendable {
    var events: [[UInt8]]
    var more: Bool
    /// The last change in the page (valid when `more`).
    var lastEntrySeq: Int64
    var lastSeq: Int64
    var prunedThrough: Int64

    init(_ page: ChangePage, for subscription: Subscription) {
        let changes = PreparedChanges(page.entries)
        events = page.entries.indices.compactMap { index in
            let match = changes.match(index, subscription)
            guard match != .no else { return nil }
            return changes.event(index, for: subscription.id, idsOnly: subscription.idsOnly, matches: match == .yes)
        }
        more = page.more
        lastEntrySeq = page.entries.last?.seq ?? 0
        lastSeq = page.lastSeq
        prunedThrough = page.prunedThrough
    }
}

/// A tiny lock-protected counter.
final class AtomicCounter: Sendable {
    private let value = Synchronization.Atomic<Int>(0)
    func add(_ delta: Int) { value.add(delta, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}
