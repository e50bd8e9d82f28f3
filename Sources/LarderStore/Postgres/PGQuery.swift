import Foundation
import LarderWire

// Searches on PostgreSQL answer exactly what they answer on SQLite (`QuerySQL`, mirrored in Swift by
// `FilterEvaluator`), record for record and cursor for cursor. The record is the compact text in `documents.data`;
// filters and sorts read `documents.q`, a jsonb copy of it, through expressions that give each value SQLite's view:
//
// - `k1`: the value's kind in Protocol.md's order (§5.2): 0 null or missing, 1 numbers and booleans (0 and 1), 2
//   strings, 3 arrays and objects (SQLite's `FieldPath.sortKeySQL` gives these their JSON text as a BLOB, which it
//   orders after every string).
// - `k2`: the number, exactly (numeric); booleans as 0 and 1.
// - `k3`: the text, compared by UTF-8 bytes (COLLATE "C"); for an array or object its compact text, cut from `data`
//   (so arrays, `[`, come before objects, `{`, as the BLOB's bytes do on SQLite).
//
// A value sorts by (k1, k2, k3), and a declared INDEX is a btree on these expressions of one collection, so filters and
// sorts on the field use it. Field path segments and collection names reach the SQL text only validated and quoted
// (`PGSQL.literal`); every value a client sent is a bound parameter.

