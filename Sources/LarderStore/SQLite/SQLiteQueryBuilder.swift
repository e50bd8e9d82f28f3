import Foundation
import LarderWire

extension FieldPath {
    /// The SQLite JSON path with every segment quoted: `$."address"."city"`. Segments never contain `"` (FieldPath
    /// rejects it), so the quoting is unambiguous. SQLite compares a quoted label with a member name as it is written
    /// in the stored JSON, where a backslash is escaped (`\\`): so is it here, or such a member could not be found
    /// (the other characters the compact form escapes are refused in paths).
    var jsonPath: String {
        var path = "$"
        for segment in segments { path += ".\"" + segment.replacingOccurrences(of: "\\", with: "\\\\") + "\"" }
        return path
    }

    /// `jsonPath` as an SQL string literal (single quotes doubled). Used only where SQLite needs a literal: CREATE
    /// INDEX expressions, and queries on indexed paths (so the planner can match the index expression).
    var sqlLiteral: String { "'" + jsonPath.replacingOccurrences(of: "'", with: "''") + "'" }

    /// The expression a data field at `path` (a literal or a parameter) is sorted, grouped and compared by: what
    /// `json_extract` answers for null (SQL NULL, as for a missing field), booleans (0 and 1), numbers and strings, and
    /// for an array or object its JSON text as a BLOB. SQLite orders NULL, then numbers, then TEXT by its bytes, then
    /// BLOBs by their bytes: exactly Protocol.md's order of kinds (§5.2), with strings never mixed among arrays and
    /// objects. One expression for every kind keeps a keyset cursor a plain comparison, and lets one index (`INDEX`,
    /// built on this expression) serve filters and sorts.
    static func sortKeySQL(_ path: String) -> String {
        "CASE WHEN json_type(data, \(path)) IN ('object', 'array') THEN CAST(json_extract(data, \(path)) AS BLOB) "
            + "ELSE json_extract(data, \(path)) END"
    }
}

/// Translates filters, text search and sorts into an SQL condition with numbered parameters. Field paths are bound as
/// parameters, except on indexed paths where the literal (built from the validated path) must match the index.
struct SQLiteQueryBuilder {
    let collection: String
    let core: StoreCore
    private(set) var values: [SQLValue] = []
    /// Whether the condition reads the trigram index (`ix.text_index`): such a statement must run inside
    /// `TextIndexer.withSnapshots`.
    private(set) var usesTextIndex = false

    /// How a text condition finds its documents (decided in the reader's snapshot: `SQLiteStore.read`).
    let textPlan: TextPlan

    init(collection: String, core: StoreCore, textPlan: TextPlan = .index) {
        self.collection = collection
        self.core = core
        self.textPlan = textPlan
        _ = param(.text(collection))  // ?1 is always the collection
    }

    mutating func param(_ value: SQLValue) -> String {
        values.append(value)
        return "?\(values.count)"
    }

    /// The value expression (`FieldPath.sortKeySQL` for data fields) and, for data fields, the json_type expression
    /// of a field.
    mutating func field(_ path: FieldPath) -> (value: String, type: String?) {
        if let envelope = path.envelope {
            switch envelope {
            case .id: return ("id", nil)
            case .rev: return ("rev", nil)
            case .createdAt: return ("createdAt", nil)
            case .updatedAt: return ("updatedAt", nil)
            }
        }
        let path_ = core.isIndexed(collection, path) ? path.sqlLiteral : param(.text(path.jsonPath))
        return (FieldPath.sortKeySQL(path_), "json_type(data, \(path_))")
    }

    static func sqlValue(_ json: JSON) -> SQLValue {
        switch json {
        case .null: .null
        case .bool(let b): .int(b ? 1 : 0)
        case .int(let i): .int(i)
        case .double(let d): .double(d)
        case .string(let s): .text(s)
        case .array, .object: .text(String(decoding: json.bytes, as: UTF8.self))
        }
    }

