import CSQLite
import Dispatch
import Foundation
import LarderIO
import LarderSync
import LarderWire
import Synchronization

/// The single writer: one connection, touched only on `queue`. Concurrent submissions that arrive while a transaction
/// runs are batched into the next one (group commit); each runs in its own SAVEPOINT, and every completion is called
/// only after that transaction's COMMIT returned.
final class SQLiteWriter: @unchecked Sendable {
    struct Job {
        /// Runs the body inside the open transaction and returns what to deliver once the COMMIT outcome is known.
        let execute: (SQLiteWriteContext) -> (LarderError?) -> Void
    }

    static let maxBatch = 512

    private let batches = GroupCommitQueue<Job>(label: "larder.store.writer", maxBatch: SQLiteWriter.maxBatch)
    private var queue: DispatchQueue { batches.queue }
    private let core: StoreCore
    private var connection: SQLiteConnection?  // only on `queue`
    private var prune = PruneSchedule()  // only on `queue`
    private let uuids = TimeOrderedUUIDs()  // only on `queue`
    private let collections = KnownCollections()  // only on `queue`
    private let documentNumbers: DocumentNumbers  // only on `queue`
    let coveredCollections: CoveredCollections  // only on `queue`
    let requestKeys: RequestKeyIndex  // shared with the other writers open on this file
    /// Set once `close` gave `requestKeys` back (`RequestKeyIndex.release`).
    private let keysReleased = Atomic<Bool>(false)
    private let checkpointer: Checkpointer
    /// Told after every `fullTextBacklog` document writes (set once, before the first write).
    var textIndexer: TextIndexer?
    private var unindexedWrites = 0  // only on `queue`

    init(connection: SQLiteConnection, core: StoreCore) throws(LarderError) {
        self.connection = connection
        self.documentNumbers = DocumentNumbers(highest: try DocumentNumbers.highest(connection))
        self.coveredCollections = CoveredCollections(
            try connection.query("SELECT name FROM text_collections") { $0.text(0) })
        self.requestKeys = try RequestKeyIndex.shared(connection, path: core.databasePath)
        self.core = core
        self.checkpointer = Checkpointer(path: core.databasePath)
        checkpointer.install(on: connection)
        batches.start { [unowned self] batch in run(batch) }
    }

    var isOnQueue: Bool { batches.isOnQueue }

    /// What this writer has done since it started.
    var stats: WriterStats { batches.stats }

    /// Queues a job for the next batch; false once closed.
    func enqueue(_ job: Job) -> Bool { batches.enqueue(job) }

    private func run(_ batch: [Job]) {
        guard let connection else {
            let error = LarderError(.unavailable, "the store is closed")
            for job in batch { job.execute(SQLiteWriteContext.closed(core))(error) }
            return
        }
        let context = SQLiteWriteContext(
            connection: connection, core: core, uuids: uuids, collections: collections, documentNumbers: documentNumbers,
            covered: coveredCollections, requestKeys: requestKeys)
        do {
            try connection.run(.begin)
        } catch {
            for job in batch { job.execute(SQLiteWriteContext.closed(core))(error) }
            return
        }
        var deliveries: [(LarderError?) -> Void] = []
        deliveries.reserveCapacity(batch.count)
        for job in batch { deliveries.append(job.execute(context)) }
        var commitError: LarderError?
        do throws(LarderError) {
            if let failure = context.unguardedFailure { throw failure }
            try context.raiseChangeSeq()
            pruneChangesIfDue(context, connection)
            try connection.run(.commit)
            collections.committedPending()
            documentNumbers.committedPending()
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
            collections.forgetPending()
            documentNumbers.forgetPending()
            try? connection.run(.rollback)
        }
        for deliver in deliveries { deliver(commitError) }
    }

    /// Prunes the change log and the expired request keys inside the batch's transaction, in a savepoint of its own
    /// so that a failure leaves the log and its `changesPrunedThrough` mark as they were (and the batch's writes
    /// untouched).
    private func pruneChangesIfDue(_ context: SQLiteWriteContext, _ connection: SQLiteConnection) {
        prune.changesSincePrune += context.changes.count
        let now = nowMillis()
        let configuration = core.configuration
        guard prune.isDue(retainEvents: configuration.changeRetentionEvents, now: now) else { return }
        do throws(LarderError) {
            try connection.execute("SAVEPOINT prune")
            try context.pruneChanges(
                retainEvents: configuration.changeRetentionEvents, retainMs: configuration.changeRetentionMs, now: now)
            let mark = try context.pruneRequestKeys(now: now)
            try connection.execute("RELEASE prune")
            // The sweep's mark moves in memory only once it is in the file.
            if let mark { context.afterCommit.append { [requestKeys] in requestKeys.passedRows(below: mark) } }
        } catch {
            try? connection.execute("ROLLBACK TO prune")
            try? connection.execute("RELEASE prune")
        }
        prune.pruned(now: now)
    }

    /// Runs `body` on the writer queue outside any batch (checkpoint, close).
    func exclusive<T>(_ body: (SQLiteConnection?) -> T) -> T {
        if isOnQueue { return body(connection) }
        return queue.sync { body(connection) }
    }

    /// Refuses new work, waits for queued work, and closes the connection.
    func close() {
        batches.close()
        defer { if !keysReleased.exchange(true, ordering: .acquiringAndReleasing) { requestKeys.release() } }
        guard !isOnQueue else { return }
        queue.sync { connection = nil }
        checkpointer.close()
    }
}
