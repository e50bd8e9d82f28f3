import Dispatch
import Foundation
import LarderSync
import LarderWire

/// The PostgreSQL implementation of `DocumentStore` and `BlobStore`: the same answers as `SQLiteStore`, operation by
/// operation (the conformance and differential tests hold both to that), on a database that many servers can share.
///
/// Tables (`PGSchema`): `documents` keeps each document's compact text in `data` (what reads return, byte for byte),
/// a jsonb copy in `q` for filters and sorts (`PGQuery`), and the folded text of its strings in `search` (pg_trgm GIN
/// index); `blobs` keeps the JPEG bytes (bytea, stored uncompressed) with their metadata; `changes` is the change log,
/// numbered from the one row of `larder_seq` (see `PGWriter`). Collection names and field paths reach SQL text only
/// validated and quoted; every client value is a parameter.
///
/// Threading: every method is synchronous and callable from any thread. Writes go to one writer connection with group
/// commit (`PGWriter`); reads borrow a connection from a small pool. Each call waits on the network, so the server
/// runs none of them on an event loop (`pointReadsAreLocal` is false). When PostgreSQL is unreachable, calls answer
/// UNAVAILABLE naming the database; connections are made again on later calls, so the store recovers by itself.
public final class PostgresStore: GroupCommitStore, @unchecked Sendable {
    let core: StoreCore
    let connector: PGConnector
    let writer: PGWriter
    let readers: PGPool
    let textIndexer: PGTextIndexer
    let follower: PGChangeFollower
    public let settings: PGSettings
    /// The writer's `synchronous_commit` (`--synchronous full` makes it `on`), for the start-up line.
    public let synchronousCommit: String

    /// Connects, migrates the schema (under an advisory lock) and loads what the writer needs. Throws UNAVAILABLE
    /// when the database cannot be reached (wrong password, unreachable host), INTERNAL when it cannot be used (a
    /// newer schema, no pg_trgm and no right to create it).
    public init(
        settings: PGSettings, configuration: StoreConfiguration = StoreConfiguration(), timeoutMs: Int = 20_000
    ) throws(LarderError) {
        self.settings = settings
        // `full` asks every commit to wait for its WAL flush whatever the database or role says; `normal` keeps the
        // database's own setting (PostgreSQL's default, `on`, already waits).
        let session = configuration.synchronous == .full ? [PGStatement("SET synchronous_commit TO on")] : []
        let connector = PGConnector(settings: settings, timeoutMs: timeoutMs, session: session)
        self.connector = connector
        let connection = try connector.open()
        try PGSchema.migrate(connection)
        synchronousCommit = try connection.run([PGStatement("SHOW synchronous_commit")])[0].text(0, 0)
        let last = try connection.run([PGStatement("SELECT last FROM larder_seq WHERE id = 1")])[0]
        let core = StoreCore(
            configuration: configuration, databasePath: "", hasTrigram: true, lastChangeSeq: last.int(0, 0))
        self.core = core
        textIndexer = try PGTextIndexer(connector: connector, connection: connection)
        follower = try PGChangeFollower(core: core, connector: connector)
        writer = PGWriter(
            core: core, connector: connector, connection: connection, textIndexer: textIndexer, follower: follower)
        readers = PGPool(connector: connector, size: max(2, configuration.readerCount))
    }

    /// `init(settings:)` from a URI or conninfo string.
    public convenience init(
        url: String, configuration: StoreConfiguration = StoreConfiguration(), timeoutMs: Int = 20_000
    ) throws(LarderError) {
        try self.init(settings: try PGSettings(url: url), configuration: configuration, timeoutMs: timeoutMs)
    }

    deinit { close() }

    public var configuration: StoreConfiguration { core.configuration }

    /// Point reads wait on the network: the server answers them off its event loops.
    public var pointReadsAreLocal: Bool { false }

    /// Many servers may share the database (README, "Scaling out").
    public var isShared: Bool { true }

