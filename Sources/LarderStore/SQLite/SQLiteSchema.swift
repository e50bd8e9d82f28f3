import Foundation
import LarderWire

/// One schema step: SQL, or code for a step that depends on what the database holds.
enum Migration: Sendable, ExpressibleByStringLiteral {
    case sql(String)
    case code(@Sendable (SQLiteConnection) throws(LarderError) -> Void)

    init(stringLiteral value: String) { self = .sql(value) }
}

/// The schema and its migrations, recorded in `larder_migrations`.
enum SQLiteSchema {
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
        // 9: a document's create event is its own row (`createSeq`, the change's number), not a second row in
        // `changes` with a copy of the document; it moves to `changes` when the row first changes or goes.
        // The creates logged before stay in `changes`: their rows get no number, and nothing else needs converting.
        // The index carries the collection so that a replay of one collection reads no row it skips.
        // (The column may be there already in a directory whose recorded version was set back by hand.)
        .code { db throws(LarderError) in
            let has = try db.scalar("SELECT count(*) FROM pragma_table_info('documents') WHERE name = 'createSeq'")
            if has == 0 { try db.execute("ALTER TABLE documents ADD COLUMN createSeq INTEGER") }
            try db.execute(
                "CREATE INDEX IF NOT EXISTS documents_create_seq ON documents(createSeq, collection) "
                    + "WHERE createSeq IS NOT NULL")
        },
        // 10: blobs larger than a frame, and resumable uploads (Uploads.swift). An upload's chunks are rows of
        // `blob_chunks` under its id, keyed by their start offset; the finished blob points at them (`chunks`, with an
        // empty `bytes`), so finishing copies nothing. The trigger deletes them with the blob, whichever way it goes.
        // Written to run again over itself (tests replay older migrations).
        .code { db throws(LarderError) in
            try db.execute(
                """
                CREATE TABLE IF NOT EXISTS blob_chunks(
                    owner TEXT NOT NULL, start INTEGER NOT NULL, bytes BLOB NOT NULL, PRIMARY KEY(owner, start));
                CREATE TABLE IF NOT EXISTS uploads(
                    id TEXT PRIMARY KEY, blobId TEXT NOT NULL, size INTEGER NOT NULL, received INTEGER NOT NULL,
                    chunkBytes INTEGER NOT NULL, sha256 TEXT, attachedCollection TEXT, attachedId TEXT,
                    createdAt INTEGER NOT NULL, expiresAt INTEGER NOT NULL) WITHOUT ROWID;
                CREATE INDEX IF NOT EXISTS uploads_expiry ON uploads(expiresAt);
                """)
            if try db.scalar("SELECT count(*) FROM pragma_table_info('blobs') WHERE name = 'chunks'") == 0 {
                try db.execute("ALTER TABLE blobs ADD COLUMN chunks TEXT")
            }
            try db.execute(
                """
                CREATE TRIGGER IF NOT EXISTS blobs_chunks_delete AFTER DELETE ON blobs WHEN old.chunks IS NOT NULL
                BEGIN
                    DELETE FROM blob_chunks WHERE owner = old.chunks;
                END;
                """)
        },
        // 11: thumbnails cached with their blob (SQLiteThumbnails.swift), deleted with it by the trigger whatever
        // deletes it.
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
        // 12: upload and blob bytes as files in `blobs/` (BlobFiles.swift): a finished upload's blob names its file
        // (`file`); a deleted blob's file name is recorded by the trigger in the deleting transaction, and the file is
        // unlinked only after that commit. Blobs stored before keep their bytes in their row or in `blob_chunks`, and
        // are read from there; the chunks of uploads under way move to files at start-up (`SQLiteStore.recoverFiles`).
        .code { db throws(LarderError) in
            if try db.scalar("SELECT count(*) FROM pragma_table_info('blobs') WHERE name = 'file'") == 0 {
                try db.execute("ALTER TABLE blobs ADD COLUMN file TEXT")
            }
            try db.execute(
                """
                CREATE TABLE IF NOT EXISTS blob_files_deleted(name TEXT PRIMARY KEY) WITHOUT ROWID;
                CREATE TRIGGER IF NOT EXISTS blobs_file_delete AFTER DELETE ON blobs WHEN old.file IS NOT NULL BEGIN
                    INSERT OR IGNORE INTO blob_files_deleted(name) VALUES (old.file);
                END;
                """)
        },
        // 13: who holds each upload (a token's digest, or a connection), for each one's share of the upload quota
        // (`WriteRules.checkUploadQuota`). Uploads begun before count as one owner's, ''.
        .code { db throws(LarderError) in
            if try db.scalar("SELECT count(*) FROM pragma_table_info('uploads') WHERE name = 'owner'") == 0 {
                try db.execute("ALTER TABLE uploads ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
            }
            try db.execute("CREATE INDEX IF NOT EXISTS uploads_owner ON uploads(owner, expiresAt)")
        },
        // Request keys (`RequestKey`): each committed keyed write's answer, under its key, so that the same key again
        // answers it without writing; pruned by age with the change log.
        """
        CREATE TABLE IF NOT EXISTS request_keys(
            key TEXT PRIMARY KEY,
            request TEXT NOT NULL,
            digest TEXT NOT NULL,
            answer BLOB NOT NULL,
            createdAt INTEGER NOT NULL) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS request_keys_created ON request_keys(createdAt);
        """,
        // Collections' schemas (SCHEMA_SET): the schema's JSON as set (NULL once removed, the row kept so that
        // versions only grow), its version and what a record that does not match it does ('error' or 'warn').
        """
        CREATE TABLE IF NOT EXISTS larder_schemas(
            collection TEXT PRIMARY KEY, version INTEGER NOT NULL, schema TEXT, action TEXT NOT NULL) WITHOUT ROWID;
        """,
        // Each collection's rules for signed-in users (RULES_SET), as their JSON text.
        "CREATE TABLE IF NOT EXISTS collection_rules(collection TEXT PRIMARY KEY, rules TEXT NOT NULL) WITHOUT ROWID",
        // Accounts Larder keeps (`--users`) and their sessions, each by the SHA-256 of its token.
        """
        CREATE TABLE IF NOT EXISTS accounts(
            id TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE, password_hash TEXT NOT NULL,
            disabled INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS sessions(
            key BLOB PRIMARY KEY, account TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS sessions_account ON sessions(account);
        """,
        // The planner's picture of `documents` (`PlannerStats`) for the indexes that exist; new ones get theirs as
        // they are created.
        .code { db throws(LarderError) in
            try PlannerStats.describe(db, index: "documents_id", PlannerStats.documentsID)
            try PlannerStats.describeFieldIndexes(db)
        },
        // Each record's `$owner` in a column of its own (`PreparedDocument.owner`), indexed with the id: a user's
        // queries under an `owner` rule compare the column instead of reading the JSON, and a user's point read
        // (`FixedSQL.selectOwnedRecord`) takes the same steps for another user's record as for a missing id. The
        // expression indexes on `$owner` that setting rules declared before are dropped: this index serves them.
        .code { db throws(LarderError) in
            if try db.scalar("SELECT count(*) FROM pragma_table_info('documents') WHERE name = 'owner'") == 0 {
                try db.execute("ALTER TABLE documents ADD COLUMN owner TEXT")
            }
            try db.execute(
                """
                UPDATE documents SET owner = json_extract(data, '$."$owner"') WHERE json_type(data, '$."$owner"') = 'text'
                    AND instr(data -> '$."$owner"', '\\u0000') = 0
                    AND length(CAST(json_extract(data, '$."$owner"') AS BLOB)) <= \(PreparedDocument.maxColumnOwnerBytes);
                CREATE INDEX IF NOT EXISTS documents_owner ON documents(collection, owner, id) WHERE owner IS NOT NULL;
                """)
            let names = try db.query("SELECT name FROM field_indexes WHERE path = '$owner'") { $0.text(0) }
            // Index names are built from a validated collection name and hex digits only.
            for name in names { try db.execute("DROP INDEX IF EXISTS \"\(name)\"") }
            try db.execute("DELETE FROM field_indexes WHERE path = '$owner'")
            try PlannerStats.describe(db, index: "documents_owner", PlannerStats.documentsOwner)
        },
        // The documents' table rebuilt for the write path (BENCHMARKS.md "The write path"), measured one change at a
        // time with `scripts/storage-format.c`:
        // - `seq` without AUTOINCREMENT: SQLite no longer reads and rewrites `sqlite_sequence` for every insert. The
        //   writer numbers new rows itself (`DocumentNumbers`), above the highest number ever used: the rows' own,
        //   and `larder_meta.documentsSeq`, recorded before rows are deleted.
        // - `search` only in the collections the trigram index covers (`text_collections`): elsewhere NULL, and a
        //   substring search derives it from the record (`larder_search`). Covering a collection fills it first.
        // The indexes are made again as they were, with their planner statistics; dropping the old table took its
        // statistics and its `sqlite_sequence` row.
        .code { db throws(LarderError) in
            let indexes = try db.query(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'documents' AND sql IS NOT NULL"
            ) { $0.text(0) }
            try db.execute(
                """
                CREATE TABLE documents_rebuilt(
                    seq INTEGER PRIMARY KEY,
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    rev INTEGER NOT NULL,
                    createdAt INTEGER NOT NULL,
                    updatedAt INTEGER NOT NULL,
                    data TEXT NOT NULL,
                    search TEXT,
                    createSeq INTEGER,
                    owner TEXT);
                INSERT INTO documents_rebuilt(seq, collection, id, rev, createdAt, updatedAt, data, search, createSeq, owner)
                    SELECT seq, collection, id, rev, createdAt, updatedAt, data,
                        CASE WHEN collection IN (SELECT name FROM text_collections) THEN search END, createSeq, owner
                    FROM documents ORDER BY seq;
                INSERT OR REPLACE INTO larder_meta(key, value) VALUES ('documentsSeq', max(
                    coalesce((SELECT max(seq) FROM sqlite_sequence WHERE name = 'documents'), 0),
                    coalesce((SELECT value FROM larder_meta WHERE key = 'documentsSeq'), 0),
                    coalesce((SELECT max(seq) FROM documents), 0)));
                DROP TABLE documents;
                ALTER TABLE documents_rebuilt RENAME TO documents;
                """)
            for sql in indexes { try db.execute(sql) }
            try PlannerStats.describe(db, index: "documents_id", PlannerStats.documentsID)
            try PlannerStats.describe(db, index: "documents_owner", PlannerStats.documentsOwner)
            try PlannerStats.describeFieldIndexes(db)
        },
        // Request keys leave by a sweep in key order (`RequestKeyIndex`) rather than through an index by age, which
        // cost every keyed write an insert into one more B-tree and one more page in its commit's WAL frames.
        "DROP INDEX IF EXISTS request_keys_created",
        // A CREATE's request key, kept in the row it makes (`RequestKey.rowMark`) rather than in `request_keys` until
        // the document goes; `requestKeyRowsFrom` is the first row that may keep one younger than the retention
        // (`RequestKeyIndex`): none does yet.
        .code { db throws(LarderError) in
            if try db.scalar("SELECT count(*) FROM pragma_table_info('documents') WHERE name = 'createKey'") == 0 {
                try db.execute("ALTER TABLE documents ADD COLUMN createKey BLOB")
            }
            try db.run(
                "INSERT OR IGNORE INTO larder_meta(key, value) "
                    + "SELECT 'requestKeyRowsFrom', coalesce(max(seq), 0) + 1 FROM documents")
        },
    ]

