import CSQLite
import Dispatch
import Foundation
import LarderWire

/// The SQLite implementation of `DocumentStore` and `BlobStore`.
///
/// One file `larder.sqlite` in the data directory, WAL mode. Documents live in one `documents` table keyed by
/// (collection, id), so collection names never reach SQL text except as bound values (and, validated, in index names).
/// A blob stored in one frame (BLOB_PUT) keeps its bytes in its row: they, their metadata and the document they belong
/// to commit (and are deleted) in one transaction. An upload's bytes (BLOB_UPLOAD) are a file in `blobs/`, which
/// becomes its blob's (`BlobFiles` gives the rules that keep files and rows in step).
public final class SQLiteStore: GroupCommitStore, CoreBackedStore, @unchecked Sendable {
    let core: StoreCore
    let writer: SQLiteWriter
    let readers: ReaderPool
    /// Readers of large blobs by chunks and ranges, which do not map the file: a 200 MB blob read through a mapping
    /// would stay in the server's resident set (as file pages) long after; read with pread it passes through.
    let chunkReaders: ReaderPool
    /// The trigram index's own file and thread (nil without FTS5's trigram tokenizer: text search then scans).
    package let textIndexer: TextIndexer?
    /// This process's hold on the data directory (one process per directory).
    private let directoryLock: DataDirectoryLock
    /// What the start-up found wrong and could not mend (blobs whose file is missing), for the server to log.
    public let startupWarnings: [String]

    /// Opens (creating when needed) the store in `configuration.dataDirectory`.
    public init(configuration: StoreConfiguration = StoreConfiguration()) throws(LarderError) {
        let directory = configuration.dataDirectory
        do throws(LarderError) {
            try PrivateFiles.makeDirectory(directory)
        } catch {
            throw LarderError(
                .internal, "cannot create the data directory '\(directory)': check the path and its permissions")
        }
        let exposure = PrivateFiles.exposureWarning(directory)
        guard access(directory, W_OK | X_OK) == 0 else {
            throw LarderError(
                .internal, "the data directory '\(directory)' is not writable; fix its permissions or choose another")
        }
        // Before anything is read: another process's writes would go unseen by this one's caches.
        let directoryLock = try DataDirectoryLock(directory: directory)
        self.directoryLock = directoryLock
        let path = (directory as NSString).appendingPathComponent("larder.sqlite")
        let connection = try SQLiteConnection(path: path, readOnly: false)
        try connection.execute("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=\(configuration.synchronous.rawValue)")
        let hasTrigram = (try? connection.execute(
            "CREATE VIRTUAL TABLE temp.larder_probe USING fts5(x, tokenize='trigram'); DROP TABLE temp.larder_probe"))
            != nil
        try SQLiteSchema.migrate(connection, trigram: hasTrigram)
        let files = try BlobFiles(directory: directory, syncEachChunk: configuration.synchronous == .full)
        startupWarnings = (exposure.map { [$0] } ?? []) + (try SQLiteStore.recoverFiles(files, connection))
        let lastChangeSeq = try connection.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'changes'") ?? 0
        let core = StoreCore(
            configuration: configuration, databasePath: path, hasTrigram: hasTrigram, lastChangeSeq: lastChangeSeq,
            blobFiles: files)
        core.loadIndexes(try connection.query("SELECT collection, path FROM field_indexes") { ($0.text(0), $0.text(1)) })
        core.schemas.replaceAll(
            SchemaCatalog.entries(
                try connection.query(SchemaCatalog.selectAll) {
                    ($0.text(0), $0.int(1), $0.isNull(2) ? nil : $0.bytes(2), $0.text(3))
                }, limits: core.configuration.schemaLimits))
        self.core = core
        let writer = try SQLiteWriter(connection: connection, core: core)
        // A store that does not use the index (tests' and benchmarks' scans) leaves it alone; its writer keeps the
        // backlog either way.
        let textIndexer =
            hasTrigram && configuration.useTextIndex
            ? try TextIndexer(directory: directory, documents: connection, core: core, writer: writer) : nil
        writer.textIndexer = textIndexer
        self.writer = writer
        self.textIndexer = textIndexer
        self.readers = try ReaderPool(path: path, textIndexPath: textIndexer?.path, count: configuration.readerCount,
            hook: configuration.readerHook)
        self.chunkReaders = try ReaderPool(
            path: path, textIndexPath: nil, count: configuration.readerCount, mapped: false)
        // A backlog left by the last run (or a start-over's) is worked through in the background.
        textIndexer?.poke()
    }

