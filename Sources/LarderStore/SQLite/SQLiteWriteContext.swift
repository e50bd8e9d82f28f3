import CSQLite
import Foundation
import LarderIO
import LarderSchema
import LarderWire

/// The write operations on the writer connection, inside the open group-commit transaction.
final class SQLiteWriteContext: PreparedWriteContext {
    let connection: SQLiteConnection?
    let core: StoreCore
    let closedError: LarderError?
    /// Side effects on in-memory state that may happen only once the transaction committed.
    var afterCommit: [() -> Void] = []
    /// Whether `afterCommit` already unlinks the blob files this transaction deleted.
    var collectsFiles = false
    /// The changes logged in this transaction, in order; published to the change listeners after COMMIT.
    var changes: [ChangeEntry] = []
    /// The last change committed before this transaction: changes are numbered from it, one after another (a job
    /// undone takes its entries out of `changes`, so its numbers are used again and the log has no holes).
    private let committedSeq: Int64

    /// The sequence number of the next change.
    func nextChangeSeq() -> Int64 { (changes.last?.seq ?? committedSeq) + 1 }

    /// Where new document ids come from (the writer's, used only on its queue).
    private let uuids: TimeOrderedUUIDs
    /// The collections known to have their row (the writer's, used only on its queue).
    let collections: KnownCollections
    /// Where new rows' numbers come from (the writer's, used only on its queue).
    let documentNumbers: DocumentNumbers
    /// The collections whose rows keep their search text (the writer's, used only on its queue).
    private let covered: CoveredCollections
    /// Which request keys the key table may hold, and which rows keep a CREATE's key (shared by the writers open on
    /// this file; nil when closed).
    let requestKeys: RequestKeyIndex?
    /// The request key of the write running now (`keyed`), when it may ride in the row its CREATE makes.
    private var keyInFlight: RequestKey.RowMark?
    /// The key the running write claimed last (`claimRequestKey`), with its hash: storing it needs the hash again
    /// (`hash(of:)`).
    var claimedKey: (key: UUID, hash: UInt64)?
    /// Set when the running write's CREATE kept its key in the row it made (`keyed`): `storeRequestKey` has nothing
    /// to store.
    var keyKeptInRow = false
    /// Schemas set in this transaction, before its COMMIT puts them in the store's catalog.
    private var pendingSchemas: [String: SchemaEntry] = [:]

    init(
        connection: SQLiteConnection, core: StoreCore, uuids: TimeOrderedUUIDs, collections: KnownCollections,
        documentNumbers: DocumentNumbers, covered: CoveredCollections, requestKeys: RequestKeyIndex
    ) {
        self.connection = connection
        self.core = core
        self.closedError = nil
        self.uuids = uuids
        self.collections = collections
        self.documentNumbers = documentNumbers
        self.covered = covered
        self.requestKeys = requestKeys
        self.committedSeq = core.feed.lastSeq
    }

    private init(core: StoreCore, error: LarderError) {
        self.connection = nil
        self.core = core
        self.closedError = error
        self.uuids = TimeOrderedUUIDs()
        self.collections = KnownCollections()
        self.documentNumbers = DocumentNumbers(highest: 0)
        self.covered = CoveredCollections([])
        self.requestKeys = nil
        self.committedSeq = 0
    }

    static func closed(_ core: StoreCore) -> SQLiteWriteContext {
        SQLiteWriteContext(core: core, error: LarderError(.unavailable, "the store is closed"))
    }

    var db: SQLiteConnection { connection! }

    func rollbackSavepoint() {
        try? db.run(.rollbackToSavepoint)
        try? db.run(.release)
        collections.forgetPending()
    }

    /// Rows changed on this connection so far (`sqlite3_total_changes`: a statement that failed and undid itself
    /// adds nothing).
    var totalChanges: Int32 { connection.map { sqlite3_total_changes($0.handle) } ?? 0 }

    /// Set when a write run without a savepoint failed after changing rows: the transaction holds part of it, so the
    /// writer rolls the whole group commit back and answers every write in it with this error.
    private(set) var unguardedFailure: LarderError?

