import Foundation

/// A sort key's value in one record, as the server's SQL computes it (Protocol.md section 5.2): a data field as
/// `json_extract` reads it (a boolean as 0 or 1, an array or object as the bytes of its compact JSON text, a string
/// as far as its first NUL), an envelope field as its column (`$id` its lowercase text, the others integers).
package enum SortValue: Sendable, Equatable {
    /// Null, or a missing field.
    case null
    /// An integer (booleans are 0 and 1).
    case int(Int64)
    /// A real.
    case real(Double)
    /// A string.
    case text(String)
    /// An array or object: its compact JSON text.
    case blob([UInt8])

    /// The value of `path` in the record of `envelope` and `data`.
    package init(_ path: FieldPath, envelope: RecordEnvelope, data: JSONObject) {
        if let field = path.envelope {
            switch field {
            case .id: self = .text(envelope.id.wireString)
            case .rev: self = .int(envelope.rev)
            case .createdAt: self = .int(envelope.createdAt)
            case .updatedAt: self = .int(envelope.updatedAt)
            }
            return
        }
        switch FilterEvaluator.lookup(path, data) {
        case nil, .null?: self = .null
        case .bool(let b)?: self = .int(b ? 1 : 0)
        case .int(let i)?: self = .int(i)
        case .double(let d)?: self = .real(d)
        case .string(let s)?: self = .text(FilterEvaluator.cString(s))
        case .array(let items)?: self = .blob(JSON.array(items).bytes)
        case .object(let object)?: self = .blob(object.bytes)
        }
    }

    /// The kind's place in the order: null, numbers, strings, then arrays and objects.
    private var rank: Int {
        switch self {
        case .null: 0
        case .int, .real: 1
        case .text: 2
        case .blob: 3
        }
    }

    /// Ascending comparison: -1, 0 (a tie) or 1. Kinds in their order, numbers exactly by value, strings and JSON
    /// texts by their bytes compared as unsigned.
    package static func compare(_ a: SortValue, _ b: SortValue) -> Int {
        if a.rank != b.rank { return a.rank < b.rank ? -1 : 1 }
        switch (a, b) {
        case (.text(let x), .text(let y)): return FilterEvaluator.compareText(x, y)
        case (.blob(let x), .blob(let y)):
            if x == y { return 0 }
            return x.lexicographicallyPrecedes(y) ? -1 : 1
        default: return FilterEvaluator.compareNumbers(a.number, b.number) ?? 0
        }
    }

    private var number: FilterEvaluator.Value {
        switch self {
        case .int(let i): .int(i)
        case .real(let d): .real(d)
        default: .null
        }
    }

    /// The value as a cursor carries it: a real as `{"d": …}` and an array's or object's JSON text as `{"b": "…"}`,
    /// so that each comes back with the kind it sorted as.
    package var cursorJSON: JSON {
        switch self {
        case .null: .null
        case .int(let i): .int(i)
        case .real(let d): .object(["d": .double(d)])
        case .text(let s): .string(s)
        case .blob(let bytes): .object(["b": .string(String(decoding: bytes, as: UTF8.self))])
        }
    }

    /// The value a cursor carries (`cursorJSON`); nil for anything a cursor never holds.
    package init?(cursorJSON json: JSON) {
        switch json {
        case .null: self = .null
        case .int(let i): self = .int(i)
        case .string(let s): self = .text(s)
        case .object(let o) where o.count == 1:
            if let d = o["d"]?.doubleValue {
                self = .real(d)
            } else if case .string(let b)? = o["b"] {
                self = .blob(Array(b.utf8))
            } else {
                return nil
            }
        default: return nil
        }
    }
}

