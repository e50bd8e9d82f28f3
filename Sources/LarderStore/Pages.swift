import Foundation
import LarderWire

// What both stores' reads share around an answer of many records: the limits checked before any SQL, where a cursor
// says a page starts, how a page fills within the answer's byte budget, and the next page's cursor. Each store keeps
// only its SQL and how it binds values (SQLiteStore.swift, SQLiteSearch.swift; PGReads.swift and PGBlobReads.swift).

/// The limits of GET_MANY and GROUP, checked the same way by both stores.
enum ReadLimits {
    /// How many ids one GET_MANY may name.
    static let maxIds = 1000

    /// `ids` without repeats, in the order first asked; INVALID_ARGUMENT for more than `maxIds`.
    static func uniqueIds(_ ids: [UUID]) throws(LarderError) -> [UUID] {
        guard ids.count <= maxIds else {
            throw LarderError(.invalidArgument, "ask for at most \(maxIds) ids at a time", field: "ids")
        }
        var unique: [UUID] = []
        var seen: Set<UUID> = []
        for id in ids where seen.insert(id).inserted { unique.append(id) }
        return unique
    }

    /// GET_MANY's refusal when the documents found pass the answer limit.
    static func tooLarge(_ count: Int, maxBytes: Int) -> LarderError {
        LarderError(
            .payloadTooLarge, "these \(count) documents together pass the answer limit of \(maxBytes) bytes; "
                + "ask for fewer ids at a time", field: "ids", details: ["limit": .int(Int64(maxBytes))])
    }

    /// GET_MANY's answer: the records found in the order asked, and the ids not found.
    static func answer(_ unique: [UUID], _ records: [StoredRecord]) -> (records: [StoredRecord], missing: [UUID]) {
        var byId: [UUID: StoredRecord] = [:]
        for record in records { byId[record.id] = record }
        return (unique.compactMap { byId[$0] }, unique.filter { byId[$0] == nil })
    }

    static func checkPerGroup(_ perGroup: Int) throws(LarderError) {
        guard perGroup >= 0 && perGroup <= SearchQuery.maxLimit else {
            throw LarderError(.invalidArgument, "perGroup must be from 0 to \(SearchQuery.maxLimit)", field: "perGroup")
        }
    }
}

/// Fills a page of at most `limit` records within the answer's byte budget. The page query asks for `limit + 1` rows,
/// so the first row that does not fit says that a next page exists.
struct PageFill<T> {
    private(set) var items: [(StoredRecord, T)] = []
    /// Whether a row was left out: a next page exists.
    private(set) var more = false
    private let limit: Int
    private var budget: PageBudget

    init(limit: Int, maxBytes: Int) {
        self.limit = limit
        budget = PageBudget(maxBytes: maxBytes)
    }

    /// Adds a row (a record and what its cursor needs); false once the page is full.
    mutating func add(_ item: (StoredRecord, T)) -> Bool {
        guard items.count < limit, budget.admit(item.0, isFirst: items.isEmpty) else {
            more = true
            return false
        }
        items.append(item)
        return true
    }
}

/// Where a LIST or BLOB_LIST page starts: after the `seq` its cursor carries (0 on a first page), in `scope`.
struct SeqPosition {
    let kind: Cursor.Kind
    let scope: String
    let after: Int64

    private init(_ kind: Cursor.Kind, scope: String, cursor: String?, scopeMessage: String) throws(LarderError) {
        self.kind = kind
        self.scope = scope
        guard let cursor else {
            after = 0
            return
        }
        let position = try Cursor.open(cursor, kind, scope: scope, scopeMessage: scopeMessage)
        guard case .int(let seq)? = position["seq"] else { throw StoreRules.damagedCursor }
        after = seq
    }

    /// A LIST page of `collection`.
    static func list(_ collection: String, cursor: String?) throws(LarderError) -> SeqPosition {
        try SeqPosition(
            .list, scope: Cursor.scope([.string(collection)]), cursor: cursor,
            scopeMessage: "the cursor belongs to a LIST of another collection; start again without it")
    }

    /// A BLOB_LIST page of the blobs attached to `attachedTo` (of every blob when nil).
    static func blobList(_ attachedTo: BlobAttachment?, cursor: String?) throws(LarderError) -> SeqPosition {
        try SeqPosition(
            .blobList, scope: Cursor.scope([attachedTo.map { .object($0.json) } ?? .null]), cursor: cursor,
            scopeMessage: "the cursor belongs to a BLOB_LIST with another attachedTo; start again without it")
    }

    /// The cursor of the page after one whose last row is `seq`.
    func next(after seq: Int64) -> String { Cursor.encode(kind, scope: scope, ["seq": .int(seq)]) }

    /// A page from rows read with `LIMIT limit + 1`, each with its `seq`: the first `limit`, and the next page's
    /// cursor when there were more.
    func page<T>(_ rows: [(T, Int64)], limit: Int) -> (items: [T], nextCursor: String?) {
        let page = rows.prefix(limit)
        return (page.map(\.0), rows.count > limit ? next(after: page.last!.1) : nil)
    }
}

/// Where a SEARCH page starts: after the last record of the page before, by its sort values and id. A cursor is valid
/// only with the same collection, filter, text and sort (`Cursor.searchScope`).
struct SearchPosition {
    /// The sort values (one per sort key) and the id of the last record before this page.
    let values: [SQLValue]
    let lastId: String

    /// The position `query.cursor` carries; nil on a first page.
    static func open(_ collection: String, _ query: SearchQuery) throws(LarderError) -> SearchPosition? {
        guard let cursor = query.cursor else { return nil }
        let object = try Cursor.open(
            cursor, .search, scope: Cursor.searchScope(collection, query),
            scopeMessage: "the cursor belongs to another query: a SEARCH cursor is valid only with the same "
                + "collection, filter, text and sort; start again without it")
        guard case .array(let raw)? = object["v"], raw.count == query.sort.count,
            case .string(let lastId)? = object["id"]
        else { throw StoreRules.damagedCursor }
        var values: [SQLValue] = []
        for item in raw {
            guard let value = Cursor.sqlValue(item) else { throw StoreRules.damagedCursor }
            values.append(value)
        }
        return SearchPosition(values: values, lastId: lastId)
    }

    /// The page of a search and the next page's cursor, after its last record (with its sort values) when `more`.
    static func page(_ collection: String, _ query: SearchQuery, _ items: [(StoredRecord, [SQLValue])], more: Bool)
        -> Page
    {
        var next: String?
        if more, let last = items.last {
            next = Cursor.encode(
                .search, scope: Cursor.searchScope(collection, query),
                ["v": .array(last.1.map(Cursor.json)), "id": .string(last.0.id.wireString)])
        }
        return Page(records: items.map(\.0), nextCursor: next)
    }
}

/// Counts the bytes an answer's records will take, so a page stops before it passes the JSON limit.
struct PageBudget {
    /// The envelope around `data`: id, rev, two timestamps, member names and punctuation.
    static let envelopeBytes = 160
    var remaining: Int

    init(maxBytes: Int) { remaining = maxBytes }

    /// Whether `record` fits; the first record of an answer always does (a document is at most half the JSON limit).
    mutating func admit(_ record: StoredRecord, isFirst: Bool) -> Bool {
        let cost = record.data.count + PageBudget.envelopeBytes
        guard isFirst || cost <= remaining else { return false }
        remaining -= cost
        return true
    }
}