    private mutating func equals(_ path: FieldPath, _ value: JSON) -> String {
        // The column holds every `$owner` string it can (`PreparedDocument.columnOwner`); another is compared in the
        // JSON.
        if path == FieldPath.owner, case .string(let owner) = value, let column = PreparedDocument.columnOwner(owner) {
            return "owner = \(param(.text(column)))"
        }
        let (x, t) = field(path)
        if path.envelope == .id, case .string(let s) = value { return "\(x) = \(param(.text(s.lowercased())))" }
        guard let t else {
            switch value {
            case .int, .double, .string: return "\(x) = \(param(SQLiteQueryBuilder.sqlValue(value)))"
            default: return "0"
            }
        }
        switch value {
        case .null: return "(\(t) IS NULL OR \(t) = 'null')"  // a missing field equals null (Protocol.md §5.2)
        case .bool(let b): return "\(t) = '\(b ? "true" : "false")'"
        case .int, .double: return "(\(t) IN ('integer','real') AND \(x) = \(param(SQLiteQueryBuilder.sqlValue(value))))"
        case .string(let s): return "(\(t) = 'text' AND \(x) = \(param(.text(s))))"
        case .array, .object: return "0"
        }
    }

    mutating func condition(_ filter: Filter) -> String {
        switch filter {
        case .and(let items): return "(" + items.map { condition($0) }.joined(separator: " AND ") + ")"
        case .or(let items): return "(" + items.map { condition($0) }.joined(separator: " OR ") + ")"
        case .not(let inner): return "(NOT coalesce(\(condition(inner)), 0))"
        case .compare(let path, .eq, let value): return equals(path, value)
        case .compare(let path, .ne, let value): return "(NOT coalesce(\(equals(path, value)), 0))"
        case .compare(let path, let op, let value):
            let symbol = [Filter.Comparison.lt: "<", .lte: "<=", .gt: ">", .gte: ">="][op]!
            let (x, t) = field(path)
            var bound = SQLiteQueryBuilder.sqlValue(value)
            if path.envelope == .id, case .text(let s) = bound { bound = .text(s.lowercased()) }
            let comparison = "\(x) \(symbol) \(param(bound))"
            guard let t else { return comparison }
            switch value {
            case .string: return "(\(t) = 'text' AND \(comparison))"
            default: return "(\(t) IN ('integer','real') AND \(comparison))"
            }
        case .isIn(let path, let values):
            if values.isEmpty { return "0" }
            return inList(path, values)
        case .exists(let path, let flag):
            let (_, t) = field(path)
            guard let t else { return flag ? "1" : "0" }
            return flag ? "\(t) IS NOT NULL" : "\(t) IS NULL"
        case .prefix(let path, let text):
            let (x, t) = field(path)
            let p = param(.text(text))
            let test = "\(x) >= \(p) AND substr(\(x), 1, length(\(p))) = \(p)"
            return t.map { "(\($0) = 'text' AND \(test))" } ?? "(typeof(\(x)) = 'text' AND \(test))"
        case .contains(let path, let text):
            let (x, t) = field(path)
            let test = "instr(larder_fold(\(x)), \(param(.text(TextFold.fold(text))))) > 0"
            return t.map { "(\($0) = 'text' AND \(test))" } ?? "coalesce(\(test), 0)"
        }
    }

    /// `in` as at most five tests whatever the number of values: numbers and strings each as one bound JSON array
    /// (`x IN (SELECT value FROM json_each(?))`), null and booleans as `equals`. One `equals` per value joined by OR
    /// nested a level per value, and SQLite refuses expressions deeper than 1,000. The
    /// dialect twin of `PGBuilder.inList`: the same parts (`InListValues`), SQLite's tests.
    private mutating func inList(_ path: FieldPath, _ values: [JSON]) -> String {
        let (x, t) = field(path)
        func list(_ items: [JSON]) -> String {
            let array = param(.text(String(decoding: JSON.array(items).bytes, as: UTF8.self)))
            return "\(x) IN (SELECT value FROM json_each(\(array)))"
        }
        return InListValues(values).anyOf(
            numbers: { numbers in
                let test = list(numbers)
                return t.map { "(\($0) IN ('integer','real') AND \(test))" } ?? test
            },
            strings: { strings in
                let test = list(strings.map { .string(path.envelope == .id ? $0.lowercased() : $0) })
                return t.map { "(\($0) = 'text' AND \(test))" } ?? test
            },
            other: { equals(path, $0) })
    }

