import Dispatch
import Foundation
import LarderIO
import LarderSync
import LarderWire

/// The PostgreSQL store's single writer, the same shape as SQLite's (`SQLiteWriter`): one connection touched only on
/// `queue`; writes that arrive while a transaction runs are batched into the next one (group commit), and every
/// completion is called after that transaction's COMMIT returned.
///
/// A batch is one transaction: BEGIN goes out with its first statement, each write is one statement that reports
/// NOT_FOUND, CONFLICT and the current revision as rows rather than errors, so a refused write leaves the transaction
/// usable and needs no SAVEPOINT (a subtransaction per write would overflow PostgreSQL's subtransaction cache past 64
/// in a batch). Creates wait to go out with the next statement (`PGWriteContext`), so many cost one round trip; the
/// batch's change log goes in as one statement with the COMMIT (one round trip).
///
/// When a write fails after it changed something (a body of several writes whose last one is refused, or a statement
/// PostgreSQL rejected), the transaction rolls back and the batch runs again without it: the bodies are re-run, and
/// only the final outcome is delivered.
///
/// Sequence numbers: the change-log insert takes them from the one row of `larder_seq` (`last`), updated in that same
/// statement, just before COMMIT. The row lock orders committing transactions, so sequence order is commit order and
/// the committed `last` is a high-water mark: every change up to it is committed and visible. That holds across any
/// number of servers sharing the database (no change can commit later with a smaller number).
final class PGWriter: @unchecked Sendable {
    struct Job {
        /// Runs the body in the open transaction and returns what to deliver once the COMMIT outcome is known. It may
        /// run more than once (a batch run again); only the last run's delivery is called.
        let execute: (PGWriteContext) -> (LarderError?) -> Void
    }

    static let maxBatch = 512
    /// Times a batch is run again after PostgreSQL reported a deadlock or a serialization failure.
    static let maxRetries = 3

    private let batches = GroupCommitQueue<Job>(label: "larder.store.pg-writer", maxBatch: PGWriter.maxBatch)
    private var queue: DispatchQueue { batches.queue }

    private let core: StoreCore
    private let connector: PGConnector
    private var connection: PGConnection?  // only on `queue`
    private let uuids = TimeOrderedUUIDs()  // only on `queue`
    private var prune = PruneSchedule()  // only on `queue`
    /// Set when a COMMIT's outcome is unknown (the connection broke during it): before the next batch the writer
    /// reads the change log past what it published and publishes what it finds (only on `queue`).
    private var mustCatchUp = false
    /// The newest change a batch of this writer committed, moved before its writes are answered.
    private let written = Locked<Int64>(0)
    var writtenSeq: Int64 { written.withLock { $0 } }

    private let textIndexer: PGTextIndexer
    private let follower: PGChangeFollower

    init(
        core: StoreCore, connector: PGConnector, connection: PGConnection, textIndexer: PGTextIndexer,
        follower: PGChangeFollower
    ) {
        self.textIndexer = textIndexer
        self.follower = follower
        self.core = core
        self.connector = connector
        self.connection = connection
        batches.start { [unowned self] batch in run(batch) }
    }

    var isOnQueue: Bool { batches.isOnQueue }

    /// What this writer has done since it started.
    var stats: WriterStats { batches.stats }

    /// Queues a job for the next batch; false once closed.
    func enqueue(_ job: Job) -> Bool { batches.enqueue(job) }

    /// The writer's connection, made again when the last one broke; nil (with the reason) while the database is
    /// unreachable.
    private func usableConnection() -> Result<PGConnection, LarderError> {
        if let connection, connection.isUsable { return .success(connection) }
        connection = nil
        switch connector.connect() {
        case .success(let fresh):
            connection = fresh
            mustCatchUp = true
            return .success(fresh)
        case .failure(let error):
            return .failure(error)
        }
    }

    private func run(_ batch: [Job]) {
        let connection: PGConnection
        switch usableConnection() {
        case .success(let c): connection = c
        case .failure(let error):
            for job in batch { job.execute(PGWriteContext.closed(core, error))(error) }
            return
        }
        if mustCatchUp { catchUp(connection) }
        var pending = batch
        var retries = 0
        var deferring = true
        while !pending.isEmpty {
            let context = PGWriteContext(
                connection: connection, core: core, uuids: uuids, textIndexer: textIndexer, defersInserts: deferring)
            var deliveries: [(LarderError?) -> Void] = []
            var failed: Int?
            for (index, job) in pending.enumerated() {
                context.currentJob = index
                deliveries.append(job.execute(context))
                if context.mustRollBack {
                    failed = context.failedJob ?? index
                    break
                }
            }
            if failed == nil {
                // The creates still waiting go out now, in one round trip.
                context.currentJob = -1
                context.flushDeferred()
                if context.mustRollBack { failed = context.failedJob }
            }
            if let failed {
                if !connection.isUsable {
                    // The database went away: nothing of the batch committed, every write answers why.
                    let error = context.failure ?? connector.unavailable("the connection broke")
                    for delivery in deliveries { delivery(error) }
                    for job in pending[deliveries.count...] { job.execute(PGWriteContext.closed(core, error))(error) }
                    return
                }
                _ = try? connection.run([PGStatement("ROLLBACK")])
                if context.mustRunWithoutDeferring {
                    // A job went on after a create that turned out refused: it runs again, waiting for each create.
                    deferring = false
                    continue
                }
                if context.failure?.status == .unavailable && retries < PGWriter.maxRetries {
                    // A deadlock or serialization failure: the whole batch again.
                    retries += 1
                    continue
                }
                // The failed write answers its own error (a deferred create's, when that is what failed); the others
                // run again without it.
                deliveries[failed](context.failedInFlush ? context.failure : nil)
                pending.remove(at: failed)
                continue
            }
            guard commit(context, connection, deliveries) else {
                // A schema this batch checked records against changed on another server: check them again.
                _ = try? connection.run([PGStatement("ROLLBACK")])
                let reloaded = (try? PGWriter.loadSchemas(core, connection)) != nil
                if reloaded && retries < PGWriter.maxRetries {
                    retries += 1
                    continue
                }
                let error = LarderError(
                    .unavailable, "the collection's schema changed while the write ran (set on another server); retry")
                for delivery in deliveries { delivery(error) }
                return
            }
            return
        }
    }

