import Foundation
import LarderWire

/// The write operations on the writer connection, inside the open group-commit transaction.
final class SQLiteWriteContext: PreparedWriteContext {
    let connection: Connection?
    let core: StoreCore
    let closedError: LarderError?
    /// Side effects on in-memory state that may happen only once the transaction committed.
    var afterCommit: [() -> Void] = []
    /// The changes logged in this transaction, in order; published to the change listeners after COMMIT.
    var changes: [ChangeEntry] = []

    /// Where new document ids come from (the writer's, used only on its queue).
    private let uuids: TimeOrderedUUIDs

    init(connection: Connection, core: StoreCore, uuids: TimeOrderedUUIDs) {
        self.connection = connection
        self.core = core
        self.closedError = nil
        self.uuids = uuids
    }

    private init(core: StoreCore, error: LarderError) {
        self.connection = nil
        self.core = core
        self.closedError = error
        self.uuids = TimeOrderedUUIDs()
    }

    static func closed(_ core: StoreCore) -> SQLiteWriteContext {
        SQLiteWriteContext(core: core, error: LarderError(.unavailable, "the store is closed"))
    }

    private var db: Connection { connection! }

    func rollbackSavepoint() {
        try? db.run(.rollbackToSavepoint)
        try? db.run(.release)
    }

