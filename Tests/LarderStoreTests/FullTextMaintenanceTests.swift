import Foundation
import LarderTestThreads
import LarderWire
import Synchronization
import Testing

@testable import LarderStore

/// The trigram index (its own file, `TextIndexer`) is brought up to date by passes on its own thread once its backlog
/// holds `fullTextBacklog` documents (1: after every group commit); it must end exactly where per-row maintenance would
/// have: every insert, text change, delete and rolled-back write of a batch accounted for, and searches exact while
/// documents wait in the backlog, while a pass runs, and after a pass whose settle never happened.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct FullTextMaintenanceTests {
    /// A closed store in a fresh directory holding one `notes` document per text, each indexed at once (backlog 1):
    /// the starting point for rewriting its schema as an older version would have left it.
    static func notesStore(_ texts: [String]) throws -> (directory: String, path: String, ids: [UUID]) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-fts-\(UUID().wireString)").path
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, fullTextBacklog: 1))
        var ids: [UUID] = []
        for text in texts { ids.append(try store.create("notes", id: nil, data: ["text": .string(text)]).id) }
        try store.textIndexer!.indexCollection("notes")
        store.close()
        return (directory, (directory as NSString).appendingPathComponent("larder.sqlite"), ids)
    }

    @Test(arguments: [1, 4, 256])
    func batchesOfMixedWritesLeaveTheIndexConsistentAndSearchesExact(backlog: Int) throws {
        try withStore({ $0.fullTextBacklog = backlog }) { store, directory in
            _ = try store.create("notes", id: nil, data: ["text": "seed"])
            try store.textIndexer!.indexCollection("notes")  // covered from the start: every write below goes by the backlog
            let group = DispatchGroup()
            let ids = (0..<60).map { _ in UUID() }
            func submit(_ n: Int, _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> Void) {
                group.enter()
                store.submitWrite({ context throws(LarderError) in try body(context) }, completion: { _ in group.leave() })
            }
            // Round 1 creates; round 2 changes documents the index already holds. Each round's writes land in
            // whatever batches the writer fills: creates, text changes, deletes, and writes that fail inside their
            // savepoint, all mixed within group commits.
            for (n, id) in ids.enumerated() {
                submit(n) { context throws(LarderError) in
                    _ = try context.create("notes", id: id, data: ["text": .string("北京 note \(n) alpha")])
                    if n % 11 == 0 {
                        _ = try context.patch("notes", id: id, patch: ["text": .string("深圳 note \(n) delta")], expectedRev: 1)
                    }
                }
            }
            group.wait()
            for (n, id) in ids.enumerated() {
                submit(n) { context throws(LarderError) in
                    if n % 3 == 0 {
                        _ = try context.patch("notes", id: id, patch: ["text": .string("上海 note \(n) beta")], expectedRev: nil)
                    }
                    if n % 5 == 0 { _ = try context.delete("notes", id: id, expectedRev: nil) }
                    if n % 7 == 0 {
                        // Fails after changing the text: the savepoint undoes it, the index must not see it.
                        _ = try context.replace("notes", id: id, data: ["text": "广州 gamma"], expectedRev: nil)
                        throw LarderError(.conflict, "planned failure")
                    }
                }
            }
            group.wait()

            let scan = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, useTextIndex: false))
            defer { scan.close() }
            func expectSearchesExact() throws {
                for query in ["北京", "上海 note", "alpha", "beta", "广州", "gamma", "note 4", "深圳", "delta"] {
                    let text = TextQuery(query: query)
                    let indexed = try store.search("notes", SearchQuery(text: text, limit: 1000)).records.map(\.id)
                    let scanned = try scan.search("notes", SearchQuery(text: text, limit: 1000)).records.map(\.id)
                    #expect(indexed == scanned, "\(query)")
                }
            }
            // With documents still in the backlog (unless it is 1), then after integrityCheck brought it in.
            try expectSearchesExact()
            #expect(try store.integrityCheck() == "ok")
            try expectSearchesExact()
            // n % 5 == 0 deleted, unless n % 7 == 0 rolled that write back entirely.
            let expected = (0..<60).filter { $0 % 5 != 0 || $0 % 7 == 0 }.count
            #expect(try store.count("notes", filter: nil, text: TextQuery(query: "note")) == expected)
            #expect(try store.count("notes", filter: nil, text: TextQuery(query: "广州")) == 0)
        }
    }

    /// Documents in the backlog are found by text search, whatever happened to them since the index last saw them;
    /// closing the store brings the index up to date, and a store reopened with a backlog keeps using it.
    @Test func backlogDocumentsAreFoundAndCloseEmptiesTheBacklog() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-fts-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func backlogRows() throws -> Int64 {
            let db = try SQLiteConnection(path: (directory as NSString).appendingPathComponent("larder.sqlite"), readOnly: true)
            return try db.scalar("SELECT count(*) FROM fts_backlog") ?? -1
        }
        var ids: [UUID] = []
        do {
            let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, fullTextBacklog: 1))
            // Indexed by the passes that covering the collection and each write ask for (backlog 1), without anyone
            // waiting for them.
            ids.append(try store.create("notes", id: nil, data: ["text": "indexed 0 台北"]).id)
            try store.textIndexer!.indexCollection("notes")
            for n in 1..<6 { ids.append(try store.create("notes", id: nil, data: ["text": .string("indexed \(n) 台北")]).id) }
            let deadline = Date().addingTimeInterval(120)
            while try backlogRows() > 0 && Date() < deadline { usleep(10_000) }
            #expect(try backlogRows() == 0)
            #expect(store.textIndexer!.passes.load(ordering: .relaxed) >= 1)
            store.close()
        }
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, fullTextBacklog: 1000))
        #expect(store.textIndexer!.passes.load(ordering: .relaxed) == 0)  // an empty backlog at open asks for none
        _ = try store.replace("notes", id: ids[0], data: ["text": "replaced 高雄"], expectedRev: nil)
        _ = try store.patch("notes", id: ids[1], patch: ["text": "patched 高雄"], expectedRev: nil)
        _ = try store.patch("notes", id: ids[1], patch: ["text": "patched twice 台南"], expectedRev: nil)
        _ = try store.delete("notes", id: ids[2], expectedRev: nil)
        let fresh = try store.create("notes", id: nil, data: ["text": "fresh 高雄"]).id
        _ = try store.patch("notes", id: fresh, patch: ["text": "fresh again 高雄"], expectedRev: nil)
        let gone = try store.create("notes", id: nil, data: ["text": "gone 高雄"]).id
        _ = try store.delete("notes", id: gone, expectedRev: nil)
        #expect(try backlogRows() == 5)  // one row per document: ids 0, 1, 2, fresh, gone
        func found(_ query: String) throws -> Set<UUID> {
            Set(try store.search("notes", SearchQuery(text: TextQuery(query: query), limit: 100)).records.map(\.id))
        }
        #expect(try found("高雄") == [ids[0], fresh])
        #expect(try found("台北") == [ids[3], ids[4], ids[5]])
        #expect(try found("patched twice") == [ids[1]])
        #expect(try found("patched 高雄").isEmpty)
        #expect(try found("indexed 0").isEmpty)
        #expect(try found("indexed 2").isEmpty)
        #expect(try store.count("notes", filter: nil, text: TextQuery(query: "fresh")) == 1)
        store.close()
        #expect(try backlogRows() == 0)
        let reopened = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        defer { reopened.close() }
        #expect(try reopened.integrityCheck() == "ok")
        #expect(Set(try reopened.search("notes", SearchQuery(text: TextQuery(query: "高雄"), limit: 100)).records.map(\.id))
            == [ids[0], fresh])
    }

    /// Migration 6 keys the backlog by seq: a store left at migration 5 with documents in its backlog keeps each
    /// document's first row, and searches and the index stay exact.
    @Test func aBacklogFromMigration5CarriesOver() throws {
        let (directory, path, ids) = try Self.notesStore(["old one 台北", "old two 台北", "old three 台北"])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // What migration 5 and its triggers would have left: the index has all three; then the first document was
        // replaced (a backlog row with the indexed text) and a fourth created, not yet flushed.
        do {
            let db = try SQLiteConnection(path: path, readOnly: false)
            let seqs = try db.query("SELECT seq FROM documents ORDER BY seq") { $0.int(0) }
            try db.execute(
                """
                BEGIN;
                DELETE FROM larder_migrations WHERE version >= 6;
                DROP TABLE text_collections;
                DROP TABLE fts_backlog;
                CREATE TABLE fts_backlog(n INTEGER PRIMARY KEY, seq INTEGER NOT NULL, old TEXT);
                CREATE INDEX fts_backlog_seq ON fts_backlog(seq);
                UPDATE documents SET data = '{"text":"new one 高雄"}', search = 'new one 高雄', rev = 2 WHERE seq = \(seqs[0]);
                INSERT INTO fts_backlog(seq, old) VALUES (\(seqs[0]), 'old one 台北');
                INSERT INTO fts_backlog(seq, old) VALUES (\(seqs[0]), 'a later row that must not count');
                COMMIT;
                """)
        }
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        defer { store.close() }
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.query("SELECT seq, old FROM fts_backlog") { $0.text(1) } == ["old one 台北"])
        func found(_ query: String) throws -> Set<UUID> {
            Set(try store.search("notes", SearchQuery(text: TextQuery(query: query), limit: 100)).records.map(\.id))
        }
        #expect(try found("台北") == [ids[1], ids[2]])
        #expect(try found("new one") == [ids[0]])
        #expect(try store.integrityCheck() == "ok")
        #expect(try found("台北") == [ids[1], ids[2]])
        #expect(try found("高雄") == [ids[0]])
    }

    /// The index has no positions: a query asks for all its trigrams (at most 16 of them, first to last), and the
    /// exact test decides, so what is found is what a scan finds, whatever the query holds.
    @Test func trigramQueriesFindWhatAScanFinds() throws {
        #expect(SQLiteQueryBuilder.trigramMatch("abcd") == #""abc" AND "bcd""#)
        #expect(SQLiteQueryBuilder.trigramMatch("aaaaa") == #""aaa""#)
        #expect(SQLiteQueryBuilder.trigramMatch(#"a"bc"#) == #""a""b" AND """bc""#)
        let long = SQLiteQueryBuilder.trigramMatch(String(repeating: "abcdefghij", count: 10))
        #expect(long.components(separatedBy: " AND ").count <= SQLiteQueryBuilder.maxTrigrams)
        #expect(long.hasPrefix(#""abc""#) && long.hasSuffix(#""hij""#))

        try withStore { store, directory in
            let texts = [
                "the quick brown fox", "brown the quick", "quick fox brown", #"say "hello" there"#, "aaaaaa", "aaab",
                "北京市海淀区中关村", "海淀区北京", "emoji 🍯🍯 honey", "first field", "Grace Hopper 1906",
                String(repeating: "lorem ipsum dolor ", count: 12),
            ]
            for (n, text) in texts.enumerated() {
                _ = try store.create("notes", id: nil, data: ["text": .string(text), "other": .string("second \(n)")])
            }
            try store.textIndexer!.indexCollection("notes")
            let scan = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, useTextIndex: false))
            defer { scan.close() }
            let queries = [
                "quick brown", "brown fox", "the quick", #""hello""#, #"y "h"#, "aaa", "aaaa", "aab", "北京市", "海淀区北",
                "🍯🍯 h", "field second", "grace hopper", "hopper 1906", String(repeating: "lorem ipsum dolor ", count: 5),
                "ipsum lorem",
            ]
            for _ in 0..<2 {  // with the documents in the backlog, then after integrityCheck flushed it
                for query in queries {
                    let text = TextQuery(query: query)
                    let indexed = try store.search("notes", SearchQuery(text: text, limit: 100)).records.map(\.id)
                    let scanned = try scan.search("notes", SearchQuery(text: text, limit: 100)).records.map(\.id)
                    #expect(indexed == scanned, "\(query)")
                }
                #expect(try store.integrityCheck() == "ok")
            }
        }
    }

    /// Earlier versions kept the index inside the documents' file (`documents_fts`, with positions before that): it is
    /// dropped at open and the index file started over from the documents.
    @Test func anIndexInsideTheDocumentsFileIsReplacedByTheIndexFile() throws {
        let (directory, path, ids) = try Self.notesStore(["台北 one", "高雄 two", "台北 three"])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            let db = try SQLiteConnection(path: path, readOnly: false)
            try db.execute(
                """
                BEGIN;
                CREATE VIRTUAL TABLE documents_fts USING fts5(
                    search, content='documents', content_rowid='seq', tokenize='trigram case_sensitive 1');
                INSERT INTO documents_fts(documents_fts) VALUES ('rebuild');
                COMMIT;
                """)
        }
        let before = try Self.generations(directory)
        #expect(before.index == before.documents)
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, fullTextBacklog: 1))
        defer { store.close() }
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'documents_fts'") == 0)
        let after = try Self.generations(directory)
        #expect(after.index == after.documents && after.index != before.index)  // started over
        let found = try store.search("notes", SearchQuery(text: TextQuery(query: "台北 t"), limit: 10)).records.map(\.id)
        #expect(found == [ids[2]])
        #expect(try store.integrityCheck() == "ok")
        #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == 0)
    }

    /// The index file's and the documents' file's generations (`text_meta`, `larder_meta`).
    static func generations(_ directory: String) throws -> (index: Int64?, documents: Int64?) {
        let index = try SQLiteConnection(path: (directory as NSString).appendingPathComponent(TextIndexer.fileName), readOnly: true)
        let documents = try SQLiteConnection(path: (directory as NSString).appendingPathComponent("larder.sqlite"), readOnly: true)
        return (
            try index.scalar("SELECT value FROM text_meta WHERE key = 'generation'"),
            try documents.scalar("SELECT value FROM larder_meta WHERE key = 'textIndexGeneration'")
        )
    }

    /// A lost, emptied or foreign index file (its generation differs from the documents' file) is started over: empty,
    /// every document in the backlog, searches exact at once and the index complete after the passes.
    @Test func aLostOrForeignIndexFileIsStartedOver() throws {
        let (directory, path, ids) = try Self.notesStore(["台北 one", "高雄 two", "台北 three"])
        let (otherDirectory, _, _) = try Self.notesStore(["something else entirely"])
        defer {
            try? FileManager.default.removeItem(atPath: directory)
            try? FileManager.default.removeItem(atPath: otherDirectory)
        }
        let indexFile = (directory as NSString).appendingPathComponent(TextIndexer.fileName)
        for replacement in [nil, (otherDirectory as NSString).appendingPathComponent(TextIndexer.fileName)] {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: indexFile + suffix) }
            #expect(!FileManager.default.fileExists(atPath: indexFile))
            if let replacement {
                try FileManager.default.copyItem(atPath: replacement, toPath: indexFile)
                let foreign = try Self.generations(directory)
                #expect(foreign.index != nil && foreign.index != foreign.documents)
            }
            let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
            let search = { (query: String) throws -> Set<UUID> in
                Set(try store.search("notes", SearchQuery(text: TextQuery(query: query), limit: 10)).records.map(\.id))
            }
            #expect(try search("台北") == [ids[0], ids[2]])
            #expect(try search("something else").isEmpty)
            let db = try SQLiteConnection(path: path, readOnly: true)
            #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == 3)
            #expect(try store.integrityCheck() == "ok")
            #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == 0)
            #expect(try search("高雄 two") == [ids[1]])
            store.close()
            let paired = try Self.generations(directory)
            #expect(paired.index != nil && paired.index == paired.documents)
        }
    }

    /// A pass commits to the index file, then the writer settles it into the backlog. When the settle does not happen
    /// (here it fails on purpose), searches stay exact; a store closed that way (as after a crash between the two
    /// commits) starts its index over at the next open, and searches are exact throughout.
    @Test func aPassWhoseSettleNeverHappenedIsSettledLaterAndAtTheNextOpen() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-fts-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = (directory as NSString).appendingPathComponent("larder.sqlite")
        var ids: [UUID] = []
        do {
            let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, fullTextBacklog: 1000))
            for n in 0..<8 { ids.append(try store.create("notes", id: nil, data: ["text": .string("first \(n) 台北")]).id) }
            try store.textIndexer!.indexCollection("notes")
            try store.textIndexer!.catchUp()  // indexed and settled
            for n in 0..<4 {
                _ = try store.replace("notes", id: ids[n], data: ["text": .string("second \(n) 高雄")], expectedRev: nil)
            }
            _ = try store.delete("notes", id: ids[4], expectedRev: nil)
            ids.append(try store.create("notes", id: nil, data: ["text": "third 高雄"]).id)
            store.textIndexer!.failSettles.store(Int.max, ordering: .relaxed)
            #expect(throws: LarderError.self) { try store.textIndexer!.catchUp() }  // committed, never settled
            // The index now holds the new texts, the backlog still says it holds the old ones: still exact.
            let expected: [String: Set<UUID>] = [
                "台北": [ids[5], ids[6], ids[7]], "高雄": [ids[0], ids[1], ids[2], ids[3], ids[8]], "second 2": [ids[2]],
                "first 4": [], "third": [ids[8]],
            ]
            for (query, ids) in expected {
                let found = try store.search("notes", SearchQuery(text: TextQuery(query: query), limit: 100)).records
                #expect(Set(found.map(\.id)) == ids, "\(query)")
            }
            // A change after the unsettled pass: the settle must keep this row, with the text the pass indexed.
            _ = try store.replace("notes", id: ids[0], data: ["text": "fourth 台南"], expectedRev: nil)
            store.close()  // its catch-up fails too: the store closes with the journal unsettled
        }
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == 6)
        for round in 0..<2 {  // the first open starts over, its integrity check indexes everything; the second has none
            let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, fullTextBacklog: 1000))
            #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == (round == 0 ? 8 : 0))
            let expected: [String: Set<UUID>] = [
                "台北": [ids[5], ids[6], ids[7]], "高雄": [ids[1], ids[2], ids[3], ids[8]], "台南": [ids[0]],
                "second 0": [], "first 0": [], "third": [ids[8]],
            ]
            for (query, ids) in expected {
                let found = try store.search("notes", SearchQuery(text: TextQuery(query: query), limit: 100)).records
                #expect(Set(found.map(\.id)) == ids, "\(query)")
            }
            #expect(try store.integrityCheck() == "ok")
            #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == 0)
            store.close()
        }
    }

    /// The two files commit separately; a power failure can keep a pass's commit and lose its settle's, or the reverse.
    /// Either way the numbers disagree at the next open, which starts the index over; searches are exact throughout.
    @Test(arguments: ["UPDATE larder_meta SET value = value - 1 WHERE key = 'textIndexSettled'",
                      "UPDATE larder_meta SET value = value + 1 WHERE key = 'textIndexSettled'"])
    func filesThatLostDifferentCommitsStartTheIndexOver(lose: String) throws {
        let (directory, path, ids) = try Self.notesStore(["台北 one", "高雄 two", "台北 three"])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            let db = try SQLiteConnection(path: path, readOnly: false)
            #expect(try db.scalar("SELECT value FROM larder_meta WHERE key = 'textIndexSettled'") ?? 0 > 0)
            _ = try db.run(lose)
        }
        let before = try Self.generations(directory)
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, fullTextBacklog: 1000))
        defer { store.close() }
        #expect(try Self.generations(directory).index != before.index)
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == 3)
        let found = Set(try store.search("notes", SearchQuery(text: TextQuery(query: "台北"), limit: 10)).records.map(\.id))
        #expect(found == [ids[0], ids[2]])
        #expect(try store.integrityCheck() == "ok")
    }

    /// A collection joins the index at its first substring search (of any length); until then its writes add nothing
    /// to the backlog. Searches are exact before, while and after it joins; dropping the collection takes
    /// it out again, and the next passes remove its documents from the index.
    @Test func aCollectionJoinsTheIndexAtItsFirstSubstringSearch() throws {
        try withStore({ $0.fullTextBacklog = 1 }) { store, directory in
            let db = try SQLiteConnection(path: (directory as NSString).appendingPathComponent("larder.sqlite"), readOnly: true)
            func backlog() throws -> Int64 { try db.scalar("SELECT count(*) FROM fts_backlog") ?? -1 }
            func covered() throws -> [String] { try db.query("SELECT name FROM text_collections") { $0.text(0) } }
            func count(_ query: String) throws -> Int {
                try store.count("shop", filter: nil, text: TextQuery(query: query))
            }
            func waitFor(_ condition: () throws -> Bool) throws {
                let deadline = Date().addingTimeInterval(120)
                while try !condition() && Date() < deadline { usleep(10_000) }
            }
            for n in 0..<50 { _ = try store.create("shop", id: nil, data: ["item": .string("茶葉蛋 \(n)")]) }
            #expect(try backlog() == 0 && covered().isEmpty)
            // The first search, of any length, scans (exact, deriving each row's text) and asks for the index; the
            // ones after read the rows' text and the index.
            #expect(try count("蛋") == 50)
            try waitFor { try covered() == ["shop"] && backlog() == 0 }
            #expect(try count("茶葉蛋 1") == 11)  // 1 and 10-19
            #expect(try covered() == ["shop"] && backlog() == 0)
            #expect(try store.explain("shop", SearchQuery(text: TextQuery(query: "茶葉蛋 1"))).contains("text_index"))
            #expect(try count("茶葉蛋 1") == 11)
            _ = try store.create("shop", id: nil, data: ["item": "茶葉蛋 99"])
            #expect(try count("茶葉蛋 9") == 2)  // 9 and 99, the new one from the backlog or the index
            #expect(try store.integrityCheck() == "ok")
            // Dropped: out of the index's collections; created again, it starts uncovered.
            _ = try store.dropCollection("shop")
            #expect(try covered().isEmpty)
            _ = try store.create("shop", id: nil, data: ["item": "茶葉蛋 again"])
            try store.textIndexer!.catchUp()
            #expect(try backlog() == 0)
            #expect(try store.integrityCheck() == "ok")  // the dropped documents are gone from the index
            #expect(try count("茶葉蛋") == 1)
            try waitFor { try covered() == ["shop"] }  // that search asked again for the new collection
            #expect(try covered() == ["shop"])
        }
    }

    /// Between joining the index and the passes that index its documents, a collection's searches use the index and
    /// find every document through the backlog, including ones changed or deleted meanwhile.
    @Test func searchesAreExactWhileACollectionJoins() throws {
        try withStore({ $0.fullTextBacklog = 100_000 }) { store, directory in  // no pass until the catch-up below
            let db = try SQLiteConnection(path: (directory as NSString).appendingPathComponent("larder.sqlite"), readOnly: true)
            var ids: [UUID] = []
            for n in 0..<30 { ids.append(try store.create("shop", id: nil, data: ["item": .string("珍珠奶茶 \(n)")]).id) }
            _ = try store.search("shop", SearchQuery(text: TextQuery(query: "珍珠奶茶")))  // asks for the index
            let deadline = Date().addingTimeInterval(120)
            while try db.scalar("SELECT count(*) FROM text_collections") == 0 && Date() < deadline { usleep(10_000) }
            #expect(try db.scalar("SELECT count(*) FROM fts_backlog") == 30)
            #expect(store.textIndexer!.passes.load(ordering: .relaxed) == 0)
            _ = try store.replace("shop", id: ids[0], data: ["item": "紅茶"], expectedRev: nil)
            _ = try store.delete("shop", id: ids[1], expectedRev: nil)
            _ = try store.create("shop", id: nil, data: ["item": "珍珠奶茶 new"])
            func found(_ query: String) throws -> Int {
                try store.count("shop", filter: nil, text: TextQuery(query: query))
            }
            #expect(try store.explain("shop", SearchQuery(text: TextQuery(query: "珍珠奶茶"))).contains("text_index"))
            #expect(try found("珍珠奶茶") == 29)  // 30 - 2 + 1
            #expect(try found("紅茶") == 1)
            #expect(try found("珍珠奶茶 1") == 10)  // 1 (deleted), 10-19
            try store.textIndexer!.catchUp()
            #expect(store.textIndexer!.passes.load(ordering: .relaxed) >= 1)
            #expect(try found("珍珠奶茶") == 29 && found("紅茶") == 1 && found("珍珠奶茶 1") == 10)
            #expect(try store.integrityCheck() == "ok")
        }
    }

    /// A query few documents can match has its candidates looked up one by one (`TextPlan.indexDriving`); one many
    /// documents match walks the collection; both answer exactly what a scan answers, page by page, in counts and in
    /// groups.
    @Test func rareAndCommonQueriesTakeTheirPlansAndAnswerAlike() throws {
        try withStore({ $0.fullTextBacklog = 1 }) { store, directory in
            let cities = ["台北市信義區", "台北市大安區", "台北市大安區"]  // 1,000 and 2,000 of 3,000
            _ = try store.syncWrite { context throws(LarderError) -> Int in
                for n in 0..<3_000 {
                    _ = try context.create(
                        "people", id: nil,
                        data: ["name": .string("member \(n)"), "city": .string(cities[n % 3]), "n": .int(Int64(n))])
                }
                return 0
            }
            try store.textIndexer!.indexCollection("people")
            try store.textIndexer!.catchUp(rounds: 100)
            let scan = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, useTextIndex: false))
            defer { scan.close() }
            let sorted = [SortKey(field: try FieldPath("n"), descending: true)]
            let queries = [
                ("member 12", true), ("信義區", true), ("大安區", true), ("台北市", false), ("member", false),
                ("前鎮 no such", true),
            ]
            for (query, driving) in queries {
                let plan = try store.explain("people", SearchQuery(text: TextQuery(query: query)))
                #expect(plan.contains("INTEGER PRIMARY KEY") == driving, "\(query): \(plan)")
                for sort in [[], sorted] {
                    var cursor: String?
                    var pages = 0
                    repeat {
                        let q = SearchQuery(text: TextQuery(query: query), sort: sort, limit: 97, cursor: cursor)
                        let indexed = try store.search("people", q)
                        let scanned = try scan.search("people", q)
                        #expect(indexed.records.map(\.id) == scanned.records.map(\.id), "\(query) page \(pages)")
                        cursor = indexed.nextCursor
                        pages += 1
                    } while cursor != nil && pages < 40
                }
                let text = TextQuery(query: query)
                #expect(try store.count("people", filter: nil, text: text) == scan.count("people", filter: nil, text: text))
                let groups = try store.group("people", field: try FieldPath("city"), filter: nil, text: text, perGroup: 2)
                let scannedGroups = try scan.group("people", field: try FieldPath("city"), filter: nil, text: text, perGroup: 2)
                #expect(groups == scannedGroups, "\(query)")
            }
        }
    }

    /// Past `fullTextBacklogLimit` backlog documents the writer waits for a pass (which runs although the backlog is
    /// below a pass's usual size, and without deadlocking on the settle the writer must run itself); the index ends
    /// exact.
    @Test func theWriterWaitsForAPassPastTheBacklogLimit() throws {
        try withStore({
            $0.fullTextBacklog = 1_000  // no pass asked for by the writes themselves
            $0.fullTextBacklogLimit = 10
            // The writer waits for the pass as long as a slow machine takes to run it (not its usual second): a
            // timeout below is then a pass that never came, not one that came late.
            $0.fullTextWriterWaitLimit = .seconds(30)
        }) { store, _ in
            let indexer = store.textIndexer!
            _ = try store.create("notes", id: nil, data: ["text": "first 台北"])
            try indexer.indexCollection("notes")
            // The passes that opening and covering asked for have run (on the index's queue, before this): the 50
            // writes below ask for none, so a slow machine cannot have a pass run among them.
            try indexer.catchUp(rounds: 0)
            for n in 0..<50 { _ = try store.create("notes", id: nil, data: ["text": .string("note \(n) 台北")]) }
            #expect(indexer.passes.load(ordering: .relaxed) == 0)
            try indexer.catchUp(rounds: 0)  // counts the backlog: 51, past the limit
            #expect(indexer.writerWaits.load(ordering: .relaxed) == 0)
            _ = try store.create("notes", id: nil, data: ["text": "last 台北"])
            // At least that commit (a pass may already be settling when it looks, and the settle's own commit may
            // count too).
            #expect(indexer.writerWaits.load(ordering: .relaxed) >= 1)
            #expect(indexer.writerWaitTimeouts.load(ordering: .relaxed) == 0)
            #expect(indexer.passes.load(ordering: .relaxed) >= 1)
            #expect(try store.count("notes", filter: nil, text: TextQuery(query: "台北")) == 52)
            #expect(try store.integrityCheck() == "ok")
        }
    }

    /// A settle that failed is tried again before the next pass reads the backlog; the index then ends exact.
    @Test func aFailedSettleIsRetriedBeforeTheNextPass() throws {
        try withStore({ $0.fullTextBacklog = 1000 }) { store, _ in
            var ids: [UUID] = []
            for n in 0..<5 { ids.append(try store.create("notes", id: nil, data: ["text": .string("first \(n) 台北")]).id) }
            try store.textIndexer!.indexCollection("notes")
            store.textIndexer!.failSettles.store(1, ordering: .relaxed)
            #expect(throws: LarderError.self) { try store.textIndexer!.catchUp() }
            _ = try store.replace("notes", id: ids[0], data: ["text": "second 高雄"], expectedRev: nil)
            _ = try store.delete("notes", id: ids[1], expectedRev: nil)
            try store.textIndexer!.catchUp()
            #expect(store.textIndexer!.passes.load(ordering: .relaxed) == 2)
            let found = { (query: String) throws -> Set<UUID> in
                Set(try store.search("notes", SearchQuery(text: TextQuery(query: query), limit: 100)).records.map(\.id))
            }
            #expect(try found("台北") == [ids[2], ids[3], ids[4]])
            #expect(try found("高雄") == [ids[0]])
            #expect(try store.integrityCheck() == "ok")
        }
    }

    /// A text search reads the documents and the index at two snapshots; a pass that commits to the index and settles
    /// the backlog between them could hide a document whose old text matched. Pairs of documents swap a word in one
    /// transaction (exactly one of each pair holds it), passes run after every commit, and searches paused between
    /// their two snapshots must still count exactly one per pair.
    @Test func searchesCountExactlyWhilePassesCommitAndSettle() throws {
        try withStore({ $0.fullTextBacklog = 1 }) { store, _ in
            let pairs = 8
            var built: [(UUID, UUID)] = []
            for n in 0..<pairs {
                let a = try store.create("swaps", id: nil, data: ["text": .string("plugh \(n)")]).id
                let b = try store.create("swaps", id: nil, data: ["text": .string("xyzzy \(n)")]).id
                built.append((a, b))
            }
            let slots = built
            try store.textIndexer!.indexCollection("swaps")
            try store.textIndexer!.catchUp()
            store.textIndexer!.pauseBetweenSnapshotsMicros.store(2_000, ordering: .relaxed)
            let stop = Atomic<Bool>(false)
            let swapperEnded = DispatchSemaphore(value: 0)
            let swapper = Thread {
                defer { swapperEnded.signal() }
                var round = 0
                while !stop.load(ordering: .relaxed) {
                    round += 1
                    let (a, b) = slots[round % pairs]
                    let aHolds = round / pairs % 2 == 0
                    let text = "\(round)"
                    _ = try? store.syncWrite { context throws(LarderError) in
                        _ = try context.replace(
                            "swaps", id: a, data: ["text": .string((aHolds ? "xyzzy " : "plugh ") + text)],
                            expectedRev: nil)
                        _ = try context.replace(
                            "swaps", id: b, data: ["text": .string((aHolds ? "plugh " : "xyzzy ") + text)],
                            expectedRev: nil)
                    }
                }
            }
            swapper.start()
            defer {
                stop.store(true, ordering: .relaxed)
                swapperEnded.wait()
            }
            let passesBefore = store.textIndexer!.passes.load(ordering: .relaxed)
            var wrong: [Int] = []
            // At least 150 searches, and on until passes have committed among them (a busy machine may hold the
            // swapper or the index's queue back for longer than 150 searches take).
            let deadline = Date().addingTimeInterval(120)
            var searches = 0
            while searches < 150
                || (store.textIndexer!.passes.load(ordering: .relaxed) <= passesBefore + 1 && Date() < deadline)
            {
                let count = try store.count("swaps", filter: nil, text: TextQuery(query: "plugh"))
                if count != pairs { wrong.append(count) }
                searches += 1
            }
            stop.store(true, ordering: .relaxed)
            #expect(wrong.isEmpty, "searches that did not count one per pair: \(wrong)")
            #expect(store.textIndexer!.passes.load(ordering: .relaxed) > passesBefore)
            store.textIndexer!.pauseBetweenSnapshotsMicros.store(0, ordering: .relaxed)
            #expect(try store.integrityCheck() == "ok")
        }
    }
}
