import Dispatch
import Foundation
import LarderSync
import LarderWire

/// Document reads on PostgreSQL, each a pooled round trip: the SQL twin of `SQLiteStore`'s reads.
extension PostgresStore {
    static let recordColumns = "id, rev, created_at, updated_at, data"

    /// A record from columns `recordColumns` starting at `column`.
    static func record(_ result: PGResult, _ row: Int, at column: Int = 0) -> StoredRecord {
        StoredRecord(
            id: result.uuid(row, column), rev: result.int(row, column + 1), createdAt: result.int(row, column + 2),
            updatedAt: result.int(row, column + 3), data: result.bytes(row, column + 4))
    }

    public func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord {
        try CollectionName.validate(collection)
        guard let record = try pointReadBatcher.read(collection, id).record else {
            throw StoreRules.notFound(collection, id)
        }
        return record
    }

    public func getSequenced(_ collection: String, id: UUID) throws(LarderError) -> SequencedRead {
        try CollectionName.validate(collection)
        return try pointReadBatcher.read(collection, id)
    }

    public func submitGet(
        _ collection: String, id: UUID, completion: @escaping @Sendable (Result<SequencedRead, LarderError>) -> Void
    ) {
        do throws(LarderError) {
            try CollectionName.validate(collection)
        } catch {
            return completion(.failure(error))
        }
        pointReadBatcher.submit(.init(collection: collection, id: id, completion: completion))
    }

    static func getStatement(_ collection: String, _ id: UUID) -> PGStatement {
        PGStatement(
            "SELECT \(recordColumns) FROM documents WHERE collection = $1 AND id = $2", [.text(collection), .uuid(id)],
            name: "doc_get")
    }

    static func getRecord(_ db: PGConnection, _ collection: String, _ id: UUID) throws(LarderError) -> StoredRecord {
        let result = try db.run([getStatement(collection, id)])[0]
        guard result.rows == 1 else { throw StoreRules.notFound(collection, id) }
        return record(result, 0)
    }

    public func pointReads() -> any PointReads { PGPointReads(self) }