    /// The migration that gave each record's owner a column.
    static let ownerColumnVersion: Int64 = 19

    /// The migration that rebuilt `documents` for the write path.
    static let leanDocumentsVersion: Int64 = 20

    /// The migration that gave the planner its picture of `documents` (`PlannerStats`).
    static let plannerStatsVersion: Int64 = 18

    /// Brings `db` to the newest schema (to version `through`, for tests that make an older data directory).
    static func migrate(_ db: SQLiteConnection, trigram: Bool, through: Int = migrations.count) throws(LarderError) {
        try db.execute(
            "CREATE TABLE IF NOT EXISTS larder_migrations(version INTEGER PRIMARY KEY, appliedAt INTEGER NOT NULL)")
        let applied = try db.scalar("SELECT coalesce(max(version), 0) FROM larder_migrations") ?? 0
        for (n, migration) in migrations.enumerated() where Int64(n + 1) > applied && n < through {
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

/// What SQLite's query planner is told about `documents` (rows of `sqlite_stat1`, the table `ANALYZE` fills; SQLite
/// documents writing them by hand to steer its plans). Without them it guesses that `collection = ?` matches about ten
/// rows, that an equality on an index's second column narrows that little further, and that a range keeps a quarter:
/// a two-filter search such as `group = K AND n >= K` then walks the index of `n` over half the collection (or the
/// collection in id order), testing `group` on every row, instead of reading the few rows of `group = K`.
/// The figures state the shape indexes are made for: a collection holds many documents, and a value of an indexed
/// field few of them. Measured statistics would follow the data but go stale as it grows, and reader connections load
/// them only when the schema changes; these are written with the index they describe, in the transaction that
/// creates it, so every connection reads them with the new schema.
enum PlannerStats {
    /// `documents_id` (collection, id): a million rows, a hundred thousand per collection, one per id.
    static let documentsID = "1000000 100000 1"
    /// `documents_owner` (collection, owner, id): a hundred records per user, one per id.
    static let documentsOwner = "1000000 100000 100 1"
    /// A field index (collection, value): ten documents per value of the field.
    static let fieldIndex = "1000000 100000 10"

    /// Records the statistics of every field index (`field_indexes`).
    static func describeFieldIndexes(_ db: SQLiteConnection) throws(LarderError) {
        let names = try db.query("SELECT name FROM field_indexes") { $0.text(0) }
        for name in names { try describe(db, index: name, fieldIndex) }
    }

    /// Records `stat` for the index `index` of `documents`, creating `sqlite_stat1` if the database has none (only
    /// `ANALYZE` may create it: it analyzes the small `larder_meta`, whose row is then removed).
    static func describe(_ db: SQLiteConnection, index: String, _ stat: String) throws(LarderError) {
        if try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'") == 0 {
            try db.execute("ANALYZE larder_meta; DELETE FROM sqlite_stat1 WHERE tbl = 'larder_meta'")
        }
        try db.run("DELETE FROM sqlite_stat1 WHERE tbl = 'documents' AND idx = ?1", [.text(index)])
        try db.run(
            "INSERT INTO sqlite_stat1(tbl, idx, stat) VALUES ('documents', ?1, ?2)", [.text(index), .text(stat)])
    }
}