    /// Loads every collection's schema into the store's catalog from the database.
    static func loadSchemas(_ core: StoreCore, _ connection: PGConnection) throws {
        let rows = try connection.pipeline([PGStatement(SchemaCatalog.selectAll, name: "schemas_all")])[0]
        core.schemas.replaceAll(
            SchemaCatalog.entries(
                (0..<rows.rows).map {
                    (rows.text($0, 0), rows.int($0, 1), rows.isNull($0, 2) ? nil : rows.bytes($0, 2), rows.text($0, 3))
                }, limits: core.configuration.schemaLimits))
    }

    /// The statement that fails the batch (SQLSTATE `LS001`, before its COMMIT) when a schema version it checked
    /// records against is no longer the collection's: nil when it wrote to no collection.
    ///
    /// Why this keeps the rule that a schema set through one server is enforced by every server from the moment its
    /// answer is sent: the answer goes out after SCHEMA_SET's COMMIT, so a write sent after it reaches this check
    /// later, and the check's statement (READ COMMITTED: a snapshot taken when it starts) sees that commit. It reads
    /// without a row lock, so no batch waits for another and none leaves a lock behind.
    static func schemaCheck(_ versions: [String: Int64]) -> PGStatement? {
        guard !versions.isEmpty else { return nil }
        var names = PGArray(.text)
        var numbers = PGArray(.int8)
        for (name, version) in versions {
            names.append(.text(name))
            numbers.append(.int(version))
        }
        return PGStatement(
            "SELECT larder_schema_check($1::text[], $2::int8[])", [.array(names), .array(numbers)],
            name: "schema_check")
    }

    /// The SQLSTATE `larder_schema_check` fails with.
    static let schemaChanged = "LS001"

    /// COMMIT with the batch's change log, then the listeners, then the completions; false, having delivered
    /// nothing, when a schema the batch checked records against changed (`schemaCheck`).
    private func commit(_ context: PGWriteContext, _ connection: PGConnection, _ deliveries: [(LarderError?) -> Void])
        -> Bool
    {
        let check = PGWriter.schemaCheck(context.schemaVersions)
        guard context.begun else {
            // Nothing reached the database (every write was refused before its statement): a refusal by a schema
            // still needs its version confirmed.
            if let check {
                do {
                    _ = try connection.pipeline([check])
                } catch let failure as PGFailure where failure.sqlState == PGWriter.schemaChanged {
                    return false
                } catch {}
            }
            for delivery in deliveries { delivery(nil) }
            return true
        }
        // The log entries of creates that were refused never happened.
        var changes = context.changes
        if !context.droppedChanges.isEmpty {
            changes = changes.indices.filter { !context.droppedChanges.contains($0) }.map { changes[$0] }
        }
        var statements: [PGStatement] = []
        if let check { statements.append(check) }
        let first = statements.count
        if !changes.isEmpty { statements.append(PGWriter.changeInsert(changes)) }
        prune.changesSincePrune += changes.count
        let now = nowMillis()
        let configuration = core.configuration
        if prune.isDue(retainEvents: configuration.changeRetentionEvents, now: now) {
            statements.append(
                PGStatement(
                    PGWriter.pruneSQL,
                    [.int(Int64(configuration.changeRetentionEvents)), .int(now - configuration.changeRetentionMs)],
                    name: "prune"))
            statements.append(
                PGStatement(
                    "DELETE FROM request_keys WHERE created_at < $1", [.int(core.oldestLiveRequestKey(now: now))],
                    name: "prune_request_keys"))
            prune.pruned(now: now)
        }
        statements.append(PGStatement("COMMIT"))
        var commitError: LarderError?
        do {
            let results = try connection.pipeline(statements)
            if !changes.isEmpty {
                let base = results[first].int(0, 0)
                for index in changes.indices { changes[index].seq = base + Int64(index) + 1 }
            }
            for action in context.afterCommit { action() }
            // Before the completions: a subscriber learns of a write no later than its writer does. Changes that
            // other servers committed since this server last published come first: read from the log with these.
            if let newest = changes.last?.seq {
                written.withLock { $0 = max($0, newest) }
                if !core.feed.publishInOrder(changes) {
                    try? PGChangeFollower.catchUp(core, connection)
                    if core.feed.lastSeq < newest { mustCatchUp = true }
                }
                follower.announce(newest)
            }
        } catch let failure as PGFailure where failure.sqlState == PGWriter.schemaChanged {
            return false
        } catch {
            if connection.isUsable {
                _ = try? connection.run([PGStatement("ROLLBACK")])
                commitError = (error as? PGFailure).map { connection.error($0) }
                    ?? LarderError(.internal, "\(connection.label): \(error)")
            } else {
                // The outcome is unknown: the COMMIT may have been applied. What committed is published from the log
                // before the next batch.
                mustCatchUp = true
                commitError = LarderError(
                    .unavailable, "\(connection.label) is unavailable: the connection broke during COMMIT, so the "
                        + "write may or may not have been applied; read it back before retrying")
            }
        }
        for (index, deliver) in deliveries.enumerated() { deliver(commitError ?? context.refused[index]) }
        return true
    }

