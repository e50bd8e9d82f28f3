import Foundation
import LarderWire

/// Translates filters, text search and sorts into PostgreSQL conditions with numbered parameters, answering what
/// `SQLiteQueryBuilder` answers on SQLite (the rules are spelled out in `FilterEvaluator`).
struct PGBuilder {
    let collection: String
    private(set) var values: [PGValue] = []

    init(collection: String) { self.collection = collection }

    mutating func param(_ value: PGValue) -> String {
        values.append(value)
        return "$\(values.count)"
    }

    /// A numeric parameter (sent as text: exact, in SQLite's value).
    mutating func number(_ text: String) -> String { "\(param(.text(text)))::numeric" }

    /// The collection test: a literal (the name is validated), so a partial field index's predicate matches it.
    var collectionTest: String { "collection = \(PGSQL.literal(collection))" }

    /// `collection AND filter AND text`.
    mutating func whereClause(filter: Filter?, text: TextQuery?) -> String {
        var parts = [collectionTest]
        if let filter { parts.append(condition(filter)) }
        if let text { parts.append(self.text(text)) }
        return parts.joined(separator: " AND ")
    }

    static func envelopeColumn(_ envelope: FieldPath.Envelope) -> String {
        switch envelope {
        case .id: "id"
        case .rev: "rev"
        case .createdAt: "created_at"
        case .updatedAt: "updated_at"
        }
    }

    // MARK: Filters

    mutating func condition(_ filter: Filter) -> String {
        switch filter {
        case .and(let items): return "(" + items.map { condition($0) }.joined(separator: " AND ") + ")"
        case .or(let items): return "(" + items.map { condition($0) }.joined(separator: " OR ") + ")"
        case .not(let inner): return "(NOT coalesce(\(condition(inner)), false))"
        case .compare(let path, .eq, let value): return equals(path, value)
        case .compare(let path, .ne, let value): return "(NOT coalesce(\(equals(path, value)), false))"
        case .compare(let path, let op, let value): return order(path, op, value)
        case .isIn(let path, let values): return inList(path, values)
        case .exists(let path, let flag):
            guard path.envelope == nil else { return flag ? "true" : "false" }
            let field = PGField(path: path)
            return flag ? "(\(field.value) IS NOT NULL)" : "(\(field.value) IS NULL)"
        case .prefix(let path, let text):
            let prefix = FilterEvaluator.cString(text)
            if let envelope = path.envelope {
                guard envelope == .id else { return "false" }
                return "starts_with(id::text COLLATE \"C\", \(param(.text(prefix))))"
            }
            let field = PGField(path: path)
            let p = param(.text(prefix))
            return "(\(field.type) = 'string' AND \(field.k1) = 2 AND \(field.k2) IS NULL AND \(field.k3) >= \(p) "
                + "AND starts_with(\(field.k3), \(p)))"
        case .contains(let path, let text):
            let needle = FilterEvaluator.cString(TextFold.fold(text))
            if let envelope = path.envelope {
                guard envelope == .id else { return "false" }
                return "(strpos(id::text, \(param(.text(needle)))) > 0)"
            }
            let field = PGField(path: path)
            return "(\(field.type) = 'string' AND strpos(larder_fold(\(field.value) #>> '{}'), "
                + "\(param(.text(needle)))) > 0)"
        }
    }

    private mutating func stringEquals(_ field: PGField, _ text: String) -> String {
        let s = param(.text(text))
        return "(\(field.type) = 'string' AND \(field.k1) = 2 AND \(field.k2) IS NULL AND \(field.k3Prefix) = "
            + "left(\(s), \(PGSQL.indexedTextChars)) AND \(field.k3) = \(s))"
    }