/// SEARCH, COUNT and GROUP answered over records in memory, with the server's semantics (Protocol.md section 5.2):
/// the filter through `FilterEvaluator`, the text as the store's `search` column and `json_tree` find it, the sort as
/// `SortValue` orders, keyset cursors in the server's own form. A client's local replica answers its reads with it.
package enum RecordQuery {
    /// One record as the queries read it.
    package struct Item: Sendable {
        /// Its envelope.
        package var envelope: RecordEnvelope
        /// Its data.
        package var data: JSONObject

        /// A record with this envelope and data.
        package init(envelope: RecordEnvelope, data: JSONObject) {
            self.envelope = envelope
            self.data = data
        }
    }

    /// Whether `item` matches `filter` and `text` (each nil for all).
    package static func matches(_ item: Item, filter: Filter?, text: TextQuery?) -> Bool {
        if let filter, !FilterEvaluator.matches(filter, record: item.envelope, data: item.data) { return false }
        if let text, !matches(text, item.data) { return false }
        return true
    }

    /// The substring search: the folded query in the folded strings of the whole document, and, with `fields`, in a
    /// string at or under one of them.
    package static func matches(_ text: TextQuery, _ data: JSONObject) -> Bool {
        let query = TextFold.fold(text.query)
        guard FilterEvaluator.contains(TextFold.searchText(data), query) else { return false }
        guard let fields = text.fields else { return true }
        func found(_ value: JSON) -> Bool {
            switch value {
            case .string(let s): return FilterEvaluator.contains(TextFold.fold(s), query)
            case .array(let items): return items.contains(where: found)
            case .object(let object): return object.contains { found($0.1) }
            default: return false
            }
        }
        return fields.contains { path in FilterEvaluator.lookup(path, data).map(found) ?? false }
    }

    /// Ascending comparison of two records under `sort`, the id ascending last.
    package static func compare(_ a: Item, _ b: Item, _ sort: [SortKey]) -> Int {
        for key in sort {
            let c = SortValue.compare(
                SortValue(key.field, envelope: a.envelope, data: a.data),
                SortValue(key.field, envelope: b.envelope, data: b.data))
            if c != 0 { return key.descending ? -c : c }
        }
        return FilterEvaluator.compareText(a.envelope.id.wireString, b.envelope.id.wireString)
    }

    /// One page of `items` matching `query`, in its order, after its cursor; and the next page's cursor when more
    /// follow. `collection` scopes the cursor, which is the server's own SEARCH cursor: a page read here continues
    /// with the same query here.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a sort under a collation (strings compare by bytes here), a `limit` outside
    ///   1...1000, or a cursor of another query (field `cursor`).
    package static func search(_ items: [Item], collection: String, _ query: SearchQuery) throws(LarderError)
        -> (items: [Item], nextCursor: String?)
    {
        guard (1...SearchQuery.maxLimit).contains(query.limit) else {
            throw .invalid("limit", "'limit' must be an integer from 1 to \(SearchQuery.maxLimit)")
        }
        for (index, key) in query.sort.enumerated() where key.collation != nil {
            throw LarderError(
                .invalidArgument,
                "sort.\(index).collation: a local replica orders strings by their bytes; sort under a collation on "
                    + "the server (LarderCollection.search)", field: "sort.\(index).collation")
        }
        let scope = Cursor.searchScope(collection, query)
        var after: (values: [SortValue], id: String)?
        if let cursor = query.cursor {
            let object = try Cursor.open(
                cursor, .search, scope: scope,
                scopeMessage: "the cursor belongs to another query: a SEARCH cursor is valid only with the same "
                    + "collection, filter, text and sort; start again without it")
            guard case .array(let raw)? = object["v"], raw.count == query.sort.count,
                case .string(let id)? = object["id"]
            else {
                throw LarderError(
                    .invalidArgument, "the cursor is damaged; pass nextCursor back unchanged", field: "cursor")
            }
            var values: [SortValue] = []
            for item in raw {
                guard let value = SortValue(cursorJSON: item) else {
                    throw LarderError(
                        .invalidArgument, "the cursor is damaged; pass nextCursor back unchanged", field: "cursor")
                }
                values.append(value)
            }
            after = (values, id)
        }
        var selected = items.filter { matches($0, filter: query.filter, text: query.text) }
        selected.sort { compare($0, $1, query.sort) < 0 }
        if let after {
            selected.removeAll { item in
                for (i, key) in query.sort.enumerated() {
                    let c = SortValue.compare(SortValue(key.field, envelope: item.envelope, data: item.data), after.values[i])
                    if c != 0 { return (key.descending ? -c : c) < 0 }
                }
                return FilterEvaluator.compareText(item.envelope.id.wireString, after.id) <= 0
            }
        }
        guard selected.count > query.limit else { return (selected, nil) }
        let page = Array(selected.prefix(query.limit))
        let last = page[page.count - 1]
        let values = query.sort.map { SortValue($0.field, envelope: last.envelope, data: last.data).cursorJSON }
        let next = Cursor.encode(.search, scope: scope, ["v": .array(values), "id": .string(last.envelope.id.wireString)])
        return (page, next)
    }

    /// How many of `items` match `filter` and `text`.
    package static func count(_ items: [Item], filter: Filter?, text: TextQuery?) -> Int {
        items.reduce(0) { $0 + (matches($1, filter: filter, text: text) ? 1 : 0) }
    }

    /// One GROUP section: its key, how many records share it, and its first records.
    package struct Section: Sendable {
        /// The field's value shared by the section; null for records without it.
        package var key: JSON
        /// How many records share it.
        package var count: Int
        /// The first `perGroup` of them, in `items`' order.
        package var items: [Item]
    }

    /// The sections of `items` matching `filter` and `text` by the value of `field`, in the order of an ascending sort
    /// on it (a boolean before the number equal to it), at most 1000; each with its first `perGroup` records in the
    /// order of `items`. Values that `eq` finds equal share a section, keyed by an integer when the section holds one.
    package static func group(
        _ items: [Item], field: FieldPath, filter: Filter?, text: TextQuery?, perGroup: Int, maxSections: Int = 1000
    ) -> [Section] {
        struct Bucket {
            var value: SortValue
            var isBool: Bool
            var key: JSON
            var count = 0
            var items: [Item] = []
        }
        var buckets: [Bucket] = []
        for item in items where matches(item, filter: filter, text: text) {
            let value = SortValue(field, envelope: item.envelope, data: item.data)
            let raw = field.envelope == nil ? FilterEvaluator.lookup(field, item.data) : nil
            var isBool = false
            var key: JSON
            if field.envelope != nil {
                switch value {
                case .int(let i): key = .int(i)
                case .text(let s): key = .string(s)
                default: key = .null
                }
            } else {
                switch raw {
                case .bool?: isBool = true
                default: break
                }
                key = raw ?? .null
            }
            if let index = buckets.firstIndex(where: { SortValue.compare($0.value, value) == 0 && $0.isBool == isBool }) {
                buckets[index].count += 1
                if buckets[index].items.count < perGroup { buckets[index].items.append(item) }
                if case .int = key, case .double = buckets[index].key { buckets[index].key = key }
            } else {
                buckets.append(Bucket(value: value, isBool: isBool, key: key, count: 1, items: perGroup > 0 ? [item] : []))
            }
        }
        buckets.sort { a, b in
            let c = SortValue.compare(a.value, b.value)
            return c != 0 ? c < 0 : (a.isBool && !b.isBool)
        }
        return buckets.prefix(maxSections).map { Section(key: $0.key, count: $0.count, items: $0.items) }
    }
}
