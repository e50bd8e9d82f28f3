import Foundation

/// Evaluates a `Filter` on one document in memory, answering exactly what SEARCH's SQL (`SQLiteQueryBuilder.condition`)
/// answers for the same document, so a WATCH filter selects the same records a SEARCH would, and a client's local
/// replica the same records the server would.
///
/// The SQL rules it mirrors:
/// - a data field is read like `json_extract`/`json_type`: through objects only (never into arrays), an absent path
///   is SQL NULL, and a NULL comparison counts as false (`not` and `ne` coalesce it, so a missing field matches them);
///   `eq null` matches a missing field as well as a null one, so `ne null` matches neither;
/// - comparisons need the same kind: numbers by value (integers and reals exactly, as SQLite compares them), strings
///   by UTF-8 bytes (BINARY collation), booleans and null only by `eq`;
/// - `contains` folds both sides as `larder_fold` does and looks for the bytes; `prefix` compares bytes;
/// - text stops at its first NUL character, on both sides: `json_extract` (SQLite 3.40) answers a string holding
///   `\u0000` cut there, and a bound parameter is read as a C string;
/// - envelope fields are SQL columns with affinity: `$id` is TEXT (a string value is lowercased first, a number is
///   compared as its text), `$rev`, `$createdAt` and `$updatedAt` are INTEGER (a string that reads as a number is
///   compared as that number, any other string sorts after every integer).
package enum FilterEvaluator {
    /// True when the document (envelope `record`, data `data`) matches `filter`.
    package static func matches(_ filter: Filter, record: RecordEnvelope, data: JSONObject) -> Bool {
        switch filter {
        case .and(let items): return items.allSatisfy { matches($0, record: record, data: data) }
        case .or(let items): return items.contains { matches($0, record: record, data: data) }
        case .not(let inner): return !matches(inner, record: record, data: data)
        case .compare(let path, .eq, let value): return equals(path, value, record, data)
        case .compare(let path, .ne, let value): return !equals(path, value, record, data)
        case .compare(let path, let op, let value): return order(path, op, value, record, data)
        case .isIn(let path, let values): return values.contains { equals(path, $0, record, data) }
        case .exists(let path, let flag):
            guard path.envelope == nil else { return flag }
            return (lookup(path, data) != nil) == flag
        case .prefix(let path, let text):
            switch field(path, record, data) {
            case .text(let s)?: return s.utf8.starts(with: cString(text).utf8)
            default: return false
            }
        case .contains(let path, let text):
            switch field(path, record, data) {
            case .text(let s)?: return contains(TextFold.fold(s), cString(TextFold.fold(text)))
            default: return false
            }
        }
    }

    /// A value as SQL sees it: `json_extract` of a data field, or an envelope column.
    package enum Value {
        case null
        case bool(Bool)
        case int(Int64)
        case real(Double)
        case text(String)
        /// An array or object (json_extract answers its JSON text; filters never compare with one).
        case composite
    }

    /// The data member at `path`, walking objects only; nil when absent (SQL NULL for both value and type).
    package static func lookup(_ path: FieldPath, _ data: JSONObject) -> JSON? {
        var current: JSON = .object(data)
        for segment in path.segments {
            guard case .object(let object) = current, let next = object[segment] else { return nil }
            current = next
        }
        return current
    }

    package static func field(_ path: FieldPath, _ record: RecordEnvelope, _ data: JSONObject) -> Value? {
        if let envelope = path.envelope {
            switch envelope {
            case .id: return .text(record.id.wireString)
            case .rev: return .int(record.rev)
            case .createdAt: return .int(record.createdAt)
            case .updatedAt: return .int(record.updatedAt)
            }
        }
        switch lookup(path, data) {
        case nil: return nil
        case .null?: return .null
        case .bool(let b)?: return .bool(b)
        case .int(let i)?: return .int(i)
        case .double(let d)?: return .real(d)
        case .string(let s)?: return .text(cString(s))
        case .array?, .object?: return .composite
        }
    }

    /// `text` as far as its first NUL, as SQLite reads it.
    package static func cString(_ text: String) -> String {
        guard let nul = text.utf8.firstIndex(of: 0) else { return text }
        return String(text[..<nul])
    }

    // MARK: eq

    private static func equals(_ path: FieldPath, _ value: JSON, _ record: RecordEnvelope, _ data: JSONObject) -> Bool {
        if let envelope = path.envelope {
            guard let column = field(path, record, data) else { return false }
            switch value {
            case .string(let s) where envelope == .id:
                return compareColumn(column, .text(cString(s.lowercased())), envelope) == 0
            case .int, .double, .string: return compareColumn(column, sqlValue(value), envelope) == 0
            default: return false
            }
        }
        guard let actual = field(path, record, data) else { return value == .null }
        switch (value, actual) {
        case (.null, .null): return true
        case (.bool(let b), .bool(let a)): return a == b
        case (.int, .int), (.int, .real), (.double, .int), (.double, .real):
            return compareNumbers(actual, sqlValue(value)) == 0
        case (.string(let s), .text(let a)): return a.utf8.elementsEqual(cString(s).utf8)
        default: return false
        }
    }

    // MARK: lt, lte, gt, gte

    private static func order(
        _ path: FieldPath, _ op: Filter.Comparison, _ value: JSON, _ record: RecordEnvelope, _ data: JSONObject
    ) -> Bool {
        guard let actual = field(path, record, data) else { return false }
        let sign: Int?
        if let envelope = path.envelope {
            var bound = sqlValue(value)
            if envelope == .id, case .text(let s) = bound { bound = .text(cString(s.lowercased())) }
            sign = compareColumn(actual, bound, envelope)
        } else {
            switch (value, actual) {
            case (.string(let s), .text(let a)): sign = compareText(a, cString(s))
            case (.int, .int), (.int, .real), (.double, .int), (.double, .real):
                sign = compareNumbers(actual, sqlValue(value))
            default: sign = nil
            }
        }
        guard let sign else { return false }
        switch op {
        case .lt: return sign < 0
        case .lte: return sign <= 0
        case .gt: return sign > 0
        case .gte: return sign >= 0
        case .eq: return sign == 0
        case .ne: return sign != 0
        }
    }

    /// How SQLite binds a filter value (SQLiteQueryBuilder.sqlValue).
    private static func sqlValue(_ json: JSON) -> Value {
        switch json {
        case .null: .null
        case .bool(let b): .int(b ? 1 : 0)
        case .int(let i): .int(i)
        case .double(let d): .real(d)
        case .string(let s): .text(cString(s))
        case .array, .object: .composite
        }
    }

    /// An envelope column against a bound value, with the column's affinity applied to the value first.
    private static func compareColumn(_ column: Value, _ bound: Value, _ envelope: FieldPath.Envelope) -> Int? {
        if envelope == .id {
            // TEXT affinity: a number is compared as its text.
            guard case .text(let id) = column else { return nil }
            switch bound {
            case .text(let s): return compareText(id, s)
            case .int(let i): return compareText(id, String(i))
            case .real(let d): return compareText(id, realText(d))
            default: return nil
            }
        }
        // INTEGER affinity: a string that reads as a number becomes that number.
        switch bound {
        case .int, .real: return compareNumbers(column, bound)
        case .text(let s):
            if let number = numericAffinity(s) { return compareNumbers(column, number) }
            return -1  // SQLite orders every number before every string.
        default: return nil
        }
    }

    package static func compareText(_ a: String, _ b: String) -> Int {
        if a.utf8.elementsEqual(b.utf8) { return 0 }
        return a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : 1
    }

    /// Integers and reals compared exactly, as SQLite does (no rounding of large integers to doubles).
    package static func compareNumbers(_ a: Value, _ b: Value) -> Int? {
        switch (a, b) {
        case (.int(let x), .int(let y)): return x < y ? -1 : (x > y ? 1 : 0)
        case (.real(let x), .real(let y)): return x < y ? -1 : (x > y ? 1 : 0)
        case (.int(let x), .real(let y)): return compare(x, y)
        case (.real(let x), .int(let y)): return -compare(y, x)
        default: return nil
        }
    }

    private static func compare(_ i: Int64, _ r: Double) -> Int {
        if r < -9_223_372_036_854_775_808.0 { return 1 }
        if r >= 9_223_372_036_854_775_808.0 { return -1 }
        let truncated = Int64(r)
        if i != truncated { return i < truncated ? -1 : 1 }
        // Equal integer parts: the fraction decides (exact, since |r| < 2^63 here).
        let whole = Double(truncated)
        return whole < r ? -1 : (whole > r ? 1 : 0)
    }

    /// SQLite's NUMERIC affinity on text: a well-formed integer or real literal (surrounding spaces allowed) becomes
    /// a number; anything else (hex, `inf`, `12abc`) stays text.
    package static func numericAffinity(_ text: String) -> Value? {
        let spaces: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D]
        var bytes = Array(text.utf8)
        while let last = bytes.last, spaces.contains(last) { bytes.removeLast() }
        let start = bytes.firstIndex { !spaces.contains($0) } ?? bytes.count
        bytes.removeFirst(start)
        var i = 0
        func digits() -> Int {
            let from = i
            while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1 }
            return i - from
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
        var count = digits()
        var isInteger = true
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            count += digits()
            isInteger = false
        }
        guard count > 0 else { return nil }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard digits() > 0 else { return nil }
            isInteger = false
        }
        guard i == bytes.count else { return nil }
        let literal = String(decoding: bytes, as: UTF8.self)
        if isInteger, let int = Int64(literal) { return .int(int) }
        return Double(literal).map { .real($0) }
    }

    /// A real as SQLite renders it for TEXT affinity (`%!.15g`: 15 significant digits, always a decimal point).
    package static func realText(_ d: Double) -> String {
        var text = String(format: "%.15g", d)
        guard d.isFinite else { return text }
        if let e = text.firstIndex(of: "e") {
            if !text[..<e].contains(".") { text.insert(contentsOf: ".0", at: e) }
        } else if !text.contains(".") {
            text += ".0"
        }
        return text
    }

    /// `instr(haystack, needle) > 0` on UTF-8 bytes; an empty needle is found everywhere.
    package static func contains(_ haystack: String, _ needle: String) -> Bool {
        let h = Array(haystack.utf8)
        let n = Array(needle.utf8)
        guard !n.isEmpty else { return true }
        guard n.count <= h.count else { return false }
        let first = n[0]
        var i = 0
        while i + n.count <= h.count {
            if h[i] == first && h[i..<(i + n.count)].elementsEqual(n) { return true }
            i += 1
        }
        return false
    }
}

/// The envelope of a stored document as filters and sorts read it: id, revision, and the two times in milliseconds
/// since 1970.
package struct RecordEnvelope: Sendable, Equatable {
    /// The document's id.
    package var id: UUID
    /// The document's revision.
    package var rev: Int64
    /// When it was created, in milliseconds since 1970.
    package var createdAt: Int64
    /// When it was last written, in milliseconds since 1970.
    package var updatedAt: Int64

    /// The envelope of these values.
    package init(id: UUID, rev: Int64, createdAt: Int64, updatedAt: Int64) {
        self.id = id
        self.rev = rev
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}
