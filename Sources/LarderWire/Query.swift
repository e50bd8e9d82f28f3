/// A field addressed by a search: a dot path into a document's `data` (`address.city`), or an envelope field.
///
/// Rules: at most 512 bytes and 32 segments; every segment non-empty, without control characters or `"`.
/// A path starting with `$` must be one of `$id`, `$rev`, `$createdAt`, `$updatedAt` (the envelope), or `$owner`, the
/// data member the server sets to the user who created a record; other data keys that start with `$` cannot be
/// addressed as the first segment.
public struct FieldPath: Sendable, Hashable, CustomStringConvertible {
    /// The envelope fields a path can name instead of a `data` member.
    public enum Envelope: String, Sendable, Hashable, CaseIterable {
        /// The document's id.
        case id = "$id"
        /// The document's revision.
        case rev = "$rev"
        /// When the document was created.
        case createdAt = "$createdAt"
        /// When the document was last written.
        case updatedAt = "$updatedAt"
    }

    /// The data path's segments; empty for an envelope field.
    public let segments: [String]
    /// The envelope field, when the path names one.
    public let envelope: Envelope?

    /// The longest path, in UTF-8 bytes.
    public static let maxBytes = 512
    /// The most segments in a path.
    public static let maxSegments = 32

    /// Parses and validates a dot path; `field` names the request field for errors.
    public init(_ string: String, field: String = "field") throws(LarderError) {
        guard !string.isEmpty else { throw .invalid(field, "a field path must not be empty") }
        guard string.utf8.count <= FieldPath.maxBytes else {
            throw .invalid(field, "a field path is at most \(FieldPath.maxBytes) bytes")
        }
        if string == ownerMember {
            self.segments = [ownerMember]
            self.envelope = nil
            return
        }
        if string.hasPrefix("$") {
            guard let envelope = Envelope(rawValue: string) else {
                throw .invalid(
                    field, "unknown envelope field '\(string)'; use $id, $rev, $createdAt, $updatedAt or $owner")
            }
            self.envelope = envelope
            self.segments = []
            return
        }
        let parts = string.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count <= FieldPath.maxSegments else {
            throw .invalid(field, "a field path has at most \(FieldPath.maxSegments) segments")
        }
        for part in parts {
            guard !part.isEmpty else {
                throw .invalid(field, "a field path's segments must not be empty (check for '..' or a trailing dot)")
            }
            for byte in part.utf8 where byte < 0x20 || byte == 0x7F || byte == UInt8(ascii: "\"") {
                throw .invalid(field, "a field path must not contain control characters or '\"'")
            }
        }
        self.segments = parts
        self.envelope = nil
    }

    /// A data path from already-split segments (validated the same way).
    public init(segments: [String]) throws(LarderError) {
        try self.init(segments.joined(separator: "."))
    }

    /// `$owner`: the user who created a record (a data member the server sets).
    package static let owner: FieldPath = {
        do {
            return try FieldPath(ownerMember)
        } catch {
            fatalError("$owner is a field path")
        }
    }()

    /// The dot form, as written in requests.
    public var description: String { envelope?.rawValue ?? segments.joined(separator: ".") }
}

