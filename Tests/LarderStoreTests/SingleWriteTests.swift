import Dispatch
import Foundation
import LarderSync
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Writes run without a savepoint of their own (`submitSingleWrite`) must answer and store exactly what the guarded
/// ones did, inside one group commit with others, and a failure they cannot undo alone must take nothing with it.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SingleWriteTests {
    typealias Body = @Sendable (any WriteContext) throws(LarderError) -> StoredRecord?

    /// A body that answers the record it wrote.
    static func w(_ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> StoredRecord) -> Body {
        { (c: any WriteContext) throws(LarderError) -> StoredRecord? in try body(c) }
    }

    /// Submits `bodies` so that they share one group commit: the writer is held by a first job until all are queued.
    static func oneBatch(_ store: SQLiteStore, _ bodies: [Body]) -> [Result<StoredRecord?, LarderError>] {
        let gate = DispatchSemaphore(value: 0)
        let held = DispatchSemaphore(value: 0)
        store.submitWrite({ _ throws(LarderError) in
            held.signal()
            gate.wait()
        }, completion: { _ in })
        held.wait()
        let results = Locked<[Int: Result<StoredRecord?, LarderError>]>([:])
        let group = DispatchGroup()
        for (n, body) in bodies.enumerated() {
            group.enter()
            store.submitSingleWrite(body) { result in
                results.withLock { $0[n] = result }
                group.leave()
            }
        }
        gate.signal()
        group.wait()
        return results.withLock { all in bodies.indices.map { all[$0]! } }
    }

    /// The status a write was refused with, nil when it was acknowledged.
    static func refusal(_ result: Result<StoredRecord?, LarderError>) -> (status: Status, field: String?)? {
        if case .failure(let error) = result { return (error.status, error.field) }
        return nil
    }

    static func record(_ result: Result<StoredRecord?, LarderError>) -> StoredRecord? {
        if case .success(let record) = result { return record }
        return nil
    }

    @Test func refusalsInAGroupCommitLeaveNoTraceAndSpareTheOthers() throws {
        try withStore { store, _ in
            let taken = UUID()
            let kept = try store.create("items", id: taken, data: ["name": "first"])
            let gone = try store.create("items", id: nil, data: ["name": "to delete"])
            let seqBefore = store.lastChangeSeq
            let fresh = UUID()
            var bodies: [Body] = []
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.create("items", id: taken, data: ["name": "again"])
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.create("items", id: fresh, data: ["name": "new"])
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.patch("items", id: taken, patch: ["name": "stale"], expectedRev: 7)
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.replace("items", id: UUID(), data: ["name": "nobody"], expectedRev: nil)
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.patch("items", id: taken, patch: ["name": "patched"], expectedRev: 1)
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                let deleted = try c.delete("items", id: gone.id, expectedRev: 1)
                return StoredRecord(id: gone.id, rev: deleted.rev, createdAt: 0, updatedAt: 0, data: [])
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.create("brand-new", id: nil, data: ["name": "in a new collection"])
            })
            let results = SingleWriteTests.oneBatch(store, bodies)
            #expect(SingleWriteTests.refusal(results[0])?.status == .conflict)
            #expect(SingleWriteTests.refusal(results[0])?.field == "id")
            #expect(SingleWriteTests.record(results[1])?.id == fresh)
            #expect(SingleWriteTests.refusal(results[2])?.status == .conflict)
            #expect(SingleWriteTests.refusal(results[2])?.field == "rev")
            #expect(SingleWriteTests.refusal(results[3])?.status == .notFound)
            #expect(SingleWriteTests.record(results[4])?.rev == 2)
            #expect(SingleWriteTests.record(results[5])?.rev == 1)
            #expect(SingleWriteTests.record(results[6])?.rev == 1)

            // What the refusals would have written is nowhere: the document, its revision, the change log.
            let now = try store.get("items", id: taken)
            #expect(now.rev == 2 && now.createdAt == kept.createdAt)
            #expect(try JSONParser.parseObject(now.data)["name"] == "patched")
            expectError(.notFound) { _ = try store.get("items", id: gone.id) }
            let log = try store.changes(after: seqBefore, collection: nil, limit: 100, maxBytes: 1 << 20).entries
            #expect(log.map(\.kind) == [.create, .patch, .delete, .create])
            #expect(log.map(\.seq) == Array(seqBefore + 1...seqBefore + 4))
            #expect(store.lastChangeSeq == seqBefore + 4)
            #expect(try store.collections().map(\.name) == ["brand-new", "items"])
        }
    }

    @Test func aFailureAfterARowChangedRollsTheWholeGroupCommitBack() throws {
        try withStore { store, _ in
            let taken = try store.create("items", id: nil, data: ["name": "first"])
            let seqBefore = store.lastChangeSeq
            let countBefore = try store.count("items", filter: nil, text: nil)
            // Misuse on purpose: a body that writes and then fails is what an I/O error halfway looks like.
            var bodies: [Body] = []
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.create("items", id: nil, data: ["name": "innocent"])
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                _ = try c.create("items", id: nil, data: ["name": "half"])
                return try c.create("items", id: taken.id, data: ["name": "clash"])
            })
            bodies.append(SingleWriteTests.w { c throws(LarderError) in
                try c.create("other", id: nil, data: ["name": "innocent too"])
            })
            let results = SingleWriteTests.oneBatch(store, bodies)
            // Nothing of the batch was acknowledged: each write is answered that it must be retried.
            #expect(results.map { SingleWriteTests.refusal($0)?.status } == [.unavailable, .unavailable, .unavailable])
            #expect(try store.count("items", filter: nil, text: nil) == countBefore)
            #expect(store.lastChangeSeq == seqBefore)
            #expect(try store.collections().map(\.name) == ["items"])
            // The writer goes on: the next write commits, and a collection the rolled-back batch made is made again.
            let after = try store.create("other", id: nil, data: ["name": "later"])
            #expect(try store.get("other", id: after.id) == after)
            #expect(store.lastChangeSeq == seqBefore + 1)
        }
    }

    @Test func aDroppedCollectionIsMadeAgainByTheNextCreate() throws {
        try withStore { store, _ in
            _ = try store.create("items", id: nil, data: ["name": "first"])
            #expect(try store.dropCollection("items").documents == 1)
            #expect(try store.collections().isEmpty)
            let again = try store.create("items", id: nil, data: ["name": "second"])
            #expect(try store.collections().map(\.name) == ["items"])
            #expect(try store.get("items", id: again.id) == again)
        }
    }
}