    // MARK: Writes

    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) {
        let job = PGWriter.Job { context in
            let result: Result<T, LarderError>
            if let closedError = context.closedError {
                result = .failure(closedError)
            } else {
                let logged = context.changes.count
                context.beginJob()
                do throws(LarderError) {
                    result = .success(try body(context))
                } catch {
                    context.jobFailed()
                    context.changes.removeSubrange(logged...)
                    result = .failure(error)
                }
            }
            return { commitError in completion(commitError.map { .failure($0) } ?? result) }
        }
        if !writer.enqueue(job) { completion(.failure(LarderError(.unavailable, "the store is closed"))) }
    }

    var isOnWriterQueue: Bool { writer.isOnQueue }

    // MARK: Reads

    static let recordColumns = "id, rev, created_at, updated_at, data"

    /// A record from columns `recordColumns` starting at `column`.
    static func record(_ result: PGResult, _ row: Int, at column: Int = 0) -> StoredRecord {
        StoredRecord(
            id: result.uuid(row, column), rev: result.int(row, column + 1), createdAt: result.int(row, column + 2),
            updatedAt: result.int(row, column + 3), data: result.bytes(row, column + 4))
    }

    public func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord {
        try SQLiteStore.validateCollection(collection)
        return try readers.read { db throws(LarderError) in try PostgresStore.getRecord(db, collection, id) }
    }

    static func getStatement(_ collection: String, _ id: UUID) -> PGStatement {
        PGStatement(
            "SELECT \(recordColumns) FROM documents WHERE collection = $1 AND id = $2", [.text(collection), .uuid(id)],
            name: "doc_get")
    }

    static func getRecord(_ db: PGConnection, _ collection: String, _ id: UUID) throws(LarderError) -> StoredRecord {
        let result = try db.run([getStatement(collection, id)])[0]
        guard result.rows == 1 else { throw SQLiteStore.notFound(collection, id) }
        return record(result, 0)
    }

    public func pointReads() -> any PointReads { PGPointReads(self) }

    public func getMany(_ collection: String, ids: [UUID]) throws(LarderError)
        -> (records: [StoredRecord], missing: [UUID])
    {
        try SQLiteStore.validateCollection(collection)
        guard ids.count <= 1000 else {
            throw LarderError(.invalidArgument, "ask for at most 1000 ids at a time", field: "ids")
        }
        var unique: [UUID] = []
        var seen: Set<UUID> = []
        for id in ids where seen.insert(id).inserted { unique.append(id) }
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT \(PostgresStore.recordColumns) FROM documents WHERE collection = $1 AND id = ANY($2)",
                    [.text(collection), .array(PGArray(uuids: unique))], name: "doc_get_many")
            ])[0]
        }
        var byId: [UUID: StoredRecord] = [:]
        var budget = PageBudget(maxBytes: configuration.maxPageBytes)
        for row in 0..<result.rows {
            let record = PostgresStore.record(result, row)
            guard budget.admit(record, isFirst: row == 0) else {
                throw LarderError(
                    .payloadTooLarge, "these \(unique.count) documents together pass the answer limit of "
                        + "\(configuration.maxPageBytes) bytes; ask for fewer ids at a time", field: "ids",
                    details: ["limit": .int(Int64(configuration.maxPageBytes))])
            }
            byId[record.id] = record
        }
        return (unique.compactMap { byId[$0] }, unique.filter { byId[$0] == nil })
    }

    public func list(_ collection: String, limit: Int, cursor: String?) throws(LarderError) -> Page {
        try SQLiteStore.validateCollection(collection)
        try SQLiteStore.checkLimit(limit)
        var after: Int64 = 0
        let scope = Cursor.scope([.string(collection)])
        if let cursor {
            let position = try Cursor.open(
                cursor, .list, scope: scope,
                scopeMessage: "the cursor belongs to a LIST of another collection; start again without it")
            guard case .int(let seq)? = position["seq"] else { throw SQLiteStore.damagedCursor }
            after = seq
        }
        let statement = PGStatement(
            "SELECT \(PostgresStore.recordColumns), seq FROM documents WHERE collection = $1 AND seq > $2 "
                + "ORDER BY seq LIMIT $3", [.text(collection), .int(after), .int(Int64(limit + 1))], name: "doc_list")
        let (page, more) = try readPage(statement, limit: limit) { result, row in
            (PostgresStore.record(result, row), result.int(row, 5))
        }
        let next = more ? Cursor.encode(.list, scope: scope, ["seq": .int(page.last!.1)]) : nil
        return Page(records: page.map(\.0), nextCursor: next)
    }

    /// Reads up to `limit` rows of a page query (which asks for `limit + 1`), stopping early when the records would
    /// pass `maxPageBytes`; `more` says whether a next page exists.
    private func readPage<T>(
        _ statement: PGStatement, limit: Int, _ row: (PGResult, Int) -> (StoredRecord, T)
    ) throws(LarderError) -> (page: [(StoredRecord, T)], more: Bool) {
        let result = try readers.read { db throws(LarderError) in try db.run([statement])[0] }
        var page: [(StoredRecord, T)] = []
        var budget = PageBudget(maxBytes: configuration.maxPageBytes)
        for index in 0..<result.rows {
            let item = row(result, index)
            guard page.count < limit, budget.admit(item.0, isFirst: page.isEmpty) else { return (page, true) }
            page.append(item)
        }
        return (page, false)
    }

    /// The statement of a search, and where each sort key's columns start.
    /// Asks for the collection's trigram index when `text` is long enough to use one (`PGTextIndexer`).
    private func wantsTextIndex(_ collection: String, _ text: TextQuery?) {
        guard let text, TextFold.fold(text.query).unicodeScalars.count >= 3 else { return }
        textIndexer.ensure(collection)
    }

    func searchStatement(_ collection: String, _ query: SearchQuery) throws(LarderError) -> (PGStatement, [Int]) {
        try SQLiteStore.validateCollection(collection)
        try SQLiteStore.checkLimit(query.limit)
        wantsTextIndex(collection, query.text)
        var builder = PGBuilder(collection: collection)
        var clause = builder.whereClause(filter: query.filter, text: query.text)
        if let cursor = query.cursor {
            let object = try Cursor.open(
                cursor, .search, scope: SQLiteStore.searchScope(collection, query),
                scopeMessage: "the cursor belongs to another query: a SEARCH cursor is valid only with the same "
                    + "collection, filter, text and sort; start again without it")
            guard case .array(let raw)? = object["v"], raw.count == query.sort.count,
                case .string(let lastId)? = object["id"]
            else { throw SQLiteStore.damagedCursor }
            var values: [SQLValue] = []
            for item in raw {
                guard let value = Cursor.sqlValue(item) else { throw SQLiteStore.damagedCursor }
                values.append(value)
            }
            clause += " AND " + (try builder.after(query.sort, values, lastId: lastId))
        }
        var order = query.sort.flatMap(PGBuilder.orderTerms)
        order.append("id ASC")
        var columns = [PostgresStore.recordColumns]
        var starts: [Int] = []
        var next = 5
        for key in query.sort {
            starts.append(next)
            // Named apart from the record's columns (`ORDER BY id` must find one `id`).
            columns += PGBuilder.keyColumns(key).enumerated().map { "\($1) AS sort_\(next + $0)" }
            next += PGBuilder.columnCount(key)
        }
        let sql = "SELECT \(columns.joined(separator: ", ")) FROM documents WHERE \(clause) ORDER BY "
            + order.joined(separator: ", ") + " LIMIT \(query.limit + 1)"
        return (PGStatement(sql, builder.values), starts)
    }

    public func search(_ collection: String, _ query: SearchQuery) throws(LarderError) -> Page {
        let (statement, starts) = try searchStatement(collection, query)
        let (page, more) = try readPage(statement, limit: query.limit) { result, row in
            (
                PostgresStore.record(result, row),
                query.sort.indices.map { PGBuilder.sortValue(query.sort[$0], result, row, at: starts[$0]) }
            )
        }
        var next: String?
        if more, let last = page.last {
            next = Cursor.encode(
                .search, scope: SQLiteStore.searchScope(collection, query),
                ["v": .array(last.1.map(Cursor.json)), "id": .string(last.0.id.wireString)])
        }
        return Page(records: page.map(\.0), nextCursor: next)
    }

    /// `EXPLAIN` of a search, for tests that prove an index is used.
    func explain(_ collection: String, _ query: SearchQuery) throws(LarderError) -> String {
        let (statement, _) = try searchStatement(collection, query)
        let result = try readers.read { db throws(LarderError) in
            try db.run([PGStatement("EXPLAIN " + statement.sql, statement.values)])[0]
        }
        return (0..<result.rows).map { result.text($0, 0) }.joined(separator: "\n")
    }

    public func count(_ collection: String, filter: Filter?, text: TextQuery?) throws(LarderError) -> Int {
        try SQLiteStore.validateCollection(collection)
        wantsTextIndex(collection, text)
        var builder = PGBuilder(collection: collection)
        let clause = builder.whereClause(filter: filter, text: text)
        let statement = PGStatement("SELECT count(*) FROM documents WHERE \(clause)", builder.values)
        return Int(try readers.read { db throws(LarderError) in try db.run([statement])[0].int(0, 0) })
    }

    public func group(_ collection: String, field: FieldPath, filter: Filter?, text: TextQuery?, perGroup: Int)
        throws(LarderError) -> [Group]
    {
        try SQLiteStore.validateCollection(collection)
        guard perGroup >= 0 && perGroup <= SearchQuery.maxLimit else {
            throw LarderError(.invalidArgument, "perGroup must be from 0 to \(SearchQuery.maxLimit)", field: "perGroup")
        }
        wantsTextIndex(collection, text)
        var builder = PGBuilder(collection: collection)
        let clause = builder.whereClause(filter: filter, text: text)
        let kind: String
        let k1: String
        let k2: String
        let k3: String
        if let envelope = field.envelope {
            // SQLite's GROUP takes any envelope column as a number kind (its json_type is absent), with its value.
            kind = "'number'"
            if envelope == .id {
                (k1, k2, k3) = ("2", "NULL::numeric", "(id::text COLLATE \"C\")")
            } else {
                (k1, k2, k3) = ("1", "(\(PGBuilder.envelopeColumn(envelope)))::numeric", "(NULL::text COLLATE \"C\")")
            }
        } else {
            let f = PGField(path: field)
            (kind, k1, k2, k3) = (f.kind, f.k1, f.k2, f.k3)
        }
        // A section is a kind and a value, ranked (`g`) in the sort order of `field` (Protocol.md §5.2): numbers
        // and booleans by value, a boolean's section before the number's it ties with. Ranking by numeric equality
        // puts 1 and 1.0 in one section, as `eq` matches them (keyed by the integer when the section holds one),
        // while `true` and 1 stay apart, as `eq` keeps them; as on SQLite, only the first 1000 sections are read.
        let ranked =
            "WITH m AS MATERIALIZED (SELECT seq, \(PostgresStore.recordColumns), \(kind) AS kt, \(k1) AS k1, "
            + "\(k2) AS k2, \(k3) AS k3 FROM documents WHERE \(clause)), "
            + "r AS (SELECT m.*, dense_rank() OVER (ORDER BY k1, k2, k3, kt = 'number') AS g FROM m) "
        var statements = [
            PGStatement("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
            PGStatement(
                ranked + "SELECT min(kt), min(k1)::int8, min(k2)::text, "
                    + "max(k2) FILTER (WHERE scale(k2) = 0)::text, min(k3), count(*) FROM r "
                    + "GROUP BY g ORDER BY g LIMIT \(SQLiteStore.maxGroups)", builder.values),
        ]
        if perGroup > 0 {
            statements.append(
                PGStatement(
                    ranked + "SELECT g, \(PostgresStore.recordColumns) "
                        + "FROM (SELECT r.*, row_number() OVER (PARTITION BY g ORDER BY seq) AS rn FROM r) x "
                        + "WHERE rn <= \(perGroup) AND g <= \(SQLiteStore.maxGroups) ORDER BY g, rn", builder.values))
        }
        statements.append(PGStatement("COMMIT"))
        let results = try readers.read { db throws(LarderError) in try db.run(statements) }
        let groups = results[1]
        var recordsByRank: [Int64: [StoredRecord]] = [:]
        if perGroup > 0 {
            let rows = results[2]
            var budget = PageBudget(maxBytes: configuration.maxPageBytes)
            for row in 0..<rows.rows {
                let record = PostgresStore.record(rows, row, at: 1)
                guard budget.admit(record, isFirst: row == 0) else { break }
                recordsByRank[rows.int(row, 0), default: []].append(record)
            }
        }
        return (0..<groups.rows).map { row in
            let key: JSON
            switch groups.text(row, 0) {
            case "null": key = .null
            case "true": key = .bool(true)
            case "false": key = .bool(false)
            case "object", "array":
                let text = groups.text(row, 4)
                key = (try? JSONParser.parse(Array(text.utf8))) ?? .string(text)
            default:
                if groups.int(row, 1) == 1 {
                    // A section of integers and reals of one value is keyed by the integer.
                    if !groups.isNull(row, 3), let int = Int64(groups.text(row, 3)) {
                        key = .int(int)
                    } else {
                        key = .double(Double(groups.text(row, 2)) ?? 0)
                    }
                } else {
                    key = .string(groups.text(row, 4))
                }
            }
            return Group(key: key, count: Int(groups.int(row, 5)), records: recordsByRank[Int64(row + 1)] ?? [])
        }
    }

    public func collections() throws(LarderError) -> [CollectionInfo] {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT name, (SELECT count(*) FROM documents WHERE collection = c.name) FROM collections AS c "
                        + "ORDER BY name", name: "collections")
            ])[0]
        }
        return (0..<result.rows).map { CollectionInfo(name: result.text($0, 0), count: Int(result.int($0, 1))) }
    }

    public func stats() throws(LarderError) -> StoreStats {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    """
                    SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM blobs),
                        (SELECT count(*) FROM changes),
                        (SELECT last FROM larder_seq WHERE id = 1),
                        (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c
                         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
                         AND c.relname IN ('documents', 'blobs', 'changes', 'collections', 'field_indexes',
                            'larder_seq', 'larder_migrations'))
                    """, name: "stats")
            ])[0]
        }
        return StoreStats(
            documents: Int(result.int(0, 0)), blobs: Int(result.int(0, 1)), databaseBytes: result.int(0, 4),
            changes: Int(result.int(0, 2)), lastChangeSeq: result.int(0, 3))
    }

    /// Nothing to do: PostgreSQL checkpoints itself. Answers whether the writer's connection works.
    public func checkpoint() throws(LarderError) {}

    public func close() {
        textIndexer.close()
        writer.close()
        follower.close()
        readers.close()
        // Nothing commits through this store any more; a listener holding it would keep it alive.
        core.feed.removeAllListeners()
    }

    // MARK: The change log

    public var lastChangeSeq: Int64 { core.feed.lastSeq }

    public func addChangeListener(_ listener: @escaping @Sendable ([ChangeEntry]) -> Void) { core.feed.add(listener) }

    public func changes(after seq: Int64, collection: String?, limit: Int, maxBytes: Int) throws(LarderError)
        -> ChangePage
    {
        if let collection { try SQLiteStore.validateCollection(collection) }
        return try readers.read { db throws(LarderError) in
            try PostgresStore.changesPage(db, after: seq, collection: collection, limit: limit, maxBytes: maxBytes)
        }
    }

    /// One statement, one snapshot: the page and where the log stood (`larder_seq`).
    static func changesPage(_ db: PGConnection, after seq: Int64, collection: String?, limit: Int, maxBytes: Int)
        throws(LarderError) -> ChangePage
    {
        let limit = max(1, limit)
        let filter = collection == nil ? "" : " AND collection = $3"
        var values: [PGValue] = [.int(seq), .int(Int64(limit) + 1)]
        if let collection { values.append(.text(collection)) }
        let result = try db.run([
            PGStatement(
                """
                SELECT s.last, s.pruned_through, c.seq, c.collection, c.kind, c.time, c.id, c.rev, c.created_at,
                    c.updated_at, c.data, c.blob, c.previous
                FROM larder_seq s LEFT JOIN LATERAL (SELECT * FROM changes WHERE seq > $1\(filter)
                    ORDER BY seq LIMIT $2) c ON true
                WHERE s.id = 1 ORDER BY c.seq
                """, values, name: collection == nil ? "changes_all" : "changes_one")
        ])[0]
        guard result.rows > 0 else { return ChangePage(entries: [], more: false, lastSeq: 0, prunedThrough: 0) }
        var entries: [ChangeEntry] = []
        var bytes = 0
        var more = false
        for row in 0..<result.rows where !result.isNull(row, 2) {
            if entries.count >= limit || (!entries.isEmpty && bytes >= maxBytes) {
                more = true
                break
            }
            var record: StoredRecord?
            if !result.isNull(row, 6) {
                record = StoredRecord(
                    id: result.uuid(row, 6), rev: result.int(row, 7), createdAt: result.int(row, 8),
                    updatedAt: result.int(row, 9), data: result.bytes(row, 10))
            }
            var blob: BlobMeta?
            if !result.isNull(row, 11) { blob = try? BlobMeta(json: JSONParser.parseObject(result.bytes(row, 11))) }
            let entry = ChangeEntry(
                seq: result.int(row, 2), kind: ChangeKind(rawValue: result.text(row, 4)),
                collection: result.text(row, 3), time: result.int(row, 5), record: record, blob: blob,
                previous: result.isNull(row, 12) ? nil : result.bytes(row, 12))
            bytes += (entry.record?.data.count ?? 0) + (entry.previous?.count ?? 0) + 256
            entries.append(entry)
        }
        return ChangePage(entries: entries, more: more, lastSeq: result.int(0, 0), prunedThrough: result.int(0, 1))
    }

    // MARK: Blobs

    static let blobColumns =
        "id, size, sha256, content_type, width, height, created_at, attached_collection, attached_id"

    static func blobMeta(_ result: PGResult, _ row: Int) -> BlobMeta {
        var attachment: BlobAttachment?
        if !result.isNull(row, 7) {
            attachment = BlobAttachment(collection: result.text(row, 7), id: result.uuid(row, 8))
        }
        return BlobMeta(
            id: result.uuid(row, 0), size: result.int(row, 1), sha256: result.text(row, 2),
            contentType: result.text(row, 3), width: Int(result.int(row, 4)), height: Int(result.int(row, 5)),
            createdAt: result.int(row, 6), attachedTo: attachment)
    }

    public func blobGet(_ id: UUID) throws(LarderError) -> (meta: BlobMeta, bytes: [UInt8]) {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT \(PostgresStore.blobColumns), bytes FROM blobs WHERE id = $1", [.uuid(id)],
                    name: "blob_get")
            ])[0]
        }
        guard result.rows == 1 else { throw SQLiteStore.blobNotFound(id) }
        return (PostgresStore.blobMeta(result, 0), result.bytes(0, 9))
    }

    static func blobHeadStatement(_ id: UUID) -> PGStatement {
        PGStatement("SELECT \(blobColumns) FROM blobs WHERE id = $1", [.uuid(id)], name: "blob_head")
    }

    public func blobHead(_ id: UUID) throws(LarderError) -> BlobMeta {
        let result = try readers.read { db throws(LarderError) in
            try db.run([PostgresStore.blobHeadStatement(id)])[0]
        }
        guard result.rows == 1 else { throw SQLiteStore.blobNotFound(id) }
        return PostgresStore.blobMeta(result, 0)
    }

    public func blobList(limit: Int, cursor: String?, attachedTo: BlobAttachment?) throws(LarderError)
        -> (blobs: [BlobMeta], nextCursor: String?)
    {
        try SQLiteStore.checkLimit(limit)
        var after: Int64 = 0
        let scope = Cursor.scope([attachedTo.map { .object($0.json) } ?? .null])
        if let cursor {
            let position = try Cursor.open(
                cursor, .blobList, scope: scope,
                scopeMessage: "the cursor belongs to a BLOB_LIST with another attachedTo; start again without it")
            guard case .int(let seq)? = position["seq"] else { throw SQLiteStore.damagedCursor }
            after = seq
        }
        var sql = "SELECT \(PostgresStore.blobColumns), seq FROM blobs WHERE seq > $1"
        var values: [PGValue] = [.int(after), .int(Int64(limit + 1))]
        if let attachedTo {
            try SQLiteStore.validateCollection(attachedTo.collection, field: "attachedTo.collection")
            sql += " AND attached_collection = $3 AND attached_id = $4"
            values += [.text(attachedTo.collection), .uuid(attachedTo.id)]
        }
        sql += " ORDER BY seq LIMIT $2"
        let statement = PGStatement(sql, values, name: attachedTo == nil ? "blob_list" : "blob_list_attached")
        let result = try readers.read { db throws(LarderError) in try db.run([statement])[0] }
        let rows = (0..<result.rows).map { (PostgresStore.blobMeta(result, $0), result.int($0, 9)) }
        let page = rows.prefix(limit)
        let next = rows.count > limit ? Cursor.encode(.blobList, scope: scope, ["seq": .int(page.last!.1)]) : nil
        return (page.map(\.0), next)
    }
}

