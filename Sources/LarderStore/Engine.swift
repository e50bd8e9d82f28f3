import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// State shared by the writer, the readers and the write contexts: configuration, the schema features found at open,
/// and which field paths have expression indexes.
final class StoreCore: @unchecked Sendable {
    let configuration: StoreConfiguration
    let databasePath: String
    /// Whether this SQLite has FTS5 with the trigram tokenizer (3.34+ built with FTS5).
    let hasTrigram: Bool
    /// The last committed change and the listeners told of new ones.
    let feed: ChangeFeedState
    /// Transactions the writer committed: a read snapshot taken when this had some value sees every write
    /// acknowledged before then (`PointReads` keeps a snapshot while it is unchanged).
    let commits = Atomic<UInt64>(0)
    private let lock = Lock()
    private var indexed: Set<String> = []

    init(configuration: StoreConfiguration, databasePath: String, hasTrigram: Bool, lastChangeSeq: Int64) {
        self.configuration = configuration
        self.databasePath = databasePath
        self.hasTrigram = hasTrigram
        self.feed = ChangeFeedState(lastSeq: lastChangeSeq)
    }

    private static func key(_ collection: String, _ path: FieldPath) -> String { collection + "\u{0}" + path.description }

    func isIndexed(_ collection: String, _ path: FieldPath) -> Bool {
        guard configuration.useFieldIndexes else { return false }
        let key = StoreCore.key(collection, path)
        return lock.withLock { indexed.contains(key) }
    }

    func setIndexed(_ collection: String, _ path: FieldPath) {
        let key = StoreCore.key(collection, path)
        _ = lock.withLock { indexed.insert(key) }
    }

    func loadIndexes(_ pairs: [(String, String)]) {
        lock.withLock {
            for (collection, path) in pairs { indexed.insert(collection + "\u{0}" + path) }
        }
    }

    func dropIndexes(of collection: String) {
        lock.withLock { indexed = indexed.filter { !$0.hasPrefix(collection + "\u{0}") } }
    }
}

/// The single writer: one connection, touched only on `queue`. Concurrent submissions that arrive while a transaction
/// runs are batched into the next one (group commit); each runs in its own SAVEPOINT, and every completion is called
/// only after that transaction's COMMIT returned.
final class Writer: @unchecked Sendable {
    struct Job {
        /// Runs the body inside the open transaction and returns what to deliver once the COMMIT outcome is known.
        let execute: (SQLiteWriteContext) -> (LarderError?) -> Void
    }

    static let maxBatch = 512

    private let batches = BatchQueue<Job>(label: "larder.store.writer", maxBatch: Writer.maxBatch)
    private var queue: DispatchQueue { batches.queue }
    private let core: StoreCore
    private var connection: Connection?  // only on `queue`
    private var prune = PruneSchedule()  // only on `queue`
    private let uuids = TimeOrderedUUIDs()  // only on `queue`
    private let checkpointer: Checkpointer
    /// Told after every `fullTextBacklog` document writes (set once, before the first write).
    var textIndexer: TextIndexer?
    private var unindexedWrites = 0  // only on `queue`

    init(connection: Connection, core: StoreCore) {
        self.connection = connection
        self.core = core
        self.checkpointer = Checkpointer(path: core.databasePath)
        checkpointer.install(on: connection)
        batches.start { [unowned self] batch in run(batch) }
    }

    var isOnQueue: Bool { batches.isOnQueue }

    /// Queues a job for the next batch; false once closed.
    func enqueue(_ job: Job) -> Bool { batches.enqueue(job) }

    private func run(_ batch: [Job]) {
        guard let connection else {
            let error = LarderError(.unavailable, "the store is closed")
            for job in batch { job.execute(SQLiteWriteContext.closed(core))(error) }
            return
        }
        let context = SQLiteWriteContext(connection: connection, core: core, uuids: uuids)
        do {
            try connection.run(.begin)
        } catch {
            for job in batch { job.execute(SQLiteWriteContext.closed(core))(error) }
            return
        }
        var deliveries: [(LarderError?) -> Void] = []
        deliveries.reserveCapacity(batch.count)
        for job in batch { deliveries.append(job.execute(context)) }
        pruneChangesIfDue(context, connection)
        var commitError: LarderError?
        do {
            try connection.run(.commit)
            core.commits.add(1, ordering: .releasing)
            if let textIndexer {
                unindexedWrites += context.changes.count
                if unindexedWrites >= core.configuration.fullTextBacklog {
                    unindexedWrites = 0
                    textIndexer.poke()
                }
                // Before the completions: the writes of this batch are durable either way, and holding their
                // acknowledgements is what slows the callers to the index's pace.
                textIndexer.wrote()
            }
            for action in context.afterCommit { action() }
            // Before the completions: a subscriber learns of a write no later than its writer does.
            core.feed.committed(context.changes)
        } catch {
            commitError = error
            try? connection.run(.rollback)
        }
        for deliver in deliveries { deliver(commitError) }
    }