    /// Substring search. The precomputed `search` column holds every string value folded; a 3+ character query first
    /// narrows by the trigram index (plus its backlog), and the exact `instr` test always decides, so both paths
    /// answer the same.
// The SQLite dialect of PGBuilder.text (PostgreSQL): one clause per
// backend, alike but for the SQL functions.
    mutating func text(_ query: TextQuery) -> String {
        let folded = TextFold.fold(query.query)
        let q = param(.text(folded))
        var parts: [String] = []
        if textPlan != .scan && core.hasTrigram && core.configuration.useTextIndex && folded.unicodeScalars.count >= 3 {
            let match = SQLiteQueryBuilder.trigramMatch(folded)
            // The index's matches, and the documents written since it last saw them (`fts_backlog`). Under `.index`,
            // `+seq` keeps SQLite from driving by them (the planner's statistics say a collection is large, so it
            // would): the collection is walked in the order asked for, and a page stops early.
            usesTextIndex = true
            let column = textPlan == .indexDriving ? "seq" : "+seq"
            parts.append(
                "\(column) IN (SELECT rowid FROM ix.text_index WHERE text_index MATCH \(param(.text(match))) "
                    + "UNION ALL SELECT seq FROM fts_backlog)")
        }
        // A collection the index does not cover keeps no search text in its rows (`CoveredCollections`).
        parts.append("instr(coalesce(search, larder_search(data)), \(q)) > 0")
        if let fields = query.fields {
            let tests = fields.map { path in
                "EXISTS (SELECT 1 FROM json_tree(documents.data, \(param(.text(path.jsonPath)))) AS j "
                    + "WHERE j.type = 'text' AND instr(larder_fold(j.value), \(q)) > 0)"
            }
            parts.append("(" + tests.joined(separator: " OR ") + ")")
        }
        return "(" + parts.joined(separator: " AND ") + ")"
    }

    /// The documents that hold every trigram of `folded` (3+ scalars): an FTS5 query of its trigrams joined by AND, each
    /// a quoted string. The index has no positions, so it cannot ask for them adjacent; `instr` decides. Any subset of
    /// the trigrams finds a superset of the matches, so a long query uses at most `maxTrigrams` of them, spread from the
    /// first to the last.
    static func trigramMatch(_ folded: String) -> String {
        trigrams(folded).map { "\"" + $0.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }.joined(separator: " AND ")
    }

    /// The distinct trigrams a query of `folded` asks the index for: at most `maxTrigrams`, spread first to last.
    static func trigrams(_ folded: String) -> [String] {
        let scalars = Array(folded.unicodeScalars)
        var trigrams: [String] = []
        var seen: Set<String> = []
        let count = scalars.count - 2
        let step = max(1.0, Double(count - 1) / Double(maxTrigrams - 1))
        var position = 0.0
        while Int(position.rounded()) < count {
            let start = Int(position.rounded())
            var view = String.UnicodeScalarView()
            view.append(contentsOf: scalars[start..<start + 3])
            let trigram = String(view)
            if seen.insert(trigram).inserted { trigrams.append(trigram) }
            position += step
        }
        return trigrams
    }

    static let maxTrigrams = 16

    /// `collection = ?1 AND filter AND text`.
    mutating func whereClause(filter: Filter?, text: TextQuery?) -> String {
        var parts: [String] = []
        if let filter { parts.append(condition(filter)) }
        if let text { parts.append(self.text(text)) }
        // `+collection` keeps SQLite from walking the collection's index: the few candidates drive instead.
        let collection = usesTextIndex && textPlan == .indexDriving ? "+collection = ?1" : "collection = ?1"
        return ([collection] + parts).joined(separator: " AND ")
    }
}

/// How a substring search of 3+ characters finds its documents.
enum TextPlan: Sendable {
    /// Every document of the collection is tested (the collection is not covered by the trigram index).
    case scan
    /// The collection's documents are walked (in the order asked for, so a page can stop early) and each is checked
    /// against the index's candidates: for queries that many documents match.
    case index
    /// The index's candidates are looked up one by one and the rest filtered and sorted: for queries that few
    /// documents can match (a rare word, a name, an id).
    case indexDriving
}