/// A search filter: comparisons on fields, joined with and / or / not.
///
/// Wire form: `{"field":"price","op":"lt","value":50}`, `{"and":[...]}`, `{"or":[...]}`, `{"not":{...}}`.
/// - `eq`, `ne`: value null, boolean, number or string; `eq null` matches a null or missing field; `ne` is exactly
///   `not eq` (a missing field matches `ne` of any value but null).
/// - `lt`, `lte`, `gt`, `gte`: value number or string; only fields of the same kind match (numbers by value,
///   strings by UTF-8 byte order).
/// - `in`: an array of at most 1000 scalars; matches when `eq` matches one of them.
/// - `exists`: boolean; true matches a present field, even one holding null.
/// - `prefix`: string; a string field starting with it (case-sensitive).
/// - `contains`: string; a string field containing it, case-insensitively.
public indirect enum Filter: Sendable, Equatable {
    /// How a `compare` filter compares a field with its value.
    public enum Comparison: String, Sendable, Equatable, CaseIterable {
        /// Equal, not equal, less than, less or equal, greater than, greater or equal (`op` on the wire).
        case eq, ne, lt, lte, gt, gte
    }

    /// Compares a field with a value: `.compare(try FieldPath("price"), .lt, 50)`.
    case compare(FieldPath, Comparison, JSON)
    /// Matches when the field equals one of the values (`in`).
    case isIn(FieldPath, [JSON])
    /// Matches a present field (true) or a missing one (false); a field holding null is present.
    case exists(FieldPath, Bool)
    /// Matches a string field that starts with the text (case-sensitive).
    case prefix(FieldPath, String)
    /// Matches a string field that contains the text, case-insensitively.
    case contains(FieldPath, String)
    /// Matches when every filter matches.
    case and([Filter])
    /// Matches when any filter matches.
    case or([Filter])
    /// Matches when the filter does not.
    case not(Filter)

    /// The deepest nesting of and / or / not accepted.
    public static let maxDepth = 32
    /// The most clauses (comparisons plus combinators) in one filter.
    public static let maxClauses = 256
    /// The most values in one `in`.
    public static let maxInValues = 1000

    /// Parses a filter object; errors name the offending field as a dot path under `path`.
    public init(json: JSON, path: String = "filter") throws(LarderError) {
        var clauses = 0
        self = try Filter.parse(json, path: path, depth: 0, clauses: &clauses)
    }

    private static func parse(_ json: JSON, path: String, depth: Int, clauses: inout Int) throws(LarderError) -> Filter {
        clauses += 1
        guard clauses <= maxClauses else {
            throw .invalid(path, "a filter has at most \(maxClauses) clauses")
        }
        guard depth < maxDepth else { throw .invalid(path, "filters nest at most \(maxDepth) deep") }
        guard case .object(var object) = json else {
            throw .invalid(path, "a filter must be an object, not \(json.typeNameWithArticle)")
        }
        // A member set to null is absent (Protocol.md §3), but for `value`, where null is what is compared with.
        for key in object.keys where key != "value" && object[key] == .null { object[key] = nil }
        for combinator in ["and", "or"] {
            guard let value = object[combinator] else { continue }
            guard object.count == 1 else {
                throw .invalid(path, "a '\(combinator)' filter must have no other members")
            }
            guard case .array(let items) = value, !items.isEmpty else {
                throw .invalid("\(path).\(combinator)", "'\(combinator)' takes a non-empty array of filters")
            }
            var parsed: [Filter] = []
            for (n, item) in items.enumerated() {
                parsed.append(try parse(item, path: "\(path).\(combinator).\(n)", depth: depth + 1, clauses: &clauses))
            }
            return combinator == "and" ? .and(parsed) : .or(parsed)
        }
        if let inner = object["not"] {
            guard object.count == 1 else { throw .invalid(path, "a 'not' filter must have no other members") }
            return .not(try parse(inner, path: "\(path).not", depth: depth + 1, clauses: &clauses))
        }
        for key in object.keys where key != "field" && key != "op" && key != "value" {
            throw .invalid("\(path).\(key)", "unknown filter member '\(key)'; use field/op/value, and, or, not")
        }
        guard case .string(let fieldString)? = object["field"] else {
            throw .invalid("\(path).field", "a filter needs 'field', a string dot path")
        }
        let field = try FieldPath(fieldString, field: "\(path).field")
        guard case .string(let op)? = object["op"] else {
            throw .invalid("\(path).op", "a filter needs 'op': eq ne lt lte gt gte in exists prefix contains")
        }
        guard let value = object["value"] else {
            throw .invalid("\(path).value", "a filter needs 'value'")
        }
        let valuePath = "\(path).value"
        switch op {
        case "eq", "ne":
            guard value.isScalar else {
                throw .invalid(valuePath, "'\(op)' compares with null, a boolean, a number or a string")
            }
            return .compare(field, Comparison(rawValue: op)!, value)
        case "lt", "lte", "gt", "gte":
            switch value {
            case .int, .double, .string: return .compare(field, Comparison(rawValue: op)!, value)
            default: throw .invalid(valuePath, "'\(op)' compares with a number or a string, not \(value.typeNameWithArticle)")
            }
        case "in":
            guard case .array(let items) = value else {
                throw .invalid(valuePath, "'in' takes an array of values")
            }
            guard items.count <= maxInValues else {
                throw .invalid(valuePath, "'in' takes at most \(maxInValues) values")
            }
            for (n, item) in items.enumerated() where !item.isScalar {
                throw .invalid("\(valuePath).\(n)", "'in' values are null, booleans, numbers or strings")
            }
            return .isIn(field, items)
        case "exists":
            guard case .bool(let flag) = value else { throw .invalid(valuePath, "'exists' takes true or false") }
            return .exists(field, flag)
        case "prefix", "contains":
            guard case .string(let text) = value else { throw .invalid(valuePath, "'\(op)' takes a string") }
            return op == "prefix" ? .prefix(field, text) : .contains(field, text)
        default:
            throw .invalid("\(path).op", "unknown op '\(op)'; use eq ne lt lte gt gte in exists prefix contains")
        }
    }

    /// The wire form.
    public var json: JSON {
        func leaf(_ field: FieldPath, _ op: String, _ value: JSON) -> JSON {
            ["field": .string(field.description), "op": .string(op), "value": value]
        }
        switch self {
        case .compare(let field, let op, let value): return leaf(field, op.rawValue, value)
        case .isIn(let field, let values): return leaf(field, "in", .array(values))
        case .exists(let field, let flag): return leaf(field, "exists", .bool(flag))
        case .prefix(let field, let text): return leaf(field, "prefix", .string(text))
        case .contains(let field, let text): return leaf(field, "contains", .string(text))
        case .and(let items): return ["and": .array(items.map(\.json))]
        case .or(let items): return ["or": .array(items.map(\.json))]
        case .not(let inner): return ["not": inner.json]
        }
    }
}