    deinit { close() }

    public var configuration: StoreConfiguration { core.configuration }

    /// The database file's path (`larder.sqlite` in the data directory).
    package var databasePath: String { core.databasePath }

    var feed: ChangeFeedState { core.feed }

    // MARK: Writes

    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) {
        let job = SQLiteWriter.Job { context in
            let numbered = context.numberedThrough
            return context.runJob(
                body, begin: { () throws(LarderError) in try context.connection!.run(.savepoint) },
                end: { () throws(LarderError) in try context.connection!.run(.release) },
                undo: {
                    context.rollbackSavepoint()
                    context.unnumber(after: numbered)
                }, completion: completion)
        }
        if !writer.enqueue(job) { completion(.failure(LarderError(.unavailable, "the store is closed"))) }
    }

    /// Runs the body without a savepoint. A refusal changed no row (the single write checks first; a failed statement
    /// undoes itself); a failure after a row changed (an I/O error, a full disk) cannot be undone alone, so it fails
    /// the whole group commit (`SQLiteWriteContext.unguardedFailure`), and nothing of it is acknowledged.
    public func submitSingleWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) {
        let job = SQLiteWriter.Job { context in
            let before = context.totalChanges
            let numbered = context.numberedThrough
            return context.runJob(
                body, begin: {},
                undo: {
                    context.unguardedFailed(changesBefore: before)
                    context.unnumber(after: numbered)
                }, completion: completion)
        }
        if !writer.enqueue(job) { completion(.failure(LarderError(.unavailable, "the store is closed"))) }
    }

    package var isOnWriterQueue: Bool { writer.isOnQueue }

    // MARK: Point reads

    static let recordColumns = "id, rev, createdAt, updatedAt, data"

    static func record(_ row: SQLiteStatement, at offset: Int32 = 0) -> StoredRecord {
        StoredRecord(
            id: row.uuid(offset), rev: row.int(offset + 1), createdAt: row.int(offset + 2),
            updatedAt: row.int(offset + 3), data: row.bytes(offset + 4))
    }

    public func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord {
        try CollectionName.validate(collection)
        return try readers.read { db throws(LarderError) in try SQLiteStore.getRecord(db, collection, id) }
    }

    /// The document `id` of `collection` read with `db` (validated collection name), or NOT_FOUND.
    static func getRecord(_ db: SQLiteConnection, _ collection: String, _ id: UUID) throws(LarderError) -> StoredRecord {
        try withRecordRow(db, collection, id) { SQLiteStore.record($0) }
    }

    /// Calls `body` with the row of document `id` (columns `recordColumns`), or throws NOT_FOUND.
    static func withRecordRow<R>(
        _ db: SQLiteConnection, _ collection: String, _ id: UUID, ownedBy owner: String? = nil,
        _ body: (SQLiteStatement) -> R
    ) throws(LarderError) -> R {
        let statement = try db.statement(owner == nil ? .selectRecord : .selectOwnedRecord)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(collection))
        try statement.bindUUID(id, at: 2)
        if let owner { try statement.bind(at: 3, .text(owner)) }
        guard try statement.step() else { throw StoreRules.notFound(collection, id) }
        return body(statement)
    }

    public func getMany(_ collection: String, ids: [UUID]) throws(LarderError) -> (records: [StoredRecord], missing: [UUID]) {
        try CollectionName.validate(collection)
        let unique = try ReadLimits.uniqueIds(ids)
        let list = JSON.array(unique.map { .string($0.wireString) })
        let rows = try readers.read { db throws(LarderError) in
            var rows: [StoredRecord] = []
            var budget = PageBudget(maxBytes: configuration.maxPageBytes)
            var fits = true
            try db.forEachRow(
                "SELECT \(SQLiteStore.recordColumns) FROM documents WHERE collection = ?1 AND id IN "
                    + "(SELECT value FROM json_each(?2))",
                [.text(collection), .text(String(decoding: list.bytes, as: UTF8.self))]
            ) { row in
                let record = SQLiteStore.record(row)
                fits = budget.admit(record, isFirst: rows.isEmpty)
                if fits { rows.append(record) }
                return fits
            }
            guard fits else { throw ReadLimits.tooLarge(unique.count, maxBytes: configuration.maxPageBytes) }
            return rows
        }
        return ReadLimits.answer(unique, rows)
    }

    public func list(_ collection: String, limit: Int, cursor: String?) throws(LarderError) -> Page {
        try CollectionName.validate(collection)
        try StoreRules.checkLimit(limit)
        let position = try SeqPosition.list(collection, cursor: cursor)
        let statement = (
            sql: "SELECT \(SQLiteStore.recordColumns), seq FROM documents WHERE collection = ?1 AND seq > ?2 "
                + "ORDER BY seq LIMIT ?3",
            values: [SQLValue.text(collection), .int(position.after), .int(Int64(limit + 1))]
        )
        let (page, more) = try readPage(collection, text: nil, { _ in statement }, limit: limit) {
            (SQLiteStore.record($0), $0.int(5))
        }
        return Page(records: page.map(\.0), nextCursor: more ? position.next(after: page.last!.1) : nil)
    }

    public func collections() throws(LarderError) -> [CollectionInfo] {
        try readers.read { db throws(LarderError) in
            try db.query(
                "SELECT name, (SELECT count(*) FROM documents WHERE collection = c.name) FROM collections AS c "
                    + "ORDER BY name"
            ) { CollectionInfo(name: $0.text(0), count: Int($0.int(1))) }
        }
    }

    public func schema(_ collection: String) throws(LarderError) -> StoredSchema? {
        try CollectionName.validate(collection)
        let rows = try readers.read { db throws(LarderError) in
            try db.query(
                "SELECT version, schema, action FROM larder_schemas WHERE collection = ?1", [.text(collection)]
            ) { ($0.int(0), $0.isNull(1) ? nil : $0.bytes(1), $0.text(2)) }
        }
        guard let (version, text, action) = rows.first else { return nil }
        return StoredSchema(
            version: version, schema: try text.map { bytes throws(LarderError) in try JSONParser.parseObject(bytes) },
            action: SchemaValidationAction(rawValue: action) ?? .error)
    }

    public func stats() throws(LarderError) -> StoreStats {
        let (documents, blobs, changes, lastChange) = try readers.read(transaction: true) { db throws(LarderError) in
            (Int(try db.scalar("SELECT count(*) FROM documents") ?? 0),
                Int(try db.scalar("SELECT count(*) FROM blobs") ?? 0),
                Int(try db.scalar(
                    "SELECT (SELECT count(*) FROM changes) + (SELECT count(*) FROM documents WHERE createSeq > "
                        + "(SELECT value FROM larder_meta WHERE key = 'changesPrunedThrough'))") ?? 0),
                try db.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'changes'") ?? 0)
        }
        var bytes: Int64 = 0
        for suffix in ["", "-wal"] {
            let attributes = try? FileManager.default.attributesOfItem(atPath: core.databasePath + suffix)
            bytes += (attributes?[.size] as? NSNumber)?.int64Value ?? 0
        }
        return StoreStats(
            documents: documents, blobs: blobs, databaseBytes: bytes, changes: changes, lastChangeSeq: lastChange,
            writer: writer.stats)
    }

    public func checkpoint() throws(LarderError) {
        let result: LarderError? = writer.exclusive { connection in
            guard let connection else { return LarderError(.unavailable, "the store is closed") }
            do throws(LarderError) {
                try connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                return nil
            } catch {
                return error
            }
        }
        if let result { throw result }
    }

    public func close() {
        // While the writer still settles its passes: a cleanly closed store leaves little or nothing in the backlog.
        textIndexer?.close()
        writer.close()
        feed.removeAllListeners()
        readers.close()
        chunkReaders.close()
        directoryLock.release()
    }

    /// `PRAGMA integrity_check` on a reader: "ok" when the database is sound.
    /// SQLite's `integrity_check`, then the trigram index checked against the documents it indexes: `ok` when both
    /// pass, otherwise what they reported.
    public func integrityCheck() throws(LarderError) -> String {
        let pages = try readers.read { db throws(LarderError) in
            try db.query("PRAGMA integrity_check") { $0.text(0) }.joined(separator: "\n")
        }
        guard pages == "ok", let textIndexer else { return pages }
        // The documents still in the backlog go in first (that exercises the passes); the check holds either way.
        do throws(LarderError) {
            try textIndexer.catchUp()
        } catch {
            return "trigram index: \(error.message)"
        }
        return textIndexer.check()
    }

}