    func unguardedFailed(changesBefore: Int32) {
        collections.forgetPending()
        guard totalChanges != changesBefore, unguardedFailure == nil else { return }
        unguardedFailure = LarderError(
            .unavailable, "a write failed halfway and its group commit was rolled back; nothing in it was applied, retry")
    }

    private func ensureCollection(_ name: String) throws(LarderError) {
        guard !collections.contains(name) else { return }
        let statement = try db.statement(.ensureCollection)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(name))
        try statement.bind(at: 2, .int(nowMillis()))
        while try statement.step() {}
        collections.ensured(name)
    }

    /// Inserts a document whose collection name and size were checked.
    func insert(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord {
        try ensureCollection(collection)
        let id = id ?? uuids.next()
        let now = nowMillis()
        // The create event is the row itself (`createSeq`): no second copy of the document in `changes`.
        let seq = nextChangeSeq()
        let statement = try db.statement(.insertDocument)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(collection))
        try statement.bindUUID(id, at: 2)
        try statement.bind(at: 3, .int(now))
        try statement.bindText(document.data, at: 4)
        let keepsText = covered.contains(collection)
        try bindSearch(keepsText ? document : nil, at: 5, in: statement)
        try statement.bind(at: 6, .int(seq))
        try statement.bind(at: 7, document.owner.map { .text($0) } ?? .null)
        let number = documentNumbers.next()
        try statement.bind(at: 8, .int(number))
        // A CREATE's request key rides in its row when the row keeps the document it brought (its answer can then
        // be made again for a retry); before the row is written, the index learns where it is.
        func write() throws(LarderError) {
            do throws(LarderError) {
                while try statement.step() {}
            } catch where error.status == .conflict {
                throw WriteRules.idTaken(id, in: collection)
            }
        }
        if let mark = keyInFlight, let requestKeys, mark.isBrought(document.data) {
            requestKeys.storedInRow(hash(of: mark.key), row: number)
            try mark.withBytes { (bytes) throws(LarderError) in try statement.withBlob(bytes, at: 9, write) }
            keyKeptInRow = true
        } else {
            try statement.bind(at: 9, .null)
            try write()
            keyKeptInRow = false
        }
        if keepsText { try enterBacklog(seq: number, old: nil) }
        let record = StoredRecord(id: id, rev: 1, createdAt: now, updatedAt: now, data: document.data)
        changes.append(ChangeEntry(seq: seq, kind: .create, collection: collection, time: now, record: record))
        return record
    }

    /// Runs `create` with `key` riding in the row it makes (`RequestKey.rowMark`): the key then needs no row of its
    /// own in `request_keys` until the document goes (`moveRowKey`); the index finds it for a retry
    /// (`claimRequestKey`).
    func keyed(_ key: RequestKey, _ create: () throws(LarderError) -> StoredRecord) throws(LarderError)
        -> StoredRecord
    {
        keyKeptInRow = false
        keyInFlight = key.rowMark
        defer { keyInFlight = nil }
        do {
            return try create()
        } catch {
            // The write failed: no key of it is kept, and the next write's must be stored.
            keyKeptInRow = false
            throw error
        }
    }

    /// Before document `id`'s row goes: the request key its CREATE left in it, if not expired, moves to
    /// `request_keys` with the answer it stands for, so that a retry still finds it.
    private func moveRowKey(_ collection: String, _ id: UUID, createdAt: Int64, mark: [UInt8]) throws(LarderError) {
        guard createdAt >= core.oldestLiveRequestKey(), let requestKeys, let key = RequestKey.key(ofMark: mark)
        else { return }
        let stored = RequestKey.tableRow(collection: collection, id: id, createdAt: createdAt, mark: mark)
        try insertKeyRow(key, stored, createdAt: createdAt, db, requestKeys)
    }

    private struct Current {
        var seq: Int64
        var rev: Int64
        var createdAt: Int64
        var updatedAt: Int64
        var data: [UInt8]
        /// The create event the row still holds (nil once it moved to `changes`).
        var createSeq: Int64?
        /// The row's search text (nil where the collection is not covered).
        var search: [UInt8]?
        /// The request key its CREATE left in it (`RequestKey.rowMark`).
        var createKey: [UInt8]?
    }

    private func current(_ collection: String, _ id: UUID, expectedRev: Int64?) throws(LarderError) -> Current {
        let statement = try db.statement(.selectCurrent)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(collection))
        try statement.bindUUID(id, at: 2)
        guard try statement.step() else { throw StoreRules.notFound(collection, id) }
        let row = Current(
            seq: statement.int(0), rev: statement.int(1), createdAt: statement.int(2), updatedAt: statement.int(3),
            data: statement.bytes(4), createSeq: statement.isNull(5) ? nil : statement.int(5),
            search: statement.isNull(6) ? nil : statement.bytes(6),
            createKey: statement.isNull(7) ? nil : statement.bytes(7))
        if let expectedRev, expectedRev != row.rev {
            throw WriteRules.revisionConflict(current: row.rev, expected: expectedRev)
        }
        return row
    }

    /// Before a document's row changes or goes: its create event, while the row still holds it, moves to `changes`
    /// with the data it was created with (the row's, since nothing changed it yet).
    private func moveCreateToLog(_ row: Current) throws(LarderError) {
        guard row.createSeq != nil else { return }
        let statement = try db.statement(.moveCreateToLog)
        defer { statement.reset() }
        try statement.bind(at: 1, .int(row.seq))
        while try statement.step() {}
    }

    /// Raises the log's durable last number (`sqlite_sequence`, which an insert into `changes` raises itself) to the
    /// last change of this transaction, whose creates live in their rows.
    func raiseChangeSeq() throws(LarderError) {
        guard let last = changes.last?.seq else { return }
        let statement = try db.statement(.raiseChangeSeq)
        defer { statement.reset() }
        try statement.bind(at: 1, .int(last))
        while try statement.step() {}
        if sqlite3_changes(db.handle) == 0 {
            // No change was ever logged in `changes`: the table has no sequence row yet.
            try db.run("INSERT INTO sqlite_sequence(name, seq) VALUES ('changes', ?1)", [.int(last)])
        }
    }

    /// The last row number taken so far (`DocumentNumbers`): read before a write, so that a write that fails can
    /// give its numbers back (`unnumber`).
    var numberedThrough: Int64 { documentNumbers.last }

    func unnumber(after mark: Int64) { documentNumbers.rewind(to: mark) }

    /// Puts document row `seq` of a collection the index covers (`CoveredCollections`, which the caller asks) into
    /// the trigram index's backlog (`TextIndexer`, which states the rule that keeps searches exact): `old` is the text
    /// the index holds for it, the row's before this write (nil for a new row). `INSERT OR IGNORE` keeps a row's first
    /// backlog entry, whose `old` is what the index holds; the entry rolls back with its write. The writer does this
    /// itself, for covered collections only: a trigger would cost every write (a TEMP trigger with a lookup in
    /// `text_collections`: 6.0 µs per create in plain SQLite against 4.7 without, `scripts/storage-format.c`). The
    /// index itself is never written here: every write runs in its own SAVEPOINT, and FTS5 writes its pending terms
    /// out as a new segment at each one (a segment, and soon a merge, per document).
    private func enterBacklog(seq: Int64, old: [UInt8]?) throws(LarderError) {
        guard core.hasTrigram else { return }
        let statement = try db.statement(.enterBacklog)
        defer { statement.reset() }
        try statement.bind(at: 1, .int(seq))
        if let old { try statement.bindText(old, at: 2) } else { try statement.bind(at: 2, .null) }
        while try statement.step() {}
    }

    /// Binds a row's `search`: the text of `document`, given where the trigram index covers its collection, else
    /// NULL.
    private func bindSearch(_ document: PreparedDocument?, at index: Int32, in statement: SQLiteStatement)
        throws(LarderError)
    {
        if let document {
            try statement.bindText(document.search, at: index)
        } else {
            try statement.bind(at: index, .null)
        }
    }

    /// Records the highest row number taken so far (`DocumentNumbers`) before rows go: the numbers of rows that
    /// exist need no record, for the writer starts above the highest of them.
    private func recordNumbersBeforeDeleting() throws(LarderError) {
        let statement = try db.statement(.raiseDocumentSeq)
        defer { statement.reset() }
        try statement.bind(at: 1, .int(documentNumbers.last))
        while try statement.step() {}
    }

    private func update(
        _ collection: String, _ id: UUID, _ row: Current, _ document: PreparedDocument, kind: ChangeKind
    ) throws(LarderError) -> StoredRecord {
        try checkSize(document, field: kind == .patch ? "patch" : "data")
        try moveCreateToLog(row)
        let keepsText = covered.contains(collection)
        if keepsText { try enterBacklog(seq: row.seq, old: row.search) }
        let now = nowMillis()
        let statement = try db.statement(.updateDocument)
        defer { statement.reset() }
        try statement.bind(at: 1, .int(now))
        try statement.bindText(document.data, at: 2)
        try bindSearch(keepsText ? document : nil, at: 3, in: statement)
        try statement.bind(at: 4, .int(row.seq))
        try statement.bind(at: 5, document.owner.map { .text($0) } ?? .null)
        while try statement.step() {}
        let record = StoredRecord(id: id, rev: row.rev + 1, createdAt: row.createdAt, updatedAt: now, data: document.data)
        try recordChange(kind, collection, record: record, previous: row.data)
        return record
    }

    func replace(_ collection: String, id: UUID, document: PreparedDocument, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try CollectionName.validate(collection)
        // The data it had goes into the change log with the new one (a filter can then tell it stopped matching).
        // Before the row is read, as on PostgreSQL: a record that does not match is refused whatever the row.
        let warning = try checkSchema(collection, document, field: "data")
        let row = try current(collection, id, expectedRev: expectedRev)
        let record = try update(collection, id, row, document, kind: .replace)
        warned(collection, id, warning)
        return record
    }

    func patch(_ collection: String, id: UUID, patch: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try CollectionName.validate(collection)
        let row = try current(collection, id, expectedRev: expectedRev)
        let document = try PreparedDocument(merging: patch, into: row.data)
        // The merged record is what must match.
        let warning = try checkSchema(collection, document, field: "patch")
        let record = try update(collection, id, row, document, kind: .patch)
        warned(collection, id, warning)
        return record
    }

    func schemaEntry(_ collection: String) -> SchemaEntry? { pendingSchemas[collection] ?? core.schemas.entry(collection) }

    func setSchema(_ collection: String, schema: CollectionSchema?, action: SchemaValidationAction)
        throws(LarderError) -> Int64
    {
        try CollectionName.validate(collection)
        let version =
            (try db.scalar("SELECT version FROM larder_schemas WHERE collection = ?1", [.text(collection)]) ?? 0) + 1
        try db.run(
            "INSERT INTO larder_schemas(collection, version, schema, action) VALUES (?1, ?2, ?3, ?4) "
                + "ON CONFLICT(collection) DO UPDATE SET version = excluded.version, schema = excluded.schema, "
                + "action = excluded.action",
            [
                .text(collection), .int(version),
                Self.schemaText(schema).map { .text(String(decoding: $0, as: UTF8.self)) } ?? .null,
                .text(action.rawValue),
            ])
        let entry = SchemaEntry(version: version, schema: schema, action: action)
        pendingSchemas[collection] = entry
        let schemas = core.schemas
        afterCommit.append { schemas.set(collection, entry) }
        return version
    }

    func delete(_ collection: String, id: UUID, expectedRev: Int64?) throws(LarderError) -> (rev: Int64, blobsDeleted: Int) {
        try CollectionName.validate(collection)
        // The data goes into the change log, so a subscriber's filter can tell whether the deletion concerns it.
        let row = try current(collection, id, expectedRev: expectedRev)
        try moveCreateToLog(row)
        if let mark = row.createKey { try moveRowKey(collection, id, createdAt: row.createdAt, mark: mark) }
        try recordNumbersBeforeDeleting()
        if covered.contains(collection) { try enterBacklog(seq: row.seq, old: row.search) }
        try db.run("DELETE FROM documents WHERE seq = ?1", [.int(row.seq)])
        let blobs = try db.run(
            "DELETE FROM blobs WHERE attachedCollection = ?1 AND attachedId = ?2",
            [.text(collection), .text(id.wireString)])
        if blobs > 0 { collectBlobFilesAfterCommit() }
        try recordChange(
            .delete, collection,
            record: StoredRecord(id: id, rev: row.rev, createdAt: row.createdAt, updatedAt: row.updatedAt, data: row.data))
        return (row.rev, blobs)
    }

    func dropCollection(_ name: String) throws(LarderError) -> (documents: Int, blobs: Int) {
        try CollectionName.validate(name)
        guard try db.scalar("SELECT 1 FROM collections WHERE name = ?1", [.text(name)]) != nil else {
            throw LarderError(.notFound, "no collection '\(name)'", field: "collection")
        }
        let indexes = try db.query("SELECT name FROM field_indexes WHERE collection = ?1", [.text(name)]) { $0.text(0) }
        for index in indexes {
            // Index names are built from a validated collection name and hex digits only.
            try db.execute("DROP INDEX IF EXISTS \"\(index)\"")
        }
        try db.run("DELETE FROM field_indexes WHERE collection = ?1", [.text(name)])
        // The create events its documents still hold go to the log first: a replay from before the drop sees them.
        try db.run(
            "INSERT INTO changes(seq, collection, kind, time, id, rev, createdAt, updatedAt, data) "
                + "SELECT createSeq, collection, 'create', createdAt, id, 1, createdAt, createdAt, data FROM documents "
                + "WHERE collection = ?1 AND createSeq > (SELECT value FROM larder_meta WHERE key = 'changesPrunedThrough')",
            [.text(name)])
        let keys = try db.query(
            "SELECT id, createdAt, createKey FROM documents WHERE collection = ?1 AND createKey IS NOT NULL "
                + "AND createdAt >= ?2",
            [.text(name), .int(core.oldestLiveRequestKey())]
        ) { (id: $0.uuid(0), createdAt: $0.int(1), mark: $0.bytes(2)) }
        for key in keys { try moveRowKey(name, key.id, createdAt: key.createdAt, mark: key.mark) }
        let blobs = try db.run("DELETE FROM blobs WHERE attachedCollection = ?1", [.text(name)])
        if blobs > 0 { collectBlobFilesAfterCommit() }
        try recordNumbersBeforeDeleting()
        if core.hasTrigram && covered.contains(name) {
            // What the index holds for each document it is to forget.
            try db.run(
                "INSERT OR IGNORE INTO fts_backlog(seq, old) SELECT seq, search FROM documents WHERE collection = ?1",
                [.text(name)])
        }
        let documents = try db.run("DELETE FROM documents WHERE collection = ?1", [.text(name)])
        try db.run("DELETE FROM collections WHERE name = ?1", [.text(name)])
        collections.dropped(name)
        // After the deletions, whose backlog rows tell the trigram index what to remove: a collection created again
        // under this name starts unindexed.
        try db.run("DELETE FROM text_collections WHERE name = ?1", [.text(name)])
        // After the COMMIT, and only if the collection is still uncovered then: a collection created again in the same
        // batch may have been covered again after this.
        let covered = self.covered
        let db = self.db
        afterCommit.append {
            let still = try? db.scalar("SELECT count(*) FROM text_collections WHERE name = ?1", [.text(name)])
            if still == 0 { covered.uncovered(name) }
        }
        // One event for the whole collection, not one per document: a drop costs the log O(1).
        try recordChange(.drop, name, record: nil)
        let core = self.core
        afterCommit.append { core.dropIndexes(of: name) }
        return (documents, blobs)
    }

    func createIndex(_ collection: String, field: FieldPath, collation: String?, strength: Int?) throws(LarderError)
        -> (name: String, created: Bool)
    {
        let tag = try Collation.indexTag(field, collation, strength)
        let name = try WriteRules.indexName(collection, field, tag: tag)
        let path = Collation.indexPath(field, tag)
        if try db.scalar("SELECT 1 FROM field_indexes WHERE collection = ?1 AND path = ?2", [.text(collection), .text(path)])
            != nil
        {
            return (name, false)
        }
        try ensureCollection(collection)
        var key = FieldPath.sortKeySQL(field.sqlLiteral)
        if let tag {
            // The first term of a sort under the collation, as `searchSQL` writes it on an indexed path.
            key = Collation.sqlitePrefixed(key, type: "json_type(data, \(field.sqlLiteral))") + Collation.sqliteClause(tag)
        }
        try db.execute("CREATE INDEX IF NOT EXISTS \"\(name)\" ON documents(collection, \(key))")
        try PlannerStats.describe(db, index: name, PlannerStats.fieldIndex)
        try db.run(
            "INSERT INTO field_indexes(collection, path, name) VALUES (?1, ?2, ?3)",
            [.text(collection), .text(path), .text(name)])
        let core = self.core
        afterCommit.append { core.setIndexed(collection, field) }
        return (name, true)
    }

    func setCollectionRules(_ collection: String, _ rules: CollectionRules) throws(LarderError) {
        try CollectionName.validate(collection)
        let text = String(decoding: JSON.object(rules.json).bytes, as: UTF8.self)
        _ = try db.run(
            "INSERT INTO collection_rules(collection, rules) VALUES (?1, ?2) "
                + "ON CONFLICT(collection) DO UPDATE SET rules = excluded.rules",
            [SQLValue.text(collection), SQLValue.text(text)])
        let core = self.core
        afterCommit.append { core.accessChanged() }
    }

    func insertBlob(_ blob: PreparedBlob) throws(LarderError) -> BlobInfo {
        let meta = blob.meta
        var document: StoredRecord?
        if let attachment = meta.attachedTo {
            document = try self.document(attachment)
            guard document != nil else { throw WriteRules.attachMissing(attachment) }
        }
        do throws(LarderError) {
            try insertBlobRow(meta, bytes: .blob(blob.bytes), chunks: .null, file: .null, in: db)
        } catch where error.status == .conflict {
            throw WriteRules.blobIdTaken(meta.id)
        }
        if let attachment = meta.attachedTo, let document {
            try recordChange(.blobAttach, attachment.collection, record: document, blob: meta)
        }
        return meta
    }

    /// The row of blob `meta`: its bytes in the row, or (with empty `bytes`) in its upload's chunks (`chunks`, blobs
    /// stored before migration 12) or its upload's file (`file`, `BlobFiles`).
    func insertBlobRow(_ meta: BlobInfo, bytes: SQLValue, chunks: SQLValue, file: SQLValue, in connection: SQLiteConnection)
        throws(LarderError)
    {
        try connection.run(
            "INSERT INTO blobs(id, size, sha256, contentType, width, height, createdAt, attachedCollection, "
                + "attachedId, bytes, chunks, file) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            [
                .text(meta.id.wireString), .int(meta.size), .text(meta.sha256), .text(meta.contentType),
                .int(Int64(meta.width)), .int(Int64(meta.height)), .int(meta.createdAtMs),
                meta.attachedTo.map { .text($0.collection) } ?? .null,
                meta.attachedTo.map { .text($0.id.wireString) } ?? .null, bytes, chunks, file,
            ])
    }

    /// The document a blob is (to be) attached to, when it exists (read with `connection`: by default the writer's).
    func document(_ attachment: BlobAttachment, in connection: SQLiteConnection? = nil) throws(LarderError) -> StoredRecord? {
        try (connection ?? db).query(
            "SELECT \(SQLiteStore.recordColumns) FROM documents WHERE collection = ?1 AND id = ?2",
            [.text(attachment.collection), .text(attachment.id.wireString)]
        ) { SQLiteStore.record($0) }.first
    }

    func blobDelete(_ id: UUID) throws(LarderError) {
        let metas = try db.query("SELECT \(SQLiteStore.blobColumns) FROM blobs WHERE id = ?1", [.text(id.wireString)]) {
            SQLiteStore.blobMeta($0)
        }
        guard let meta = metas.first else { throw StoreRules.blobNotFound(id) }
        try db.run("DELETE FROM blobs WHERE id = ?1", [.text(id.wireString)])
        collectBlobFilesAfterCommit()
        if let attachment = meta.attachedTo, let document = try document(attachment) {
            try recordChange(.blobDelete, attachment.collection, record: document, blob: meta)
        }
    }
}