/// A substring text search: `{"query": "北京", "fields": ["name", "address"]}`.
///
/// Case-insensitive (Unicode lowercase), any length from one character. Without `fields` it searches every string
/// value anywhere in the document (not keys); a named field that holds an object or array searches the strings in it.
public struct TextQuery: Sendable, Equatable {
    /// The text to find, 1 to 256 bytes, without control characters.
    public var query: String
    /// nil: every string field.
    public var fields: [FieldPath]?

    /// The longest query, in UTF-8 bytes.
    public static let maxQueryBytes = 256
    /// The most fields one text search names.
    public static let maxFields = 32

    /// A search for `query` in `fields` (every string field when nil): `TextQuery(query: "ball")`.
    public init(query: String, fields: [FieldPath]? = nil) {
        self.query = query
        self.fields = fields
    }

    /// Parses the wire form; throws INVALID_ARGUMENT naming the member at fault under `path`.
    public init(json: JSON, path: String = "text") throws(LarderError) {
        guard case .object(let object) = json else { throw .invalid(path, "'text' must be an object") }
        for key in object.keys where key != "query" && key != "fields" {
            throw .invalid("\(path).\(key)", "unknown text member '\(key)'; use query and fields")
        }
        guard case .string(let query)? = object["query"], !query.isEmpty else {
            throw .invalid("\(path).query", "'text.query' must be a non-empty string")
        }
        guard query.utf8.count <= TextQuery.maxQueryBytes else {
            throw .invalid("\(path).query", "'text.query' is at most \(TextQuery.maxQueryBytes) bytes")
        }
        for byte in query.utf8 where byte < 0x20 {
            throw .invalid("\(path).query", "'text.query' must not contain control characters")
        }
        self.query = query
        switch object["fields"] {
        case nil, .null?:
            self.fields = nil
        case .array(let items)?:
            guard !items.isEmpty, items.count <= TextQuery.maxFields else {
                throw .invalid("\(path).fields", "'text.fields' lists 1 to \(TextQuery.maxFields) field paths")
            }
            var fields: [FieldPath] = []
            for (n, item) in items.enumerated() {
                guard case .string(let string) = item else {
                    throw .invalid("\(path).fields.\(n)", "a text field must be a string dot path")
                }
                let field = try FieldPath(string, field: "\(path).fields.\(n)")
                guard field.envelope == nil else {
                    throw .invalid("\(path).fields.\(n)", "text search covers data fields, not \(string)")
                }
                fields.append(field)
            }
            self.fields = fields
        default:
            throw .invalid("\(path).fields", "'text.fields' must be an array of field paths")
        }
    }

