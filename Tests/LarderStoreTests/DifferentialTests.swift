import Foundation
import LarderIO
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// The same few thousand operations, drawn from a seeded generator, applied to a SQLite store and a PostgreSQL store
/// side by side: every answer must be the same, byte for byte, apart from timestamps (records' `createdAt` and
/// `updatedAt`, blobs' `createdAt`, change times). Writes of every kind (with conflicts, stale revisions, missing
/// documents), searches paged to the end through their cursors with writes between the pages, counts, groups,
/// lists, blob calls, index declarations, dropped collections, and the change log. Values mix every kind in one field
/// (null, missing, booleans, integers and the reals equal to them, strings that read like JSON, arrays, objects), so
/// sorts and GROUP cross Protocol.md §5.2's order of kinds; filters ask `eq`/`ne null` of fields that are often missing;
/// cursors are taken to other requests and other queries, and must be refused alike.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DifferentialTests {
    @Test(arguments: [20_261_201, 7_411])
    func bothStoresAnswerAlike(seed: UInt64) throws {
        try withStore(.sqlite) { sqlite in
            try withStore(.postgres) { postgres in
                var run = DifferentialRun(seed: seed, stores: [sqlite, postgres])
                try run.go(operations: 1_500)
            }
        }
    }
}

struct DifferentialRun {
    var random: SplitMix64
    let stores: [AnyStore]
    let documentIds: [UUID]
    let blobIds: [UUID]
    var operations = 0
    var compared = 0
    /// Comparisons where every store answered rather than failed.
    var answered = 0
    /// Answered comparisons whose answer carried something: a page with a record in it, a count, a document.
    var substantial = 0
    /// Cursors answered so far (every store answers the same), to be misused by `misuseCursor`.
    var cursors: [String] = []
    /// Misused cursors the stores refused.
    var refusedCursors = 0
    /// The first store's answer to the last operation.
    var lastAnswer = ""

    static let collections = ["items", "students", "nul"]
    static let words = [
        "北京市海淀区", "北京", "上海市", "7-Eleven", "OK mart", "FamilyMart 全家", "Straße", "ÉCOLE", "école", "İstanbul",
        "ΟΔΟΣ", "abc", "ABC", "a'b\"c\\d", "", " ", "%_", "z", "Zürich", "鮪魚飯糰", "🍯 honey", "[1]", "{\"a\":1}",
    ]
    static let queries = [
        "北", "北京", "京市海", "mart", "MART", "ab", "a", "straße", "école", "i̇stanbul", "οδος", "%", "_", "🍯", "飯糰",
        "zz", "b\"c",
    ]

