import Dispatch
import Foundation
import LarderSync
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
        let keyed = RequestKey.document(key, .create, collection: "todos", id: nil, rev: nil, data: document.data)
            .create("todos", id: nil, document: document)
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

    /// The table of row keys finds every pair it holds through its growth, a key's several rows all, and drops the
    /// rows below the mark only when it grows.
    @Test func theRowTableFindsEveryKeyAndDropsOnlyPassedRows() {
        var table = RowKeys()
        let keys = (0..<5_000).map { _ in UUID() }
        for (n, key) in keys.enumerated() { table.insert(key, row: Int64(n + 1), keepingFrom: 0) }
        // A key written again (its first write rolled back): both rows.
        table.insert(keys[7], row: 9_000, keepingFrom: 0)
        #expect(keys.enumerated().allSatisfy { n, key in table.rows(holding: key).contains(Int64(n + 1)) })
        #expect(Set(table.rows(holding: keys[7])) == [8, 9_000])
        #expect((0..<1_000).allSatisfy { _ in table.rows(holding: UUID()).isEmpty })
        // Growing past the mark drops the rows below it, and keeps the rest.
        for n in 0..<10_000 { table.insert(UUID(), row: Int64(10_000 + n), keepingFrom: 2_501) }
        #expect(table.rows(holding: keys[0]).isEmpty && table.rows(holding: keys[2_499]).isEmpty)
        #expect(table.rows(holding: keys[2_500]) == [2_501] && table.rows(holding: keys[4_999]) == [5_000])
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
                    index.stored(RequestKeyIndex.hash(key))
                    if old { gone.append(key) } else { live.append(key) }
                }
                _ = try index.sweep(db, oldest: Int64(round) + 1, newest: 0)
                for key in live { #expect(index.mayHold(key)) }
            }
            // Enough slices for three passes over the table: the first ends what the rounds began and takes the last
            // expired keys out, the next two forget them.
            for _ in 0..<20 { _ = try index.sweep(db, oldest: 100, newest: 0) }
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
            // The CREATEs' keys are in their rows.
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 0)
            let kept = try Self.count(store, "SELECT count(*) FROM documents WHERE createKey IS NOT NULL")
            #expect(kept == Int64(writes))
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
        // A key put in the table while no store is open (a copied-in file would do the same): the same request's,
        // as the document's row keeps it.
        let later = UUID()
        do {
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            let row = try db.query("SELECT id, createdAt, createKey FROM documents") {
                (id: $0.uuid(0), createdAt: $0.int(1), mark: $0.bytes(2))
            }[0]
            let mark = withUnsafeBytes(of: later.uuid) { Array($0) } + row.mark[16...]
            let stored = RequestKey.tableRow(collection: "todos", id: row.id, createdAt: row.createdAt, mark: mark)
            try db.run(
                "INSERT INTO request_keys(key, request, digest, answer, createdAt) VALUES (?1, ?2, ?3, ?4, ?5)",
                [.text(later.wireString), .text(stored.request), .text(stored.digest), .blob(stored.answer),
                 .int(row.createdAt)])
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
            // Each key is in its document's row, found again as the store opened.
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 0)
            #expect(try Self.count(store, "SELECT count(*) FROM documents WHERE length(createKey) = 24") == 50)
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