    private func ensureCollection(_ name: String) throws(LarderError) {
        let statement = try db.statement(.ensureCollection)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(name))
        try statement.bind(at: 2, .int(nowMillis()))
        while try statement.step() {}
    }

    /// Inserts a document whose collection name and size were checked.
    func insert(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord {
        try ensureCollection(collection)
        let id = id ?? uuids.next()
        let now = nowMillis()
        let statement = try db.statement(.insertDocument)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(collection))
        try statement.bindUUID(id, at: 2)
        try statement.bind(at: 3, .int(now))
        try statement.bindText(document.data, at: 4)
        try statement.bindText(document.search, at: 5)
        do throws(LarderError) {
            while try statement.step() {}
        } catch where error.status == .conflict {
            throw WriteRules.idTaken(id, in: collection)
        }
        let record = StoredRecord(id: id, rev: 1, createdAt: now, updatedAt: now, data: document.data)
        try recordChange(.create, collection, record: record)
        return record
    }

    private struct Current {
        var seq: Int64
        var rev: Int64
        var createdAt: Int64
        var updatedAt: Int64
        var data: [UInt8]
    }

    private func current(_ collection: String, _ id: UUID, expectedRev: Int64?) throws(LarderError) -> Current {
        let statement = try db.statement(.selectCurrent)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(collection))
        try statement.bindUUID(id, at: 2)
        guard try statement.step() else { throw SQLiteStore.notFound(collection, id) }
        let row = Current(
            seq: statement.int(0), rev: statement.int(1), createdAt: statement.int(2), updatedAt: statement.int(3),
            data: statement.bytes(4))
        if let expectedRev, expectedRev != row.rev {
            throw WriteRules.revisionConflict(current: row.rev, expected: expectedRev)
        }
        return row
    }

    private func update(
        _ collection: String, _ id: UUID, _ row: Current, _ document: PreparedDocument, kind: ChangeKind
    ) throws(LarderError) -> StoredRecord {
        try checkSize(document, field: kind == .patch ? "patch" : "data")
        let now = nowMillis()
        let statement = try db.statement(.updateDocument)
        defer { statement.reset() }
        try statement.bind(at: 1, .int(now))
        try statement.bindText(document.data, at: 2)
        try statement.bindText(document.search, at: 3)
        try statement.bind(at: 4, .int(row.seq))
        while try statement.step() {}
        let record = StoredRecord(id: id, rev: row.rev + 1, createdAt: row.createdAt, updatedAt: now, data: document.data)
        try recordChange(kind, collection, record: record, previous: row.data)
        return record
    }

    func replace(_ collection: String, id: UUID, document: PreparedDocument, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try SQLiteStore.validateCollection(collection)
        // The data it had goes into the change log with the new one (a filter can then tell it stopped matching).
        let row = try current(collection, id, expectedRev: expectedRev)
        return try update(collection, id, row, document, kind: .replace)
    }

    func patch(_ collection: String, id: UUID, patch: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try SQLiteStore.validateCollection(collection)
        let row = try current(collection, id, expectedRev: expectedRev)
        let stored = try JSONParser.parseObject(row.data)
        return try update(collection, id, row, PreparedDocument(MergePatch.apply(patch, to: stored)), kind: .patch)
    }

    func delete(_ collection: String, id: UUID, expectedRev: Int64?) throws(LarderError) -> (rev: Int64, blobsDeleted: Int) {
        try SQLiteStore.validateCollection(collection)
        // The data goes into the change log, so a subscriber's filter can tell whether the deletion concerns it.
        let row = try current(collection, id, expectedRev: expectedRev)
        try db.run("DELETE FROM documents WHERE seq = ?1", [.int(row.seq)])
        let blobs = try db.run(
            "DELETE FROM blobs WHERE attachedCollection = ?1 AND attachedId = ?2",
            [.text(collection), .text(id.wireString)])
        try recordChange(
            .delete, collection,
            record: StoredRecord(id: id, rev: row.rev, createdAt: row.createdAt, updatedAt: row.updatedAt, data: row.data))
        return (row.rev, blobs)
    }

    func dropCollection(_ name: String) throws(LarderError) -> (documents: Int, blobs: Int) {
        try SQLiteStore.validateCollection(name)
        guard try db.scalar("SELECT 1 FROM collections WHERE name = ?1", [.text(name)]) != nil else {
            throw LarderError(.notFound, "no collection '\(name)'", field: "collection")
        }
        let indexes = try db.query("SELECT name FROM field_indexes WHERE collection = ?1", [.text(name)]) { $0.text(0) }
        for index in indexes {
            // Index names are built from a validated collection name and hex digits only.
            try db.execute("DROP INDEX IF EXISTS \"\(index)\"")
        }
        try db.run("DELETE FROM field_indexes WHERE collection = ?1", [.text(name)])
        let blobs = try db.run("DELETE FROM blobs WHERE attachedCollection = ?1", [.text(name)])
        let documents = try db.run("DELETE FROM documents WHERE collection = ?1", [.text(name)])
        try db.run("DELETE FROM collections WHERE name = ?1", [.text(name)])
        // After the deletions, whose backlog rows tell the trigram index what to remove: a collection created again
        // under this name starts unindexed.
        try db.run("DELETE FROM text_collections WHERE name = ?1", [.text(name)])
        // One event for the whole collection, not one per document: a drop costs the log O(1).
        try recordChange(.drop, name, record: nil)
        let core = self.core
        afterCommit.append { core.dropIndexes(of: name) }
        return (documents, blobs)
    }

    func createIndex(_ collection: String, field: FieldPath) throws(LarderError) -> (name: String, created: Bool) {
        let name = try WriteRules.indexName(collection, field)
        if try db.scalar(
            "SELECT 1 FROM field_indexes WHERE collection = ?1 AND path = ?2", [.text(collection), .text(field.description)])
            != nil
        {
            return (name, false)
        }
        try ensureCollection(collection)
        let key = FieldPath.sortKeySQL(field.sqlLiteral)
        try db.execute("CREATE INDEX IF NOT EXISTS \"\(name)\" ON documents(collection, \(key))")
        try db.run(
            "INSERT INTO field_indexes(collection, path, name) VALUES (?1, ?2, ?3)",
            [.text(collection), .text(field.description), .text(name)])
        let core = self.core
        afterCommit.append { core.setIndexed(collection, field) }
        return (name, true)
    }

    func insertBlob(_ blob: PreparedBlob) throws(LarderError) -> BlobMeta {
        let meta = blob.meta
        var document: StoredRecord?
        if let attachment = meta.attachedTo {
            document = try self.document(attachment)
            guard document != nil else {
                throw LarderError(
                    .notFound, "cannot attach the blob: no document \(attachment.id.wireString) in '\(attachment.collection)'",
                    field: "attach.id")
            }
        }
        do throws(LarderError) {
            try db.run(
                "INSERT INTO blobs(id, size, sha256, contentType, width, height, createdAt, attachedCollection, "
                    + "attachedId, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                [
                    .text(meta.id.wireString), .int(meta.size), .text(meta.sha256), .text(meta.contentType),
                    .int(Int64(meta.width)), .int(Int64(meta.height)), .int(meta.createdAt),
                    meta.attachedTo.map { .text($0.collection) } ?? .null,
                    meta.attachedTo.map { .text($0.id.wireString) } ?? .null, .blob(blob.bytes),
                ])
        } catch where error.status == .conflict {
            throw WriteRules.blobIdTaken(meta.id)
        }
        if let attachment = meta.attachedTo, let document {
            try recordChange(.blobAttach, attachment.collection, record: document, blob: meta)
        }
        return meta
    }

    /// The document a blob is (to be) attached to, when it exists.
    private func document(_ attachment: BlobAttachment) throws(LarderError) -> StoredRecord? {
        try db.query(
            "SELECT \(SQLiteStore.recordColumns) FROM documents WHERE collection = ?1 AND id = ?2",
            [.text(attachment.collection), .text(attachment.id.wireString)]
        ) { SQLiteStore.record($0) }.first
    }

    func blobDelete(_ id: UUID) throws(LarderError) {
        let metas = try db.query("SELECT \(SQLiteStore.blobColumns) FROM blobs WHERE id = ?1", [.text(id.wireString)]) {
            SQLiteStore.blobMeta($0)
        }
        guard let meta = metas.first else { throw SQLiteStore.blobNotFound(id) }
        try db.run("DELETE FROM blobs WHERE id = ?1", [.text(id.wireString)])
        if let attachment = meta.attachedTo, let document = try document(attachment) {
            try recordChange(.blobDelete, attachment.collection, record: document, blob: meta)
        }
    }
}

