import Foundation
import LarderWire

// Searches on PostgreSQL answer exactly what they answer on SQLite (`SQLiteQueryBuilder`, mirrored in Swift by
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

    /// Under the collation of the canonical tag `tag` (`Collation`): a string's first `Collation.prefixCharacters`
    /// characters, and the whole string; NULL for other kinds, which `k1`, `k2` and `k3` order.
    func k3Collated(_ tag: String) -> (prefix: String, whole: String) {
        let name = PGSQL.identifier(Collation.postgresName(tag))
        let string = "(CASE \(type) WHEN 'string' THEN (\(value) #>> '{}') END)"
        return ("(left(\(string), \(Collation.prefixCharacters)) COLLATE \(name))", "(\(string) COLLATE \(name))")
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

    /// The statement that builds the field index `name` (a quoted identifier) of `collection` under the collation of
    /// `tag`: what sorts under it order by first (`PGBuilder.orderTerms`).
    func createCollatedIndex(_ name: String, collection: String, tag: String) -> String {
        "CREATE INDEX IF NOT EXISTS \(name) ON documents (\(k1), \(k2), \(k3Collated(tag).prefix), id) "
            + "WHERE \(PGBuilder(collection: collection).collectionTest)"
    }

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