    private mutating func equals(_ path: FieldPath, _ value: JSON) -> String {
        if let envelope = path.envelope { return envelopeCompare(envelope, .eq, value) }
        // The column holds every `$owner` string it can (`PreparedDocument.columnOwner`); another is compared in the
        // jsonb copy.
        if path == FieldPath.owner, case .string(let owner) = value, let column = PreparedDocument.columnOwner(owner) {
            return "owner = \(param(.text(column)))"
        }
        let field = PGField(path: path)
        switch value {
        case .null: return "(\(field.type) IS NULL OR \(field.type) = 'null')"  // a missing field equals null (§5.2)
        case .bool(let b): return "(\(field.type) = 'boolean' AND \(field.k1) = 1 AND \(field.k2) = \(b ? 1 : 0))"
        case .int, .double:
            return "(\(field.type) = 'number' AND \(field.k1) = 1 AND \(field.k2) = \(number(PGNumber.text(value)!)))"
        case .string(let s): return stringEquals(field, FilterEvaluator.cString(s))
        case .array, .object: return "false"
        }
    }

    private mutating func order(_ path: FieldPath, _ op: Filter.Comparison, _ value: JSON) -> String {
        let symbol = [Filter.Comparison.lt: "<", .lte: "<=", .gt: ">", .gte: ">="][op]!
        if let envelope = path.envelope { return envelopeCompare(envelope, op, value) }
        let field = PGField(path: path)
        switch value {
        case .int, .double:
            return "(\(field.type) = 'number' AND \(field.k1) = 1 AND \(field.k2) \(symbol) "
                + "\(number(PGNumber.text(value)!)))"
        case .string(let s):
            let text = FilterEvaluator.cString(s)
            let p = param(.text(text))
            // The indexed prefix bounds the range too (it orders like the whole text), so an index can serve it.
            let prefixSymbol = op == .lt || op == .lte ? "<=" : ">="
            return "(\(field.type) = 'string' AND \(field.k1) = 2 AND \(field.k2) IS NULL AND \(field.k3Prefix) "
                + "\(prefixSymbol) left(\(p), \(PGSQL.indexedTextChars)) AND \(field.k3) \(symbol) \(p))"
        default:
            return "false"
        }
    }

    /// An envelope column against a value, with SQLite's column affinity (`FilterEvaluator.compareColumn`): `$id`
    /// is text (a number compares as its text), the others integers (a string that reads as a number becomes it; any
    /// other string sorts after every integer).
    private mutating func envelopeCompare(_ envelope: FieldPath.Envelope, _ op: Filter.Comparison, _ value: JSON)
        -> String
    {
        let symbol = [Filter.Comparison.eq: "=", .ne: "<>", .lt: "<", .lte: "<=", .gt: ">", .gte: ">="][op]!
        let column = PGBuilder.envelopeColumn(envelope)
        if envelope == .id {
            let text: String
            switch value {
            case .string(let s): text = FilterEvaluator.cString(s.lowercased())
            case .int(let i): text = String(i)
            case .double(let d): text = FilterEvaluator.realText(d)
            default: return "false"
            }
            if op == .eq {
                guard let id = UUID(uuidString: text), id.wireString == text else { return "false" }
                return "(id = \(param(.uuid(id))))"
            }
            return "(id::text COLLATE \"C\" \(symbol) \(param(.text(text))))"
        }
        var numeric: String
        switch value {
        case .int, .double: numeric = PGNumber.text(value)!
        case .string(let s):
            switch FilterEvaluator.numericAffinity(FilterEvaluator.cString(s)) {
            case .int(let i)?: numeric = String(i)
            case .real(let d)?: numeric = PGNumber.text(d)
            default:
                // Every integer sorts before every string.
                return op == .lt || op == .lte ? "true" : "false"
            }
        default: return "false"
        }
        if numeric.hasPrefix("+") { numeric.removeFirst() }
        return "(\(column) \(symbol) \(number(numeric)))"
    }

    /// `in` as one test per kind: numbers and strings each as an array parameter, null and booleans as `equals`. The
    /// dialect twin of `SQLiteQueryBuilder.inList`: the same parts (`InListValues`), PostgreSQL's tests.
    private mutating func inList(_ path: FieldPath, _ values: [JSON]) -> String {
        if values.isEmpty { return "false" }
        if path.envelope != nil {
            var tests: [String] = []
            for value in values { tests.append(equals(path, value)) }
            return "(" + tests.joined(separator: " OR ") + ")"
        }
        let field = PGField(path: path)
        return InListValues(values).anyOf(
            numbers: { numbers in
                let list = param(.array(PGArray(texts: numbers.map { PGNumber.text($0)! })))
                return "(\(field.type) = 'number' AND \(field.k2) = ANY(\(list)::numeric[]))"
            },
            strings: { strings in
                let list = param(.array(PGArray(texts: strings.map(FilterEvaluator.cString))))
                return "(\(field.type) = 'string' AND \(field.k3) = ANY(\(list)))"
            },
            other: { equals(path, $0) })
    }