/// Makes connections for the writer and the pool. After a failed attempt it answers that failure again for a short
/// while instead of trying at once (a stopped database is not asked again by every request), then tries anew.
final class PGConnector: @unchecked Sendable {
    let settings: PGSettings
    let timeoutMs: Int
    /// Run on every new connection before it is used (`SET synchronous_commit TO on` for `--synchronous full`).
    let session: [PGStatement]
    static let retryAfterMs: UInt64 = 200
    private let lock = Lock()
    private var lastFailure: (at: UInt64, error: LarderError)?

    init(settings: PGSettings, timeoutMs: Int, session: [PGStatement] = []) {
        self.settings = settings
        self.timeoutMs = timeoutMs
        self.session = session
    }

    /// A new connection with the session's settings, or the failure (no retry pause: `connect` adds that).
    func open() throws(LarderError) -> PGConnection {
        let connection = try PGConnection(settings: settings, timeoutMs: timeoutMs)
        if !session.isEmpty { _ = try connection.run(session) }
        return connection
    }

    func connect() -> Result<PGConnection, LarderError> {
        let now = DispatchTime.now().uptimeNanoseconds / 1_000_000
        if let failure = lock.withLock({ lastFailure }), now &- failure.at < PGConnector.retryAfterMs {
            return .failure(failure.error)
        }
        do throws(LarderError) {
            let connection = try open()
            lock.withLock { lastFailure = nil }
            return .success(connection)
        } catch {
            let failure =
                error.status == .unavailable
                ? LarderError(.unavailable, "\(error.message); retry shortly") : error
            lock.withLock { lastFailure = (now, failure) }
            return .failure(failure)
        }
    }