/// RFC 7396 JSON merge patch: null removes a member, objects merge recursively, anything else replaces.
public enum MergePatch {
    public static func apply(_ patch: JSONObject, to target: JSONObject) -> JSONObject {
        var result = target
        for (key, value) in patch {
            switch value {
            case .null:
                result[key] = nil
            case .object(let inner):
                let base = result[key]?.objectValue ?? [:]
                result[key] = .object(apply(inner, to: base))
            default:
                result[key] = value
            }
        }
        return result
    }
}

/// One schema step: SQL, or code for a step that depends on what the database holds.
enum Migration: Sendable, ExpressibleByStringLiteral {
    case sql(String)
    case code(@Sendable (Connection) throws(LarderError) -> Void)

    init(stringLiteral value: String) { self = .sql(value) }
}

/// The schema and its migrations, recorded in `larder_migrations`.
enum Schema {
    static let migrations: [Migration] = [
        """
        CREATE TABLE collections(name TEXT PRIMARY KEY, createdAt INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE documents(
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            rev INTEGER NOT NULL,
            createdAt INTEGER NOT NULL,
            updatedAt INTEGER NOT NULL,
            data TEXT NOT NULL,
            search TEXT NOT NULL);
        CREATE UNIQUE INDEX documents_id ON documents(collection, id);
        CREATE TABLE field_indexes(
            collection TEXT NOT NULL, path TEXT NOT NULL, name TEXT NOT NULL,
            PRIMARY KEY(collection, path)) WITHOUT ROWID;
        CREATE TABLE blobs(
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            size INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            contentType TEXT NOT NULL,
            width INTEGER NOT NULL,
            height INTEGER NOT NULL,
            createdAt INTEGER NOT NULL,
            attachedCollection TEXT,
            attachedId TEXT,
            bytes BLOB NOT NULL);
        CREATE INDEX blobs_attached ON blobs(attachedCollection, attachedId) WHERE attachedCollection IS NOT NULL;
        """,
        // 2: the change log behind WATCH. `seq` is AUTOINCREMENT so a number is never reused, even after pruning.
        """
        CREATE TABLE changes(
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            collection TEXT NOT NULL,
            kind TEXT NOT NULL,
            time INTEGER NOT NULL,
            id TEXT,
            rev INTEGER,
            createdAt INTEGER,
            updatedAt INTEGER,
            data TEXT,
            blob TEXT);
        CREATE INDEX changes_collection ON changes(collection, seq);
        CREATE TABLE larder_meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        INSERT INTO larder_meta(key, value) VALUES ('changesPrunedThrough', 0);
        """,
        // 3: a replace or patch keeps the data it replaced, so a WATCH filter sees a document leave it.
        "ALTER TABLE changes ADD COLUMN previous TEXT;",
        // 4: the trigram index is maintained once per group commit (see `pendingFullText`), not by triggers per row.
        """
        DROP TRIGGER IF EXISTS documents_fts_insert;
        DROP TRIGGER IF EXISTS documents_fts_delete;
        DROP TRIGGER IF EXISTS documents_fts_update;
        """,
        // 5: the trigram index's backlog: the documents written since it was last brought up to date (see
        // `fullTextBacklog`), so that it can be brought up to date every few hundred writes rather than every commit.
        """
        CREATE TABLE fts_backlog(n INTEGER PRIMARY KEY, seq INTEGER NOT NULL, old TEXT);
        CREATE INDEX fts_backlog_seq ON fts_backlog(seq);
        """,
        // 6: the backlog keyed by the document's seq itself: one B-tree instead of a table and an index, one page
        // fewer in every commit's WAL. It held at most one row per seq already; the first is the one that counts.
        """
        CREATE TABLE fts_backlog_by_seq(seq INTEGER PRIMARY KEY, old TEXT);
        INSERT INTO fts_backlog_by_seq(seq, old)
            SELECT seq, old FROM fts_backlog WHERE n IN (SELECT min(n) FROM fts_backlog GROUP BY seq);
        DROP TABLE fts_backlog;
        ALTER TABLE fts_backlog_by_seq RENAME TO fts_backlog;
        """,
        // 7: the collections the trigram index covers (`TextIndexer`: a collection is added at its first substring
        // search); those that existed before were all indexed, and stay so.
        """
        CREATE TABLE text_collections(name TEXT PRIMARY KEY) WITHOUT ROWID;
        INSERT INTO text_collections(name) SELECT name FROM collections;
        """,
        // 8: field indexes are built on the expression searches sort and compare by (`FieldPath.sortKeySQL`, which
        // keeps strings apart from arrays and objects), so the ones built on bare `json_extract` are built again.
        .code { db throws(LarderError) in
            let indexes = try db.query("SELECT name, path FROM field_indexes") { ($0.text(0), $0.text(1)) }
            for (name, path) in indexes {
                let field = try FieldPath(path)
                // Index names are built from a validated collection name and hex digits only.
                try db.execute("DROP INDEX IF EXISTS \"\(name)\"")
                try db.execute(
                    "CREATE INDEX \"\(name)\" ON documents(collection, \(FieldPath.sortKeySQL(field.sqlLiteral)))")
            }
        },
        // 9: thumbnails cached with their blob (Thumbnails.swift), deleted with it by the trigger whatever deletes it.
        // IF NOT EXISTS: the tests that replay older migrations run it again.
        """
        CREATE TABLE IF NOT EXISTS thumbnails(
            seq INTEGER PRIMARY KEY,
            blobId TEXT NOT NULL,
            maxSide INTEGER NOT NULL,
            width INTEGER NOT NULL,
            height INTEGER NOT NULL,
            bytes BLOB NOT NULL,
            createdAt INTEGER NOT NULL,
            UNIQUE(blobId, maxSide));
        CREATE TRIGGER IF NOT EXISTS blobs_delete_thumbnails AFTER DELETE ON blobs BEGIN
            DELETE FROM thumbnails WHERE blobId = old.id;
        END;
        """,
    ]