    init(seed: UInt64, stores: [AnyStore]) {
        random = SplitMix64(seed: seed)
        self.stores = stores
        var ids = SplitMix64(seed: seed ^ 0xABCD)
        func uuid() -> UUID {
            var bytes = [UInt8](repeating: 0, count: 16)
            for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255, using: &ids) }
            bytes[6] = (bytes[6] & 0x0F) | 0x40
            bytes[8] = (bytes[8] & 0x3F) | 0x80
            return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
        }
        documentIds = (0..<150).map { _ in uuid() }
        blobIds = (0..<30).map { _ in uuid() }
    }

    mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }
    mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &random)] }

    // MARK: Values

    mutating func number(_ collection: String) -> JSON {
        switch Int.random(in: 0..<10, using: &random) {
        case 0: return .double(Double(Int.random(in: -50...50, using: &random)) + 0.5)
        case 1: return .double(Double(Int.random(in: 0...400, using: &random)) * 0.25 + 0.125)
        case 2: return .double(pick([1e20, -3.5e21, 1.5e-7, 9.2233720368547758e18, 123456789.125]))
        case 3: return .int([Int64.max, Int64.min, 9_007_199_254_740_993, 0][Int.random(in: 0..<4, using: &random)])
        // Reals equal to small integers: one GROUP section and `eq` with the integer (1 and 1.0).
        case 4: return .double(Double(Int.random(in: -2...3, using: &random)))
        default: return .int(Int64.random(in: -20...200, using: &random))
        }
    }

    mutating func scalar(_ collection: String) -> JSON {
        switch Int.random(in: 0..<12, using: &random) {
        case 0: return .null
        case 1: return .bool(chance(50))
        case 2, 3, 4: return number(collection)
        default:
            var word = pick(DifferentialRun.words)
            if collection == "nul" && chance(30) { word += "\u{0}tail" + word }
            return .string(word)
        }
    }

    mutating func value(_ collection: String, depth: Int = 0) -> JSON {
        if depth < 2 && chance(15) {
            return .array((0..<Int.random(in: 0...3, using: &random)).map { _ in value(collection, depth: depth + 1) })
        }
        if depth < 2 && chance(10) {
            var object: JSONObject = [:]
            for key in ["city", "zip", "x"] where chance(60) { object[key] = value(collection, depth: depth + 1) }
            return .object(object)
        }
        return scalar(collection)
    }

    mutating func document(_ collection: String) -> JSONObject {
        var object: JSONObject = [:]
        for key in ["name", "price", "qty", "tags", "address", "flag", "note"] where chance(75) {
            switch key {
            case "name": object[key] = chance(80) ? .string(pick(DifferentialRun.words)) : scalar(collection)
            case "price", "qty": object[key] = chance(80) ? number(collection) : scalar(collection)
            case "flag": object[key] = chance(80) ? .bool(chance(50)) : scalar(collection)
            case "address":
                var address: JSONObject = ["city": chance(85) ? .string(pick(DifferentialRun.words)) : scalar(collection)]
                if chance(40) { address["zip"] = number(collection) }
                object[key] = chance(85) ? .object(address) : value(collection)
            default: object[key] = value(collection)
            }
        }
        return object
    }

    static let fields = ["name", "price", "qty", "tags", "address", "address.city", "address.zip", "flag", "note",
        "missing", "$id", "$rev"]

    mutating func field() -> FieldPath {
        try! FieldPath(pick(DifferentialRun.fields))
    }

    mutating func filter(depth: Int = 0, collection: String) -> Filter {
        if depth < 2 && chance(25) {
            let items = (0..<Int.random(in: 1...3, using: &random)).map { _ in
                filter(depth: depth + 1, collection: collection)
            }
            switch Int.random(in: 0..<3, using: &random) {
            case 0: return .and(items)
            case 1: return .or(items)
            default: return .not(items[0])
            }
        }
        let path = field()
        switch Int.random(in: 0..<10, using: &random) {
        case 0: return .compare(path, .eq, chance(30) ? .null : scalar(collection))
        case 1: return .compare(path, .ne, chance(30) ? .null : scalar(collection))
        case 2, 3:
            let op = pick([Filter.Comparison.lt, .lte, .gt, .gte])
            let value: JSON = chance(60) ? number(collection) : .string(pick(DifferentialRun.words))
            return .compare(path, op, value)
        case 4: return .isIn(path, (0..<Int.random(in: 0...4, using: &random)).map { _ in scalar(collection) })
        case 5: return .exists(path, chance(50))
        case 6: return .prefix(path, pick(["", "北", "O", "Fam", "a", "É", "[", "{"]))
        case 7:
            if chance(30) {
                let id = JSON.string(pick(documentIds).wireString.uppercased())
                return .compare(try! FieldPath("$id"), pick([.eq, .lt, .gt]), id)
            }
            return .contains(path, pick(DifferentialRun.queries))
        default: return .compare(path, .eq, chance(50) ? number(collection) : .string(pick(DifferentialRun.words)))
        }
    }

    mutating func text() -> TextQuery? {
        guard chance(35) else { return nil }
        let fields: [FieldPath]? = chance(40) ? [field(), field()] : nil
        return TextQuery(query: pick(DifferentialRun.queries), fields: fields)
    }

    static func jpeg(width: Int, height: Int) -> [UInt8] {
        [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 0x08, UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8),
            UInt8(width & 0xFF), 0x01, 0x01, 0x11, 0x00, 0xFF, 0xD9]
    }

    // MARK: Comparing

    static func describe(_ record: StoredRecord) -> String {
        "\(record.id.wireString) r\(record.rev) \(String(decoding: record.data, as: UTF8.self))"
    }

    static func describe(_ page: Page) -> String {
        page.records.map(describe).joined(separator: "\n") + "\n\(page.nextCursor ?? "-")"
    }

    static func describe(_ blob: BlobInfo) -> String {
        var json = blob.json
        json["createdAt"] = nil
        return String(decoding: json.bytes, as: UTF8.self)
    }

    static func describe(_ error: any Error) -> String {
        guard let error = error as? LarderError else { return "\(error)" }
        return "\(error.status.name) \(error.message) \(error.field ?? "-") \(error.details.bytes)"
    }

    /// Runs `body` on every store and requires the same description.
    mutating func same(_ what: @autoclosure () -> String, _ body: (AnyStore) throws -> String) {
        var answers: [String] = []
        for store in stores {
            do {
                answers.append(try body(store))
            } catch {
                answers.append("error: " + DifferentialRun.describe(error))
            }
        }
        compared += 1
        lastAnswer = answers[0]
        if !answers.contains(where: { $0.hasPrefix("error: ") }) {
            answered += 1
            // An empty page or list describes itself as its cursor line alone, after an empty first line.
            if !answers[0].isEmpty && !answers[0].hasPrefix("\n") { substantial += 1 }
        }
        guard answers[0] != answers[1] else { return }
        // The first line that differs, rather than two whole answers.
        let sqlite = answers[0].split(separator: "\n", omittingEmptySubsequences: false)
        let postgres = answers[1].split(separator: "\n", omittingEmptySubsequences: false)
        let line = Array(zip(sqlite, postgres)).firstIndex { $0 != $1 } ?? min(sqlite.count, postgres.count)
        Issue.record(
            """
            operation \(operations): \(what())
            line \(line) of \(sqlite.count) (SQLite) and \(postgres.count) (PostgreSQL):
            SQLite:     \(line < sqlite.count ? sqlite[line] : "(none)")
            PostgreSQL: \(line < postgres.count ? postgres[line] : "(none)")
            """)
    }

    mutating func searchAll(_ collection: String, _ query: SearchQuery, writeBetween: Bool) {
        var cursor: String?
        var pages = 0
        repeat {
            var paged = query
            paged.cursor = cursor
            var cursors: [String?] = []
            same("search \(collection) \(paged)") { store in
                let page = try store.search(collection, paged)
                cursors.append(page.nextCursor)
                return page.records.map(DifferentialRun.describe).joined(separator: "\n") + "\nnext \(page.nextCursor ?? "-")"
            }
            cursor = cursors.first ?? nil
            if let cursor { self.cursors.append(cursor) }
            pages += 1
            if writeBetween && cursor != nil && chance(30) { write() }
        } while cursor != nil && pages < 60
    }

    // MARK: Operations

    mutating func write() {
        let collection = pick(DifferentialRun.collections)
        let id = pick(documentIds)
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<45:
            let data = document(collection)
            same("create") { try DifferentialRun.describe($0.create(collection, id: id, data: data)) }
        case 45..<60:
            let data = document(collection)
            let rev: Int64? = chance(50) ? nil : Int64.random(in: 1...3, using: &random)
            same("replace") { try DifferentialRun.describe($0.replace(collection, id: id, data: data, expectedRev: rev)) }
        case 60..<78:
            var patch = document(collection)
            if chance(40) { patch[pick(["name", "price", "tags", "address"])] = .null }
            if chance(30) { patch["address"] = .object(["zip": number(collection), "city": .null]) }
            let rev: Int64? = chance(60) ? nil : Int64.random(in: 1...3, using: &random)
            same("patch") { try DifferentialRun.describe($0.patch(collection, id: id, patch: patch, expectedRev: rev)) }
        case 78..<86:
            let rev: Int64? = chance(70) ? nil : Int64.random(in: 1...3, using: &random)
            same("delete") { store in
                let (rev, blobs) = try store.delete(collection, id: id, expectedRev: rev)
                return "deleted r\(rev) blobs \(blobs)"
            }
        case 86..<95:
            let attach: BlobAttachment? = chance(60) ? BlobAttachment(collection: collection, id: id) : nil
            let bytes = DifferentialRun.jpeg(
                width: Int.random(in: 1...4000, using: &random), height: Int.random(in: 1...3000, using: &random))
            let blobId = pick(blobIds)
            same("blobPut") {
                try DifferentialRun.describe($0.blobPut(id: blobId, bytes: bytes, expectedSHA256: nil, attachTo: attach))
            }
        case 95..<98:
            let blobId = pick(blobIds)
            same("blobDelete") { store in
                try store.blobDelete(blobId)
                return "ok"
            }
        case 98:
            let path = field()
            same("index \(path)") { store in
                let (name, created) = try store.createIndex(collection, field: path)
                return "\(name) \(created)"
            }
        default:
            guard chance(40) else { return }
            same("drop \(collection)") { store in
                let (documents, blobs) = try store.dropCollection(collection)
                return "\(documents) \(blobs)"
            }
        }
    }

    mutating func read() {
        let collection = pick(DifferentialRun.collections)
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<40:
            var sort: [SortKey] = []
            for _ in 0..<Int.random(in: 0...2, using: &random) {
                sort.append(SortKey(field: field(), descending: chance(50)))
            }
            let query = SearchQuery(
                filter: chance(70) ? filter(collection: collection) : nil, text: text(), sort: sort,
                limit: Int.random(in: 1...9, using: &random))
            searchAll(collection, query, writeBetween: true)
        case 40..<50:
            let filter = chance(70) ? filter(collection: collection) : nil
            let text = text()
            same("count") { try "\($0.count(collection, filter: filter, text: text))" }
        case 50..<62:
            let path = field()
            let filter = chance(40) ? filter(collection: collection) : nil
            let text = text()
            let perGroup = Int.random(in: 0...3, using: &random)
            same("group \(path)") { store in
                try store.group(collection, field: path, filter: filter, text: text, perGroup: perGroup).map {
                    "\(String(decoding: $0.key.bytes, as: UTF8.self)) \($0.count): "
                        + $0.records.map(DifferentialRun.describe).joined(separator: ", ")
                }.joined(separator: "\n")
            }
        case 62..<70:
            var cursor: String?
            repeat {
                var next: [String?] = []
                let after = cursor
                same("list") { store in
                    let page = try store.list(collection, limit: 7, cursor: after)
                    next.append(page.nextCursor)
                    return page.records.map(DifferentialRun.describe).joined(separator: "\n") + "\n\(page.nextCursor ?? "-")"
                }
                cursor = next.first ?? nil
                if let cursor { cursors.append(cursor) }
            } while cursor != nil
        case 70..<80:
            let id = pick(documentIds)
            same("get") { try DifferentialRun.describe($0.get(collection, id: id)) }
        case 80..<84:
            let ids = (0..<5).map { _ in pick(documentIds) }
            same("getMany") { store in
                let (records, missing) = try store.getMany(collection, ids: ids)
                return records.map(DifferentialRun.describe).joined(separator: "\n") + "\nmissing \(missing)"
            }
        case 84..<90:
            let blobId = pick(blobIds)
            same("blobGet") { store in
                let (meta, bytes) = try store.blobGet(blobId)
                return DifferentialRun.describe(meta) + " \(bytes) " + DifferentialRun.describe(try store.blobHead(blobId))
            }
        case 90..<94:
            let attached: BlobAttachment? = chance(50) ? BlobAttachment(collection: collection, id: pick(documentIds)) : nil
            var cursor: String?
            repeat {
                var next: [String?] = []
                let after = cursor
                same("blobList") { store in
                    let (blobs, nextCursor) = try store.blobList(limit: 4, cursor: after, attachedTo: attached)
                    next.append(nextCursor)
                    return blobs.map(DifferentialRun.describe).joined(separator: "\n") + "\n\(nextCursor ?? "-")"
                }
                cursor = next.first ?? nil
                if let cursor { cursors.append(cursor) }
            } while cursor != nil
        case 94..<97:
            same("collections") { try $0.collections().map { "\($0.name) \($0.count)" }.joined(separator: ", ") }
        default:
            let after = Int64.random(in: 0...Int64(max(1, operations)), using: &random)
            let only: String? = chance(50) ? collection : nil
            same("changes") { store in
                let page = try store.changes(after: after, collection: only, limit: 50, maxBytes: 1 << 20)
                let entries = page.entries.map { (entry: ChangeEntry) -> String in
                    let record: String = entry.record.map(DifferentialRun.describe) ?? "-"
                    let blob: String = entry.blob.map(DifferentialRun.describe) ?? "-"
                    let previous: String = entry.previous.map { String(decoding: $0, as: UTF8.self) } ?? "-"
                    return "\(entry.seq) \(entry.kind) \(entry.collection) \(record) \(blob) \(previous)"
                }
                return entries.joined(separator: "\n")
                    + "\nmore \(page.more) last \(page.lastSeq) pruned \(page.prunedThrough)"
            }
        }
    }

    /// An earlier cursor given to any page request with any scope: most are another request's or another query's
    /// (INVALID_ARGUMENT, field `cursor`), some the very query that issued them (a page, by then after writes).
    mutating func misuseCursor() {
        let cursor = pick(cursors)
        let collection = pick(DifferentialRun.collections)
        switch Int.random(in: 0..<3, using: &random) {
        case 0:
            same("list with a cursor") { store in
                DifferentialRun.describe(try store.list(collection, limit: 5, cursor: cursor))
            }
        case 1:
            var sort: [SortKey] = []
            if chance(60) {
                sort.append(SortKey(field: field(), descending: chance(50)))
            }
            let query = SearchQuery(
                filter: chance(40) ? filter(collection: collection) : nil, sort: sort, limit: 5, cursor: cursor)
            same("search with a cursor \(query)") { store in DifferentialRun.describe(try store.search(collection, query)) }
        default:
            let attached: BlobAttachment? =
                chance(50) ? BlobAttachment(collection: collection, id: pick(documentIds)) : nil
            same("blobList with a cursor") { store in
                let (blobs, next) = try store.blobList(limit: 4, cursor: cursor, attachedTo: attached)
                return blobs.map(DifferentialRun.describe).joined(separator: "\n") + "\n\(next ?? "-")"
            }
        }
        if lastAnswer.hasPrefix("error: INVALID_ARGUMENT") && lastAnswer.contains(" cursor ") { refusedCursors += 1 }
    }

    mutating func go(operations count: Int) throws {
        for _ in 0..<count {
            operations += 1
            if !cursors.isEmpty && chance(4) {
                misuseCursor()
            } else if chance(55) {
                write()
            } else {
                read()
            }
        }
        same("stats") { store in
            let stats = try store.stats()
            return "\(stats.documents) \(stats.blobs) \(stats.changes) \(stats.lastChangeSeq)"
        }
        #expect(compared > count)
        // Stores that failed alike would agree on every operation: most must have been answered (three in four are,
        // for both seeds), most with something in the answer.
        #expect(answered > compared / 2, "\(answered) of \(compared) comparisons answered without an error")
        #expect(substantial > compared / 2, "\(substantial) of \(compared) comparisons answered something")
        #expect(refusedCursors > 10, "cursors taken to other requests or queries were refused \(refusedCursors) times")
    }
}

/// Found by the differential test: SQLite's GROUP filed an integer's records under the double nearest to it, so the
/// records of 2^63 - 1 were listed with those of 2^63 (a different section).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct GroupNumberTests {
    @Test(arguments: StoreKind.allCases)
    func integersPastTwoToThe53KeepTheirOwnSections(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            for value in [JSON.int(.max), .double(9.223372036854776e18), .int(1), .double(1.5)] {
                _ = try store.create("c", id: nil, data: ["n": value])
            }
            let groups = try store.group("c", field: try FieldPath("n"), filter: nil, text: nil, perGroup: 5)
            #expect(groups.map(\.key) == [.int(1), .double(1.5), .int(.max), .double(9.223372036854776e18)])
            #expect(groups.map(\.count) == [1, 1, 1, 1])
            #expect(groups.map(\.records.count) == [1, 1, 1, 1])
        }
    }
}
