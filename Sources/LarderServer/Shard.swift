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
import LarderEventLoop
import LarderIO

/// A shard: one event loop thread (`loop`) and the connections it serves, with their shared read buffer, timer tick,
/// read cache and change inbox. The server has `ServerConfiguration.ioQueues` of them. Its loop-only state on a
/// request's path skips Swift's run-time exclusivity checks, as `ServerConnection`'s does.
final class Shard: EventLoopHandler, @unchecked Sendable {
    let loop: EventLoop
    /// Only touched on `loop`.
    var connections: [ObjectIdentifier: ServerConnection] = [:]
    /// One read buffer for every connection of the shard: connections never read at the same time on one loop, and
    /// 10,000 idle connections then cost no buffer memory.
    let readBuffer: UnsafeMutableRawBufferPointer
    /// Only used on `loop`.
    let encoders: SharedEncoders
    /// The connections holding a subscription (only on `loop`).
    var watchers: [ObjectIdentifier: ServerConnection] = [:]
    /// The newest change published to this shard (only on `loop`). Changes reach a shard in commit order, so every
    /// change up to it has either reached the live subscriptions or is in the log for those catching up.
    var publishedSeq: Int64

    /// The point reads (GET, BLOB_HEAD) answered on `loop` during one turn share one read snapshot of the store while
    /// nothing commits; it is given back at the end of the turn, before the loop waits again.
    let store: Router.Store
    @exclusivity(unchecked) private var turnReads: (any PointReads)?
    @exclusivity(unchecked) var turnReadsOpen = false

    /// `endOfTurn` is asked for (once per turn).
    @exclusivity(unchecked) private var endOfTurnScheduled = false

    private func scheduleEndOfTurn() {
        guard !endOfTurnScheduled else { return }
        endOfTurnScheduled = true
        loop.flushAtEndOfTurn(self)
    }

    /// Only on `loop`.
    var pointReads: any PointReads {
        if !turnReadsOpen {
            turnReadsOpen = true
            scheduleEndOfTurn()
        }
        if let turnReads { return turnReads }
        let reads: any PointReads =
            readCache.isEnabled ? CachedPointReads(shard: self, reads: store.pointReads()) : store.pointReads()
        turnReads = reads
        return reads
    }

    private let stats: ServerStats
    /// Recent GET answers (only on `loop`); see `ReadCache`.
    @exclusivity(unchecked) var readCache: ReadCache
    /// Counted on `loop`, summed for STATS.
    @exclusivity(unchecked) var cacheHits = 0
    @exclusivity(unchecked) var cacheMisses = 0
    /// Change batches published to this shard so far (writer thread), and applied to the read cache (loop).
    private let published = Atomic<Int>(0)
    @exclusivity(unchecked) private var applied = 0
    var publishedBatches: Int { published.load(ordering: .acquiring) }

    /// Applies to the read cache every change published so far (and pushes it to the subscriptions, as the scheduled
    /// drain would); returns the batch count it is current with. On `loop`.
    func applyPublishedChanges() -> Int {
        let current = published.load(ordering: .acquiring)
        if current != applied { drain() }
        return current
    }

    /// The requests answered and the bytes moved by this shard's connections since they were last added to
    /// `ServerStats` (only on `loop`): added under its lock once per turn instead of once per request, read and write.
    @exclusivity(unchecked) private var pendingStats = ServerStats.Batch()

    /// Counts a request answered on this shard (added to STATS by `flushStats`).
    func recordRequest(_ opcode: Opcode, _ status: Status, latencyMicros: UInt64?) {
        pendingStats.requests.append(.init(opcode: opcode, status: status, latencyMicros: latencyMicros))
        scheduleEndOfTurn()
    }

    /// Counts a connection's traffic (added to STATS by `flushStats`).
    func addTraffic(wireIn: Int, wireOut: Int, uncompressedIn: Int, uncompressedOut: Int, peakUnsent: Int) {
        guard wireIn | wireOut | uncompressedIn | uncompressedOut != 0 || peakUnsent > 0 else { return }
        pendingStats.addTraffic(
            wireIn: wireIn, wireOut: wireOut, uncompressedIn: uncompressedIn, uncompressedOut: uncompressedOut,
            peakUnsent: peakUnsent)
        scheduleEndOfTurn()
    }

