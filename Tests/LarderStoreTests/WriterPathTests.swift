import Foundation
import LarderIO
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// The writer's cheaper paths must store exactly what the plain ones did: the same search text, the same bytes, ids
/// of the same kind, and the same errors.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct WriterPathTests {
    /// What `TextFold.searchText` computed before its byte-level fast path: the strings joined, then lowercased.
    static func reference(_ object: JSONObject) -> String {
        var parts: [String] = []
        func walk(_ value: JSON) {
            switch value {
            case .string(let s): parts.append(s)
            case .array(let items): items.forEach(walk)
            case .object(let o): for (_, v) in o { walk(v) }
            default: break
            }
        }
        for (_, value) in object { walk(value) }
        return parts.joined(separator: "\u{1F}").lowercased()
    }

    @Test(arguments: [
        #"{}"#,
        #"{"a":1,"b":null,"c":true}"#,
        #"{"name":"Grace HOPPER","tags":["Drink","COFFEE"],"n":{"deep":{"x":"AbC@[`{Z"}}}"#,
        #"{"s":"","t":"","u":["",""]}"#,
        #"{"name":"王小明 ÉCOLE","city":"İstanbul","greek":"ΣΟΦΟΣ","mixed":["ABC","Straße","ǅ"]}"#,
        #"{"emoji":"Too sweet 🍯 OK","ctrl":"a\u0001B\tC"}"#,
        #"{"k":"\u00c0\u0130","ascii":"PLAIN"}"#,
    ])
    func searchTextMatchesJoinThenLowercase(text: String) throws {
        let data = try object(text)
        #expect(TextFold.searchText(data) == WriterPathTests.reference(data))
        #expect(TextFold.searchBytes(data) == Array(WriterPathTests.reference(data).utf8))
        #expect(PreparedDocument(data).data == data.bytes)
        // Read without a tree (the server's path for CREATE and REPLACE), the document is prepared alike.
        #expect(CompactJSON.object(Array(text.utf8)).map(PreparedDocument.init) == PreparedDocument(data))
    }

    /// Every seed record, written with spaces as apps' JSON encoders write it, is prepared alike with and without a
    /// tree: the same stored bytes and the same folded search text.
    @Test func seedRecordsPrepareAlikeWithoutATree() throws {
        var count = 0
        for (_, records) in try seedRecords() {
            for record in records {
                let spaced = Array(String(decoding: record.bytes, as: UTF8.self)
                    .replacingOccurrences(of: "\",\"", with: "\", \"").replacingOccurrences(of: "\":", with: "\": ").utf8)
                let compact = try #require(CompactJSON.object(spaced))
                #expect(PreparedDocument(compact) == PreparedDocument(record))
                count += 1
            }
        }
        #expect(count > 10)
    }

    @Test func storedSearchColumnIsTheFoldedText() throws {
        try withStore { store, directory in
            let data = try object(#"{"name":"Emily CHEN","city":"台北 Xinyi","tags":["VIP"]}"#)
            let record = try store.create("people", id: nil, data: data)
            let db = try SQLiteConnection(path: (directory as NSString).appendingPathComponent("larder.sqlite"), readOnly: true)
            // Uncovered by the trigram index, the row keeps no text and searches derive it (`larder_search`).
            let text = try db.query(
                "SELECT search IS NULL, larder_search(data) FROM documents WHERE id = ?1", [.text(record.id.wireString)]
            ) { ($0.int(0), $0.text(1)) }
            #expect(text.map(\.0) == [1] && text.map(\.1) == [WriterPathTests.reference(data)])
            try store.textIndexer!.indexCollection("people")
            let search = try db.query("SELECT search FROM documents WHERE id = ?1", [.text(record.id.wireString)]) {
                $0.text(0)
            }
            #expect(search == [WriterPathTests.reference(data)])
            #expect(try store.count("people", filter: nil, text: TextQuery(query: "emily chen")) == 1)
            #expect(try store.count("people", filter: nil, text: TextQuery(query: "vip")) == 1)
        }
    }

    /// Generated ids are version 7: distinct, their text in creation order (within a millisecond by the counter, across
    /// a counter that runs out, and when the clock steps back), carrying the creation millisecond.
    @Test func generatedIdsAreDistinctTimeOrderedVersion7() {
        let uuids = TimeOrderedUUIDs()
        var seen: Set<UUID> = []
        var last = ""
        let start: Int64 = 1_764_460_800_000  // 2025-11-30T00:00:00Z
        // 5,000 ids in one millisecond (the 12-bit counter runs out and borrows the next), then the clock steps back.
        let clock = Array(repeating: start, count: 5_000) + [start + 5, start + 5, start + 2, start + 9]
        var latest = start
        for (n, now) in clock.enumerated() {  // several refills of the 4 KiB buffer
            latest = max(latest, now)
            let id = uuids.next(now: now)
            #expect(seen.insert(id).inserted)
            let text = id.wireString
            #expect(Array(text)[14] == "7")
            #expect("89ab".contains(Array(text)[19]))
            #expect(text > last, "id \(n) sorts after the one before")
            last = text
            let millis = Int64(text.replacingOccurrences(of: "-", with: "").prefix(12), radix: 16)!
            // Never before the clock's time, never more than the borrowed milliseconds past the latest it showed.
            #expect(millis >= now && millis <= latest + 3)
        }
        // The real clock: the first id of a fresh generator carries the millisecond it was made in.
        let before = nowMillis()
        let fresh = TimeOrderedUUIDs().next()
        let after = nowMillis()
        let millis = Int64(fresh.wireString.replacingOccurrences(of: "-", with: "").prefix(12), radix: 16)!
        #expect(millis >= before && millis <= after)
    }

    /// Records created without an id come back in creation order when no sort is asked for (ids sort by time).
    @Test func recordsWithoutASortComeInCreationOrder() throws {
        try withStore { store, _ in
            var created: [UUID] = []
            for n in 0..<300 { created.append(try store.create("todos", id: nil, data: ["n": .int(Int64(n))]).id) }
            let listed = try store.search("todos", SearchQuery(limit: 1000)).records.map(\.id)
            #expect(listed == created)
        }
    }

    @Test func preparedWritesThroughTheContextMatchThePlainOnes() throws {
        try withStore { store, _ in
            let data = try object(#"{"title":"Buy milk 買牛奶","isFinish":false}"#)
            let id = UUID()
            let created = try store.syncWrite { context throws(LarderError) in
                try context.create("todos", id: id, document: PreparedDocument(data))
            }
            #expect(created.id == id && created.rev == 1 && created.data == data.bytes)
            #expect(try store.get("todos", id: id) == created)
            let newer = try object(#"{"title":"Buy oat milk","isFinish":true}"#)
            let replaced = try store.syncWrite { context throws(LarderError) in
                try context.replace("todos", id: id, document: PreparedDocument(newer), expectedRev: 1)
            }
            #expect(replaced.rev == 2 && replaced.data == newer.bytes)
            #expect(try store.count("todos", filter: nil, text: TextQuery(query: "oat milk")) == 1)
            #expect(try store.count("todos", filter: nil, text: TextQuery(query: "牛奶")) == 0)
            expectError(.conflict, field: "rev") {
                _ = try store.syncWrite { context throws(LarderError) in
                    try context.replace("todos", id: id, document: PreparedDocument(data), expectedRev: 1)
                }
            }
            expectError(.conflict, field: "id") {
                _ = try store.syncWrite { context throws(LarderError) in
                    try context.create("todos", id: id, document: PreparedDocument(data))
                }
            }
            expectError(.invalidArgument, field: "collection") {
                _ = try store.syncWrite { context throws(LarderError) in
                    try context.create("1bad", id: nil, document: PreparedDocument(data))
                }
            }
            let changes = try store.changes(after: 0, collection: "todos", limit: 10, maxBytes: 1 << 20).entries
            #expect(changes.map(\.kind) == [.create, .replace])
            #expect(changes.last?.previous == data.bytes)
        }
    }

    @Test func preparedDocumentsOverTheLimitAreRefusedOnTheWriter() throws {
        try withStore({ $0.maxDocumentBytes = 64 }) { store, _ in
            let big = PreparedDocument(["text": .string(String(repeating: "x", count: 100))])
            expectError(.payloadTooLarge, field: "data") {
                _ = try store.syncWrite { context throws(LarderError) in
                    try context.create("notes", id: nil, document: big)
                }
            }
            let small = try store.create("notes", id: nil, data: ["text": "ok"])
            expectError(.payloadTooLarge, field: "data") {
                _ = try store.syncWrite { context throws(LarderError) in
                    try context.replace("notes", id: small.id, document: big, expectedRev: nil)
                }
            }
            expectError(.payloadTooLarge, field: "data") {
                _ = try store.replace("notes", id: small.id, data: ["text": .string(String(repeating: "y", count: 100))],
                    expectedRev: nil)
            }
            #expect(try store.get("notes", id: small.id).rev == 1)
        }
    }

    /// Checkpoints run off the writer thread, and the WAL still starts over instead of holding everything written.
    @Test func checkpointsCopyTheWALAndKeepItBounded() throws {
        try withStore { store, directory in
            let path = (directory as NSString).appendingPathComponent("larder.sqlite")
            func size(_ file: String) -> Int {
                ((try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? NSNumber)?.intValue ?? 0
            }
            // ~590 KB of numbers (no search text) per document: 40 documents pass ~5,800 pages through the WAL.
            let numbers = JSON.array((0..<100_000).map { .int(Int64($0)) })
            var ids: [UUID] = []
            for n in 0..<40 { ids.append(try store.create("big", id: nil, data: ["n": .int(Int64(n)), "v": numbers]).id) }
            let deadline = Date().addingTimeInterval(120)
            while size(path) < 16 << 20 && Date() < deadline { usleep(20_000) }
            #expect(size(path) >= 16 << 20, "checkpoints copied the documents into the database file")
            #expect(size(path + "-wal") < 16 << 20, "the WAL started over: \(size(path + "-wal")) bytes")
            #expect(try store.getMany("big", ids: Array(ids.prefix(3))).records.count == 3)
            #expect(try store.integrityCheck() == "ok")
        }
    }
}