    /// The wire form, `{"query": ..., "fields": [...]}`.
    public var json: JSON {
        var object: JSONObject = ["query": .string(query)]
        if let fields { object["fields"] = .array(fields.map { .string($0.description) }) }
        return .object(object)
    }
}

/// One sort key: `{"field": "price", "order": "desc"}` (order defaults to "asc"), and for strings read by people a
/// collation: `{"field": "title", "collation": "de", "strength": 2}`.
///
/// Order across kinds (Protocol.md §5.2): missing and null first, then numbers (booleans as 0 and 1, integers and reals
/// compared exactly), then strings (UTF-8 byte order, or the collation's), then arrays and objects (by their compact
/// JSON text, so arrays first); descending reverses it. The record id, ascending, breaks ties last.
public struct SortKey: Sendable, Equatable {
    /// The field sorted on.
    public var field: FieldPath
    /// True for descending order.
    public var descending: Bool
    /// The ICU collation strings are ordered by, as a BCP 47 language tag (`"en"`, `"de"`, `"zh-u-co-pinyin"`,
    /// `"ja"`); nil orders them by their UTF-8 bytes. Strings the collation finds equal are ordered by their bytes.
    public var collation: String?
    /// The collation's strength: 1 (base letters only) to 5 (identical); nil is the locale's own (3, tertiary:
    /// accents and case count). Only with `collation`.
    public var strength: Int?

    /// The longest `collation` tag taken.
    public static let maxCollationBytes = 64

    /// A sort on `field`: `SortKey(field: try FieldPath("price"), descending: true)`, or with a collation:
    /// `SortKey(field: try FieldPath("title"), collation: "de")`.
    public init(field: FieldPath, descending: Bool = false, collation: String? = nil, strength: Int? = nil) {
        self.field = field
        self.descending = descending
        self.collation = collation
        self.strength = strength
    }

    /// Parses the wire form; throws INVALID_ARGUMENT naming the member at fault under `path`. Whether ICU knows the
    /// collation's locale is the server's to say (INVALID_ARGUMENT naming `path.collation`).
    public init(json: JSON, path: String) throws(LarderError) {
        guard case .object(let object) = json else {
            throw .invalid(path, "a sort key must be an object like {\"field\":\"price\",\"order\":\"desc\"}")
        }
        for key in object.keys where !["field", "order", "collation", "strength"].contains(key) {
            throw .invalid("\(path).\(key)", "unknown sort member '\(key)'; use field, order, collation and strength")
        }
        guard case .string(let string)? = object["field"] else {
            throw .invalid("\(path).field", "a sort key needs 'field', a string dot path")
        }
        field = try FieldPath(string, field: "\(path).field")
        switch object["order"] {
        case nil, .null?, .string("asc")?: descending = false
        case .string("desc")?: descending = true
        default: throw .invalid("\(path).order", "'order' is \"asc\" or \"desc\"")
        }
        switch object["collation"] {
        case nil, .null?: collation = nil
        case .string(let tag)?
        where (1...SortKey.maxCollationBytes).contains(tag.utf8.count)
            && tag.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || (0x30...0x39).contains($0)
                || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }):
            collation = tag
        default:
            throw .invalid(
                "\(path).collation",
                "'collation' is a BCP 47 language tag of letters, digits and '-' (at most "
                    + "\(SortKey.maxCollationBytes) bytes), like \"en\", \"de\" or \"zh-u-co-pinyin\"")
        }
        switch object["strength"] {
        case nil, .null?: strength = nil
        case .int(let level)? where (1...5).contains(level) && collation != nil: strength = Int(level)
        default:
            throw .invalid("\(path).strength", "'strength' is an integer from 1 to 5, given with 'collation'")
        }
        if collation != nil, field.envelope != nil {
            throw .invalid("\(path).collation", "a collation orders strings; \(field) is not a data field")
        }
    }

    /// The wire form, `{"field": ..., "order": "asc" | "desc"}`, with `collation` and `strength` when set.
    public var json: JSON {
        var object: JSONObject = ["field": .string(field.description), "order": .string(descending ? "desc" : "asc")]
        if let collation { object["collation"] = .string(collation) }
        if let strength { object["strength"] = .int(Int64(strength)) }
        return .object(object)
    }
}

