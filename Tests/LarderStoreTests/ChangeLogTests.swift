import Dispatch
import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore
import LarderSync

/// The change log behind WATCH: one entry per committed write, in commit order, durable, pruned by count and age.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ChangeLogTests {
    /// Collects what the listener hears.
    final class Heard: Sendable {
        let entries = Locked<[ChangeEntry]>([])
        func add(_ batch: [ChangeEntry]) { entries.withLock { $0 += batch } }
        var all: [ChangeEntry] { entries.withLock { $0 } }
    }

    func everything(_ store: AnyStore, collection: String? = nil) throws -> [ChangeEntry] {
        try store.changes(after: 0, collection: collection, limit: 10_000, maxBytes: 1 << 30).entries
    }

    @Test(arguments: StoreKind.allCases) func everyKindOfWriteIsLoggedOnceInOrder(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let heard = Heard()
            store.addChangeListener { heard.add($0) }
            #expect(store.lastChangeSeq == 0)
            let a = try store.create("items", id: nil, data: ["item": "茶葉蛋", "price": 13])
            let b = try store.replace("items", id: a.id, data: ["item": "茶葉蛋", "price": 15], expectedRev: 1)
            let c = try store.patch("items", id: a.id, patch: ["discount": true], expectedRev: nil)
            let jpeg = try fixture("rocket.jpg")
            let attached = try store.blobPut(
                id: nil, bytes: jpeg, expectedSHA256: nil, attachTo: BlobAttachment(collection: "items", id: a.id))
            _ = try store.blobPut(id: nil, bytes: jpeg, expectedSHA256: nil, attachTo: nil)  // in no collection
            try store.blobDelete(attached.id)
            _ = try store.createIndex("items", field: try FieldPath("price"))  // not a change of data
            // Refused writes log nothing.
            expectError(.conflict) { _ = try store.create("items", id: a.id, data: [:]) }
            expectError(.notFound) { _ = try store.patch("items", id: UUID(), patch: [:], expectedRev: nil) }
            expectError(.conflict) { _ = try store.delete("items", id: a.id, expectedRev: 1) }
            let deleted = try store.delete("items", id: a.id, expectedRev: nil)
            _ = try store.create("todos", id: nil, data: ["title": "Buy milk"])
            _ = try store.dropCollection("todos")

            let log = try everything(store)
            #expect(log.map(\.kind) == [.create, .replace, .patch, .blobAttach, .blobDelete, .delete, .create, .drop])
            #expect(log.map(\.seq) == Array(1...8))
            #expect(log.map(\.collection) == ["items", "items", "items", "items", "items", "items", "todos", "todos"])
            #expect(log[0].record == a && log[1].record == b && log[2].record == c)
            // A replace or patch keeps what it replaced; the others need no before-image.
            #expect(log[0].previous == nil && log[1].previous == a.data && log[2].previous == b.data)
            #expect(log[5].previous == nil)
            #expect(log[3].blob == attached && log[3].record == c)  // the document the blob went to
            #expect(log[4].blob?.id == attached.id && log[4].record?.id == a.id)
            #expect(log[5].record?.rev == deleted.rev && log[5].record?.data == c.data)  // the last data, for filters
            #expect(log[7].record == nil)
            #expect(heard.all == log)
            #expect(store.lastChangeSeq == 8)
            #expect(try store.changes(after: 0, collection: "todos", limit: 100, maxBytes: 1 << 20).entries.map(\.seq)
                == [7, 8])
            let stats = try store.stats()
            #expect(stats.changes == 8 && stats.lastChangeSeq == 8)
        }
    }

    @Test(arguments: StoreKind.allCases) func concurrentWritersAreHeardInCommitOrder(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let heard = Heard()
            store.addChangeListener { batch in
                // The listener runs after COMMIT: the log already holds the batch, and lastChangeSeq covers it.
                #expect(store.lastChangeSeq >= batch.last!.seq)
                heard.add(batch)
            }
            DispatchQueue.concurrentPerform(iterations: 8) { thread in
                for n in 0..<25 {
                    _ = try? store.create("c\(thread % 2)", id: nil, data: ["n": .int(Int64(n))])
                }
            }
            let log = try everything(store)
            #expect(log.count == 200)
            #expect(heard.all.map(\.seq) == log.map(\.seq))
            #expect(zip(log, log.dropFirst()).allSatisfy { $0.seq < $1.seq })
        }
    }

    /// A listener that holds its store (as a server's does, through its shards) must not keep the store alive once it
    /// is closed: a store opened and closed again and again would leak each time (found by LeakSanitizer).
    @Test func aClosedStoreLetsGoOfListenersThatHoldIt() throws {
        final class Watcher: @unchecked Sendable {
            weak var store: SQLiteStore?
        }
        let watcher = Watcher()
        try withStore { store, _ in
            watcher.store = store
            store.addChangeListener { _ in _ = store.lastChangeSeq }
            _ = try store.create("items", id: nil, data: ["n": 1])
        }
        // The writer's and the index's queues may hold the store a moment longer: a condition, not a moment.
        let deadline = Date().addingTimeInterval(120)
        while watcher.store != nil && Date() < deadline { usleep(10_000) }
        #expect(watcher.store == nil, "the closed store is still alive")
    }

    @Test(arguments: StoreKind.allCases) func pagesStopAtTheirLimitOrBudget(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            for n in 0..<10 {
                _ = try store.create(n % 2 == 0 ? "even" : "odd", id: nil, data: ["pad": .string(String(repeating: "x", count: 1000))])
            }
            var page = try store.changes(after: 0, collection: nil, limit: 4, maxBytes: 1 << 20)
            #expect(page.entries.map(\.seq) == [1, 2, 3, 4] && page.more && page.lastSeq == 10 && page.prunedThrough == 0)
            page = try store.changes(after: 8, collection: nil, limit: 4, maxBytes: 1 << 20)
            #expect(page.entries.map(\.seq) == [9, 10] && !page.more)
            page = try store.changes(after: 0, collection: "odd", limit: 100, maxBytes: 2500)
            #expect(page.entries.map(\.seq) == [2, 4] && page.more)  // stops once past the budget
            page = try store.changes(after: 0, collection: nil, limit: 100, maxBytes: 1)
            #expect(page.entries.count == 1 && page.more)  // a page holds at least one change
            page = try store.changes(after: 10, collection: nil, limit: 100, maxBytes: 1 << 20)
            #expect(page.entries.isEmpty && !page.more && page.lastSeq == 10)
            expectError(.invalidArgument, field: "collection") {
                _ = try store.changes(after: 0, collection: "no such", limit: 1, maxBytes: 1)
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func retentionByCountKeepsTheNewest(_ kind: StoreKind) throws {
        try withStore(kind, { $0.changeRetentionEvents = 5 }) { store in
            for n in 0..<20 { _ = try store.create("items", id: nil, data: ["n": .int(Int64(n))]) }
            let page = try store.changes(after: 0, collection: nil, limit: 100, maxBytes: 1 << 20)
            #expect(page.entries.map(\.seq) == Array(16...20))
            #expect(page.prunedThrough == 15 && page.lastSeq == 20)
        }
    }

    @Test(arguments: StoreKind.allCases) func retentionByAgeDropsOldChanges(_ kind: StoreKind) throws {
        try withStore(kind, { $0.changeRetentionMs = 300 }) { store in
            _ = try store.create("items", id: nil, data: ["n": 1])
            _ = try store.create("items", id: nil, data: ["n": 2])
            Thread.sleep(forTimeInterval: 1.1)  // age pruning runs at most once a second
            _ = try store.create("items", id: nil, data: ["n": 3])
            let page = try store.changes(after: 0, collection: nil, limit: 100, maxBytes: 1 << 20)
            #expect(page.entries.map(\.seq) == [3])
            #expect(page.prunedThrough == 2)
        }
    }

    @Test func theLogAndItsNumbersSurviveAReopen() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-log-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = StoreConfiguration(dataDirectory: directory)
        configuration.changeRetentionEvents = 3
        do {
            let store = try SQLiteStore(configuration: configuration)
            for n in 0..<6 { _ = try store.create("items", id: nil, data: ["n": .int(Int64(n))]) }
            store.close()
        }
        let store = try SQLiteStore(configuration: configuration)
        defer { store.close() }
        #expect(store.lastChangeSeq == 6)
        #expect(try everything(store).map(\.seq) == [4, 5, 6])
        _ = try store.create("items", id: nil, data: ["n": 7])
        // A number is never reused, even once every earlier change was pruned.
        #expect(try everything(store).map(\.seq) == [5, 6, 7])
    }

    @Test func aVersionOneDatabaseGainsTheLogAndKeepsItsDocuments() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-v1-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let id = UUID()
        do {
            // The schema as the first release wrote it.
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.execute("PRAGMA journal_mode=WAL")
            try db.execute(
                "CREATE TABLE larder_migrations(version INTEGER PRIMARY KEY, appliedAt INTEGER NOT NULL)")
            guard case .sql(let first) = SQLiteSchema.migrations[0] else {
                throw LarderError(.internal, "migration 1 is SQL")
            }
            try db.execute(first)
            try db.execute("INSERT INTO larder_migrations(version, appliedAt) VALUES (1, 0)")
            try db.run(
                "INSERT INTO documents(collection, id, rev, createdAt, updatedAt, data, search) "
                    + "VALUES ('items', ?1, 1, 0, 0, '{\"n\":1}', '')", [.text(id.wireString)])
            try db.execute("INSERT INTO collections(name, createdAt) VALUES ('items', 0)")
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            #expect(try store.get("items", id: id).data == Array(#"{"n":1}"#.utf8))
            #expect(try store.lastChangeSeq == 0 && everything(store).isEmpty)
            _ = try store.patch("items", id: id, patch: ["n": 2], expectedRev: 1)
            #expect(try everything(store).map(\.kind) == [.patch])
        }
    }

    @Test(arguments: StoreKind.allCases) func aRolledBackWriteInABatchLogsNothing(_ kind: StoreKind) async throws {
        try await withStoreAsync(kind) { store in
            let existing = try store.create("items", id: nil, data: [:])
            async let good: StoredRecord = store.write { (context) throws(LarderError) in
                try context.create("items", id: nil, data: ["ok": true])
            }
            async let bad: StoredRecord = store.write { (context) throws(LarderError) in
                _ = try context.create("items", id: nil, data: ["logged": "then rolled back"])
                return try context.create("items", id: existing.id, data: [:])  // CONFLICT undoes the whole body
            }
            _ = try await good
            let refused: LarderError?
            do {
                _ = try await bad
                refused = nil
            } catch {
                refused = error as? LarderError
            }
            #expect(refused?.status == .conflict)
            #expect(try everything(store).map { $0.record?.data } == [Array("{}".utf8), Array(#"{"ok":true}"#.utf8)])
        }
    }
}