    /// Adds what was counted to STATS: at the end of each turn, and before a connection writes while requests are
    /// counted (`answersOnly`), so that a client who has an answer finds its request in STATS and /metrics,
    /// whichever connection asks. Traffic alone waits for the end of the turn.
    func flushStats(answersOnly: Bool = false) {
        guard answersOnly ? !pendingStats.requests.isEmpty : !pendingStats.isEmpty else { return }
        stats.add(pendingStats)
        pendingStats.removeAll()
    }

    func readable() {}
    func writable() {}
    func endOfTurn() {
        endOfTurnScheduled = false
        if turnReadsOpen {
            turnReadsOpen = false
            turnReads?.end()
        }
        flushStats()
        if cacheHits | cacheMisses | afterSeqWaits | afterSeqFallThroughs != 0 {
            stats.readCache(hits: cacheHits, misses: cacheMisses, waits: afterSeqWaits, fellThrough: afterSeqFallThroughs)
            cacheHits = 0
            cacheMisses = 0
            afterSeqWaits = 0
            afterSeqFallThroughs = 0
        }
    }

    /// The longest a GET with `afterSeq` waits for the shard to apply the change log that far (`sharedGet`).
    let afterSeqWaitMs: Int
    /// GETs waiting for the change log (only on `loop`), and whether a timer is set to end their wait.
    @exclusivity(unchecked) var sharedGetWaiters: [SharedGetWaiter] = []
    /// GETs that waited for the change log, and those of them that then read the database (for STATS).
    @exclusivity(unchecked) var afterSeqWaits = 0
    @exclusivity(unchecked) var afterSeqFallThroughs = 0

    init(
        index: Int, configuration: ConnectionStateMachine.Configuration, store: Router.Store, stats: ServerStats,
        readCacheBytes: Int = 0, publishedSeq: Int64 = 0, maxInboxChanges: Int = Shard.defaultMaxInboxChanges,
        afterSeqWaitMs: Int = 0
    ) {
        self.afterSeqWaitMs = afterSeqWaitMs
        self.maxInboxChanges = max(1, maxInboxChanges)
        inbox = Locked(ChangeInbox(limit: maxInboxChanges))
        self.store = store
        self.stats = stats
        readCache = ReadCache(maxBytes: readCacheBytes)
        encoders = SharedEncoders(configuration: configuration)
        loop = EventLoop(name: "larder.io.\(index)")
        readBuffer = .allocate(byteCount: 64 << 10, alignment: 16)
        self.publishedSeq = publishedSeq
    }

    /// Committed changes waiting for `loop` (under the mutex: the writer queue publishes, `loop` takes).
    private let inbox: Locked<ChangeInbox>
    /// The most changes the inbox holds for a loop that has fallen behind (an overloaded server): past it they are
    /// dropped, and the next drain ends the shard's live subscriptions with a gap (each resumes from its own last
    /// change with `since`) and empties its read cache, instead of the inbox growing without bound.
    let maxInboxChanges: Int
    /// Changes committed and waiting for `loop` to push them (the change feed's lag, for /metrics).
    var pendingChanges: Int { inbox.withLock { $0.pending.count } }
    static let defaultMaxInboxChanges = 100_000
    /// Times the inbox overflowed (for tests and STATS).
    let inboxOverflows = Atomic<Int>(0)

    /// Called on the store's writer queue: queues a batch and schedules a drain unless one is pending. Batches that
    /// arrive while the shard is busy are pushed together, so a connection gets one write for many commits when the
    /// fan-out falls behind, rather than one per commit.
    func publish(_ entries: [ChangeEntry]) {
        let (schedule, overflowed) = inbox.withLock { $0.publish(entries) }
        if overflowed { inboxOverflows.add(1, ordering: .relaxed) }
        // After the entries are in the inbox, before the writer acknowledges the write (see `ReadCache`).
        published.add(1, ordering: .releasing)
        if schedule { loop.async { self.drain() } }
    }

    /// On `loop`: every change published so far, in commit order, to every live subscription of the shard.
    private func drain() {
        // Once this drain's changes have reached the subscriptions: a GET that goes on may drain again.
        defer { if !sharedGetWaiters.isEmpty { resumeSharedGets() } }
        let current = published.load(ordering: .acquiring)
        let (entries, dropped) = inbox.withLock { $0.take() }
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

    /// On `loop`: every connection of the shard looks its token up in the reloaded table.
    func tokensReloaded() -> TokenRecheck {
        // A copy: a connection that closes leaves `connections`.
        Array(connections.values).reduce(TokenRecheck()) { $0 + $1.tokensReloaded() }
    }

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