    // MARK: Text search

    /// Substring search: the folded `search` column holds every string value; from three characters on, `LIKE` lets
    /// the pg_trgm GIN index find the candidates, and `strpos` decides (as `instr` does on SQLite).
// The PostgreSQL dialect of SQLiteQueryBuilder.text (SQLite).
    mutating func text(_ query: TextQuery) -> String {
        let folded = TextFold.fold(query.query)
        let q = param(.text(folded))
        var parts: [String] = []
        if folded.unicodeScalars.count >= 3 {
            var pattern = "%"
            for character in folded.unicodeScalars {
                if character == "%" || character == "_" || character == "\\" { pattern += "\\" }
                pattern.unicodeScalars.append(character)
            }
            pattern += "%"
            parts.append("search LIKE \(param(.text(pattern)))")
        }
        parts.append("strpos(search, \(q)) > 0")
        if let fields = query.fields {
            let tests = fields.map { path in
                "EXISTS (SELECT 1 FROM jsonb_path_query(\(PGField(path: path).value), 'strict $.**') AS j(v) "
                    + "WHERE jsonb_typeof(j.v) = 'string' AND strpos(larder_fold(j.v #>> '{}'), \(q)) > 0)"
            }
            parts.append("(" + tests.joined(separator: " OR ") + ")")
        }
        return "(" + parts.joined(separator: " AND ") + ")"
    }

    // MARK: Sorting

    /// The ORDER BY terms of one sort key.
    /// `tag`: the canonical tag of the key's collation (`Collation.tag`), nil for byte order.
    static func orderTerms(_ key: SortKey, tag: String?) -> [String] {
        let direction = key.descending ? " DESC" : " ASC"
        if let envelope = key.field.envelope { return [envelopeColumn(envelope) + direction] }
        let field = PGField(path: key.field)
        guard let tag else { return [field.k1, field.k2, field.k3Prefix, field.k3].map { $0 + direction } }
        let collated = field.k3Collated(tag)
        return [field.k1, field.k2, collated.prefix, collated.whole, field.k3].map { $0 + direction }
    }

    /// The columns a page query returns per sort key, from which the cursor's value is made (`sortValue`).
    static func keyColumns(_ key: SortKey) -> [String] {
        if let envelope = key.field.envelope {
            return envelope == .id ? ["id::text"] : [envelopeColumn(envelope)]
        }
        let field = PGField(path: key.field)
        return ["\(field.k1)::int8", "(\(field.k2))::text", field.k3]
    }

    static func columnCount(_ key: SortKey) -> Int { key.field.envelope == nil ? 3 : 1 }

    /// The value SQLite's `json_extract` (or the envelope column) gives for a row, as the cursor keeps it.
    static func sortValue(_ key: SortKey, _ row: PGResult, _ index: Int, at column: Int) -> SQLValue {
        if let envelope = key.field.envelope {
            return envelope == .id ? .text(row.text(index, column)) : .int(row.int(index, column))
        }
        switch row.int(index, column) {
        case 1:
            let text = row.text(index, column + 1)
            if !text.contains("."), !text.contains("e"), let int = Int64(text) { return .int(int) }
            return .double(Double(text) ?? 0)
        case 2:
            return .text(row.text(index, column + 2))
        case 3:
            return .blob(Array(row.text(index, column + 2).utf8))
        default:
            return .null
        }
    }

    /// The keyset tests of a text of kind `kind` (2 strings, 3 arrays and objects): rows after it, rows equal to it.
    private mutating func textAfter(_ field: PGField, kind: Int, _ text: String, descending: Bool)
        -> (strict: String, equal: String)
    {
        let s = param(.text(text))
        let strict =
            descending
            ? "(\(field.k1) < \(kind) OR (\(field.k1) = \(kind) AND \(field.k3) < \(s)))"
            : "(\(field.k1) > \(kind) OR (\(field.k1) = \(kind) AND \(field.k3) > \(s)))"
        return (strict, "(\(field.k1) = \(kind) AND \(field.k3) = \(s))")
    }

