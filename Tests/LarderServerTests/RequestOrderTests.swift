import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

/// One connection's order (Protocol.md section 2.3), in the state machine: runs of reads, or of writes, go out
/// together; a request of the other kind waits for the run before it; request ids are unique in flight.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct RequestOrderTests {
    typealias Machine = ConnectionStateMachine
    typealias Support = ConnectionStateMachineTests

    static let x = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"

    static func bytes(_ opcode: Opcode, _ id: UInt32) -> [UInt8] {
        let json: JSONObject =
            switch opcode {
            case .create: ["collection": "t", "id": .string(x), "data": ["v": 0]]
            case .patch: ["collection": "t", "id": .string(x), "patch": ["v": 1]]
            case .search: ["collection": "t"]
            case .ping: [:]
            default: ["collection": "t", "id": .string(x)]
            }
        return Support.frameBytes(opcode, id: id, json: json)
    }

    static func ok(_ opcode: Opcode, _ id: UInt32) -> Reply { Reply(opcode: opcode, requestID: id, json: []) }

    static func ids(_ actions: [Machine.Action]) -> [UInt32] { Support.executed(actions).map(\.requestID) }

    @Test func readsWithNoWritePendingRunAtOnce() {
        var machine = Support.ready()
        let actions = Support.feed(&machine, Self.bytes(.search, 2) + Self.bytes(.get, 3) + Self.bytes(.ping, 4))
        #expect(Self.ids(actions) == [2, 3, 4])
    }

    @Test func aReadAfterAWriteWaitsForItsAnswer() {
        var machine = Support.ready()
        // CREATE, PATCH, PATCH, GET: the writes go out at once, in order; the GET waits.
        let stream = Self.bytes(.create, 2) + Self.bytes(.patch, 3) + Self.bytes(.patch, 4) + Self.bytes(.get, 5)
        #expect(Self.ids(Support.feed(&machine, stream)) == [2, 3, 4])
        #expect(Self.ids(machine.requestCompleted(Self.ok(.create, 2), now: 0)).isEmpty)
        #expect(Self.ids(machine.requestCompleted(Self.ok(.patch, 3), now: 0)).isEmpty)
        let actions = machine.requestCompleted(Self.ok(.patch, 4), now: 0)
        #expect(Self.ids(actions) == [5])
        // The writes' answers were queued before the GET was handed out.
        #expect(Support.drain(&machine).frames.map(\.requestID) == [2, 3, 4])
        #expect(machine.inFlight == 1)
    }

    @Test func runsOfOneKindGoOutTogether() {
        var machine = Support.ready()
        // W2 W3 | R4 R5 | W6 | R7: each run waits for the one before it to be answered.
        let stream =
            Self.bytes(.patch, 2) + Self.bytes(.delete, 3) + Self.bytes(.get, 4) + Self.bytes(.search, 5)
            + Self.bytes(.create, 6) + Self.bytes(.get, 7)
        #expect(Self.ids(Support.feed(&machine, stream)) == [2, 3])
        // Answers in any order within a run; the next run goes out with the last of them.
        #expect(Self.ids(machine.requestCompleted(Self.ok(.delete, 3), now: 0)).isEmpty)
        #expect(Self.ids(machine.requestCompleted(Self.ok(.patch, 2), now: 0)) == [4, 5])
        #expect(Self.ids(machine.requestCompleted(Self.ok(.search, 5), now: 0)).isEmpty)
        #expect(Self.ids(machine.requestCompleted(Self.ok(.get, 4), now: 0)) == [6])
        #expect(Self.ids(machine.requestCompleted(Self.ok(.create, 6), now: 0)) == [7])
        #expect(machine.inFlight == 1)
    }

    @Test func aWriteWaitsForTheReadsSentBeforeIt() {
        var machine = Support.ready()
        // A slow SEARCH, a GET, then a write: the write must not change what they read.
        let stream = Self.bytes(.search, 2) + Self.bytes(.get, 3) + Self.bytes(.patch, 4) + Self.bytes(.get, 5)
        #expect(Self.ids(Support.feed(&machine, stream)) == [2, 3])
        #expect(Self.ids(machine.requestCompleted(Self.ok(.get, 3), now: 0)).isEmpty)
        #expect(Self.ids(machine.requestCompleted(Self.ok(.search, 2), now: 0)) == [4])
        #expect(Self.ids(machine.requestCompleted(Self.ok(.patch, 4), now: 0)) == [5])
    }

    @Test func aRefusedWriteEndsItsRunLikeAnyOther() {
        var machine = Support.ready()
        // W2 W3 R4. W3 is refused before it reaches the store and answered first: R4 still waits for W2.
        let stream = Self.bytes(.patch, 2) + Self.bytes(.delete, 3) + Self.bytes(.get, 4)
        #expect(Self.ids(Support.feed(&machine, stream)) == [2, 3])
        let refused = Reply(opcode: .delete, requestID: 3, error: LarderError(.invalidArgument, "bad"))
        #expect(Self.ids(machine.requestCompleted(refused, now: 0)).isEmpty)
        #expect(Self.ids(machine.requestCompleted(Self.ok(.patch, 2), now: 0)) == [4])
        _ = machine.requestCompleted(Self.ok(.get, 4), now: 0)
        // Nothing is in flight any more: the next request of either kind runs at once.
        #expect(Self.ids(Support.feed(&machine, Self.bytes(.patch, 5))) == [5])
    }

    @Test func writesBehindWritesAreNeverHeld() {
        var machine = Support.ready()
        let stream = Self.bytes(.create, 2) + Self.bytes(.patch, 3) + Self.bytes(.patch, 4) + Self.bytes(.delete, 5)
        #expect(Self.ids(Support.feed(&machine, stream)) == [2, 3, 4, 5])
    }

    @Test func heldRequestsCountAgainstTheInFlightLimit() {
        var limits = Limits.default
        limits.maxInFlight = 3
        var machine = Support.ready(.init(limits: limits))
        let stream = Self.bytes(.patch, 2) + Self.bytes(.get, 3) + Self.bytes(.get, 4) + Self.bytes(.get, 5)
        #expect(Self.ids(Support.feed(&machine, stream)) == [2])
        let (frames, _) = Support.drain(&machine)
        #expect(frames.map(\.requestID) == [5])
        #expect(frames.first?.status == .resourceExhausted)
    }

    @Test func aConnectionClosingAfterAnErrorStillAnswersHeldRequests() {
        var machine = Support.ready()
        _ = Support.feed(&machine, Self.bytes(.patch, 2) + Self.bytes(.get, 3))
        var actions = Support.feed(&machine, [0, 0, 0, 24, 0x58, 0x58])  // bad magic
        #expect(Support.closeReason(actions) == nil, "requests in flight are answered first")
        actions = machine.requestCompleted(Self.ok(.patch, 2), now: 0)
        #expect(Self.ids(actions) == [3])
        actions = machine.requestCompleted(Self.ok(.get, 3), now: 0)
        actions += Support.drain(&machine).actions
        #expect(Support.closeReason(actions) == .protocolError(.protocolError))
    }

    @Test func anIdInFlightCannotBeReused() {
        var machine = Support.ready()
        #expect(Self.ids(Support.feed(&machine, Self.bytes(.search, 7))) == [7])
        let actions = Support.feed(&machine, Self.bytes(.get, 7))
        #expect(Self.ids(actions).isEmpty, "the second request with id 7 is not run")
        #expect(actions.contains(.pauseReading))
        var (frames, _) = Support.drain(&machine)
        #expect(frames.count == 1)
        #expect(frames[0].status == .protocolError)
        #expect(frames[0].requestID == 0 && frames[0].opcode.rawValue == 0, "an unprompted error: opcode 0, id 0")
        #expect(frames[0].replyText.contains("request id 7 is already in flight"))
        // The first request with id 7 is still answered, then the connection ends.
        var after = machine.requestCompleted(Self.ok(.search, 7), now: 0)
        let drained = Support.drain(&machine)
        frames = drained.frames
        after += drained.actions
        #expect(frames.map(\.requestID) == [7] && frames[0].opcode == .search && frames[0].status == .ok)
        #expect(Support.closeReason(after) == .protocolError(.protocolError))
    }

    @Test func anIdMayBeUsedAgainOnceAnswered() {
        var machine = Support.ready()
        #expect(Self.ids(Support.feed(&machine, Self.bytes(.get, 7))) == [7])
        _ = machine.requestCompleted(Self.ok(.get, 7), now: 0)
        #expect(Self.ids(Support.feed(&machine, Self.bytes(.get, 7))) == [7])
    }

    /// Ids in flight are kept in a short list, then (past `RequestSizes.listLimit`) in a dictionary: a reused id is
    /// refused either way, and ids answered out of order are free again.
    @Test(arguments: [4, RequestSizes.listLimit + 8])
    func idsInFlightAreTrackedHoweverManyThereAre(inFlight: Int) {
        var machine = Support.ready()
        let ids = (0..<UInt32(inFlight)).map { $0 * 3 + 1 }
        #expect(Self.ids(Support.feed(&machine, ids.flatMap { Self.bytes(.get, $0) })) == ids)
        // Answered out of order: the last, then every other one from the first.
        var answered = [ids.last!] + stride(from: 0, to: ids.count - 1, by: 2).map { ids[$0] }
        for id in answered { _ = machine.requestCompleted(Self.ok(.get, id), now: 0) }
        _ = Support.drain(&machine)
        #expect(machine.inFlight == ids.count - answered.count)
        #expect(Self.ids(Support.feed(&machine, answered.flatMap { Self.bytes(.get, $0) })) == answered)
        answered = []
        let stillInFlight = ids[1]
        let actions = Support.feed(&machine, Self.bytes(.get, stillInFlight))
        #expect(Self.ids(actions).isEmpty, "id \(stillInFlight) is still in flight")
        let (frames, _) = Support.drain(&machine)
        #expect(frames.contains { $0.status == .protocolError && $0.replyText.contains("already in flight") })
    }

    @Test func requestSizesMoveToATableAndBack() {
        var sizes = RequestSizes()
        let count = UInt32(RequestSizes.listLimit * 2)
        let inserted = (0..<count).map { sizes.insert($0, Int($0) + 10) }
        #expect(inserted.allSatisfy { $0 })
        let duplicates = [sizes.insert(0, 1), sizes.insert(count - 1, 1)]
        #expect(duplicates == [false, false], "duplicates refused in the table")
        let removed = (0..<count).reversed().map { sizes.remove($0) }
        #expect(removed == (0..<count).reversed().map { Int($0) + 10 })
        let absent = sizes.remove(0)
        #expect(absent == nil)
        let again = [sizes.insert(5, 1), sizes.insert(5, 2)]
        #expect(again == [true, false], "back to a list, duplicates still refused")
        let last = sizes.remove(5)
        #expect(last == 1)
    }

    @Test func requestIDZeroIsAnOrdinaryID() {
        var machine = Support.ready()
        #expect(Self.ids(Support.feed(&machine, Self.bytes(.get, 0))) == [0])
    }

    @Test func aRequestWithAStatusIsRefusedAndTheConnectionStaysOpen() throws {
        var machine = Support.ready()
        let frame = Frame(opcode: .get, requestID: 9, status: .notFound, json: (["collection": "t"] as JSONObject).bytes)
        let actions = Support.feed(&machine, FrameEncoder().encode(frame))
        #expect(Self.ids(actions).isEmpty)
        let (frames, _) = Support.drain(&machine)
        #expect(frames.map(\.requestID) == [9])
        #expect(frames[0].status == .invalidArgument)
        #expect(frames[0].replyText.contains("status 0"))
        #expect(Self.ids(Support.feed(&machine, Self.bytes(.get, 10))) == [10], "still open")
    }
}

extension Frame {
    fileprivate var replyText: String { String(decoding: json, as: UTF8.self) }
}