    /// The backlog of the trigram index (`TextIndexer`, which also states the rule that keeps searches exact): the
    /// documents whose `search` text changed since the index last saw them, each with the text the index holds for it
    /// (`old`, NULL when none). A backlog row is small (no text for a new document) and rolls back with its write's
    /// savepoint; `INSERT OR IGNORE` keeps a document's first row, whose `old` is what the index holds.
    ///
    /// Why not triggers on the index itself: every write runs in its own SAVEPOINT (so a failing write undoes only
    /// itself), and FTS5 writes its pending terms out as a new segment at every savepoint: one segment, and soon a
    /// merge, per document; and even a few hundred documents at once cost the writer about half its time. The
    /// triggers are TEMP: only the writer connection writes.
    /// Only documents of the collections the index covers (`text_collections`) enter the backlog: a collection never
    /// searched by substring costs its writes one lookup in that small table instead.
    static let backlogTriggers = """
        CREATE TEMP TRIGGER IF NOT EXISTS fts_backlog_insert AFTER INSERT ON main.documents
        WHEN new.collection IN (SELECT name FROM main.text_collections) BEGIN
            INSERT OR IGNORE INTO fts_backlog(seq, old) VALUES (new.seq, NULL);
        END;
        CREATE TEMP TRIGGER IF NOT EXISTS fts_backlog_delete AFTER DELETE ON main.documents
        WHEN old.collection IN (SELECT name FROM main.text_collections) BEGIN
            INSERT OR IGNORE INTO fts_backlog(seq, old) VALUES (old.seq, old.search);
        END;
        CREATE TEMP TRIGGER IF NOT EXISTS fts_backlog_update AFTER UPDATE OF search ON main.documents
        WHEN old.collection IN (SELECT name FROM main.text_collections) BEGIN
            INSERT OR IGNORE INTO fts_backlog(seq, old) VALUES (old.seq, old.search);
        END;
        """

