import Dispatch
import Foundation
import LarderWire

/// The PostgreSQL store's single writer, the same shape as SQLite's (`Writer`): one connection touched only on
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

    private let batches = BatchQueue<Job>(label: "larder.store.pg-writer", maxBatch: PGWriter.maxBatch)
    private var queue: DispatchQueue { batches.queue }

    private let core: StoreCore
    private let connector: PGConnector
    private var connection: PGConnection?  // only on `queue`
    private let uuids = TimeOrderedUUIDs()  // only on `queue`
    private var prune = PruneSchedule()  // only on `queue`
    /// Set when a COMMIT's outcome is unknown (the connection broke during it): before the next batch the writer
    /// reads the change log past what it published and publishes what it finds (only on `queue`).
    private var mustCatchUp = false

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
            commit(context, connection, deliveries)
            return
        }
    }

    /// COMMIT with the batch's change log, then the listeners, then the completions.
    private func commit(_ context: PGWriteContext, _ connection: PGConnection, _ deliveries: [(LarderError?) -> Void]) {
        guard context.begun else {
            // Nothing reached the database (every write was refused before its statement).
            for delivery in deliveries { delivery(nil) }
            return
        }
        // The log entries of creates that were refused never happened.
        var changes = context.changes
        if !context.droppedChanges.isEmpty {
            changes = changes.indices.filter { !context.droppedChanges.contains($0) }.map { changes[$0] }
        }
        var statements: [PGStatement] = []
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
            prune.pruned(now: now)
        }
        statements.append(PGStatement("COMMIT"))
        var commitError: LarderError?
        do {
            let results = try connection.pipeline(statements)
            if !changes.isEmpty {
                let base = results[0].int(0, 0)
                for index in changes.indices { changes[index].seq = base + Int64(index) + 1 }
            }
            for action in context.afterCommit { action() }
            // Before the completions: a subscriber learns of a write no later than its writer does. Changes that
            // other servers committed since this server last published come first: read from the log with these.
            if let newest = changes.last?.seq {
                if !core.feed.publishInOrder(changes) {
                    try? PGChangeFollower.catchUp(core, connection)
                    if core.feed.lastSeq < newest { mustCatchUp = true }
                }
                follower.announce(newest)
            }
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

    /// Runs `body` on the writer queue outside any batch (checkpoint, close).
    func exclusive<T>(_ body: (PGConnection?) -> T) -> T {
        if isOnQueue { return body(connection) }
        return queue.sync { body(connection) }
    }

    /// Refuses new work, waits for queued work, and closes the connection.
    func close() {
        batches.close()
        guard !isOnQueue else { return }
        queue.sync {
            connection?.close()
            connection = nil
        }
    }
}

/// The write operations on the writer's connection, inside the open batch transaction.
final class PGWriteContext: PreparedWriteContext {
    let connection: PGConnection?
    let core: StoreCore
    let closedError: LarderError?
    /// The changes logged in this transaction, in order (sequence numbers are set at COMMIT).
    var changes: [ChangeEntry] = []
    /// Side effects on in-memory state that may happen only once the transaction committed.
    var afterCommit: [() -> Void] = []
    /// Whether BEGIN was sent.
    private(set) var begun = false
    /// Whether the current job changed anything (so a failure of it needs the transaction rolled back).
    var jobWrote = false
    /// Set when the transaction cannot go on: a job failed after writing, or a statement failed.
    private(set) var mustRollBack = false
    /// The error that ended the transaction.
    private(set) var failure: LarderError?
    private let uuids: TimeOrderedUUIDs
    private let textIndexer: PGTextIndexer?

    // Creates are deferred: a job's create that is its first write goes out with the next statement of the batch (or
    // at its end), so a batch of N creates costs one round trip rather than N. Its record is answered from what was
    // sent; if PostgreSQL then finds the id taken (no row inserted), the job's answer becomes the CONFLICT it would
    // have thrown, and its log entry is dropped. That is only the same as throwing when the job did nothing after
    // the create: one that went on makes the batch run again without deferring.

    /// A create waiting to be sent: its statement, its job, its change-log entry, and the refusal if no row goes in.
    private struct Deferred {
        var statement: PGStatement
        var job: Int
        var change: Int
        var conflict: LarderError
    }

