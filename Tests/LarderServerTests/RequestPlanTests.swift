import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

/// Where each request runs (`RequestPlan`): decided from the request alone, whether the store's point reads are
/// local, and whether the connection has writes on its lane.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct RequestPlanTests {
    static func frame(_ opcode: Opcode, jsonBytes: Int = 40, binary: [UInt8] = []) -> Frame {
        Frame(opcode: opcode, requestID: 1, json: [UInt8](repeating: 0x20, count: jsonBytes), binary: binary)
    }

    static func plan(
        _ opcode: Opcode, jsonBytes: Int = 40, binary: [UInt8] = [], local: Bool = true, laneIsBusy: Bool = false
    ) -> RequestPlan {
        RequestPlan(
            for: frame(opcode, jsonBytes: jsonBytes, binary: binary), pointReadsAreLocal: local, laneIsBusy: laneIsBusy)
    }

    @Test func pointReadsRunOnTheLoopOnlyWhenTheStoreAnswersThemLocally() {
        #expect(Self.plan(.get) == .inline)
        #expect(Self.plan(.blobHead) == .inline)
        #expect(Self.plan(.get, local: false) == .workPool)
        #expect(Self.plan(.blobHead, local: false) == .workPool)
        // PING needs no store at all.
        #expect(Self.plan(.ping, local: false) == .inline)
    }

    @Test func otherReadsRunOnTheWorkPool() {
        for opcode in [Opcode.search, .list, .count, .group, .getMany, .collections, .blobGet, .blobList, .stats] {
            #expect(Self.plan(opcode) == .workPool, "\(opcode.name)")
        }
    }

    @Test func smallSingleWritesGoStraightToTheWriterUnlessTheLaneHoldsAWrite() {
        for opcode in [Opcode.create, .replace, .patch, .delete] {
            #expect(Self.plan(opcode) == .writer, "\(opcode.name)")
            #expect(Self.plan(opcode, laneIsBusy: true) == .writeLane, "\(opcode.name)")
            #expect(Self.plan(opcode, jsonBytes: RequestPlan.loopWriteBytes) == .writer, "\(opcode.name)")
            #expect(Self.plan(opcode, jsonBytes: RequestPlan.loopWriteBytes + 1) == .writeLane, "\(opcode.name)")
        }
    }

    @Test func otherWritesAndUploadsTakeTheLane() {
        for opcode in [
            Opcode.dropCollection, .index, .blobDelete, .blobUpload, .blobUploadFinish, .blobUploadAbort,
        ] {
            #expect(Self.plan(opcode) == .writeLane, "\(opcode.name)")
        }
        #expect(Self.plan(.blobPut, binary: [1, 2, 3]) == .writeLane)
        #expect(Self.plan(.blobUploadChunk, binary: [1, 2, 3]) == .writeLane)
        // BLOB_UPLOAD_STATUS reads: it does not wait behind the writes.
        #expect(Self.plan(.blobUploadStatus) == .workPool)
    }

    @Test func watchAndBackupHaveTheirOwnPlaces() {
        #expect(Self.plan(.watch) == .watch)
        #expect(Self.plan(.unwatch) == .watch)
        #expect(Self.plan(.backup) == .backup)
        #expect(Self.plan(.backupRead) == .backup)
    }

    @Test func refusalsNeedNoStore() {
        #expect(Self.plan(.event) == .refused)
        #expect(Self.plan(Opcode(rawValue: 0xEE)) == .refused)
        #expect(Self.plan(.get, binary: [1]) == .refused)
        #expect(Self.plan(.create, binary: [1]) == .refused)
        #expect(Router.refusal(Self.frame(.event)).status == .unknownOpcode)
        #expect(Router.refusal(Self.frame(Opcode(rawValue: 0xEE))).status == .unknownOpcode)
        #expect(Router.refusal(Self.frame(.get, binary: [1])).status == .invalidArgument)
    }

    @Test func theLaneIsBusyWhileAWriteOnItIsUnanswered() {
        var lane = LaneWrites()
        #expect(!lane.isBusy)
        lane.handedOut()
        lane.handedOut()
        lane.answered()
        #expect(lane.isBusy)
        lane.answered()
        #expect(!lane.isBusy)
    }
}