    func unavailable(_ reason: String) -> LarderError {
        LarderError(.unavailable, "\(settings.label) is unavailable: \(reason); retry shortly")
    }
}

/// The reader connections: at most `size` at once, made when first needed and again after one breaks.
final class PGPool: @unchecked Sendable {
    private let connector: PGConnector
    private let lock = Lock()
    private var idle: [PGConnection] = []
    private var closed = false
    private let semaphore: DispatchSemaphore

    init(connector: PGConnector, size: Int) {
        self.connector = connector
        semaphore = DispatchSemaphore(value: size)
    }

    /// Runs `body` on a connection. A read that fails because a connection kept from before broke (the database
    /// restarted since) is tried once more on a new connection: reads change nothing.
    func read<T>(_ body: (PGConnection) throws(LarderError) -> T) throws(LarderError) -> T {
        semaphore.wait()
        defer { semaphore.signal() }
        var retried = false
        while true {
            guard !lock.withLock({ closed }) else { throw LarderError(.unavailable, "the store is closed") }
            let kept = lock.withLock { idle.popLast() }
            let connection: PGConnection
            if let kept {
                connection = kept
            } else {
                switch connector.connect() {
                case .success(let fresh): connection = fresh
                case .failure(let error): throw error
                }
            }
            do throws(LarderError) {
                let value = try body(connection)
                giveBack(connection)
                return value
            } catch {
                if connection.isUsable {
                    giveBack(connection)
                } else if kept != nil && !retried {
                    retried = true
                    continue
                }
                throw error
            }
        }
    }