    /// Prunes the change log inside the batch's transaction, in a savepoint of its own so that a failure leaves the
    /// log and its `changesPrunedThrough` mark as they were (and the batch's writes untouched).
    private func pruneChangesIfDue(_ context: SQLiteWriteContext, _ connection: Connection) {
        prune.changesSincePrune += context.changes.count
        let now = nowMillis()
        let configuration = core.configuration
        guard prune.isDue(retainEvents: configuration.changeRetentionEvents, now: now) else { return }
        do throws(LarderError) {
            try connection.execute("SAVEPOINT prune")
            try context.pruneChanges(
                retainEvents: configuration.changeRetentionEvents, retainMs: configuration.changeRetentionMs, now: now)
            try connection.execute("RELEASE prune")
        } catch {
            try? connection.execute("ROLLBACK TO prune")
            try? connection.execute("RELEASE prune")
        }
        prune.pruned(now: now)
    }

    /// Runs `body` on the writer queue outside any batch (checkpoint, close).
    func exclusive<T>(_ body: (Connection?) -> T) -> T {
        if isOnQueue { return body(connection) }
        return queue.sync { body(connection) }
    }

    /// Refuses new work, waits for queued work, and closes the connection.
    func close() {
        batches.close()
        guard !isOnQueue else { return }
        queue.sync { connection = nil }
        checkpointer.close()
    }
}

/// Runs the WAL checkpoints the writer's commits call for on a queue of their own, so that copying pages into the
/// database file (and its fsync) is not paid on the single writer thread.
///
/// SQLite's own rule (`wal_autocheckpoint`, 1000 pages) runs a PASSIVE checkpoint inside the COMMIT that passes the
/// threshold, on the committing thread. This replaces that hook: past 1000 pages a commit only schedules a PASSIVE
/// checkpoint here, on a short-lived connection of its own (none stays open between checkpoints). A checkpoint never
/// changes what is durable: the WAL holds every commit either way. The WAL file starts over only when a write begins
/// with every frame copied, which under steady writes a checkpoint on another thread rarely achieves; so at
/// `writerFrames` the committing writer checkpoints itself, as SQLite would (by then the background has copied
/// nearly everything, so little is left to copy), and the WAL stays within ~2000 pages (~8 MiB) plus one
/// transaction. A PASSIVE checkpoint never waits: whichever side finds the other checkpointing leaves it be.
final class Checkpointer: @unchecked Sendable {
    /// SQLite's default `wal_autocheckpoint`.
    static let backgroundFrames: Int32 = 1000
    /// Where the writer takes over.
    static let writerFrames: Int32 = 2000

    private let path: String
    private let queue = DispatchQueue(label: "larder.store.checkpoint", qos: .userInitiated)
    private let lock = Lock()
    private var running = false  // under `lock`
    private var closed = false  // under `lock`

    init(path: String) { self.path = path }