/// A SEARCH request: filter, text, sort, limit and cursor.
///
/// `{"filter": {...}, "text": {...}, "sort": [...], "limit": 50, "cursor": "..."}`; every member optional. A
/// `collection` member is tolerated (the server reads it); any other member is INVALID_ARGUMENT. `limit` is 1 to 1000
/// (default 50). Without `sort` records come in id order; `id` always breaks ties last. `cursor` is the previous page's
/// `nextCursor`, valid only with the same sort.
public struct SearchQuery: Sendable, Equatable {
    /// Only records matching this filter; nil for all.
    public var filter: Filter?
    /// Only records containing this text; nil for no text search.
    public var text: TextQuery?
    /// Sort keys, most significant first; empty for id order.
    public var sort: [SortKey]
    /// The page size, 1 to 1000.
    public var limit: Int
    /// The previous page's `nextCursor`, to read the next page (with the same sort).
    public var cursor: String?

    /// The page size when none is given.
    public static let defaultLimit = 50
    /// The largest page.
    public static let maxLimit = 1000
    /// The most sort keys in one search.
    public static let maxSortKeys = 8
    /// The longest SEARCH cursor taken back. A cursor carries the last record's sort values, so it is about 4/3 of
    /// them: a sort on a long text field makes a long cursor (the request's `maxJSONBytes` bounds it too).
    public static let maxCursorBytes = 4 << 20

    /// A search; every member is optional: `SearchQuery(filter: .exists(try FieldPath("photo"), true), limit: 20)`.
    public init(
        filter: Filter? = nil, text: TextQuery? = nil, sort: [SortKey] = [], limit: Int = SearchQuery.defaultLimit,
        cursor: String? = nil
    ) {
        self.filter = filter
        self.text = text
        self.sort = sort
        self.limit = limit
        self.cursor = cursor
    }

    /// Parses the wire form of a SEARCH request; throws INVALID_ARGUMENT naming the member at fault.
    public init(json: JSONObject) throws(LarderError) {
        for key in json.keys where !["filter", "text", "sort", "limit", "cursor", "collection"].contains(key) {
            throw .invalid(key, "unknown search member '\(key)'; use filter, text, sort, limit, cursor")
        }
        self.init()
        if let value = json["filter"], !value.isNull { filter = try Filter(json: value) }
        if let value = json["text"], !value.isNull { text = try TextQuery(json: value) }
        switch json["sort"] {
        case nil, .null?: break
        case .array(let items)?:
            guard items.count <= SearchQuery.maxSortKeys else {
                throw .invalid("sort", "at most \(SearchQuery.maxSortKeys) sort keys")
            }
            for (n, item) in items.enumerated() { sort.append(try SortKey(json: item, path: "sort.\(n)")) }
        default: throw .invalid("sort", "'sort' must be an array of {\"field\",\"order\"}")
        }
        limit = try SearchQuery.parseLimit(json["limit"], field: "limit")
        switch json["cursor"] {
        case nil, .null?: break
        case .string(let string)?:
            guard !string.isEmpty, string.utf8.count <= SearchQuery.maxCursorBytes else {
                throw .invalid("cursor", "'cursor' must be a previous page's nextCursor")
            }
            cursor = string
        default: throw .invalid("cursor", "'cursor' must be a string from a previous page's nextCursor")
        }
    }

    /// Reads a `limit` member: absent means 50, otherwise an integer from 1 to 1000.
    package static func parseLimit(_ value: JSON?, field: String) throws(LarderError) -> Int {
        guard let value, !value.isNull else { return defaultLimit }
        guard let int = value.intValue, int >= 1, int <= Int64(maxLimit) else {
            throw .invalid(field, "'\(field)' must be an integer from 1 to \(maxLimit)")
        }
        return Int(int)
    }

    /// The wire form of the search's members.
    public var json: JSONObject {
        var object: JSONObject = [:]
        if let filter { object["filter"] = filter.json }
        if let text { object["text"] = text.json }
        if !sort.isEmpty { object["sort"] = .array(sort.map(\.json)) }
        object["limit"] = .int(Int64(limit))
        if let cursor { object["cursor"] = .string(cursor) }
        return object
    }
}

extension JSON {
    /// Null, a boolean, a number or a string.
    package var isScalar: Bool {
        switch self {
        case .array, .object: false
        default: true
        }
    }
}
