import CSQLite
import Dispatch
import Foundation
import LarderWire

/// The SQLite implementation of `DocumentStore` and `BlobStore`.
///
/// One file `larder.sqlite` in the data directory, WAL mode. Documents live in one `documents` table keyed by
/// (collection, id), so collection names never reach SQL text except as bound values (and, validated, in index names).
/// Blob bytes are stored in SQLite itself: the bytes, their metadata and the document they belong to then commit (and
/// are deleted) in one transaction, with SQLite's WAL providing the fsync ordering; 32 MiB is well within its limits.
public final class SQLiteStore: GroupCommitStore, @unchecked Sendable {
    let core: StoreCore
    let writer: Writer
    let readers: ReaderPool
    /// Readers of large blobs by chunks and ranges, which do not map the file: a 200 MB blob read through a mapping
    /// would stay in the server's resident set (as file pages) long after; read with pread it passes through.
    let chunkReaders: ReaderPool
    /// The trigram index's own file and thread (nil without FTS5's trigram tokenizer: text search then scans).
    let textIndexer: TextIndexer?
    /// This process's hold on the data directory (one process per directory).
    private let directoryLock: DataDirectoryLock

    /// The collection name rule: a letter, then up to 63 letters, digits, `_` or `-`.
    public static func validateCollection(_ name: String, field: String = "collection") throws(LarderError) {
        let bytes = Array(name.utf8)
        func isLetter(_ b: UInt8) -> Bool { (b >= 65 && b <= 90) || (b >= 97 && b <= 122) }
        guard let first = bytes.first, isLetter(first), bytes.count <= 64,
            bytes.allSatisfy({ isLetter($0) || ($0 >= 48 && $0 <= 57) || $0 == 95 || $0 == 45 })
        else {
            throw LarderError(
                .invalidArgument,
                "a collection name is a letter followed by up to 63 letters, digits, '_' or '-'", field: field)
        }
    }

    /// Opens (creating when needed) the store in `configuration.dataDirectory`.
    public init(configuration: StoreConfiguration = StoreConfiguration()) throws(LarderError) {
        let directory = configuration.dataDirectory
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw LarderError(
                .internal, "cannot create the data directory '\(directory)': check the path and its permissions")
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw LarderError(
                .internal, "the data directory '\(directory)' is not writable; fix its permissions or choose another")
        }
        // Before anything is read: another process's writes would go unseen by this one's caches.
        let directoryLock = try DataDirectoryLock(directory: directory)
        self.directoryLock = directoryLock
        let path = (directory as NSString).appendingPathComponent("larder.sqlite")
        let connection = try Connection(path: path, readOnly: false)
        try connection.execute("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=\(configuration.synchronous.rawValue)")
        let hasTrigram = (try? connection.execute(
            "CREATE VIRTUAL TABLE temp.larder_probe USING fts5(x, tokenize='trigram'); DROP TABLE temp.larder_probe"))
            != nil
        try Schema.migrate(connection, trigram: hasTrigram)
        if hasTrigram { try connection.execute(Schema.backlogTriggers) }
        let lastChangeSeq = try connection.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'changes'") ?? 0
        let core = StoreCore(
            configuration: configuration, databasePath: path, hasTrigram: hasTrigram, lastChangeSeq: lastChangeSeq)
        core.loadIndexes(try connection.query("SELECT collection, path FROM field_indexes") { ($0.text(0), $0.text(1)) })
        self.core = core
        let writer = Writer(connection: connection, core: core)
        // A store that does not use the index (tests' and benchmarks' scans) leaves it alone; the backlog triggers run
        // either way.
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

    var feed: ChangeFeedState { core.feed }