    public func getMany(_ collection: String, ids: [UUID]) throws(LarderError)
        -> (records: [StoredRecord], missing: [UUID])
    {
        try CollectionName.validate(collection)
        let unique = try ReadLimits.uniqueIds(ids)
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT \(PostgresStore.recordColumns) FROM documents WHERE collection = $1 AND id = ANY($2)",
                    [.text(collection), .array(PGArray(uuids: unique))], name: "doc_get_many")
            ])[0]
        }
        var records: [StoredRecord] = []
        var budget = PageBudget(maxBytes: configuration.maxPageBytes)
        for row in 0..<result.rows {
            let record = PostgresStore.record(result, row)
            guard budget.admit(record, isFirst: row == 0) else {
                throw ReadLimits.tooLarge(unique.count, maxBytes: configuration.maxPageBytes)
            }
            records.append(record)
        }
        return ReadLimits.answer(unique, records)
    }

    public func list(_ collection: String, limit: Int, cursor: String?) throws(LarderError) -> Page {
        try CollectionName.validate(collection)
        try StoreRules.checkLimit(limit)
        let position = try SeqPosition.list(collection, cursor: cursor)
        let statement = PGStatement(
            "SELECT \(PostgresStore.recordColumns), seq FROM documents WHERE collection = $1 AND seq > $2 "
                + "ORDER BY seq LIMIT $3", [.text(collection), .int(position.after), .int(Int64(limit + 1))],
            name: "doc_list")
        let (page, more) = try readPage(statement, limit: limit) { result, row in
            (PostgresStore.record(result, row), result.int(row, 5))
        }
        return Page(records: page.map(\.0), nextCursor: more ? position.next(after: page.last!.1) : nil)
    }

    /// Reads up to `limit` rows of a page query (which asks for `limit + 1`), stopping early when the records would
    /// pass `maxPageBytes`; `more` says whether a next page exists.
    private func readPage<T>(
        _ statement: PGStatement, limit: Int, _ row: (PGResult, Int) -> (StoredRecord, T)
    ) throws(LarderError) -> (page: [(StoredRecord, T)], more: Bool) {
        let result = try readers.read { db throws(LarderError) in try db.run([statement])[0] }
        var fill = PageFill<T>(limit: limit, maxBytes: configuration.maxPageBytes)
        for index in 0..<result.rows {
            guard fill.add(row(result, index)) else { break }
        }
        return (fill.items, fill.more)
    }

    /// The statement of a search, and where each sort key's columns start.
    /// Asks for the collection's trigram index when `text` is long enough to use one (`PGTextIndexer`).
    private func wantsTextIndex(_ collection: String, _ text: TextQuery?) {
        guard let text, TextFold.fold(text.query).unicodeScalars.count >= 3 else { return }
        textIndexer.ensure(collection)
    }

    func searchStatement(_ collection: String, _ query: SearchQuery) throws(LarderError) -> (PGStatement, [Int]) {
        try CollectionName.validate(collection)
        try StoreRules.checkLimit(query.limit)
        wantsTextIndex(collection, query.text)
        var builder = PGBuilder(collection: collection)
        var clause = builder.whereClause(filter: query.filter, text: query.text)
        let tags = try Collation.tags(query.sort)
        try collations.ensure(tags.compactMap { $0 }, readers)
        if let position = try SearchPosition.open(collection, query) {
            clause += " AND " + (try builder.after(query.sort, tags: tags, position.values, lastId: position.lastId))
        }
        var order = query.sort.indices.flatMap { PGBuilder.orderTerms(query.sort[$0], tag: tags[$0]) }
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
        return SearchPosition.page(collection, query, page, more: more)
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
        try CollectionName.validate(collection)
        wantsTextIndex(collection, text)
        var builder = PGBuilder(collection: collection)
        let clause = builder.whereClause(filter: filter, text: text)
        let statement = PGStatement("SELECT count(*) FROM documents WHERE \(clause)", builder.values)
        return Int(try readers.read { db throws(LarderError) in try db.run([statement])[0].int(0, 0) })
    }

    public func group(_ collection: String, field: FieldPath, filter: Filter?, text: TextQuery?, perGroup: Int)
        throws(LarderError) -> [Group]
    {
        try CollectionName.validate(collection)
        try ReadLimits.checkPerGroup(perGroup)
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
                    + "GROUP BY g ORDER BY g LIMIT \(StoreRules.maxGroups)", builder.values),
        ]
        if perGroup > 0 {
            statements.append(
                PGStatement(
                    ranked + "SELECT g, \(PostgresStore.recordColumns) "
                        + "FROM (SELECT r.*, row_number() OVER (PARTITION BY g ORDER BY seq) AS rn FROM r) x "
                        + "WHERE rn <= \(perGroup) AND g <= \(StoreRules.maxGroups) ORDER BY g, rn", builder.values))
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

    public func schema(_ collection: String) throws(LarderError) -> StoredSchema? {
        try CollectionName.validate(collection)
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT version, schema, action FROM larder_schemas WHERE collection = $1", [.text(collection)],
                    name: "schema_get")
            ])[0]
        }
        guard result.rows == 1 else { return nil }
        return StoredSchema(
            version: result.int(0, 0), schema: result.isNull(0, 1) ? nil : try JSONParser.parseObject(result.bytes(0, 1)),
            action: SchemaValidationAction(rawValue: result.text(0, 2)) ?? .error)
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
                            'larder_seq', 'larder_migrations', 'thumbnails'))
                    """, name: "stats")
            ])[0]
        }
        return StoreStats(
            documents: Int(result.int(0, 0)), blobs: Int(result.int(0, 1)), databaseBytes: result.int(0, 4),
            changes: Int(result.int(0, 2)), lastChangeSeq: result.int(0, 3), writer: writer.stats)
    }
}

/// Point reads on PostgreSQL: each one a pooled round trip (the server runs them on its work queue).
final class PGPointReads: PointReads {
    private let store: PostgresStore

    init(_ store: PostgresStore) { self.store = store }

    func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord { try store.get(collection, id: id) }

    func getJSON(_ collection: String, id: UUID) throws(LarderError) -> [UInt8] {
        try CollectionName.validate(collection)
        return try store.readers.read { db throws(LarderError) in
            let result = try db.run([PostgresStore.getStatement(collection, id)])[0]
            guard result.rows == 1 else { throw StoreRules.notFound(collection, id) }
            var out: [UInt8] = []
            result.withBytes(0, 4) { data in
                RecordWriter.write(
                    id: id, rev: result.int(0, 1), createdAt: result.int(0, 2), updatedAt: result.int(0, 3), data: data,
                    into: &out)
            }
            return out
        }
    }

    func blobHead(_ id: UUID) throws(LarderError) -> BlobInfo { try store.blobHead(id) }

    func end() {}
}