    /// The keyset tests of a string under the collation of `tag`: rows after it, rows equal to it (the same bytes).
    private mutating func collatedTextAfter(_ field: PGField, _ tag: String, _ text: String, descending: Bool)
        -> (strict: String, equal: String)
    {
        let collated = field.k3Collated(tag)
        let (prefix, whole) = (param(.text(Collation.prefix(text))), param(.text(text)))
        let symbol = descending ? "<" : ">"
        let later =
            "(\(collated.prefix) \(symbol) \(prefix) OR (\(collated.prefix) = \(prefix) AND \(collated.whole) \(symbol) \(whole)))"
        let strict =
            descending
            ? "(\(field.k1) < 2 OR (\(field.k1) = 2 AND \(later)))" : "(\(field.k1) > 2 OR (\(field.k1) = 2 AND \(later)))"
        return (strict, "(\(field.k1) = 2 AND \(field.k3) = \(whole))")
    }

    /// Keyset: rows strictly after the cursor's values in (keys..., id) order.
    /// `tags`: the canonical tags of the keys' collations, nil for byte order.
    mutating func after(_ sort: [SortKey], tags: [String?], _ values: [SQLValue], lastId: String) throws(LarderError)
        -> String
    {
        func idAfter() -> String {
            if let id = UUID(uuidString: lastId), id.wireString == lastId { return "id > \(param(.uuid(id)))" }
            return "id::text COLLATE \"C\" > \(param(.text(lastId)))"
        }
        func damaged() -> LarderError { StoreRules.damagedCursor }
        var clause = idAfter()
        for i in sort.indices.reversed() {
            let key = sort[i]
            let value = values[i]
            let strict: String
            let equal: String
            if let envelope = key.field.envelope {
                let column = PGBuilder.envelopeColumn(envelope)
                let symbol = key.descending ? "<" : ">"
                if envelope == .id {
                    guard case .text(let text) = value else { throw damaged() }
                    let p = param(.text(text))
                    strict = "id::text COLLATE \"C\" \(symbol) \(p)"
                    equal = "id::text COLLATE \"C\" = \(p)"
                } else {
                    guard case .int(let int) = value else { throw damaged() }
                    let p = param(.int(int))
                    strict = "\(column) \(symbol) \(p)"
                    equal = "\(column) = \(p)"
                }
            } else {
                let field = PGField(path: key.field)
                switch value {
                case .null:
                    strict = key.descending ? "false" : "\(field.k1) > 0"
                    equal = "\(field.k1) = 0"
                case .int, .double:
                    let text = value.intValue.map { String($0) } ?? PGNumber.text(value.doubleValue ?? 0)
                    let n = number(text)
                    strict =
                        key.descending
                        ? "(\(field.k1) = 0 OR (\(field.k1) = 1 AND \(field.k2) < \(n)))"
                        : "(\(field.k1) > 1 OR (\(field.k1) = 1 AND \(field.k2) > \(n)))"
                    equal = "(\(field.k1) = 1 AND \(field.k2) = \(n))"
                case .text(let text):
                    let tests =
                        if let tag = tags[i] {
                            collatedTextAfter(field, tag, text, descending: key.descending)
                        } else {
                            textAfter(field, kind: 2, text, descending: key.descending)
                        }
                    (strict, equal) = (tests.strict, tests.equal)
                case .blob(let bytes):
                    // An array's or object's JSON text: kind 3, after every string.
                    let text = String(decoding: bytes, as: UTF8.self)
                    let tests = textAfter(field, kind: 3, text, descending: key.descending)
                    (strict, equal) = (tests.strict, tests.equal)
                }
            }
            clause = "(\(strict) OR (\(equal) AND \(clause)))"
        }
        return clause
    }
}

extension SQLValue {
    var intValue: Int64? {
        if case .int(let i) = self { return i }
        return nil
    }

    var doubleValue: Double? {
        if case .double(let d) = self { return d }
        return nil
    }
}
