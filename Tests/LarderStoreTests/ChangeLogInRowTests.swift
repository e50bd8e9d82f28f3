import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// A document's create event lives in its own row (`createSeq`) until the row first changes or goes; the change log
/// a reader sees is the same as when every event had a row of its own in `changes`.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ChangeLogInRowTests {
    static func everything(_ store: SQLiteStore, after seq: Int64 = 0, collection: String? = nil) throws
        -> [ChangeEntry]
    {
        try store.changes(after: seq, collection: collection, limit: 10_000, maxBytes: 1 << 30).entries
    }

    @Test func createsInRowsAndEventsInTheLogReplayInOrder() throws {
        try withStore { store, _ in
            let a = try store.create("items", id: nil, data: ["name": "a"])
            let b = try store.create("other", id: nil, data: ["name": "b"])
            let c = try store.create("items", id: nil, data: ["name": "c"])
            _ = try store.patch("items", id: a.id, patch: ["name": "a2"], expectedRev: 1)
            _ = try store.replace("items", id: a.id, data: ["name": "a3"], expectedRev: 2)
            _ = try store.delete("items", id: c.id, expectedRev: 1)
            let all = try ChangeLogInRowTests.everything(store)
            #expect(all.map(\.seq) == [1, 2, 3, 4, 5, 6])
            #expect(all.map(\.kind) == [.create, .create, .create, .patch, .replace, .delete])
            // Each create carries the document as it was created, though the row has changed (or is gone) since.
            #expect(all[0].record?.data == Array(#"{"name":"a"}"#.utf8) && all[0].record?.rev == 1)
            #expect(all[2].record?.data == Array(#"{"name":"c"}"#.utf8))
            #expect(all[3].previous == Array(#"{"name":"a"}"#.utf8))
            #expect(try ChangeLogInRowTests.everything(store, after: 2, collection: "items").map(\.seq) == [3, 4, 5, 6])
            // A closure, not `\.record?.id`: that optional-chained key path makes the Swift runtime's projection
            // memcpy overlapping ranges, which AddressSanitizer reports.
            #expect(try ChangeLogInRowTests.everything(store, collection: "other").map { $0.record?.id } == [b.id])
            #expect(store.lastChangeSeq == 6)
            #expect(try store.stats().changes == 6)
            // Pages stop at their count and go on where they stopped.
            let first = try store.changes(after: 0, collection: nil, limit: 4, maxBytes: 1 << 20)
            #expect(first.entries.map(\.seq) == [1, 2, 3, 4] && first.more && first.lastSeq == 6)
            // A dropped collection's creates stay in the log, before its drop.
            _ = try store.dropCollection("other")
            let afterDrop = try ChangeLogInRowTests.everything(store, collection: "other")
            #expect(afterDrop.map(\.kind) == [.create, .drop] && afterDrop.first?.record?.id == b.id)
        }
    }

    @Test func numbersGoOnAfterARestartAndPruningPassesCreatesInRows() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-inrow-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            for n in 0..<5 { _ = try store.create("items", id: nil, data: ["n": .int(Int64(n))]) }
        }
        try withStore({
            $0.dataDirectory = directory
            $0.changeRetentionEvents = 3
        }) { store, _ in
            #expect(store.lastChangeSeq == 5)
            for n in 5..<10 { _ = try store.create("items", id: nil, data: ["n": .int(Int64(n))]) }
            let page = try store.changes(after: 0, collection: nil, limit: 100, maxBytes: 1 << 20)
            #expect(page.lastSeq == 10)
            // Pruning left the newest three (it runs as the writer commits); the log answers from past what it passed.
            #expect(page.prunedThrough == 7)
            #expect(page.entries.map(\.seq) == Array((page.prunedThrough + 1)...10))
            #expect(try store.stats().changes == page.entries.count)
        }
    }

    @Test func aDataDirectoryOfTheOldSchemaKeepsItsDocumentsAndLog() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-v8-\(UUID().wireString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let kept = UUID()
        let patched = UUID()
        do {
            // The schema before create events moved into the rows (migration 8), written as that writer wrote.
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.execute("PRAGMA journal_mode=WAL")
            try SQLiteSchema.migrate(db, trigram: false, through: 8)
            // Written just now: older events would fall to the log's retention by age at the first commit.
            let t = nowMillis()
            try db.run("INSERT INTO collections(name, createdAt) VALUES ('items', ?1)", [.int(t)])
            for (id, data) in [(kept, #"{"n":1}"#), (patched, #"{"n":2}"#)] {
                try db.run(
                    "INSERT INTO documents(collection, id, rev, createdAt, updatedAt, data, search) "
                        + "VALUES ('items', ?1, 1, ?3, ?3, ?2, '')", [.text(id.wireString), .text(data), .int(t)])
                try db.run(
                    "INSERT INTO changes(collection, kind, time, id, rev, createdAt, updatedAt, data) "
                        + "VALUES ('items', 'create', ?3, ?1, 1, ?3, ?3, ?2)", [.text(id.wireString), .text(data), .int(t)])
            }
            try db.run("UPDATE documents SET rev = 2, data = '{\"n\":3}' WHERE id = ?1", [.text(patched.wireString)])
            try db.run(
                "INSERT INTO changes(collection, kind, time, id, rev, createdAt, updatedAt, data, previous) "
                    + "VALUES ('items', 'patch', ?2, ?1, 2, ?2, ?2, '{\"n\":3}', '{\"n\":2}')",
                [.text(patched.wireString), .int(t)])
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            #expect(try store.get("items", id: kept).data == Array(#"{"n":1}"#.utf8))
            #expect(try store.get("items", id: patched).rev == 2)
            #expect(store.lastChangeSeq == 3)
            var log = try ChangeLogInRowTests.everything(store)
            #expect(log.map(\.kind) == [.create, .create, .patch] && log.map(\.seq) == [1, 2, 3])
            // New events follow the old ones; an old document's create is already in the log, and stays once.
            let fresh = try store.create("items", id: nil, data: ["n": 4])
            _ = try store.patch("items", id: kept, patch: ["n": 5], expectedRev: 1)
            _ = try store.patch("items", id: fresh.id, patch: ["n": 6], expectedRev: 1)
            log = try ChangeLogInRowTests.everything(store)
            #expect(log.map(\.seq) == [1, 2, 3, 4, 5, 6])
            #expect(log.map(\.kind) == [.create, .create, .patch, .create, .patch, .patch])
            #expect(log[3].record?.data == Array(#"{"n":4}"#.utf8) && log[3].record?.id == fresh.id)
            #expect(try store.stats().changes == 6)
            #expect(try store.integrityCheck() == "ok")
        }
    }
}