/// Quoting for the few names that must be SQL text (index expressions have to be literal to match their index).
enum PGSQL {
    /// An escape-string literal (`E'...'`): `\` and `'` escaped, so it reads the same whatever
    /// `standard_conforming_strings` says. Callers pass validated names (no control characters).
    static func literal(_ text: String) -> String {
        "E'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }

    /// A quoted identifier (`"name"`, `"` doubled).
    static func identifier(_ name: String) -> String { "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }

    /// How many characters of a text value an index keeps (a btree row must stay under ~2.7 kB).
    static let indexedTextChars = 256
}

/// The expressions that read one field in SQLite's terms (see the file comment).
struct PGField {
    let path: FieldPath

    /// The jsonb value: `q->'a'->'b'` (objects only: `->` with a text key never indexes an array, as `json_extract`).
    var value: String { path.segments.reduce("q") { "\($0)->\(PGSQL.literal($1))" } }
    /// The same member as `json`, cut from the stored text: its exact bytes (objects and arrays sort by them).
    var raw: String { path.segments.reduce("data::json") { "\($0)->\(PGSQL.literal($1))" } }
    var type: String { "jsonb_typeof(\(value))" }

    var k1: String {
        "(CASE \(type) WHEN 'number' THEN 1 WHEN 'boolean' THEN 1 WHEN 'string' THEN 2 WHEN 'object' THEN 3 "
            + "WHEN 'array' THEN 3 ELSE 0 END)"
    }

    var k2: String {
        "(CASE \(type) WHEN 'number' THEN (\(value))::numeric "
            + "WHEN 'boolean' THEN (CASE WHEN (\(value))::boolean THEN 1 ELSE 0 END)::numeric END)"
    }

    /// `raw` for a document holding `\u0000`, which PostgreSQL's json parser refuses anywhere in a document: each
    /// `\u0000` escape (one whose backslash is not itself escaped) becomes `\/`, which compact text never writes, the
    /// member is cut, and its text has the swap undone, so it is the stored bytes.
    var rawHoldingNUL: String {
        // An even run of backslashes, then the escape: `(?<!\\)((?:\\\\)*)\\u0000` as a regular expression.
        let swapped = #"regexp_replace(data, E'(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000', E'\\1\\\\/', 'g')"#
        let cut = path.segments.reduce("(\(swapped))::json") { "\($0)->\(PGSQL.literal($1))" }
        return #"regexp_replace(("# + cut
            + #")::text, E'(?<!\\\\)((?:\\\\\\\\)*)\\\\/', E'\\1\\\\u0000', 'g')"#
    }

    /// An object's or array's text is cut from `data`, exactly as stored, so it sorts by the same bytes as on SQLite.
    var k3: String {
        let composite =
            "(CASE WHEN strpos(data, E'\\\\u0000') = 0 THEN (\(raw))::text ELSE \(rawHoldingNUL) END)"
        return "((CASE \(type) WHEN 'string' THEN (\(value) #>> '{}') WHEN 'object' THEN \(composite) "
            + "WHEN 'array' THEN \(composite) END) COLLATE \"C\")"
    }

    /// The indexed prefix of `k3`.
    var k3Prefix: String { "left(\(k3), \(PGSQL.indexedTextChars))" }

    /// SQLite's `json_type` kind for GROUP: null, number, true, false, text, object or array.
    var kind: String {
        "(CASE \(type) WHEN 'number' THEN 'number' WHEN 'string' THEN 'text' WHEN 'object' THEN 'object' "
            + "WHEN 'array' THEN 'array' "
            + "WHEN 'boolean' THEN (CASE WHEN (\(value))::boolean THEN 'true' ELSE 'false' END) "
            + "ELSE 'null' END)"
    }

    /// The column list of a field index: what searches on the field sort and filter by.
    var indexColumns: String { "\(k1), \(k2), \(k3Prefix), id" }

    /// The statement that builds the field index `name` (a quoted identifier) of `collection` (a validated name): a
    /// partial index over one collection's rows.
    func createIndex(_ name: String, collection: String) -> String {
        "CREATE INDEX IF NOT EXISTS \(name) ON documents (\(indexColumns)) "
            + "WHERE \(PGBuilder(collection: collection).collectionTest)"
    }
}

/// A number as PostgreSQL numeric text with SQLite's value: integers as digits, a double as its shortest round-trip
/// decimal, or, past 2^53 where that form has an exponent, its exact integer value (so an int64 compares with it
/// exactly, as in SQLite). The text has a fraction or an exponent exactly when the number is a double.
enum PGNumber {
    static func text(_ value: Double) -> String {
        let shortest = value.description
        guard value.isFinite, shortest.contains("e+") else { return shortest }
        return exactInteger(value) + ".0"
    }

    static func text(_ json: JSON) -> String? {
        switch json {
        case .int(let i): String(i)
        case .double(let d): text(d)
        default: nil
        }
    }

    /// The decimal digits of an integral double (any magnitude): its significand doubled `exponent` times in base 10^9.
    static func exactInteger(_ value: Double) -> String {
        let magnitude = abs(value)
        let exponent = Int(magnitude.exponent) - 52
        var significand = magnitude.significandBitPattern | (1 << 52)
        var shift = exponent
        if shift < 0 {
            significand >>= UInt64(-shift)
            shift = 0
        }
        var limbs: [UInt64] = [significand % 1_000_000_000, significand / 1_000_000_000 % 1_000_000_000,
            significand / 1_000_000_000_000_000_000]
        for _ in 0..<shift {
            var carry: UInt64 = 0
            for i in limbs.indices {
                let doubled = limbs[i] * 2 + carry
                limbs[i] = doubled % 1_000_000_000
                carry = doubled / 1_000_000_000
            }
            if carry > 0 { limbs.append(carry) }
        }
        while limbs.count > 1 && limbs.last == 0 { limbs.removeLast() }
        var text = String(limbs.last!)
        for limb in limbs.dropLast().reversed() {
            let digits = String(limb)
            text += String(repeating: "0", count: 9 - digits.count) + digits
        }
        return (value < 0 ? "-" : "") + text
    }
}

/// The jsonb copy a document is queried through, when its compact text cannot serve as one directly: jsonb refuses
/// `\u0000`, and reads a double written with a positive exponent (`1e+20`) as an integer. SQLite reads a string up to
/// its first NUL (`json_extract`), so strings are cut there; a member name holding one (never addressable: paths have
/// no control characters) has it replaced by U+0001; such doubles get their exact integer digits and `.0`.
enum PGQueryForm {
    /// nil when `data` is its own query form (by far the usual case: a quick scan finds neither pattern).
    static func make(_ data: [UInt8]) -> [UInt8]? {
        guard needsRewrite(data) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(data.count)
        var i = 0
        // Whether the next string is a member name: after `{` or `,` inside an object.
        var stack: [UInt8] = []
        var expectKey = false
        while i < data.count {
            let byte = data[i]
            switch byte {
            case UInt8(ascii: "{"):
                stack.append(byte)
                expectKey = true
                out.append(byte)
                i += 1
            case UInt8(ascii: "["):
                stack.append(byte)
                expectKey = false
                out.append(byte)
                i += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                stack.removeLast()
                out.append(byte)
                i += 1
            case UInt8(ascii: ","):
                expectKey = stack.last == UInt8(ascii: "{")
                out.append(byte)
                i += 1
            case UInt8(ascii: ":"):
                expectKey = false
                out.append(byte)
                i += 1
            case UInt8(ascii: "\""):
                i = copyString(data, from: i, into: &out, isKey: expectKey)
                expectKey = false
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                var end = i
                while end < data.count, !isDelimiter(data[end]) { end += 1 }
                let token = Array(data[i..<end])
                if token.contains(UInt8(ascii: "e")) || token.contains(UInt8(ascii: "E")),
                    let value = Double(String(decoding: token, as: UTF8.self))
                {
                    out.append(contentsOf: PGNumber.text(value).utf8)
                } else {
                    out.append(contentsOf: token)
                }
                i = end
            default:
                out.append(byte)
                i += 1
            }
        }
        return out
    }

    private static func isDelimiter(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]")
    }

    /// Whether `data` holds `\u0000` or an exponent with a plus sign (compact text writes no other exponent form
    /// that jsonb misreads).
    static func needsRewrite(_ data: [UInt8]) -> Bool {
        data.withUnsafeBufferPointer { bytes in
            var i = 0
            while i + 1 < bytes.count {
                if bytes[i] == UInt8(ascii: "e") && bytes[i + 1] == UInt8(ascii: "+") { return true }
                if bytes[i] == UInt8(ascii: "\\") {
                    if i + 5 < bytes.count && bytes[i + 1] == UInt8(ascii: "u") && bytes[i + 2] == UInt8(ascii: "0")
                        && bytes[i + 3] == UInt8(ascii: "0") && bytes[i + 4] == UInt8(ascii: "0")
                        && bytes[i + 5] == UInt8(ascii: "0")
                    {
                        return true
                    }
                    i += 2
                    continue
                }
                i += 1
            }
            return false
        }
    }

    /// Copies the string starting at `start` (its opening quote); returns the index after its closing quote.
    private static func copyString(_ data: [UInt8], from start: Int, into out: inout [UInt8], isKey: Bool) -> Int {
        out.append(UInt8(ascii: "\""))
        var i = start + 1
        var cut = false
        while i < data.count {
            let byte = data[i]
            if byte == UInt8(ascii: "\"") {
                out.append(byte)
                return i + 1
            }
            if byte == UInt8(ascii: "\\") {
                let isNul =
                    i + 5 < data.count && data[i + 1] == UInt8(ascii: "u") && data[i + 2] == UInt8(ascii: "0")
                    && data[i + 3] == UInt8(ascii: "0") && data[i + 4] == UInt8(ascii: "0")
                    && data[i + 5] == UInt8(ascii: "0")
                let length = data[i + 1] == UInt8(ascii: "u") ? 6 : 2
                if isNul {
                    if isKey {
                        if !cut { out.append(contentsOf: Array(#"\u0001"#.utf8)) }
                    } else {
                        cut = true
                    }
                } else if !cut {
                    out.append(contentsOf: data[i..<min(data.count, i + length)])
                }
                i += length
                continue
            }
            if !cut { out.append(byte) }
            i += 1
        }
        return i
    }
}

/// Translates filters, text search and sorts into PostgreSQL conditions with numbered parameters, answering what
/// `SQLBuilder` answers on SQLite (the rules are spelled out in `FilterEvaluator`).
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

    /// `in` as one test per kind: numbers and strings each as an array parameter, null and booleans as `equals`.
    private mutating func inList(_ path: FieldPath, _ values: [JSON]) -> String {
        if values.isEmpty { return "false" }
        if path.envelope != nil {
            var tests: [String] = []
            for value in values { tests.append(equals(path, value)) }
            return "(" + tests.joined(separator: " OR ") + ")"
        }
        let field = PGField(path: path)
        var numbers: [String] = []
        var strings: [String] = []
        var others: [JSON] = []
        for value in values {
            switch value {
            case .int, .double: numbers.append(PGNumber.text(value)!)
            case .string(let s): strings.append(FilterEvaluator.cString(s))
            default: if !others.contains(value) { others.append(value) }
            }
        }
        var tests: [String] = []
        if !numbers.isEmpty {
            let list = param(.array(PGArray(texts: numbers)))
            tests.append("(\(field.type) = 'number' AND \(field.k2) = ANY(\(list)::numeric[]))")
        }
        if !strings.isEmpty {
            let list = param(.array(PGArray(texts: strings)))
            tests.append("(\(field.type) = 'string' AND \(field.k3) = ANY(\(list)))")
        }
        for value in others { tests.append(equals(path, value)) }
        return "(" + tests.joined(separator: " OR ") + ")"
    }

    // MARK: Text search

    /// Substring search: the folded `search` column holds every string value; from three characters on, `LIKE` lets
    /// the pg_trgm GIN index find the candidates, and `strpos` decides (as `instr` does on SQLite).
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
    static func orderTerms(_ key: SortKey) -> [String] {
        let direction = key.descending ? " DESC" : " ASC"
        if let envelope = key.field.envelope { return [envelopeColumn(envelope) + direction] }
        let field = PGField(path: key.field)
        return [field.k1, field.k2, field.k3Prefix, field.k3].map { $0 + direction }
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

    /// Keyset: rows strictly after the cursor's values in (keys..., id) order.
    mutating func after(_ sort: [SortKey], _ values: [SQLValue], lastId: String) throws(LarderError) -> String {
        func idAfter() -> String {
            if let id = UUID(uuidString: lastId), id.wireString == lastId { return "id > \(param(.uuid(id)))" }
            return "id::text COLLATE \"C\" > \(param(.text(lastId)))"
        }
        func damaged() -> LarderError { SQLiteStore.damagedCursor }
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
                    let tests = textAfter(field, kind: 2, text, descending: key.descending)
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