    // MARK: Writes

    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) {
        let job = Writer.Job { context in
            context.runJob(
                body, begin: { () throws(LarderError) in try context.connection!.run(.savepoint) },
                end: { () throws(LarderError) in try context.connection!.run(.release) },
                undo: context.rollbackSavepoint, completion: completion)
        }
        if !writer.enqueue(job) { completion(.failure(LarderError(.unavailable, "the store is closed"))) }
    }

    var isOnWriterQueue: Bool { writer.isOnQueue }

    // MARK: Reads

    static let recordColumns = "id, rev, createdAt, updatedAt, data"

    static func record(_ row: Statement, at offset: Int32 = 0) -> StoredRecord {
        StoredRecord(
            id: row.uuid(offset), rev: row.int(offset + 1), createdAt: row.int(offset + 2),
            updatedAt: row.int(offset + 3), data: row.bytes(offset + 4))
    }

    public func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord {
        try SQLiteStore.validateCollection(collection)
        return try readers.read { db throws(LarderError) in try SQLiteStore.getRecord(db, collection, id) }
    }

    /// The document `id` of `collection` read with `db` (validated collection name), or NOT_FOUND.
    static func getRecord(_ db: Connection, _ collection: String, _ id: UUID) throws(LarderError) -> StoredRecord {
        try withRecordRow(db, collection, id) { SQLiteStore.record($0) }
    }

    /// Calls `body` with the row of document `id` (columns `recordColumns`), or throws NOT_FOUND.
    static func withRecordRow<R>(
        _ db: Connection, _ collection: String, _ id: UUID, _ body: (Statement) -> R
    ) throws(LarderError) -> R {
        let statement = try db.statement(.selectRecord)
        defer { statement.reset() }
        try statement.bind(at: 1, .text(collection))
        try statement.bindUUID(id, at: 2)
        guard try statement.step() else { throw SQLiteStore.notFound(collection, id) }
        return body(statement)
    }

    static func notFound(_ collection: String, _ id: UUID) -> LarderError {
        LarderError(.notFound, "no document \(id.wireString) in collection '\(collection)'", field: "id")
    }

    public func getMany(_ collection: String, ids: [UUID]) throws(LarderError) -> (records: [StoredRecord], missing: [UUID]) {
        try SQLiteStore.validateCollection(collection)
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

    static func checkLimit(_ limit: Int) throws(LarderError) {
        guard limit >= 1 && limit <= SearchQuery.maxLimit else {
            throw LarderError(.invalidArgument, "limit must be from 1 to \(SearchQuery.maxLimit)", field: "limit")
        }
    }

    public func list(_ collection: String, limit: Int, cursor: String?) throws(LarderError) -> Page {
        try SQLiteStore.validateCollection(collection)
        try SQLiteStore.checkLimit(limit)
        let position = try SeqPosition.list(collection, cursor: cursor)
        let statement = (
            sql: "SELECT \(SQLiteStore.recordColumns), seq FROM documents WHERE collection = ?1 AND seq > ?2 "
                + "ORDER BY seq LIMIT ?3",
            values: [SQLValue.text(collection), .int(position.after), .int(Int64(limit + 1))]
        )
        let (page, more) = try readPage(collection, textIndex: false, text: nil, { _ in statement }, limit: limit) {
            (SQLiteStore.record($0), $0.int(5))
        }
        return Page(records: page.map(\.0), nextCursor: more ? position.next(after: page.last!.1) : nil)
    }

    static let damagedCursor = LarderError(
        .invalidArgument, "the cursor is damaged; pass nextCursor back unchanged, or start again without it",
        field: "cursor")

    /// What a SEARCH cursor is valid for: the collection, filter, text and sort (not the limit).
    static func searchScope(_ collection: String, _ query: SearchQuery) -> String {
        Cursor.scope([
            .string(collection), query.filter?.json ?? .null, query.text?.json ?? .null,
            .array(query.sort.map(\.json)),
        ])
    }

    /// The SQL of a search: the statement, its bound values, and how many sort-key columns follow the record's.
    func searchSQL(_ collection: String, _ query: SearchQuery, plan: TextPlan = .index) throws(LarderError)
        -> (sql: String, values: [SQLValue], keyCount: Int, textIndex: Bool)
    {
        try SQLiteStore.validateCollection(collection)
        try SQLiteStore.checkLimit(query.limit)
        var builder = SQLBuilder(collection: collection, core: core, textPlan: plan)
        var clause = builder.whereClause(filter: query.filter, text: query.text)
        let keys = query.sort.map { builder.field($0.field).value }
        if let position = try SearchPosition.open(collection, query) {
            let (values, lastId) = (position.values, position.lastId)
            // Keyset: rows strictly after the last one in (keys..., id) order, NULLs first ascending / last descending.
            func after(_ i: Int) -> String {
                if i == keys.count { return "id > \(builder.param(.text(lastId)))" }
                let x = keys[i]
                let descending = query.sort[i].descending
                let strict: String
                let equal: String
                if values[i] == .null {
                    strict = descending ? "0" : "\(x) IS NOT NULL"
                    equal = "\(x) IS NULL"
                } else {
                    let v = builder.param(values[i])
                    strict = descending ? "(\(x) < \(v) OR \(x) IS NULL)" : "\(x) > \(v)"
                    equal = "\(x) = \(v)"
                }
                return "(\(strict) OR (\(equal) AND \(after(i + 1))))"
            }
            clause += " AND " + after(0)
        }
        var order = query.sort.enumerated().map { "\(keys[$0.offset]) \($0.element.descending ? "DESC" : "ASC")" }
        order.append("id ASC")
        let keyColumns = keys.isEmpty ? "" : ", " + keys.joined(separator: ", ")
        let sql = "SELECT \(SQLiteStore.recordColumns)\(keyColumns) FROM documents WHERE \(clause) ORDER BY "
            + order.joined(separator: ", ") + " LIMIT \(query.limit + 1)"
        return (sql, builder.values, keys.count, builder.usesTextIndex)
    }

    /// A read on a pooled connection. `textIndex`: the statement would read the trigram index for `text`; it then
    /// runs in a transaction whose two snapshots were taken together (`TextIndexer.withSnapshots`), and `body` learns
    /// in that snapshot how to find the text: `.scan` when the collection is not covered by the index (which is
    /// then asked to cover it), else `.index` or `.indexDriving` by how many documents the query's rarest trigram is
    /// in. Without the index `body` gets `.index` (the statement as first built).
    private func read<T>(
        _ collection: String, textIndex: Bool, text: TextQuery? = nil, transaction: Bool = false,
        _ body: (Connection, TextPlan) throws(LarderError) -> T
    ) throws(LarderError) -> T {
        guard textIndex, let text, let textIndexer else {
            return try readers.read(transaction: transaction) { db throws(LarderError) in try body(db, .index) }
        }
        return try readers.read { db throws(LarderError) in
            try textIndexer.withSnapshots(db) { db throws(LarderError) in
                // 1: covered; 0: not covered but exists (the index is asked to cover it); nil: no such collection.
                let state = try db.scalar(
                    "SELECT coalesce((SELECT 1 FROM text_collections WHERE name = ?1), "
                        + "(SELECT 0 FROM collections WHERE name = ?1))", [.text(collection)])
                if state == 0 { textIndexer.requestIndex(collection) }
                guard state == 1 else { return try body(db, .scan) }
                return try body(db, try SQLiteStore.textPlan(db, text))
            }
        }
    }

    /// At most this many candidates (documents holding the query's rarest trigram, plus the backlog) are looked up
    /// one by one rather than walking the collection (`TextPlan.indexDriving`).
    static let drivingCandidates: Int64 = 2_000

    /// The plan for a covered collection: the trigram index's vocabulary says how many documents hold each of the
    /// query's trigrams (one B-tree lookup each); the rarest bounds the candidates.
    static func textPlan(_ db: Connection, _ text: TextQuery) throws(LarderError) -> TextPlan {
        var fewest = Int64.max
        for trigram in SQLBuilder.trigrams(TextFold.fold(text.query)) where fewest > 0 {
            fewest = min(fewest, try db.scalar("SELECT doc FROM ix.text_vocab WHERE term = ?1", [.text(trigram)]) ?? 0)
        }
        let backlog =
            try db.scalar("SELECT count(*) FROM (SELECT 1 FROM fts_backlog LIMIT \(drivingCandidates + 1))") ?? 0
        return fewest + backlog <= drivingCandidates ? .indexDriving : .index
    }

    /// `EXPLAIN QUERY PLAN` of a search, for tests that prove an index is used.
    func explain(_ collection: String, _ query: SearchQuery) throws(LarderError) -> String {
        let first = try searchSQL(collection, query)
        return try read(collection, textIndex: first.textIndex, text: query.text) { db, plan throws(LarderError) in
            let (sql, values, _, _) = plan == .index ? first : try searchSQL(collection, query, plan: plan)
            // EXPLAIN does not check the schema's version: a real read first loads indexes created since.
            _ = try db.scalar("SELECT count(*) FROM main.sqlite_master")
            return try db.query("EXPLAIN QUERY PLAN " + sql, values) { $0.text(3) }.joined(separator: "\n")
        }
    }

    public func search(_ collection: String, _ query: SearchQuery) throws(LarderError) -> Page {
        let first = try searchSQL(collection, query)
        let keyCount = first.keyCount
        let statement = { (plan: TextPlan) throws(LarderError) -> (sql: String, values: [SQLValue]) in
            let (sql, values, _, _) = plan == .index ? first : try self.searchSQL(collection, query, plan: plan)
            return (sql, values)
        }
        let (page, more) = try readPage(
            collection, textIndex: first.textIndex, text: query.text, statement, limit: query.limit
        ) { row in
            (SQLiteStore.record(row), (0..<keyCount).map { row.value(Int32(5 + $0)) })
        }
        return SearchPosition.page(collection, query, page, more: more)
    }

    /// Reads up to `limit` rows of a page query (which asks for `limit + 1`), stopping early when the records would
    /// pass `maxPageBytes`; `more` says whether a next page exists.
    private func readPage<T>(
        _ collection: String, textIndex: Bool, text: TextQuery?,
        _ statement: (TextPlan) throws(LarderError) -> (sql: String, values: [SQLValue]), limit: Int,
        _ row: (Statement) -> (StoredRecord, T)
    ) throws(LarderError) -> (page: [(StoredRecord, T)], more: Bool) {
        try read(collection, textIndex: textIndex, text: text) { db, plan throws(LarderError) in
            let (sql, values) = try statement(plan)
            var fill = PageFill<T>(limit: limit, maxBytes: configuration.maxPageBytes)
            try db.forEachRow(sql, values) { fill.add(row($0)) }
            return (fill.items, fill.more)
        }
    }

    public func count(_ collection: String, filter: Filter?, text: TextQuery?) throws(LarderError) -> Int {
        try SQLiteStore.validateCollection(collection)
        func statement(_ plan: TextPlan) -> (sql: String, values: [SQLValue], textIndex: Bool) {
            var builder = SQLBuilder(collection: collection, core: core, textPlan: plan)
            let clause = builder.whereClause(filter: filter, text: text)
            return ("SELECT count(*) FROM documents WHERE \(clause)", builder.values, builder.usesTextIndex)
        }
        let first = statement(.index)
        return try read(collection, textIndex: first.textIndex, text: text) { db, plan throws(LarderError) in
            let (sql, values, _) = plan == .index ? first : statement(plan)
            return Int(try db.scalar(sql, values) ?? 0)
        }
    }

    public static let maxGroups = 1000

    public func group(_ collection: String, field: FieldPath, filter: Filter?, text: TextQuery?, perGroup: Int)
        throws(LarderError) -> [Group]
    {
        try SQLiteStore.validateCollection(collection)
        try ReadLimits.checkPerGroup(perGroup)
        // A section is a kind and a value: `g`, the rank of (value, kind) in the sort order of `field` (§5.2), numbers
        // and booleans by value with a boolean's section before the number's it ties with. Ranking by SQLite's own
        // comparison puts 1 and 1.0 in one section, as `eq` matches them, while `true` and 1 stay apart, as `eq` keeps
        // them.
        func statements(_ plan: TextPlan) -> (groups: String, records: String, values: [SQLValue], textIndex: Bool) {
            var builder = SQLBuilder(collection: collection, core: core, textPlan: plan)
            let clause = builder.whereClause(filter: filter, text: text)
            let (x, t) = builder.field(field)
            let typeExpr = t ?? "'integer'"
            let kind =
                "CASE WHEN \(typeExpr) IS NULL OR \(typeExpr) = 'null' THEN 'null' "
                + "WHEN \(typeExpr) IN ('integer','real') THEN 'number' ELSE \(typeExpr) END"
            let isInteger = t.map { "\($0) = 'integer'" } ?? "typeof(\(x)) = 'integer'"
            let inner =
                "SELECT \(kind) AS kt, \(x) AS k, \(isInteger) AS ki, seq, \(SQLiteStore.recordColumns) FROM documents "
                + "WHERE \(clause)"
            let ranked = "SELECT *, dense_rank() OVER (ORDER BY k, kt = 'number', kt) AS g FROM (\(inner))"
            let groupsSQL =
                "SELECT g, kt, k, count(*), max(CASE WHEN ki THEN k END) FROM (\(ranked)) GROUP BY g ORDER BY g "
                + "LIMIT \(SQLiteStore.maxGroups)"
            let recordsSQL =
                "SELECT g, \(SQLiteStore.recordColumns) FROM (SELECT *, row_number() OVER "
                + "(PARTITION BY g ORDER BY seq) AS rn FROM (\(ranked))) "
                + "WHERE rn <= \(perGroup) AND g <= \(SQLiteStore.maxGroups) ORDER BY g, rn"
            return (groupsSQL, recordsSQL, builder.values, builder.usesTextIndex)
        }
        let first = statements(.index)
        let (groupRows, recordRows) = try read(collection, textIndex: first.textIndex, text: text, transaction: true) {
            db, plan throws(LarderError) in
            let (groupsSQL, recordsSQL, values, _) = plan == .index ? first : statements(plan)
            let groups = try db.query(groupsSQL, values) {
                (rank: $0.int(0), kind: $0.text(1), value: $0.value(2), integer: $0.value(4), count: Int($0.int(3)))
            }
            var records: [(Int64, StoredRecord)] = []
            var budget = PageBudget(maxBytes: configuration.maxPageBytes)
            if perGroup > 0 {
                try db.forEachRow(recordsSQL, values) { row in
                    let record = SQLiteStore.record(row, at: 1)
                    guard budget.admit(record, isFirst: records.isEmpty) else { return false }
                    records.append((row.int(0), record))
                    return true
                }
            }
            return (groups, records)
        }
        var recordsByRank: [Int64: [StoredRecord]] = [:]
        for (rank, record) in recordRows { recordsByRank[rank, default: []].append(record) }
        return groupRows.map { row in
            let key: JSON
            switch (row.kind, row.value) {
            case ("null", _): key = .null
            case ("true", _): key = .bool(true)
            case ("false", _): key = .bool(false)
            case (_, .blob(let text)):
                key = (try? JSONParser.parse(text)) ?? .string(String(decoding: text, as: UTF8.self))
            case (_, .int(let i)): key = .int(i)
            // A section of integers and reals of one value is keyed by the integer.
            case (_, .double(let d)):
                if case .int(let i) = row.integer { key = .int(i) } else { key = .double(d) }
            case (_, .text(let s)): key = .string(s)
            default: key = .null
            }
            return Group(key: key, count: row.count, records: recordsByRank[row.rank] ?? [])
        }
    }

    public func collections() throws(LarderError) -> [CollectionInfo] {
        try readers.read { db throws(LarderError) in
            try db.query(
                "SELECT name, (SELECT count(*) FROM documents WHERE collection = c.name) FROM collections AS c "
                    + "ORDER BY name"
            ) { CollectionInfo(name: $0.text(0), count: Int($0.int(1))) }
        }
    }

    public func stats() throws(LarderError) -> StoreStats {
        let (documents, blobs, changes, lastChange) = try readers.read(transaction: true) { db throws(LarderError) in
            (Int(try db.scalar("SELECT count(*) FROM documents") ?? 0),
                Int(try db.scalar("SELECT count(*) FROM blobs") ?? 0),
                Int(try db.scalar("SELECT count(*) FROM changes") ?? 0),
                try db.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'changes'") ?? 0)
        }
        var bytes: Int64 = 0
        for suffix in ["", "-wal"] {
            let attributes = try? FileManager.default.attributesOfItem(atPath: core.databasePath + suffix)
            bytes += (attributes?[.size] as? NSNumber)?.int64Value ?? 0
        }
        return StoreStats(
            documents: documents, blobs: blobs, databaseBytes: bytes, changes: changes, lastChangeSeq: lastChange)
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

    // MARK: Blob reads

    static let blobColumns = "id, size, sha256, contentType, width, height, createdAt, attachedCollection, attachedId"

    static func blobMeta(_ row: Statement) -> BlobMeta {
        var attachment: BlobAttachment?
        if !row.isNull(7) { attachment = BlobAttachment(collection: row.text(7), id: row.uuid(8)) }
        return BlobMeta(
            id: row.uuid(0), size: row.int(1), sha256: row.text(2), contentType: row.text(3), width: Int(row.int(4)),
            height: Int(row.int(5)), createdAt: row.int(6), attachedTo: attachment)
    }

    static func blobNotFound(_ id: UUID) -> LarderError {
        LarderError(.notFound, "no blob \(id.wireString)", field: "id")
    }

    public func blobGet(_ id: UUID) throws(LarderError) -> (meta: BlobMeta, bytes: [UInt8]) {
        // One transaction: the metadata and the bytes come from the same snapshot.
        try readers.read(transaction: true) { db throws(LarderError) in
            let statement = try db.statement(.selectBlobMetaAndSeq)
            defer { statement.reset() }
            try statement.bind([.text(id.wireString)])
            guard try statement.step() else { throw SQLiteStore.blobNotFound(id) }
            let meta = SQLiteStore.blobMeta(statement)
            let rowid = statement.int(9)
            if !statement.isNull(10) {
                let owner = statement.text(10)
                let range = 0..<meta.size
                return (meta, try UploadRules.assemble(id, range) { body throws(LarderError) in
                    try SQLiteStore.forEachChunk(db, owner: owner, overlapping: range, body)
                })
            }
            return (meta, try db.readBlob(table: "blobs", column: "bytes", rowid: rowid))
        }
    }

    public func blobHead(_ id: UUID) throws(LarderError) -> BlobMeta {
        try readers.read { db throws(LarderError) in try SQLiteStore.getBlobMeta(db, id) }
    }

    /// The metadata of blob `id` read with `db`, or NOT_FOUND.
    static func getBlobMeta(_ db: Connection, _ id: UUID) throws(LarderError) -> BlobMeta {
        let statement = try db.statement(.selectBlobMeta)
        defer { statement.reset() }
        try statement.bind([.text(id.wireString)])
        guard try statement.step() else { throw SQLiteStore.blobNotFound(id) }
        return SQLiteStore.blobMeta(statement)
    }

    public func blobList(limit: Int, cursor: String?, attachedTo: BlobAttachment?) throws(LarderError)
        -> (blobs: [BlobMeta], nextCursor: String?)
    {
        try SQLiteStore.checkLimit(limit)
        let position = try SeqPosition.blobList(attachedTo, cursor: cursor)
        var sql = "SELECT \(SQLiteStore.blobColumns), seq FROM blobs WHERE seq > ?1"
        var values: [SQLValue] = [.int(position.after), .int(Int64(limit + 1))]
        if let attachedTo {
            try SQLiteStore.validateCollection(attachedTo.collection, field: "attachedTo.collection")
            sql += " AND attachedCollection = ?3 AND attachedId = ?4"
            values += [.text(attachedTo.collection), .text(attachedTo.id.wireString)]
        }
        sql += " ORDER BY seq LIMIT ?2"
        let rows = try readers.read { [sql, values] db throws(LarderError) in
            try db.query(sql, values) { (SQLiteStore.blobMeta($0), $0.int(9)) }
        }
        let page = position.page(rows, limit: limit)
        return (page.items, page.nextCursor)
    }
}

struct DeleteResult: Sendable {
    var rev: Int64
    var blobs: Int
}

struct IndexResult: Sendable {
    var name: String
    var created: Bool
}

/// A blob validated and hashed before it reaches the writer.
struct PreparedBlob: Sendable {
    var meta: BlobMeta
    var bytes: [UInt8]

    init(id: UUID?, bytes: [UInt8], expectedSHA256: String?, attachTo: BlobAttachment?, core: StoreCore)
        throws(LarderError)
    {
        let limit = core.configuration.maxBlobBytes
        guard bytes.count <= limit else {
            // The binary part is no request member: no `field`.
            throw LarderError(
                .payloadTooLarge, "the blob is \(bytes.count) bytes; the limit is \(limit)",
                details: ["limit": .int(Int64(limit))])
        }
        let info = try JPEG.inspect(bytes)
        let digest = SHA256.hex(bytes)
        if let expectedSHA256, expectedSHA256.lowercased() != digest {
            throw LarderError(
                .invalidArgument, "the blob's SHA-256 differs from the expected one; it was damaged in transit, resend it",
                field: "sha256", details: ["actualSHA256": .string(digest)])
        }
        if let attachTo { try SQLiteStore.validateCollection(attachTo.collection, field: "attach.collection") }
        meta = BlobMeta(
            id: id ?? UUID(), size: Int64(bytes.count), sha256: digest, contentType: "image/jpeg", width: info.width,
            height: info.height, createdAt: nowMillis(), attachedTo: attachTo)
        self.bytes = bytes
    }
}

/// Counts the bytes an answer's records will take, so a page stops before it passes the JSON limit.
struct PageBudget {
    /// The envelope around `data`: id, rev, two timestamps, member names and punctuation.
    static let envelopeBytes = 160
    var remaining: Int

    init(maxBytes: Int) { remaining = maxBytes }

    /// Whether `record` fits; the first record of an answer always does (a document is at most half the JSON limit).
    mutating func admit(_ record: StoredRecord, isFirst: Bool) -> Bool {
        let cost = record.data.count + PageBudget.envelopeBytes
        guard isFirst || cost <= remaining else { return false }
        remaining -= cost
        return true
    }
}
