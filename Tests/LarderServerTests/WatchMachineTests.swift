import Foundation
import LarderStore
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

/// The change feed's pure parts: pushed frames in the state machine, event encoding, options.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct WatchMachineTests {
    typealias Machine = ConnectionStateMachine
    typealias Support = ConnectionStateMachineTests

    @Test func pushesAreFramedWithThePushFlagOnlyWhenReady() throws {
        var early = Machine(configuration: .init(), now: 0)
        #expect(!early.canPush)
        #expect(early.push(opcode: .event, requestID: 1, json: Array("{}".utf8)).isEmpty)

        var machine = Support.ready()
        let actions = machine.push(opcode: .event, requestID: 7, json: Array(#"{"subscription":7}"#.utf8))
        #expect(actions == [.flush])
        let (frames, _) = Support.drain(&machine)
        #expect(frames.count == 1)
        #expect(frames[0].opcode == .event && frames[0].requestID == 7 && frames[0].isPush && !frames[0].isResponse)

        // Once closing (here: the peer closed its side), nothing more is pushed.
        _ = machine.readEOF(now: 0)
        #expect(!machine.canPush)
        #expect(machine.push(opcode: .event, requestID: 7, json: []).isEmpty)
    }

    @Test func aWatchingConnectionIsNotIdle() {
        var machine = Support.ready(.init(limits: Limits(idleTimeoutMs: 1000)))
        machine.isWatching = true
        #expect(Support.closeReason(machine.timerFired(now: 5000)) == nil)
        machine.isWatching = false
        #expect(machine.timerFired(now: 9000).contains(.record(Opcode(rawValue: 0), .deadlineExceeded, requestID: nil)))
    }

    @Test func eventBodiesMatchTheWireModel() throws {
        let record = StoredRecord(
            id: UUID(), rev: 2, createdAt: 1_795_998_388_123, updatedAt: 1_795_998_421_456,
            data: Array(#"{"item":"鮪魚飯糰","price":35}"#.utf8))
        let blob = BlobInfo(
            id: UUID(), size: 3, sha256: String(repeating: "b", count: 64), contentType: "image/jpeg", width: 1,
            height: 2, createdAtMs: 5, attachedTo: BlobAttachment(collection: "items", id: record.id))
        let entries = [
            ChangeEntry(seq: 9, kind: .patch, collection: "items", time: 1_795_998_421_456, record: record),
            ChangeEntry(seq: 10, kind: .delete, collection: "items", time: 1_795_998_421_457, record: record),
            ChangeEntry(seq: 11, kind: .blobAttach, collection: "items", time: 1, record: record, blob: blob),
            ChangeEntry(seq: 12, kind: .drop, collection: "items", time: 2, record: nil),
        ]
        let changes = PreparedChanges(entries)
        func event(_ index: Int, idsOnly: Bool = false) throws -> ChangeEvent {
            try ChangeEvent(json: JSONParser.parseObject(changes.event(index, for: 3, idsOnly: idsOnly)))
        }
        let wireRecord = Record(
            id: record.id, rev: 2, createdAtMs: record.createdAt, updatedAtMs: record.updatedAt,
            data: try record.decodedData())
        #expect(
            try event(0)
                == ChangeEvent(
                    subscription: 3, seq: 9, kind: .patch, collection: "items", id: record.id, rev: 2,
                    time: Timestamp.date(1_795_998_421_456), record: wireRecord))
        #expect(try event(0, idsOnly: true).record == nil)
        // Byte for byte what the wire model writes (so the Protocol.md vector is what the server sends).
        #expect(
            changes.event(0, for: 3, idsOnly: false)
                == ChangeEvent(
                    subscription: 3, seq: 9, kind: .patch, collection: "items", id: record.id, rev: 2,
                    time: Timestamp.date(1_795_998_421_456), record: wireRecord
                ).json.bytes)
        let left = try ChangeEvent(json: JSONParser.parseObject(changes.event(0, for: 3, idsOnly: true, matches: false)))
        #expect(!left.matches && left.seq == 9)
        #expect(try event(1) == ChangeEvent(subscription: 3, seq: 10, kind: .delete, collection: "items", id: record.id, rev: 2, time: Timestamp.date(1_795_998_421_457)))
        #expect(try event(2).blob == blob && event(2).record == nil)
        #expect(try event(3) == ChangeEvent(subscription: 3, seq: 12, kind: .drop, collection: "items", time: Timestamp.date(2)))
        let gap = try ChangeEvent(json: JSONParser.parseObject(EventEncoder.gap(subscription: 3, seq: 8)))
        #expect(gap == ChangeEvent(subscription: 3, seq: 8, kind: .gap))
    }

}