    private func giveBack(_ connection: PGConnection) {
        if connection.inTransaction { _ = try? connection.run([PGStatement("ROLLBACK")]) }
        guard connection.isUsable else { return }
        lock.withLock { if !closed { idle.append(connection) } }
    }

    func close() {
        let connections = lock.withLock { () -> [PGConnection] in
            closed = true
            defer { idle.removeAll() }
            return idle
        }
        for connection in connections { connection.close() }
    }
}

/// Point reads on PostgreSQL: each one a pooled round trip (the server runs them on its work queue).
final class PGPointReads: PointReads {
    private let store: PostgresStore

    init(_ store: PostgresStore) { self.store = store }

    func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord { try store.get(collection, id: id) }

    func getJSON(_ collection: String, id: UUID) throws(LarderError) -> [UInt8] {
        try SQLiteStore.validateCollection(collection)
        return try store.readers.read { db throws(LarderError) in
            let result = try db.run([PostgresStore.getStatement(collection, id)])[0]
            guard result.rows == 1 else { throw SQLiteStore.notFound(collection, id) }
            var out: [UInt8] = []
            result.withBytes(0, 4) { data in
                RecordWriter.write(
                    id: id, rev: result.int(0, 1), createdAt: result.int(0, 2), updatedAt: result.int(0, 3), data: data,
                    into: &out)
            }
            return out
        }
    }

    func blobHead(_ id: UUID) throws(LarderError) -> BlobMeta { try store.blobHead(id) }

    func end() {}
}

/// Runs SQL text on a connection of its own (tests and tools: a schema per test, say).
package enum PGAdmin {
    package static func execute(url: String, _ sql: String) throws(LarderError) {
        let connection = try PGConnection(settings: try PGSettings(url: url), timeoutMs: 60_000)
        defer { connection.close() }
        try connection.execute(sql)
    }
}