    private var deferred: [Deferred] = []
    private let defersInserts: Bool
    /// The job running (its index in the batch); -1 between jobs.
    var currentJob = 0
    /// Whether the running job has a create waiting.
    private var currentJobDeferred = false
    /// The job at fault when `mustRollBack` (nil: the running one).
    private(set) var failedJob: Int?
    /// Whether what failed was a deferred create (its job answers `failure`).
    private(set) var failedInFlush = false
    /// Jobs whose deferred create was refused, with the refusal they answer instead of their result.
    private(set) var refused: [Int: LarderError] = [:]
    /// Log entries of refused creates, left out at COMMIT.
    private(set) var droppedChanges: Set<Int> = []
    /// A job went on after its create, which was then refused: run the batch again without deferring.
    private(set) var mustRunWithoutDeferring = false

    init(
        connection: PGConnection, core: StoreCore, uuids: TimeOrderedUUIDs, textIndexer: PGTextIndexer,
        defersInserts: Bool
    ) {
        self.connection = connection
        self.core = core
        self.closedError = nil
        self.uuids = uuids
        self.textIndexer = textIndexer
        self.defersInserts = defersInserts
    }

    private init(core: StoreCore, error: LarderError) {
        connection = nil
        self.core = core
        closedError = error
        uuids = TimeOrderedUUIDs()
        textIndexer = nil
        defersInserts = false
    }

    /// Called before each job's body.
    func beginJob() {
        jobWrote = false
        currentJobDeferred = false
    }

    /// Sends the creates still waiting (between the last job and COMMIT).
    func flushDeferred() {
        guard !deferred.isEmpty else { return }
        _ = try? run([], writes: false)
    }

    static func closed(_ core: StoreCore, _ error: LarderError) -> PGWriteContext {
        PGWriteContext(core: core, error: error)
    }

    /// Called by a job whose body threw: when it had written, the transaction must roll back.
    func jobFailed() {
        if jobWrote { mustRollBack = true }
    }

    /// Runs statements in the batch transaction (BEGIN goes with the first). `writes`: they change data.
    @discardableResult
    func run(_ statements: [PGStatement], writes: Bool) throws(LarderError) -> [PGResult] {
        guard let connection else { throw closedError ?? LarderError(.unavailable, "the store is closed") }
        let waiting = deferred
        deferred = []
        var all = waiting.map(\.statement) + statements
        let prefix = begun ? 0 : 1
        if !begun { all.insert(PGStatement("BEGIN"), at: 0) }
        begun = true
        if writes { jobWrote = true }
        do {
            let results = try connection.pipeline(all)
            for (index, create) in waiting.enumerated() where results[prefix + index].rows == 0 {
                if create.job == currentJob {
                    // The job went on as if its create had succeeded.
                    mustRunWithoutDeferring = true
                    mustRollBack = true
                    throw create.conflict
                }
                refused[create.job] = create.conflict
                droppedChanges.insert(create.change)
            }
            return Array(results.dropFirst(prefix + waiting.count))
        } catch let failure as PGFailure {
            let error = connection.error(failure)
            mustRollBack = true
            self.failure = error
            if let index = failure.statementIndex, index >= prefix, index < prefix + waiting.count {
                failedJob = waiting[index - prefix].job
                failedInFlush = true
            }
            throw error
        } catch let error as LarderError {
            mustRollBack = true
            failure = error
            throw error
        } catch {
            let error = LarderError(.internal, "\(connection.label): \(error)")
            mustRollBack = true
            failure = error
            throw error
        }
    }

    @discardableResult
    func one(_ statement: PGStatement, writes: Bool) throws(LarderError) -> PGResult {
        try run([statement], writes: writes)[0]
    }

    /// The document values every write sends: data, its query form when it differs, the search text.
    private static func documentValues(_ document: PreparedDocument) -> [PGValue] {
        let search = document.search.contains(0) ? document.search.map { $0 == 0 ? 0x1F : $0 } : document.search
        return [
            .textBytes(document.data), PGQueryForm.make(document.data).map { .textBytes($0) } ?? .null,
            .textBytes(search),
        ]
    }