/// A CREATE that carries a request key keeps the key in the document's row: no row of its own in `request_keys`, and
/// a retry is answered from the document, as the first answer was, until the key expires; the key used for another
/// request is refused; when the document goes, its key moves to `request_keys`.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CreateKeyInRowTests {
    static func keyedWrite(
        _ store: SQLiteStore, _ key: UUID, _ opcode: Opcode = .create, id: UUID, title: String
    ) throws -> [UInt8] {
        let document = PreparedDocument(try object(#"{"title":"\#(title)"}"#))
        let request = RequestKey.document(key, opcode, collection: "todos", id: id, rev: nil, data: document.data)
        let keyed =
            opcode == .create
            ? request.create("todos", id: id, document: document)
            : request.wrap { (c) throws(LarderError) in
                (try c.replace("todos", id: id, document: document, expectedRev: nil).bytes, [])
            }
        return try store.syncWrite(single: true, keyed).0
    }

    static func count(_ store: SQLiteStore, _ sql: String) throws -> Int64 {
        try SQLiteConnection(path: store.core.databasePath, readOnly: true).scalar(sql) ?? -1
    }

    /// Makes every row of `store` (and so the keys they keep) `ms` older, as if written that long ago.
    static func age(_ store: SQLiteStore, by ms: Int64) throws {
        try SQLiteConnection(path: store.core.databasePath, readOnly: false).run(
            "UPDATE documents SET createdAt = createdAt - ?1, updatedAt = updatedAt - ?1", [.int(ms)])
    }

    @Test func aRetryIsAnsweredFromTheDocumentAsTheFirstAnswerWas() throws {
        try withStore { store, _ in
            let key = UUID()
            let id = UUID()
            let first = try Self.keyedWrite(store, key, id: id, title: "Buy milk")
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 0)
            #expect(try Self.count(store, "SELECT count(*) FROM documents WHERE length(createKey) = 24") == 1)
            let seq = store.lastChangeSeq
            #expect(try Self.keyedWrite(store, key, id: id, title: "Buy milk") == first)
            // Changed since, the document still answers its CREATE's retry with revision 1, as then.
            _ = try Self.keyedWrite(store, UUID(), .replace, id: id, title: "Buy oat milk")
            #expect(try Self.keyedWrite(store, key, id: id, title: "Buy milk") == first)
            #expect(store.lastChangeSeq == seq + 1)
            #expect(try store.get("todos", id: id).rev == 2)
            // The key with another document is refused; another key for the id finds it taken.
            let reused = #expect(throws: LarderError.self) { _ = try Self.keyedWrite(store, key, id: id, title: "Tea") }
            #expect(reused?.field == "requestKey")
            let taken = #expect(throws: LarderError.self) {
                _ = try Self.keyedWrite(store, UUID(), id: id, title: "Buy milk")
            }
            #expect(taken?.status == .conflict)
        }
    }

    /// Rows written by the previous version keep 33 bytes (the key, the whole 128-bit fingerprint, a byte for the
    /// id): after an upgrade, a retry of such a CREATE is still answered, another request with its key still
    /// refused, before and after its document is deleted (and the key moves to the key table).
    @Test func aKeyKeptInTheEarlierLongerFormStillAnswersAndRefuses() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-keys-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (named, unnamed) = ((key: UUID(), id: UUID()), (key: UUID(), id: UUID?.none))
        var answers: [UUID: [UInt8]] = [:]
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            answers[named.key] = try Self.keyedWrite(store, named.key, id: named.id, title: "named")
            let document = PreparedDocument(try object(#"{"title":"unnamed"}"#))
            let request = RequestKey.document(
                unnamed.key, .create, collection: "todos", id: nil, rev: nil, data: document.data)
            let keyed = request.create("todos", id: nil, document: document)
            answers[unnamed.key] = try store.syncWrite(single: true, keyed).0
            // Each row's mark written again as the previous version wrote it.
            let db = try SQLiteConnection(path: store.core.databasePath, readOnly: false)
            for (key, id, title) in [(named.key, named.id, "named"), (unnamed.key, nil, "unnamed")] {
                let digest = RequestKey.document(
                    key, .create, collection: "todos", id: id, rev: nil, data: Array(#"{"title":"\#(title)"}"#.utf8)
                ).digest
                let fingerprint = stride(from: 0, to: 32, by: 2).map { at in
                    UInt8(digest.dropFirst(at).prefix(2), radix: 16)!
                }
                let mark = withUnsafeBytes(of: key.uuid) { Array($0) } + fingerprint + [id == nil ? 0 : 1]
                try db.run(
                    "UPDATE documents SET createKey = ?1 WHERE substr(createKey, 1, 16) = ?2",
                    [.blob(mark), .blob(withUnsafeBytes(of: key.uuid) { Array($0) })])
            }
            #expect(try Self.count(store, "SELECT count(*) FROM documents WHERE length(createKey) = 33") == 2)
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            let unnamedRetry = { () throws -> [UInt8] in
                let document = PreparedDocument(try object(#"{"title":"unnamed"}"#))
                let request = RequestKey.document(
                    unnamed.key, .create, collection: "todos", id: nil, rev: nil, data: document.data)
                return try store.syncWrite(single: true, request.create("todos", id: nil, document: document)).0
            }
            for round in 0..<2 {
                #expect(try Self.keyedWrite(store, named.key, id: named.id, title: "named") == answers[named.key])
                #expect(try unnamedRetry() == answers[unnamed.key])
                let reused = #expect(throws: LarderError.self) {
                    _ = try Self.keyedWrite(store, named.key, id: named.id, title: "other")
                }
                #expect(reused?.field == "requestKey")
                let refusedUnnamed = #expect(throws: LarderError.self) {
                    _ = try Self.keyedWrite(store, unnamed.key, id: UUID(), title: "unnamed")
                }
                #expect(refusedUnnamed?.field == "requestKey")
                #expect(try Self.count(store, "SELECT count(*) FROM documents") == 2 - Int64(round))
                // The named document goes: its key moves to the key table, and answers from there the second time.
                if round == 0 { _ = try store.delete("todos", id: named.id, expectedRev: nil) }
            }
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 1)
        }
    }

    /// Sent twice at once (one group commit, or two), the CREATE applies once and both answers are the same.
    @Test func twoCopiesInFlightApplyOnce() throws {
        try withStore { store, _ in
            for _ in 0..<20 {
                let (key, id) = (UUID(), UUID())
                let document = PreparedDocument(try object(#"{"title":"twice"}"#))
                let keyed = RequestKey.document(key, .create, collection: "todos", id: id, rev: nil, data: document.data)
                    .create("todos", id: id, document: document)
                let answers = Locked<[[UInt8]]>([])
                let done = DispatchGroup()
                for _ in 0..<2 {
                    done.enter()
                    store.submitSingleWrite(keyed) { result in
                        if case .success(let answer) = result { answers.withLock { $0.append(answer.0) } }
                        done.leave()
                    }
                }
                done.wait()
                let both = answers.withLock { $0 }
                #expect(both.count == 2 && both[0] == both[1])
            }
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == 20)
        }
    }

    /// A document deleted, or its collection dropped, takes its key to `request_keys`: the retry is still answered
    /// as the first time, and creates nothing.
    @Test func aDeletedOrDroppedDocumentsKeyStillAnswers() throws {
        try withStore { store, _ in
            let (deletedKey, deletedID) = (UUID(), UUID())
            let deleted = try Self.keyedWrite(store, deletedKey, id: deletedID, title: "gone")
            _ = try store.delete("todos", id: deletedID, expectedRev: nil)
            let (droppedKey, droppedID) = (UUID(), UUID())
            let dropped = try Self.keyedWrite(store, droppedKey, id: droppedID, title: "dropped")
            _ = try store.syncWrite { (c) throws(LarderError) in try c.dropCollection("todos") }
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 2)
            #expect(try Self.keyedWrite(store, deletedKey, id: deletedID, title: "gone") == deleted)
            #expect(try Self.keyedWrite(store, droppedKey, id: droppedID, title: "dropped") == dropped)
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == 0)
        }
    }

    /// A key kept in a CREATE's row, or moved to the key table when its document went, is refused with any request
    /// that is not that CREATE, even one whose description reads the same: a CREATE without an id in a collection
    /// named after the first one's collection and id, a NUL inside the name, another collection, a REPLACE.
    @Test func aKeyIsRefusedWithARequestThatOnlyReadsTheSame() throws {
        try withStore { store, _ in
            let (key, id) = (UUID(), UUID())
            let document = PreparedDocument(try object(#"{"title":"Buy milk"}"#))
            let first = try Self.keyedWrite(store, key, id: id, title: "Buy milk")
            func create(_ collection: String, id: UUID?) -> @Sendable (any WriteContext) throws(LarderError) -> (
                [UInt8], [UInt8]
            ) {
                RequestKey.document(key, .create, collection: collection, id: id, rev: nil, data: document.data)
                    .create(collection, id: id, document: document)
            }
            let others: [(String, @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8]))] = [
                ("a collection named after the collection and id", create("todos \(id.wireString)", id: nil)),
                ("a NUL in the collection's name", create("todos\u{0}\(id.wireString)", id: nil)),
                ("another collection", create("shop", id: id)),
                ("no id", create("todos", id: nil)),
                (
                    "a REPLACE",
                    RequestKey.document(key, .replace, collection: "todos", id: id, rev: nil, data: document.data)
                        .wrap { (c) throws(LarderError) in
                            (try c.replace("todos", id: id, document: document, expectedRev: nil).bytes, [])
                        }
                ),
            ]
            for round in 0..<2 {
                for (name, write) in others {
                    let refused = #expect(throws: LarderError.self, "\(name), round \(round)") {
                        _ = try store.syncWrite(single: true, write)
                    }
                    #expect(refused?.status == .invalidArgument && refused?.field == "requestKey", "\(name)")
                }
                #expect(try Self.keyedWrite(store, key, id: id, title: "Buy milk") == first)
                // The second round finds the key in the key table, where deleting the document moved it.
                if round == 0 { _ = try store.delete("todos", id: id, expectedRev: nil) }
            }
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 1)
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == 0)
        }
    }

    /// A CREATE whose id the server makes keeps its key in the row too: its retry answers the record it made, and
    /// creates nothing; the key sent with any other request is refused, whatever that request is.
    @Test func aKeyInARowIsFoundForAnyRequest() throws {
        try withStore { store, _ in
            let key = UUID()
            let first = try RequestKeyIndexTests.keyedCreate(store, key, "Buy milk")
            #expect(try RequestKeyIndexTests.keyedCreate(store, key, "Buy milk") == first)
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == 1)
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 0)
            let id = try store.list("todos", limit: 1, cursor: nil).records[0].id
            let patch = try object(#"{"collection":"todos","id":"\#(id.wireString)","patch":{"done":true}}"#)
            let (done, milk) = (try object(#"{"done":true}"#), try object(#"{"title":"Buy milk"}"#))
            let others: [(String, @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8]))] = [
                (
                    "PATCH",
                    RequestKey.request(key, .patch, patch).wrap { (c) throws(LarderError) in
                        (try c.patch("todos", id: id, patch: done, expectedRev: nil).bytes, [])
                    }
                ),
                (
                    "CREATE naming the id",
                    RequestKey.document(
                        key, .create, collection: "todos", id: UUID(), rev: nil,
                        data: PreparedDocument(milk).data
                    ).wrap { (c) throws(LarderError) in
                        (try c.create("todos", id: UUID(), data: milk).bytes, [])
                    }
                ),
            ]
            for (name, write) in others {
                let refused = #expect(throws: LarderError.self, "\(name)") {
                    _ = try store.syncWrite(single: true, write)
                }
                #expect(refused?.field == "requestKey", "\(name)")
            }
            // Read from a reader's connection too, as the server looks before it writes.
            let reread = #expect(throws: LarderError.self) {
                _ = try store.requestKeyAnswer(RequestKey.request(key, .patch, patch))
            }
            #expect(reread?.field == "requestKey")
            #expect(try store.get("todos", id: id).rev == 1)
            #expect(try Self.count(store, "SELECT count(*) FROM documents") == 1)
        }
    }

    /// A keyed CREATE that fails after its row was written keeps nothing for the next write in the same transaction:
    /// a keyed PATCH after it stores its own key.
    @Test func aFailedCreateLeavesTheNextWritesKeyToBeStored() throws {
        try withStore { store, _ in
            let (createKey, patchKey) = (UUID(), UUID())
            let milk = try object(#"{"title":"Buy milk"}"#)
            let done = try object(#"{"done":true}"#)
            let document = PreparedDocument(milk)
            let request = RequestKey.document(
                createKey, .create, collection: "todos", id: nil, rev: nil, data: document.data)
            let id = try store.syncWrite(single: true) { (c) throws(LarderError) in
                try c.create("todos", id: nil, data: milk)
            }.id
            let patch = try object(#"{"collection":"todos","id":"\#(id.wireString)","patch":{"done":true}}"#)
            _ = try store.syncWrite(single: true) { (c) throws(LarderError) in
                _ = try? c.keyed(request) { () throws(LarderError) -> StoredRecord in
                    _ = try c.create("todos", id: nil, document: document)
                    throw LarderError(.internal, "a failure after the row was written")
                }
                return try RequestKey.request(patchKey, .patch, patch).wrap { (c) throws(LarderError) in
                    (try c.patch("todos", id: id, patch: done, expectedRev: nil).bytes, [])
                }(c)
            }
            #expect(try Self.count(store, "SELECT count(*) FROM request_keys") == 1)
        }
    }

    /// The sweep moves the mark (`requestKeyRowsFrom`) past rows whose keys expired, so that a store opening reads
    /// only the rows whose keys may still answer.
    @Test func theMarkPassesRowsWhoseKeysExpired() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-keys-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (old, fresh) = (UUID(), UUID())
        let setUp: (inout StoreConfiguration) -> Void = {
            $0.dataDirectory = directory
            $0.changeRetentionEvents = 64
        }
        try withStore(setUp) { (store: SQLiteStore, _: String) throws -> Void in
            _ = try RequestKeyIndexTests.keyedCreate(store, old, "old")
            // Its row made two retentions ago.
            try CreateKeyInRowTests.age(store, by: 2 * store.core.configuration.requestKeyRetentionMs)
            // This write's prune runs the sweep, with its own key fresh.
            _ = try RequestKeyIndexTests.keyedCreate(store, fresh, "fresh")
            let rows = try SQLiteConnection(path: store.core.databasePath, readOnly: true).query(
                "SELECT seq FROM documents ORDER BY seq") { $0.int(0) }
            let mark = try Self.count(store, "SELECT value FROM larder_meta WHERE key = 'requestKeyRowsFrom'")
            #expect(mark > rows[0] && mark <= rows[1])
        }
        try withStore(setUp) { (store: SQLiteStore, _: String) throws -> Void in
            #expect(store.writer.requestKeys.rows(holding: old).isEmpty)
        }
    }

    /// A key past its retention is a new write: the same CREATE again finds its id taken.
    @Test func anExpiredKeyInARowIsANewWrite() throws {
        try withStore { store, _ in
            let (key, id) = (UUID(), UUID())
            let first = try Self.keyedWrite(store, key, id: id, title: "soon old")
            #expect(try Self.keyedWrite(store, key, id: id, title: "soon old") == first)
            // The row made just past the retention ago.
            try Self.age(store, by: store.core.configuration.requestKeyRetentionMs + 1)
            let taken = #expect(throws: LarderError.self) { _ = try Self.keyedWrite(store, key, id: id, title: "soon old") }
            #expect(taken?.status == .conflict)
        }
    }
}

// The index's tables by key, for these tests: the store hashes a key once per write (`RequestKeyIndex.hash`) and
// hands the hash to both.
extension KeyFilter {
    fileprivate mutating func insert(_ key: UUID) { insert(RequestKeyIndex.hash(key)) }
    fileprivate func mayContain(_ key: UUID) -> Bool { mayContain(RequestKeyIndex.hash(key)) }
}

extension RowKeys {
    fileprivate mutating func insert(_ key: UUID, row: Int64, keepingFrom from: Int64) {
        insert(RequestKeyIndex.hash(key), row: row, keepingFrom: from)
    }
    fileprivate func rows(holding key: UUID) -> [Int64] { rows(holding: RequestKeyIndex.hash(key)) }
}

extension RequestKeyIndex {
    fileprivate func mayHold(_ key: UUID) -> Bool { find(Self.hash(key)).inTable }
    fileprivate func rows(holding key: UUID) -> [Int64] { find(Self.hash(key)).rows }
}
