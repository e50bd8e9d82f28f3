import CICU
import LarderSync
import LarderWire

/// Sorts under an ICU collation (`SortKey.collation`): the same order on both stores. A sort key's tag and strength
/// become one canonical BCP 47 tag (`de-u-ks-level2`), which names a SQLite collation (made from ICU's collator on
/// each connection that meets it, `SQLiteConnection`) and a PostgreSQL ICU collation of that locale (made once in
/// the database, `PGCollations`). Strings a collator finds equal are ordered by their bytes on both stores, as
/// PostgreSQL's deterministic collations do, so the order is total and a keyset cursor (the last string and id)
/// continues it exactly.
enum Collation {
    /// What every SQLite collation name of a tag starts with.
    static let sqlitePrefix = "larder-icu-"

    /// The canonical tag of `key`'s collation (nil without one); INVALID_ARGUMENT naming `sort.<index>.collation`
    /// when ICU has no collation data for its language or the tag is not well-formed.
    static func tag(_ key: SortKey, at index: Int) throws(LarderError) -> String? {
        guard let collation = key.collation else { return nil }
        var out = [CChar](repeating: 0, count: 160)
        let length = larder_icu_canonical(collation, Int32(key.strength ?? 0), &out, Int32(out.count))
        guard length > 0 else {
            throw LarderError(
                .invalidArgument,
                "sort.\(index).collation names no locale ICU can collate by: '\(collation)'; use a BCP 47 tag like "
                    + "\"en\", \"de\", \"zh-u-co-pinyin\" or \"ja\"", field: "sort.\(index).collation")
        }
        return String(decoding: out[..<Int(length)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The canonical tag of an INDEX's collation (nil without one); INVALID_ARGUMENT naming `collation` as `tag`
    /// does for a sort key.
    static func indexTag(_ field: FieldPath, _ collation: String?, _ strength: Int?) throws(LarderError) -> String? {
        do {
            return try tag(SortKey(field: field, collation: collation, strength: strength), at: 0)
        } catch {
            throw LarderError(
                error.status, error.message.replacingOccurrences(of: "sort.0.collation", with: "collation"),
                field: "collation")
        }
    }

    /// How an index is recorded in `field_indexes.path`: the field's path, and after a `"` (which no path holds)
    /// the canonical tag of its collation.
    static func indexPath(_ field: FieldPath, _ tag: String?) -> String {
        tag.map { field.description + "\"" + $0 } ?? field.description
    }

    /// The field path of an index recorded as `path` (`indexPath`), and whether it has a collation.
    static func indexedField(_ path: String) -> (path: String, collated: Bool) {
        guard let quote = path.firstIndex(of: "\"") else { return (path, false) }
        return (String(path[..<quote]), true)
    }

    /// The canonical tags of a query's sort keys, nil for a key without a collation.
    static func tags(_ sort: [SortKey]) throws(LarderError) -> [String?] {
        var tags: [String?] = []
        for (index, key) in sort.enumerated() { tags.append(try tag(key, at: index)) }
        return tags
    }

    /// How many characters (code points) of a string the first comparison under a collation reads: strings are
    /// ordered by the collation on their first `prefixCharacters`, then on the whole, then by their bytes. The first
    /// term is what an index under a collation holds (a PostgreSQL btree row must stay small), so it serves the sort.
    static let prefixCharacters = 256

    /// The first `prefixCharacters` characters of `text`.
    static func prefix(_ text: String) -> String {
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: text.unicodeScalars.prefix(prefixCharacters))
        return String(scalars)
    }

    /// SQLite's expression of a sort key's first term under a collation: a string's first `prefixCharacters`
    /// characters, any other value itself. `key` is the key's value expression, `type` its `json_type` expression.
    static func sqlitePrefixed(_ key: String, type: String) -> String {
        "(CASE WHEN \(type) = 'text' THEN substr(\(key), 1, \(prefixCharacters)) ELSE \(key) END)"
    }

    /// The SQLite `COLLATE` clause of a canonical tag (tags hold only letters, digits and `-`).
    static func sqliteClause(_ tag: String) -> String { " COLLATE \"\(sqlitePrefix)\(tag)\"" }

    /// The PostgreSQL collation's name of a canonical tag.
    static func postgresName(_ tag: String) -> String { "larder-icu-" + tag }
}

extension PGCollations {
    /// The statement that makes the collation of `tag` in the database unless it is there; every server on the
    /// database may run it at once (the loser's duplicate is ignored). Tags hold only letters, digits and '-': safe in
    /// the literal and the quoted name.
    static func createSQL(_ tag: String) -> String {
        "DO $$BEGIN CREATE COLLATION IF NOT EXISTS \(PGSQL.identifier(Collation.postgresName(tag))) "
            + "(provider = icu, locale = '\(tag)'); "
            + "EXCEPTION WHEN unique_violation OR duplicate_object THEN NULL; END$$"
    }
}

/// The ICU collations a PostgreSQL store has made in its database (`Collation.postgresName`), each made once, by the
/// first search that sorts under it: `CREATE COLLATION` of its canonical tag, which every server on the database may
/// run at once (the loser's duplicate is ignored).
final class PGCollations: Sendable {
    /// The tags known to be in the database.
    private let made = Locked<Set<String>>([])

    /// Makes the collations of `tags` not made yet, on a connection of `pool`.
    func ensure(_ tags: [String], _ pool: PGPool) throws(LarderError) {
        let missing = made.withLock { made in tags.filter { !made.contains($0) } }
        guard !missing.isEmpty else { return }
        try pool.read { db throws(LarderError) in
            for tag in Set(missing) { try db.execute(PGCollations.createSQL(tag)) }
        }
        made.withLock { $0.formUnion(missing) }
    }
}