    func insert(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord {
        let id = id ?? uuids.next()
        let now = nowMillis()
        // NOT EXISTS refuses a taken id without drawing a `seq` (so LIST cursors number as SQLite's do); ON CONFLICT
        // refuses one that another server inserts at the same moment: this insert waits for that transaction and,
        // once it commits, inserts nothing (CONFLICT), where NOT EXISTS alone would fail on the unique index.
        let statement = PGStatement(
                """
                WITH c AS (INSERT INTO collections(name, created_at) VALUES ($1, $3) ON CONFLICT (name) DO NOTHING)
                INSERT INTO documents(collection, id, rev, created_at, updated_at, data, q, search)
                SELECT $1, $2, 1, $3, $3, $4, coalesce($5, $4)::jsonb, $6
                WHERE NOT EXISTS (SELECT 1 FROM documents WHERE collection = $1 AND id = $2)
                ON CONFLICT (collection, id) DO NOTHING
                RETURNING seq
                """, [.text(collection), .uuid(id), .int(now)] + PGWriteContext.documentValues(document),
                name: "doc_insert")
        let conflict = LarderError(
            .conflict, "a document with id \(id.wireString) already exists in '\(collection)'; "
                + "use REPLACE or PATCH to change it", field: "id")
        let record = StoredRecord(id: id, rev: 1, createdAt: now, updatedAt: now, data: document.data)
        if defersInserts && !jobWrote && currentJob >= 0 {
            deferred.append(Deferred(statement: statement, job: currentJob, change: changes.count, conflict: conflict))
            jobWrote = true
            currentJobDeferred = true
            recordChange(.create, collection, record: record)
            return record
        }
        guard try one(statement, writes: false).rows == 1 else { throw conflict }
        jobWrote = true
        recordChange(.create, collection, record: record)
        return record
    }

    static func conflict(_ current: Int64, _ expected: Int64) -> LarderError {
        LarderError(
            .conflict, "the document is at revision \(current), not \(expected); read it again and retry",
            field: "rev", details: ["currentRev": .int(current)])
    }

    func replace(_ collection: String, id: UUID, document: PreparedDocument, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try SQLiteStore.validateCollection(collection)
        // Checked before the revision, as on SQLite (which reads the row first, then checks the size at its update):
        // a document over the limit is refused whatever the revision, and the refusal writes nothing.
        let limit = core.configuration.maxDocumentBytes
        let oversized = document.data.count > limit
        let now = nowMillis()
        let result = try one(
            PGStatement(
                """
                WITH cur AS (SELECT seq, rev, created_at, data FROM documents
                    WHERE collection = $1 AND id = $2 FOR UPDATE),
                upd AS (UPDATE documents d SET rev = cur.rev + 1, updated_at = $4, data = $5,
                        q = coalesce($6, $5)::jsonb, search = $7
                    FROM cur WHERE d.seq = cur.seq AND ($3::int8 IS NULL OR cur.rev = $3) AND NOT $8
                    RETURNING d.rev)
                SELECT cur.rev, cur.created_at, cur.data, (SELECT rev FROM upd) FROM cur
                """,
                [.text(collection), .uuid(id), expectedRev.map { .int($0) } ?? .null, .int(now)]
                    + PGWriteContext.documentValues(document) + [.bool(oversized)],
                name: "doc_replace"), writes: false)
        guard result.rows == 1 else { throw SQLiteStore.notFound(collection, id) }
        let current = result.int(0, 0)
        if let expectedRev, expectedRev != current { throw PGWriteContext.conflict(current, expectedRev) }
        try checkSize(document)
        guard !result.isNull(0, 3) else { throw LarderError(.internal, "the replace of \(id.wireString) was lost") }
        jobWrote = true
        let record = StoredRecord(
            id: id, rev: result.int(0, 3), createdAt: result.int(0, 1), updatedAt: now, data: document.data)
        recordChange(.replace, collection, record: record, previous: result.bytes(0, 2))
        return record
    }

    func patch(_ collection: String, id: UUID, patch: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try SQLiteStore.validateCollection(collection)
        let current = try one(
            PGStatement(
                "SELECT seq, rev, created_at, data FROM documents WHERE collection = $1 AND id = $2 FOR UPDATE",
                [.text(collection), .uuid(id)], name: "doc_current"), writes: false)
        guard current.rows == 1 else { throw SQLiteStore.notFound(collection, id) }
        let rev = current.int(0, 1)
        if let expectedRev, expectedRev != rev { throw PGWriteContext.conflict(rev, expectedRev) }
        let previous = current.bytes(0, 3)
        let document = PreparedDocument(MergePatch.apply(patch, to: try JSONParser.parseObject(previous)))
        try checkSize(document, field: "patch")
        let now = nowMillis()
        try one(
            PGStatement(
                """
                UPDATE documents SET rev = $2, updated_at = $3, data = $4, q = coalesce($5, $4)::jsonb, search = $6
                WHERE seq = $1
                """, [.int(current.int(0, 0)), .int(rev + 1), .int(now)] + PGWriteContext.documentValues(document),
                name: "doc_update"), writes: true)
        let record = StoredRecord(
            id: id, rev: rev + 1, createdAt: current.int(0, 2), updatedAt: now, data: document.data)
        recordChange(.patch, collection, record: record, previous: previous)
        return record
    }

    func delete(_ collection: String, id: UUID, expectedRev: Int64?) throws(LarderError)
        -> (rev: Int64, blobsDeleted: Int)
    {
        try SQLiteStore.validateCollection(collection)
        let result = try one(
            PGStatement(
                """
                WITH cur AS (SELECT seq, rev, created_at, updated_at, data FROM documents
                    WHERE collection = $1 AND id = $2 FOR UPDATE),
                del AS (DELETE FROM documents d USING cur WHERE d.seq = cur.seq AND ($3::int8 IS NULL OR cur.rev = $3)
                    RETURNING d.seq),
                b AS (DELETE FROM blobs WHERE attached_collection = $1 AND attached_id = $2
                    AND EXISTS (SELECT 1 FROM del) RETURNING 1)
                SELECT cur.rev, cur.created_at, cur.updated_at, cur.data, EXISTS (SELECT 1 FROM del),
                    (SELECT count(*) FROM b) FROM cur
                """, [.text(collection), .uuid(id), expectedRev.map { .int($0) } ?? .null], name: "doc_delete"),
            writes: false)
        guard result.rows == 1 else { throw SQLiteStore.notFound(collection, id) }
        let rev = result.int(0, 0)
        guard result.bool(0, 4) else { throw PGWriteContext.conflict(rev, expectedRev ?? rev) }
        jobWrote = true
        recordChange(
            .delete, collection,
            record: StoredRecord(
                id: id, rev: rev, createdAt: result.int(0, 1), updatedAt: result.int(0, 2), data: result.bytes(0, 3)))
        return (rev, Int(result.int(0, 5)))
    }

    func dropCollection(_ name: String) throws(LarderError) -> (documents: Int, blobs: Int) {
        try SQLiteStore.validateCollection(name)
        let found = try run(
            [
                PGStatement("SELECT 1 FROM collections WHERE name = $1 FOR UPDATE", [.text(name)], name: "coll_lock"),
                PGStatement("SELECT pg_name FROM field_indexes WHERE collection = $1", [.text(name)], name: "coll_ix"),
            ], writes: false)
        guard found[0].rows == 1 else { throw LarderError(.notFound, "no collection '\(name)'", field: "collection") }
        var statements: [PGStatement] = (0..<found[1].rows).map {
            // Index names are "lx_" and hex digits (see `createIndex`).
            PGStatement("DROP INDEX IF EXISTS \(PGSQL.identifier(found[1].text($0, 0)))")
        }
        let first = statements.count
        statements += [
            PGStatement("DELETE FROM text_collections WHERE name = $1", [.text(name)], name: "drop_text"),
            PGStatement("DELETE FROM field_indexes WHERE collection = $1", [.text(name)], name: "drop_ix"),
            PGStatement("DELETE FROM blobs WHERE attached_collection = $1", [.text(name)], name: "drop_blobs"),
            PGStatement("DELETE FROM documents WHERE collection = $1", [.text(name)], name: "drop_docs"),
            PGStatement("DELETE FROM collections WHERE name = $1", [.text(name)], name: "drop_coll"),
        ]
        let results = try run(statements, writes: true)
        recordChange(.drop, name, record: nil)
        let textIndexer = self.textIndexer
        // The trigram index (which a build may be making right now) is dropped by the indexer, after any build.
        afterCommit.append { textIndexer?.drop(name) }
        return (results[first + 3].affected, results[first + 2].affected)
    }

    func createIndex(_ collection: String, field: FieldPath) throws(LarderError) -> (name: String, created: Bool) {
        try SQLiteStore.validateCollection(collection)
        guard field.envelope == nil else {
            throw LarderError(
                .invalidArgument, "indexes are declared on data fields; envelope fields need none", field: "field")
        }
        // The name answered is the one SQLite answers; PostgreSQL's own (at most 63 bytes, unique per database) is a
        // hash of both, so no collection name reaches the index's identifier.
        let name = "ix_\(collection)_" + String(SHA256.hex(Array(field.description.utf8)).prefix(16))
        let pgName = "lx_" + String(SHA256.hex(Array((collection + "\u{0}" + field.description).utf8)).prefix(32))
        // Servers declaring the same index at once take turns (two CREATE INDEX of one name would collide): the
        // lock lasts until this batch commits, and the second then finds the index declared.
        let exists = try run(
            [
                PGStatement("SELECT pg_advisory_xact_lock(hashtext($1))", [.text(pgName)], name: "ix_lock"),
                PGStatement(
                    "SELECT 1 FROM field_indexes WHERE collection = $1 AND path = $2",
                    [.text(collection), .text(field.description)], name: "ix_exists"),
            ], writes: false)[1]
        if exists.rows > 0 { return (name, false) }
        let pgField = PGField(path: field)
        try run(
            [
                PGStatement(
                    "INSERT INTO collections(name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                    [.text(collection), .int(nowMillis())], name: "coll_ensure"),
                PGStatement(pgField.createIndex(PGSQL.identifier(pgName), collection: collection)),
                PGStatement(
                    "INSERT INTO field_indexes(collection, path, name, pg_name) VALUES ($1, $2, $3, $4)",
                    [.text(collection), .text(field.description), .text(name), .text(pgName)], name: "ix_insert"),
            ], writes: true)
        return (name, true)
    }

    func insertBlob(_ blob: PreparedBlob) throws(LarderError) -> BlobMeta {
        let meta = blob.meta
        let result = try one(
            PGStatement(
                """
                WITH doc AS (SELECT id, rev, created_at, updated_at, data FROM documents
                    WHERE $9::text IS NOT NULL AND collection = $9 AND id = $10 FOR KEY SHARE),
                ins AS (INSERT INTO blobs(id, size, sha256, content_type, width, height, created_at,
                        attached_collection, attached_id, bytes)
                    SELECT $1, $2, $3, $4, $5, $6, $7, $9, $10, $8
                    WHERE ($9::text IS NULL OR EXISTS (SELECT 1 FROM doc))
                        AND NOT EXISTS (SELECT 1 FROM blobs WHERE id = $1)
                    ON CONFLICT (id) DO NOTHING
                    RETURNING 1)
                SELECT EXISTS (SELECT 1 FROM ins), d.id, d.rev, d.created_at, d.updated_at, d.data
                FROM (SELECT 1) AS one LEFT JOIN doc d ON true
                """,
                [
                    .uuid(meta.id), .int(meta.size), .text(meta.sha256), .text(meta.contentType),
                    .int(Int64(meta.width)), .int(Int64(meta.height)), .int(meta.createdAt), .bytes(blob.bytes),
                    meta.attachedTo.map { .text($0.collection) } ?? .null,
                    meta.attachedTo.map { .uuid($0.id) } ?? .null,
                ], name: "blob_insert"), writes: false)
        if let attachment = meta.attachedTo, result.isNull(0, 1) {
            throw LarderError(
                .notFound,
                "cannot attach the blob: no document \(attachment.id.wireString) in '\(attachment.collection)'",
                field: "attach.id")
        }
        guard result.bool(0, 0) else {
            throw LarderError(.conflict, "a blob with id \(meta.id.wireString) already exists", field: "id")
        }
        jobWrote = true
        if let attachment = meta.attachedTo {
            recordChange(.blobAttach, attachment.collection, record: PostgresStore.record(result, 0, at: 1), blob: meta)
        }
        return meta
    }

    func blobDelete(_ id: UUID) throws(LarderError) {
        let result = try one(
            PGStatement(
                """
                WITH b AS (DELETE FROM blobs WHERE id = $1 RETURNING \(PostgresStore.blobColumns))
                SELECT b.*, d.id, d.rev, d.created_at, d.updated_at, d.data
                FROM b LEFT JOIN documents d ON d.collection = b.attached_collection AND d.id = b.attached_id
                """, [.uuid(id)], name: "blob_delete"), writes: false)
        guard result.rows == 1 else { throw SQLiteStore.blobNotFound(id) }
        jobWrote = true
        let meta = PostgresStore.blobMeta(result, 0)
        if let attachment = meta.attachedTo, !result.isNull(0, 9) {
            recordChange(.blobDelete, attachment.collection, record: PostgresStore.record(result, 0, at: 9), blob: meta)
        }
    }

    /// Logs a change of this transaction; its sequence number is given at COMMIT.
    func recordChange(
        _ kind: ChangeKind, _ collection: String, record: StoredRecord?, blob: BlobMeta? = nil, previous: [UInt8]? = nil
    ) {
        changes.append(
            ChangeEntry(
                seq: 0, kind: kind, collection: collection, time: nowMillis(), record: record, blob: blob,
                previous: previous))
    }
}
