import Dispatch
import Foundation
import LarderSync
import LarderWire
import Testing

@testable import LarderStore

/// A PATCH merged off the writer (`PreparedPatch`) answers, stores and logs exactly what one merged on the writer
/// does, however the document changed between the merge and the write.
@Suite(.timeLimit(.minutes(10))) struct PreparedPatchTests {
    /// A PATCH body merged against `base`, the data the document had when the server read it.
    static func patch(
        _ id: UUID, _ patch: JSONObject, into base: [UInt8], expectedRev: Int64? = nil
    ) throws -> SingleWriteTests.Body {
        let prepared = try PreparedPatch(patch, into: base)
        return SingleWriteTests.w { c throws(LarderError) in
            try c.patch("items", id: id, patch: patch, expectedRev: expectedRev, prepared: prepared)
        }
    }

    static func data(_ record: StoredRecord?) throws -> JSONObject? {
        guard let record else { return nil }
        return try JSONParser.parseObject(record.data)
    }

    /// The last change logged, as WATCH and a replay see it.
    static func lastChange(_ store: SQLiteStore) throws -> ChangeEntry? {
        try store.changes(after: store.lastChangeSeq - 1, collection: nil, limit: 1, maxBytes: 1 << 20).entries.first
    }

    @Test func aPatchMergedAgainstTheCurrentDocumentWritesTheMergedResult() throws {
        try withStore { store, _ in
            let doc = try store.create("items", id: nil, data: ["name": "tea", "tags": ["a": 1, "b": 2]])
            let patch: JSONObject = ["tags": ["b": .null, "c": 3], "qty": 2]
            let results = SingleWriteTests.oneBatch(
                store, [try Self.patch(doc.id, patch, into: doc.data, expectedRev: 1)])
            let record = try #require(SingleWriteTests.record(results[0]))
            #expect(record.rev == 2)
            #expect(try Self.data(record) == ["name": "tea", "tags": ["a": 1, "c": 3], "qty": 2])
            #expect(try store.get("items", id: doc.id) == record)
            let change = try #require(try Self.lastChange(store))
            #expect(change.kind == .patch)
            #expect(change.record == record)
            #expect(change.previous == doc.data)
        }
    }

    /// Another write to the document lands between the merge and the PATCH, in the same group commit: with no
    /// revision named, the PATCH is merged again against what that write left; naming the revision it read, it is
    /// refused with the revision the document is at, and changes nothing.
    @Test func aWriteBetweenTheMergeAndThePatchIsNotLost() throws {
        try withStore { store, _ in
            let doc = try store.create("items", id: nil, data: ["name": "tea", "qty": 1])
            let replace = SingleWriteTests.w { c throws(LarderError) in
                try c.replace("items", id: doc.id, data: ["name": "coffee", "qty": 1], expectedRev: nil)
            }
            let results = SingleWriteTests.oneBatch(
                store,
                [
                    replace, try Self.patch(doc.id, ["qty": 5], into: doc.data),
                    try Self.patch(doc.id, ["qty": 9], into: doc.data, expectedRev: 1),
                ])
            #expect(SingleWriteTests.record(results[0])?.rev == 2)
            let patched = try #require(SingleWriteTests.record(results[1]))
            #expect(patched.rev == 3)
            #expect(try Self.data(patched) == ["name": "coffee", "qty": 5])
            let refused = try #require(SingleWriteTests.refusal(results[2]))
            #expect(refused.status == .conflict && refused.field == "rev")
            if case .failure(let error) = results[2] { #expect(error.details["currentRev"] == .int(3)) }
            #expect(try store.get("items", id: doc.id) == patched)
            let change = try #require(try Self.lastChange(store))
            #expect(change.kind == .patch && change.record == patched)
            #expect(try JSONParser.parseObject(try #require(change.previous)) == ["name": "coffee", "qty": 1])
        }
    }

    /// A document deleted and made again under the same id starts over at revision 1: a PATCH merged against the old
    /// one and naming revision 1 is merged again against the new one.
    @Test func aDocumentMadeAgainIsMergedAgainDespiteTheSameRevision() throws {
        try withStore { store, _ in
            let doc = try store.create("items", id: nil, data: ["name": "old", "keep": true])
            let stale = try Self.patch(doc.id, ["qty": 2], into: doc.data, expectedRev: 1)
            _ = try store.delete("items", id: doc.id, expectedRev: 1)
            let again = try store.create("items", id: doc.id, data: ["name": "new"])
            #expect(again.rev == 1)
            let record = try #require(SingleWriteTests.record(SingleWriteTests.oneBatch(store, [stale])[0]))
            #expect(record.rev == 2)
            #expect(try Self.data(record) == ["name": "new", "qty": 2])
            #expect(try store.get("items", id: doc.id) == record)
        }
    }

    /// The merged result is held to the document limit on the writer, as a PATCH merged there is.
    @Test func aMergedResultOverTheLimitIsRefused() throws {
        let big = String(repeating: "x", count: 600)
        try withStore({ $0.maxDocumentBytes = 512 }) { store, _ in
            let doc = try store.create("items", id: nil, data: ["name": "small"])
            let results = SingleWriteTests.oneBatch(store, [try Self.patch(doc.id, ["text": .string(big)], into: doc.data)])
            let refused = try #require(SingleWriteTests.refusal(results[0]))
            #expect(refused.status == .payloadTooLarge && refused.field == "patch")
            #expect(try store.get("items", id: doc.id) == doc)
        }
    }
}
