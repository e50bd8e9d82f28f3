import CSQLite
import Foundation
import LarderWire

/// Searches, counts and groups: the SQL built from a query and run on a pooled reader (with the trigram
/// index's snapshot beside it when the query has text).
extension SQLiteStore {
    /// The SQL of a search: the statement, its bound values, and how many sort-key columns follow the record's.
    func searchSQL(_ collection: String, _ query: SearchQuery, plan: TextPlan = .index) throws(LarderError)
        -> (sql: String, values: [SQLValue], keyCount: Int)
    {
        try CollectionName.validate(collection)
        try StoreRules.checkLimit(query.limit)
        var builder = SQLiteQueryBuilder(collection: collection, core: core, textPlan: plan)
        var clause = builder.whereClause(filter: query.filter, text: query.text)
        let fields = query.sort.map { builder.field($0.field) }
        let keys = fields.map(\.value)
        // Under a collation a key's strings compare by it on their first characters, then whole (`Collation`); its
        // numbers and BLOBs as before.
        let tags = try Collation.tags(query.sort)
        let collated = keys.indices.map { i in
            tags[i].map { tag in
                (
                    prefix: Collation.sqlitePrefixed(keys[i], type: fields[i].type ?? "NULL") + Collation.sqliteClause(tag),
                    whole: "(\(keys[i]))" + Collation.sqliteClause(tag)
                )
            }
        }
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
                } else if let terms = collated[i], case .text(let text) = values[i] {
                    let (vp, v) = (builder.param(.text(Collation.prefix(text))), builder.param(values[i]))
                    let symbol = descending ? "<" : ">"
                    let null = descending ? " OR \(x) IS NULL" : ""
                    strict = "(\(terms.prefix) \(symbol) \(vp) OR (\(terms.prefix) = \(vp) AND \(terms.whole) \(symbol) \(v))\(null))"
                    equal = "\(x) = \(v)"
                } else {
                    let v = builder.param(values[i])
                    strict = descending ? "(\(x) < \(v) OR \(x) IS NULL)" : "\(x) > \(v)"
                    equal = "\(x) = \(v)"
                }
                return "(\(strict) OR (\(equal) AND \(after(i + 1))))"
            }
            clause += " AND " + after(0)
        }
        var order: [String] = []
        for (i, key) in query.sort.enumerated() {
            let direction = key.descending ? " DESC" : " ASC"
            if let terms = collated[i] {
                order += [terms.prefix + direction, terms.whole + direction]
            } else {
                order.append(keys[i] + direction)
            }
        }
        order.append("id ASC")
        let keyColumns = keys.isEmpty ? "" : ", " + keys.joined(separator: ", ")
        let sql = "SELECT \(SQLiteStore.recordColumns)\(keyColumns) FROM documents WHERE \(clause) ORDER BY "
            + order.joined(separator: ", ") + " LIMIT \(query.limit + 1)"
        return (sql, builder.values, keys.count)
    }

    /// A read on a pooled connection. With `text` and the trigram index, it runs in a transaction whose two
    /// snapshots were taken together (`TextIndexer.withSnapshots`), and `body` learns in that snapshot how to find the
    /// text: `.scan` when the collection is not covered by the index (which is then asked to cover it), else `.index`
    /// or `.indexDriving` by how many documents the query's rarest trigram is in. Without either `body` gets `.index`
    /// (the statement as first built). A text search too short for the index (under three characters) asks for the
    /// collection to be covered as well: a covered collection's rows keep their search text, which such a search
    /// reads instead of deriving it from every record.
    func read<T>(
        _ collection: String, text: TextQuery? = nil, transaction: Bool = false,
        _ body: (SQLiteConnection, TextPlan) throws(LarderError) -> T
    ) throws(LarderError) -> T {
        guard let text, let textIndexer else {
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
    static func textPlan(_ db: SQLiteConnection, _ text: TextQuery) throws(LarderError) -> TextPlan {
        let trigrams = SQLiteQueryBuilder.trigrams(TextFold.fold(text.query))
        // A query under three characters reads the rows' search text alone (SQLiteQueryBuilder `text`).
        guard !trigrams.isEmpty else { return .index }
        var fewest = Int64.max
        for trigram in trigrams where fewest > 0 {
            fewest = min(fewest, try db.scalar("SELECT doc FROM ix.text_vocab WHERE term = ?1", [.text(trigram)]) ?? 0)
        }
        let backlog =
            try db.scalar("SELECT count(*) FROM (SELECT 1 FROM fts_backlog LIMIT \(drivingCandidates + 1))") ?? 0
        return fewest + backlog <= drivingCandidates ? .indexDriving : .index
    }

    /// `EXPLAIN QUERY PLAN` of a search, for tests that prove an index is used.
    func explain(_ collection: String, _ query: SearchQuery) throws(LarderError) -> String {
        let first = try searchSQL(collection, query)
        return try read(collection, text: query.text) { db, plan throws(LarderError) in
            let (sql, values, _) = plan == .index ? first : try searchSQL(collection, query, plan: plan)
            // EXPLAIN does not check the schema's version: a real read first loads indexes created since.
            _ = try db.scalar("SELECT count(*) FROM main.sqlite_master")
            return try db.query("EXPLAIN QUERY PLAN " + sql, values) { $0.text(3) }.joined(separator: "\n")
        }
    }

    public func search(_ collection: String, _ query: SearchQuery) throws(LarderError) -> Page {
        let first = try searchSQL(collection, query)
        let keyCount = first.keyCount
        let statement = { (plan: TextPlan) throws(LarderError) -> (sql: String, values: [SQLValue]) in
            let (sql, values, _) = plan == .index ? first : try self.searchSQL(collection, query, plan: plan)
            return (sql, values)
        }
        let (page, more) = try readPage(collection, text: query.text, statement, limit: query.limit) { row in
            (SQLiteStore.record(row), (0..<keyCount).map { row.value(Int32(5 + $0)) })
        }
        return SearchPosition.page(collection, query, page, more: more)
    }

    /// Reads up to `limit` rows of a page query (which asks for `limit + 1`), stopping early when the records would
    /// pass `maxPageBytes`; `more` says whether a next page exists.
    func readPage<T>(
        _ collection: String, text: TextQuery?,
        _ statement: (TextPlan) throws(LarderError) -> (sql: String, values: [SQLValue]), limit: Int,
        _ row: (SQLiteStatement) -> (StoredRecord, T)
    ) throws(LarderError) -> (page: [(StoredRecord, T)], more: Bool) {
        try read(collection, text: text) { db, plan throws(LarderError) in
            let (sql, values) = try statement(plan)
            var fill = PageFill<T>(limit: limit, maxBytes: configuration.maxPageBytes)
            try db.forEachRow(sql, values) { fill.add(row($0)) }
            return (fill.items, fill.more)
        }
    }

    public func count(_ collection: String, filter: Filter?, text: TextQuery?) throws(LarderError) -> Int {
        try CollectionName.validate(collection)
        func statement(_ plan: TextPlan) -> (sql: String, values: [SQLValue]) {
            var builder = SQLiteQueryBuilder(collection: collection, core: core, textPlan: plan)
            let clause = builder.whereClause(filter: filter, text: text)
            return ("SELECT count(*) FROM documents WHERE \(clause)", builder.values)
        }
        let first = statement(.index)
        return try read(collection, text: text) { db, plan throws(LarderError) in
            let (sql, values) = plan == .index ? first : statement(plan)
            return Int(try db.scalar(sql, values) ?? 0)
        }
    }

    public func group(_ collection: String, field: FieldPath, filter: Filter?, text: TextQuery?, perGroup: Int)
        throws(LarderError) -> [Group]
    {
        try CollectionName.validate(collection)
        try ReadLimits.checkPerGroup(perGroup)
        // A section is a kind and a value: `g`, the rank of (value, kind) in the sort order of `field` (§5.2), numbers
        // and booleans by value with a boolean's section before the number's it ties with. Ranking by SQLite's own
        // comparison puts 1 and 1.0 in one section, as `eq` matches them, while `true` and 1 stay apart, as `eq` keeps
        // them.
        func statements(_ plan: TextPlan) -> (groups: String, records: String, values: [SQLValue]) {
            var builder = SQLiteQueryBuilder(collection: collection, core: core, textPlan: plan)
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
                + "LIMIT \(StoreRules.maxGroups)"
            let recordsSQL =
                "SELECT g, \(SQLiteStore.recordColumns) FROM (SELECT *, row_number() OVER "
                + "(PARTITION BY g ORDER BY seq) AS rn FROM (\(ranked))) "
                + "WHERE rn <= \(perGroup) AND g <= \(StoreRules.maxGroups) ORDER BY g, rn"
            return (groupsSQL, recordsSQL, builder.values)
        }
        let first = statements(.index)
        let (groupRows, recordRows) = try read(collection, text: text, transaction: true) { db, plan throws(LarderError) in
            let (groupsSQL, recordsSQL, values) = plan == .index ? first : statements(plan)
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
}