    /// Publishes the changes committed past the last one this store published (after a COMMIT whose outcome was
    /// unknown, or a new connection), so subscribers never miss a committed write.
    private func catchUp(_ connection: PGConnection) {
        if (try? PGChangeFollower.catchUp(core, connection)) != nil { mustCatchUp = false }
    }

    /// The batch's changes in one statement, numbered from `larder_seq.last`, which it moves (see the type comment).
    static func changeInsert(_ changes: [ChangeEntry]) -> PGStatement {
        var collections = PGArray(.text)
        var kinds = PGArray(.text)
        var times = PGArray(.int8)
        var ids = PGArray(.uuid)
        var revs = PGArray(.int8)
        var created = PGArray(.int8)
        var updated = PGArray(.int8)
        var data = PGArray(.text)
        var blobs = PGArray(.text)
        var previous = PGArray(.text)
        for change in changes {
            collections.append(.text(change.collection))
            kinds.append(.text(change.kind.rawValue))
            times.append(.int(change.time))
            ids.append(change.record.map { .uuid($0.id) } ?? .null)
            revs.append(change.record.map { .int($0.rev) } ?? .null)
            created.append(change.record.map { .int($0.createdAt) } ?? .null)
            updated.append(change.record.map { .int($0.updatedAt) } ?? .null)
            data.append(change.record.map { .textBytes($0.data) } ?? .null)
            blobs.append(change.blob.map { .textBytes($0.json.bytes) } ?? .null)
            previous.append(change.previous.map { .textBytes($0) } ?? .null)
        }
        return PGStatement(
            """
            WITH s AS (UPDATE larder_seq SET last = last + $1 WHERE id = 1 RETURNING last - $1 AS base),
            i AS (INSERT INTO changes(
                    seq, collection, kind, time, id, rev, created_at, updated_at, data, blob, previous)
                SELECT s.base + u.n, u.collection, u.kind, u.time, u.id, u.rev, u.created_at, u.updated_at, u.data,
                    u.blob, u.previous
                FROM s, unnest($2::text[], $3::text[], $4::int8[], $5::uuid[], $6::int8[], $7::int8[], $8::int8[],
                    $9::text[], $10::text[], $11::text[])
                    WITH ORDINALITY
                    AS u(collection, kind, time, id, rev, created_at, updated_at, data, blob, previous, n))
            SELECT base FROM s
            """,
            [
                .int(Int64(changes.count)), .array(collections), .array(kinds), .array(times), .array(ids),
                .array(revs), .array(created), .array(updated), .array(data), .array(blobs), .array(previous),
            ], name: "change_insert")
    }

    /// The retention, as SQLite's writer applies it (`pruneChanges`): all but the newest $1 changes and those older
    /// than $2, in the batch's transaction, after its changes went in.
    static let pruneSQL = """
        WITH s AS (SELECT last, pruned_through FROM larder_seq WHERE id = 1),
        y AS (SELECT (SELECT c.seq FROM changes c, s WHERE c.seq > greatest(s.pruned_through, s.last - $1)
            AND c.time >= $2 ORDER BY c.seq LIMIT 1) AS young),
        b AS (SELECT CASE WHEN y.young IS NULL THEN s.last ELSE greatest(s.last - $1, y.young - 1) END AS bound,
            s.pruned_through FROM s, y),
        d AS (DELETE FROM changes WHERE seq <= (SELECT bound FROM b WHERE bound > pruned_through))
        UPDATE larder_seq SET pruned_through = b.bound FROM b WHERE larder_seq.id = 1 AND b.bound > b.pruned_through
        """

    /// Refuses new work, waits for queued work, and closes the connection (the twin of SQLite's `SQLiteWriter.close`).
    func close() {
        batches.close()
        guard !isOnQueue else { return }
        queue.sync {
            connection?.close()
            connection = nil
        }
    }
}
