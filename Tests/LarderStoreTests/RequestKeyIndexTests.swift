import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// The writer's picture of the key table (`RequestKeyIndex`): a filter that must never miss a key the table holds
/// (the write would be applied twice), and a sweep that takes expired keys out without an index by age.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct RequestKeyIndexTests {
    /// A keyed CREATE of `title` in `todos`, as the server runs one: its answer is the record's JSON.
    static func keyedCreate(_ store: SQLiteStore, _ key: UUID, _ title: String) throws -> [UInt8] {
        let document = PreparedDocument(try object(#"{"title":"\#(title)"}"#))
        let body: @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8]) = { (c) throws(LarderError) in
            (try c.create("todos", id: nil, document: document).bytes, [])
        }
        let keyed = RequestKey.document(key, .create, collection: "todos", id: nil, rev: nil, data: document.data)
            .wrap(body)
        return try store.syncWrite(single: true, keyed).0
    }

    static func count(_ store: SQLiteStore, _ sql: String) throws -> Int64 {
        try SQLiteConnection(path: store.core.databasePath, readOnly: true).scalar(sql) ?? -1
    }

    @Test func theFilterHoldsEveryKeyItWasGivenAndFewOthers() {
        // Filled to the capacity it was made for: about ten bits a key.
        var filter = KeyFilter(capacity: 200_000)
        let given = (0..<200_000).map { _ in UUID() }
        for key in given { filter.insert(key) }
        #expect(given.allSatisfy { filter.mayContain($0) })
        let others = (0..<20_000).filter { _ in filter.mayContain(UUID()) }.count
        // About 1% false positives.
        #expect(others < 500, "\(others) of 20,000 new keys looked stored")
        #expect(KeyFilter(capacity: 0, holdsAll: true).mayContain(UUID()))
    }

    /// Through stores and sweeps of every kind (a slice that ends the pass, one that does not, expired rows and
    /// live ones), every key the table holds is one the filter may hold; and a pass lets the filter forget the keys
    /// it took out.
    @Test func everyKeyTheTableHoldsStaysInTheFilterAcrossPasses() throws {
        try withStore { store, _ in
            let db = try SQLiteConnection(path: store.core.databasePath, readOnly: false)
            try db.execute("CREATE TEMP TABLE request_keys(key TEXT PRIMARY KEY, createdAt INTEGER NOT NULL)")
            let index = try RequestKeyIndex(db)
            var live: [UUID] = []
            var gone: [UUID] = []
            for round in 0..<6 {
                for n in 0..<900 {
                    let key = UUID()
                    // Each round stores keys as old as the sweep's cut-off and newer ones.
                    let old = n % 3 == 0
                    try db.run(
                        "INSERT INTO request_keys(key, createdAt) VALUES (?1, ?2)",
                        [.text(key.wireString), .int(old ? Int64(round) : 1_000)])
                    index.stored(key)
                    if old { gone.append(key) } else { live.append(key) }
                }
                try index.sweep(db, oldest: Int64(round) + 1)
                for key in live { #expect(index.mayHold(key)) }
            }
            // Enough slices for three passes over the table: the first ends what the rounds began and takes the last
            // expired keys out, the next two forget them.
            for _ in 0..<20 { try index.sweep(db, oldest: 100) }
            #expect(try db.scalar("SELECT count(*) FROM request_keys") == Int64(live.count))
            for key in live { #expect(index.mayHold(key)) }
            let remembered = gone.filter { index.mayHold($0) }.count
            #expect(remembered < gone.count / 20, "\(remembered) of \(gone.count) deleted keys still in the filter")
        }
    }

    /// Keys expired long ago leave the table a slice at a time as writes go on, with no index by age; the live keys
    /// stay and still answer their retries.
    @Test func expiredKeysAreSweptOutAndLiveOnesStillAnswer() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-keys-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A data directory holding 5,000 keys stored two days ago.
        try withStore({ $0.dataDirectory = directory }) { _, _ in }
        do {
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.execute("BEGIN")
            for _ in 0..<5_000 {
                try db.run(
                    "INSERT INTO request_keys(key, request, digest, answer, createdAt) "
                        + "VALUES (?1, 'CREATE expired', '', x'', ?2)",
                    [.text(UUID().wireString), .int(nowMillis() - 2 * 86_400_000)])
            }
            try db.execute("COMMIT")
        }
        // A prune with every write (the change log's count of 64 events, divided by 64).
        try withStore({ $0.dataDirectory = directory; $0.changeRetentionEvents = 64 }) { store, _ in
            #expect(try Self.count(store, "SELECT count(*) FROM sqlite_master WHERE name = 'request_keys_created'") == 0)
            var answers: [(UUID, String, [UInt8])] = []
            var writes = 0
            while try Self.count(store, "SELECT count(*) FROM request_keys WHERE request = 'CREATE expired'") > 0 {
                let key = UUID()
                answers.append((key, "todo \(writes)", try Self.keyedCreate(store, key, "todo \(writes)")))
                writes += 1
                // Each slice visits at least 1,024 rows: the 5,000 expired ones are gone within a few writes.
                try #require(writes < 50, "expired keys still in the table after \(writes) writes")
            }
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == Int64(writes))
            for (key, title, answer) in answers { #expect(try Self.keyedCreate(store, key, title) == answer) }
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == Int64(writes))
        }
    }

    /// Two stores open on one data directory in this process share the filter: a key one stores, the other finds.
    /// Once both closed, the next store reads the table again: a key written there meanwhile is found.
    @Test func twoStoresOnOneFileShareTheirKeys() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-keys-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let key = UUID()
        var answer: [UInt8] = []
        try withStore({ $0.dataDirectory = directory }) { first, _ in
            try withStore({ $0.dataDirectory = directory }) { second, _ in
                answer = try Self.keyedCreate(first, key, "once")
                #expect(try Self.keyedCreate(second, key, "once") == answer)
                #expect(try Self.count(second, "SELECT count(*) FROM documents") == 1)
            }
        }
        // A key put in the table while no store is open (a copied-in file would do the same).
        let later = UUID()
        do {
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.run(
                "INSERT INTO request_keys(key, request, digest, answer, createdAt) SELECT ?1, request, digest, answer, "
                    + "createdAt FROM request_keys WHERE key = ?2",
                [.text(later.wireString), .text(key.wireString)])
        }
        let expected = answer
        try withStore({ $0.dataDirectory = directory }) { (store: SQLiteStore, _: String) throws -> Void in
            #expect(try Self.keyedCreate(store, later, "once") == expected)
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == 1)
        }
    }

    /// The filter is made again from the table when the store opens: a retry after a restart still finds its key.
    @Test func aRetryAfterARestartFindsItsKey() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-keys-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keys = (0..<50).map { _ in UUID() }
        var answers: [[UInt8]] = []
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            for (n, key) in keys.enumerated() { answers.append(try Self.keyedCreate(store, key, "todo \(n)")) }
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            for (n, key) in keys.enumerated() { #expect(try Self.keyedCreate(store, key, "todo \(n)") == answers[n]) }
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == 50)
            // What the table keeps of each answer leaves out the document, which each retry brought again.
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys WHERE instr(answer, 'todo') > 0") == 0)
            // A key used for another request is still refused.
            do {
                _ = try Self.keyedCreate(store, keys[0], "other")
                Issue.record("a key used for another request was taken")
            } catch let error as LarderError {
                #expect(error.field == "requestKey")
            }
        }
    }
}