    /// Replaces the connection's automatic checkpoint with `committed(frames:)`. The connection must not outlive
    /// this object (the writer owns both).
    func install(on connection: Connection) {
        sqlite3_wal_hook(
            connection.handle,
            { context, db, name, frames in
                Unmanaged<Checkpointer>.fromOpaque(context!).takeUnretainedValue().committed(
                    db: db!, name: name!, frames: frames)
                return SQLITE_OK
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Called by SQLite on the writer thread after each COMMIT, with the WAL's size in pages.
    private func committed(db: OpaquePointer, name: UnsafePointer<CChar>, frames: Int32) {
        if frames >= Checkpointer.writerFrames {
            // What SQLite's own hook does at its threshold (an error leaves the WAL as it was; the commit stands).
            sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        } else if frames >= Checkpointer.backgroundFrames {
            schedule()
        }
    }

    private func schedule() {
        let start: Bool = lock.withLock {
            guard !running, !closed else { return false }
            running = true
            return true
        }
        guard start else { return }
        queue.async { [self] in
            defer { lock.withLock { running = false } }
            guard !lock.withLock({ closed }) else { return }
            // Failures (busy: another checkpoint runs; cannot open) leave it to the next commit or to the writer.
            guard let connection = try? Connection(path: path, readOnly: false),
                // A new connection learns that the database is in WAL mode from its first read of it.
                (try? connection.execute("PRAGMA schema_version")) != nil
            else { return }
            sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        }
    }

    /// Waits for a running checkpoint and refuses new ones.
    func close() {
        lock.withLock { closed = true }
        queue.sync {}
    }
}

/// The read-only connections. Each borrower has a connection to itself; WAL lets them read while the writer writes.
final class ReaderPool: @unchecked Sendable {
    private let lock = Lock()
    private var idle: [Connection]
    private var closed = false
    private let semaphore: DispatchSemaphore

    /// The most of the database file each reader maps (address space, not memory: pages load on demand).
    static let mmapBytes = 1 << 30

    init(path: String, textIndexPath: String?, count: Int) throws(LarderError) {
        var connections: [Connection] = []
        for _ in 0..<max(1, count) {
            let connection = try Connection(path: path, readOnly: true)
            if let textIndexPath { try connection.execute("ATTACH DATABASE \(SQL.literal(textIndexPath)) AS ix") }
            // Reads of the main file become copies out of a shared mapping instead of one pread(2) per page: a 1 MiB
            // blob is ~256 overflow pages. Pages still in the WAL are read as before.
            try connection.execute("PRAGMA mmap_size=\(ReaderPool.mmapBytes)")
            connections.append(connection)
        }
        idle = connections
        semaphore = DispatchSemaphore(value: connections.count)
    }

    /// Borrows a connection; `transaction` wraps the body in one read transaction (one consistent snapshot).
    func read<T>(transaction: Bool = false, _ body: (Connection) throws(LarderError) -> T) throws(LarderError) -> T {
        let connection = try borrow()
        defer { giveBack(connection) }
        if transaction { try connection.run(.beginRead) }
        defer { if transaction { try? connection.run(.endRead) } }
        return try body(connection)
    }

    /// Takes a connection out of the pool (waiting while all are in use); `giveBack` returns it.
    func borrow() throws(LarderError) -> Connection {
        semaphore.wait()
        guard let connection = lock.withLock({ closed ? nil : idle.popLast() }) else {
            semaphore.signal()
            throw LarderError(.unavailable, "the store is closed")
        }
        return connection
    }

    func giveBack(_ connection: Connection) {
        lock.withLock { if !closed { idle.append(connection) } }
        semaphore.signal()
    }

    func close() {
        lock.withLock {
            closed = true
            idle.removeAll()
        }
    }
}

/// A small thread-safe box for handing a result from the writer queue to a waiting thread.
final class ResultBox<T: Sendable>: @unchecked Sendable {
    private let lock = Lock()
    private var value: Result<T, LarderError>?
    let done = DispatchSemaphore(value: 0)

    func set(_ result: Result<T, LarderError>) {
        lock.withLock { value = result }
        done.signal()
    }

    func wait() throws(LarderError) -> T {
        done.wait()
        let result = lock.withLock { value! }
        return try result.get()
    }
}

func nowMillis() -> Int64 {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
}

/// Time-ordered (version 7, RFC 9562) UUIDs for the documents the writer creates without a client id: 48 bits of Unix
/// milliseconds, then a 12-bit counter that orders the ids of one millisecond (RFC 9562's method 1; it starts each
/// millisecond at a random value below 2048, and a millisecond that runs out borrows the next), then 62 random bits.
/// Their text sorts in creation order, so a new document's `(collection, id)` index entry lands at the end of the
/// index instead of on a random page: a commit of 50 creates dirties a page or two of it rather than ~50 (each one a
/// 4 KiB WAL frame), and records without a sort come back in creation order. Random bytes come from a buffer of system
/// random bytes refilled 4 KiB at a time. Not thread-safe: one owner (the writer queue).
final class TimeOrderedUUIDs {
    private var buffer: [UInt8] = []  // allocated at the first id
    private var offset = 0
    private var lastMillis: Int64 = 0
    private var counter = 0

    func next() -> UUID { next(now: nowMillis()) }

    func next(now: Int64) -> UUID {
        if offset + 10 > buffer.count {
            if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 4096) }
            buffer.withUnsafeMutableBytes { TimeOrderedUUIDs.fill($0) }
            offset = 0
        }
        if now > lastMillis {
            lastMillis = now
            counter = Int(buffer[offset]) << 3 | Int(buffer[offset + 1] & 0x07)  // below 2048
        } else {
            // The same millisecond, or the clock stepped back: keep counting from the last id.
            counter += 1
            if counter > 0xFFF {
                lastMillis += 1
                counter = 0
            }
        }
        let millis = UInt64(lastMillis)
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { raw in
            for i in 0..<6 { raw[i] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(i))) }
            raw[6] = 0x70 | UInt8(counter >> 8)  // version 7, counter's high 4 bits
            raw[7] = UInt8(truncatingIfNeeded: counter)
            buffer.withUnsafeBytes { source in
                raw.baseAddress!.advanced(by: 8).copyMemory(from: source.baseAddress! + offset + 2, byteCount: 8)
            }
            raw[8] = (raw[8] & 0x3F) | 0x80  // RFC 9562 variant
        }
        offset += 10
        return UUID(uuid: uuid)
    }

    /// Fills `bytes` from the system's cryptographic generator (/dev/urandom, what Foundation's `UUID()` reads on
    /// Linux), falling back to `SystemRandomNumberGenerator` should that fail.
    private static func fill(_ bytes: UnsafeMutableRawBufferPointer) {
        var done = 0
        let fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            while done < bytes.count {
                let n = read(fd, bytes.baseAddress! + done, bytes.count - done)
                if n > 0 {
                    done += n
                } else if n == 0 || errno != EINTR {
                    break
                }
            }
            close(fd)
        }
        var generator = SystemRandomNumberGenerator()
        for i in done..<bytes.count { bytes[i] = generator.next() }
    }
}
