import Foundation
import LarderIO
import LarderSchema
import LarderWire

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
    let textIndexer: PGTextIndexer?
    /// Schemas set in this transaction, before its COMMIT puts them in the store's catalog.
    private var pendingSchemas: [String: SchemaEntry] = [:]
    /// The schema version each collection written in this transaction was checked against (0: none), which the
    /// batch confirms just before its COMMIT (`PGWriter.schemaCheck`).
    private(set) var schemaVersions: [String: Int64] = [:]

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

    /// A context for one run of a batch on `connection`; without one, a context that answers `closedError` to every
    /// write (`closed`).
    init(
        connection: PGConnection?, core: StoreCore, closedError: LarderError? = nil,
        uuids: TimeOrderedUUIDs = TimeOrderedUUIDs(), textIndexer: PGTextIndexer? = nil, defersInserts: Bool = false
    ) {
        (self.connection, self.core, self.closedError) = (connection, core, closedError)
        (self.uuids, self.textIndexer, self.defersInserts) = (uuids, textIndexer, defersInserts)
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
        PGWriteContext(connection: nil, core: core, closedError: error)
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

    /// The document values every write sends: data, its query form when it differs, the search text, the owner.
    static func documentValues(_ document: PreparedDocument) -> [PGValue] {
        let search = document.search.contains(0) ? document.search.map { $0 == 0 ? 0x1F : $0 } : document.search
        return [
            .textBytes(document.data), PGQueryForm.make(document.data).map { .textBytes($0) } ?? .null,
            .textBytes(search), document.owner.map { .text($0) } ?? .null,
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
                INSERT INTO documents(collection, id, rev, created_at, updated_at, data, q, search, owner)
                SELECT $1, $2, 1, $3, $3, $4, coalesce($5, $4)::jsonb, $6, $7
                WHERE NOT EXISTS (SELECT 1 FROM documents WHERE collection = $1 AND id = $2)
                ON CONFLICT (collection, id) DO NOTHING
                RETURNING seq
                """, [.text(collection), .uuid(id), .int(now)] + PGWriteContext.documentValues(document),
                name: "doc_insert")
        let conflict = WriteRules.idTaken(id, in: collection)
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

    func schemaEntry(_ collection: String) -> SchemaEntry? {
        let entry = pendingSchemas[collection] ?? core.schemas.entry(collection)
        schemaVersions[collection] = entry?.version ?? 0
        return entry
    }

    func setSchema(_ collection: String, schema: CollectionSchema?, action: SchemaValidationAction)
        throws(LarderError) -> Int64
    {
        try CollectionName.validate(collection)
        // The row lock the upsert takes orders concurrent SCHEMA_SETs of the collection on every server.
        let result = try one(
            PGStatement(
                """
                INSERT INTO larder_schemas(collection, version, schema, action) VALUES ($1, 1, $2, $3)
                ON CONFLICT (collection) DO UPDATE SET version = larder_schemas.version + 1, schema = excluded.schema,
                    action = excluded.action
                RETURNING version
                """,
                [.text(collection), Self.schemaText(schema).map { .textBytes($0) } ?? .null, .text(action.rawValue)],
                name: "schema_set"), writes: true)
        let entry = SchemaEntry(version: result.int(0, 0), schema: schema, action: action)
        pendingSchemas[collection] = entry
        let schemas = core.schemas
        afterCommit.append { schemas.set(collection, entry) }
        return entry.version
    }

    /// Logs a change of this transaction; its sequence number is given at COMMIT.
    func recordChange(
        _ kind: ChangeKind, _ collection: String, record: StoredRecord?, blob: BlobInfo? = nil, previous: [UInt8]? = nil
    ) {
        changes.append(
            ChangeEntry(
                seq: 0, kind: kind, collection: collection, time: nowMillis(), record: record, blob: blob,
                previous: previous))
    }
}