    static func migrate(_ db: Connection, trigram: Bool) throws(LarderError) {
        try db.execute(
            "CREATE TABLE IF NOT EXISTS larder_migrations(version INTEGER PRIMARY KEY, appliedAt INTEGER NOT NULL)")
        let applied = try db.scalar("SELECT coalesce(max(version), 0) FROM larder_migrations") ?? 0
        for (n, migration) in migrations.enumerated() where Int64(n + 1) > applied {
            try db.execute("BEGIN IMMEDIATE")
            do throws(LarderError) {
                switch migration {
                case .sql(let sql): try db.execute(sql)
                case .code(let body): try body(db)
                }
                try db.run(
                    "INSERT INTO larder_migrations(version, appliedAt) VALUES (?1, ?2)", [.int(Int64(n + 1)), .int(nowMillis())])
                try db.execute("COMMIT")
            } catch {
                try? db.execute("ROLLBACK")
                throw error
            }
        }
        if trigram {
            // Earlier versions kept the index inside this file; `TextIndexer` starts its own file over from the
            // documents when it finds no generation here to pair with.
            let inside = try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'documents_fts'") ?? 0
            if inside > 0 {
                try db.execute(
                    "BEGIN IMMEDIATE; DROP TABLE documents_fts; DELETE FROM larder_meta WHERE key = 'textIndexGeneration'; COMMIT")
            }
        }
    }
}
