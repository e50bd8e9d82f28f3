import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// The documents' table of schema 20: row numbers without AUTOINCREMENT, and search text kept only in the rows of
/// the collections the trigram index covers; a data directory of the schema before converts when opened.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct LeanDocumentsTests {
    static func search(_ store: SQLiteStore, _ collection: String, _ query: String) throws -> Set<UUID> {
        Set(try store.search(collection, SearchQuery(text: TextQuery(query: query), limit: 1_000)).records.map(\.id))
    }

    /// The search text of every row of `collection` (nil where the row holds none), by id.
    static func searchColumn(_ store: SQLiteStore, _ collection: String) throws -> [UUID: String?] {
        let db = try SQLiteConnection(path: store.core.databasePath, readOnly: true)
        let rows = try db.query("SELECT id, search FROM documents WHERE collection = ?1", [.text(collection)]) {
            ($0.uuid(0), $0.isNull(1) ? nil : $0.text(1))
        }
        return Dictionary(rows, uniquingKeysWith: { a, _ in a })
    }

    static func rowNumber(_ store: SQLiteStore, _ id: UUID) throws -> Int64? {
        let db = try SQLiteConnection(path: store.core.databasePath, readOnly: true)
        return try db.scalar("SELECT seq FROM documents WHERE id = ?1", [.text(id.wireString)])
    }

    /// A row's number is never used again, even after the newest document was deleted and the store reopened: LIST
    /// pages by it, and a cursor past the newest row must see every later one.
    @Test func rowNumbersOnlyGrowAcrossDeletesAndRestarts() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-lean-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var numbers: [Int64] = []
        var cursor: String?
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            _ = try store.create("items", id: nil, data: ["n": 0])
            let x = try store.create("items", id: nil, data: ["n": 1])
            let y = try store.create("items", id: nil, data: ["n": 2])
            // A client paged up to x; then x and y, the newest rows, go.
            cursor = try store.list("items", limit: 2, cursor: nil).nextCursor
            #expect(cursor != nil)
            numbers.append(try LeanDocumentsTests.rowNumber(store, x.id)!)
            numbers.append(try LeanDocumentsTests.rowNumber(store, y.id)!)
            _ = try store.delete("items", id: y.id, expectedRev: 1)
            _ = try store.delete("items", id: x.id, expectedRev: 1)
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            let later = try store.create("items", id: nil, data: ["n": 3])
            numbers.append(try LeanDocumentsTests.rowNumber(store, later.id)!)
            #expect(try store.list("items", limit: 10, cursor: cursor).records.map(\.id) == [later.id])
        }
        #expect(numbers == numbers.sorted() && Set(numbers).count == 3, "\(numbers)")
    }

    @Test func uncoveredRowsKeepNoSearchTextAndAreSearchedAlike() throws {
        try withStore { store, _ in
            let a = try store.create("notes", id: nil, data: ["text": "Grüße aus Köln", "n": 1])
            let b = try store.create("notes", id: nil, data: ["title": "北京 note", "tags": ["Köln"]])
            _ = try store.create("notes", id: nil, data: ["text": "nothing here"])
            // Uncovered: no search text in the rows, and substring search (one and two characters never use the
            // index) derives it from the records.
            #expect(try LeanDocumentsTests.searchColumn(store, "notes").values.allSatisfy { $0 == nil })
            #expect(try LeanDocumentsTests.search(store, "notes", "KÖ") == [a.id, b.id])
            #expect(try LeanDocumentsTests.search(store, "notes", "北") == [b.id])

            try store.textIndexer!.indexCollection("notes")
            // Covered: every row holds the text its record makes, and writes from now on keep it.
            let c = try store.create("notes", id: nil, data: ["text": "Köln again"])
            _ = try store.patch("notes", id: a.id, patch: ["text": "Grüße aus Bonn"], expectedRev: 1)
            for (id, search) in try LeanDocumentsTests.searchColumn(store, "notes") {
                let data = try store.get("notes", id: id).data
                #expect(search == PreparedDocument.searchText(stored: data).map { String(decoding: $0, as: UTF8.self) })
            }
            #expect(try LeanDocumentsTests.search(store, "notes", "köln") == [b.id, c.id])
            #expect(try LeanDocumentsTests.search(store, "notes", "bonn") == [a.id])
            #expect(try store.integrityCheck() == "ok")
            #expect(try LeanDocumentsTests.search(store, "notes", "köln") == [b.id, c.id])
        }
    }

    /// A collection dropped, made again and covered again in one group commit stays covered for the writer: its
    /// later rows keep their text and are found through the index.
    @Test func aDropAndACoverInOneBatchLeaveTheCollectionCovered() throws {
        try withStore { store, _ in
            _ = try store.create("notes", id: nil, data: ["text": "old zebra"])
            try store.textIndexer!.indexCollection("notes")
            let started = DispatchSemaphore(value: 0)
            let gate = DispatchSemaphore(value: 0)
            let done = DispatchGroup()
            // Holds the writer, so that the drop and the cover queued meanwhile run in the next batch, in order.
            done.enter()
            store.submitWrite({ _ throws(LarderError) in
                started.signal()
                gate.wait()
            }) { _ in done.leave() }
            started.wait()
            done.enter()
            store.submitWrite({ context throws(LarderError) in
                _ = try context.dropCollection("notes")
                _ = try context.create("notes", id: nil, data: ["text": "new zebra"])
            }) { result in
                #expect((try? result.get()) != nil)
                done.leave()
            }
            done.enter()
            store.textIndexer!.join("notes") { error, covered in
                #expect(error == nil && covered)
                done.leave()
            }
            gate.signal()
            done.wait()
            let later = try store.create("notes", id: nil, data: ["text": "later zebra"])
            #expect(try LeanDocumentsTests.searchColumn(store, "notes").values.allSatisfy { $0 != nil })
            try store.textIndexer!.catchUp()
            #expect(try store.explain("notes", SearchQuery(text: TextQuery(query: "zebra"))).contains("text_index"))
            #expect(try LeanDocumentsTests.search(store, "notes", "zebra").count == 2)
            #expect(try LeanDocumentsTests.search(store, "notes", "later").contains(later.id))
            #expect(try store.integrityCheck() == "ok")
        }
    }

    /// Covering a collection larger than one fill job (`TextIndexer.fillRows`) while it is written: every row ends
    /// with its text, and searches through the index answer as a scan does.
    @Test func coveringFillsEveryRowInJobsWhileWritesGoOn() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-lean-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let rows = TextIndexer.fillRows * 2 + 100
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            _ = try store.create("notes", id: nil, data: ["text": "first"])
        }
        do {
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            // Rows as uncovered writes leave them, made in one statement (a test need not wait for thousands of
            // creates); `other` rows are interleaved, which the fill jobs pass over.
            try db.run(
                """
                WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < ?1)
                INSERT INTO documents(collection, id, rev, createdAt, updatedAt, data, createSeq)
                SELECT CASE k % 3 WHEN 0 THEN 'other' ELSE 'notes' END,
                    lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-a'
                        || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
                    1, 0, 0, json_object('text', 'Row ' || k || CASE WHEN k % 10 = 0 THEN ' Zebra' ELSE '' END), NULL
                FROM n
                """, [.int(Int64(rows))])
            try db.run("INSERT OR IGNORE INTO collections(name, createdAt) VALUES ('other', 0)")
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            let writes = DispatchGroup()
            DispatchQueue.global().async(group: writes) {
                for n in 0..<200 { _ = try? store.create("notes", id: nil, data: ["text": .string("zebra late \(n)")]) }
            }
            try store.textIndexer!.indexCollection("notes")
            writes.wait()
            #expect(try LeanDocumentsTests.searchColumn(store, "notes").values.allSatisfy { $0 != nil })
            #expect(try LeanDocumentsTests.searchColumn(store, "other").values.allSatisfy { $0 == nil })
            #expect(try store.integrityCheck() == "ok")
            let scan = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, useTextIndex: false))
            defer { scan.close() }
            for query in ["zebra", "row 1", "late 19", "first"] {
                let indexed = try LeanDocumentsTests.search(store, "notes", query)
                let scanned = try LeanDocumentsTests.search(scan, "notes", query)
                #expect(!indexed.isEmpty && indexed == scanned, "\(query)")
            }
            let zebras = (1...rows).filter { $0 % 3 != 0 && $0 % 10 == 0 }.count + 200
            #expect(try store.count("notes", filter: nil, text: TextQuery(query: "zebra")) == zebras)
            #expect(try scan.count("notes", filter: nil, text: TextQuery(query: "zebra")) == zebras)
        }
    }

    /// A data directory of schema 19 (AUTOINCREMENT row numbers, every row's search text, a field index, an owner,
    /// a collection the index covers and one it does not) opens converted, with its records, log and indexes.
    @Test func aDataDirectoryOfTheSchemaBeforeConverts() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-v19-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var ids: [String: UUID] = [:]
        var groupIndex = ""
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            ids["covered"] = try store.create("notes", id: nil, data: ["text": "Grüße aus Köln"]).id
            try store.textIndexer!.indexCollection("notes")
            ids["plain"] = try store.create("items", id: nil, data: ["name": "Köln", "group": 7]).id
            ids["owned"] = try store.create("items", id: nil, data: ["name": "mine", "$owner": "u1", "group": 7]).id
            ids["gone"] = try store.create("items", id: nil, data: ["name": "gone"]).id
            _ = try store.delete("items", id: ids["gone"]!, expectedRev: 1)
            groupIndex = try store.createIndex("items", field: FieldPath("group")).name
        }
        do {
            // As schema 19 left it: the table made again with AUTOINCREMENT and every row's search text.
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            let indexes = try db.query(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'documents' AND sql IS NOT NULL"
            ) { $0.text(0) }
            try db.execute(
                """
                BEGIN;
                CREATE TABLE old(seq INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT NOT NULL, id TEXT NOT NULL,
                    rev INTEGER NOT NULL, createdAt INTEGER NOT NULL, updatedAt INTEGER NOT NULL, data TEXT NOT NULL,
                    search TEXT NOT NULL, createSeq INTEGER, owner TEXT);
                INSERT INTO old SELECT seq, collection, id, rev, createdAt, updatedAt, data,
                    coalesce(search, larder_search(data)), createSeq, owner FROM documents;
                DROP TABLE documents;
                ALTER TABLE old RENAME TO documents;
                UPDATE sqlite_sequence SET seq = 4 WHERE name = 'documents';
                DELETE FROM larder_meta WHERE key = 'documentsSeq';
                DELETE FROM larder_migrations WHERE version >= \(SQLiteSchema.leanDocumentsVersion);
                """)
            for sql in indexes { try db.execute(sql) }
            try db.execute("COMMIT")
            #expect(try db.scalar("SELECT count(*) FROM documents WHERE search IS NULL") == 0)
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            let db = try SQLiteConnection(path: store.core.databasePath, readOnly: true)
            let table = try db.query("SELECT sql FROM sqlite_master WHERE name = 'documents'") { $0.text(0) }.first ?? ""
            #expect(!table.contains("AUTOINCREMENT") && table.contains("search TEXT,"))
            #expect(try db.scalar("SELECT count(*) FROM sqlite_sequence WHERE name = 'documents'") == 0)
            #expect(try db.scalar("SELECT count(*) FROM documents WHERE collection = 'items' AND search IS NOT NULL") == 0)
            #expect(try db.scalar("SELECT count(*) FROM documents WHERE collection = 'notes' AND search IS NULL") == 0)
            for index in ["documents_id", "documents_owner", "documents_create_seq", groupIndex] {
                #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = ?1", [.text(index)]) == 1)
            }
            #expect(try db.scalar("SELECT count(*) FROM sqlite_stat1 WHERE idx = ?1", [.text(groupIndex)]) == 1)
            let plan = try db.query(
                "EXPLAIN QUERY PLAN SELECT id FROM documents WHERE collection = 'items' AND "
                    + FieldPath.sortKeySQL(try FieldPath("group").sqlLiteral) + " = 7") { $0.text(3) }
            #expect(plan.contains { $0.contains(groupIndex) }, "\(plan)")

            #expect(try store.get("items", id: ids["owned"]!).data.count > 0)
            #expect(try LeanDocumentsTests.search(store, "items", "köln") == [ids["plain"]!])
            #expect(try LeanDocumentsTests.search(store, "notes", "köln") == [ids["covered"]!])
            #expect(try store.count("items", filter: .compare(try FieldPath("$owner"), .eq, "u1"), text: nil) == 1)
            // The log replays as before; new rows and events follow.
            let log = try store.changes(after: 0, collection: nil, limit: 100, maxBytes: 1 << 20).entries
            #expect(log.map(\.kind) == [.create, .create, .create, .create, .delete])
            let fresh = try store.create("items", id: nil, data: ["name": "new"])
            // After the deleted newest row's number, which AUTOINCREMENT had recorded.
            let number = try LeanDocumentsTests.rowNumber(store, fresh.id)
            #expect(number == 5, "\(String(describing: number))")
            #expect(try store.changes(after: 5, collection: nil, limit: 100, maxBytes: 1 << 20).entries.map(\.kind) == [.create])
            #expect(try store.integrityCheck() == "ok")
        }
    }
}
