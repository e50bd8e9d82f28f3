import Foundation
import LarderStore
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

/// The change feed of one connection as a pure state machine: WATCH and UNWATCH, live pushes, the subscription
/// buffer's bound, the catch-up from the log and its resync, the role limits. No socket, no loop, no clock.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct WatchStateMachineTests {
    typealias Machine = WatchStateMachine

    static let roomy = Machine.Output(canPush: true, bufferedBytes: 0)

    static func watchFrame(_ request: WatchRequest, id: UInt32 = 1) -> Frame {
        Frame(opcode: .watch, requestID: id, json: request.json.bytes)
    }

    static func entry(_ seq: Int64, _ collection: String = "items", price: Int = 10, kind: ChangeKind = .create)
        -> ChangeEntry
    {
        let record = StoredRecord(
            id: UUID(), rev: 1, createdAt: 1, updatedAt: 1, data: Array(#"{"price":\#(price)}"#.utf8))
        return ChangeEntry(seq: seq, kind: kind, collection: collection, time: 1, record: record)
    }

    /// The events pushed, decoded, in order.
    static func pushed(_ actions: [Machine.Action]) throws -> [ChangeEvent] {
        try actions.compactMap { action -> ChangeEvent? in
            guard case .push(_, let json) = action else { return nil }
            return try ChangeEvent(json: JSONParser.parseObject(json))
        }
    }

    static func has(_ actions: [Machine.Action], _ wanted: (Machine.Action) -> Bool) -> Bool {
        actions.contains(where: wanted)
    }

    /// A machine holding one live subscription (id 1) that has seen every change up to `seq`.
    static func watching(
        _ request: WatchRequest = WatchRequest(), seq: Int64 = 5, limits: Limits = .default,
        allowed: Set<String>? = nil
    ) throws -> Machine {
        var machine = Machine(limits: limits)
        let (reply, _) = machine.watch(watchFrame(request), lastChangeSeq: seq, allowed: allowed)
        try #require(reply.status == .ok)
        return machine
    }

    @Test func watchAnswersWithTheSubscriptionAndTheNewestChange() throws {
        var machine = Machine(limits: .default)
        let (reply, actions) = machine.watch(Self.watchFrame(WatchRequest()), lastChangeSeq: 41, allowed: nil)
        #expect(reply.status == .ok && reply.opcode == .watch)
        let response = try WatchResponse(json: JSONParser.parseObject(reply.json))
        #expect(response.subscription == 1 && response.seq == 41)
        #expect(Self.has(actions) { if case .watching(true) = $0 { true } else { false } })
        #expect(Self.has(actions) { if case .started = $0 { true } else { false } })
        #expect(machine.isWatching)

        // A second subscription gets the next id and does not announce watching again.
        let (second, again) = machine.watch(Self.watchFrame(WatchRequest(), id: 2), lastChangeSeq: 41, allowed: nil)
        #expect(try WatchResponse(json: JSONParser.parseObject(second.json)).subscription == 2)
        #expect(!Self.has(again) { if case .watching = $0 { true } else { false } })
    }

    @Test func liveChangesArePushedOnceInCommitOrderAndOlderOnesSkipped() throws {
        var machine = try Self.watching(seq: 5)
        let changes = PreparedChanges([Self.entry(4), Self.entry(6), Self.entry(7)])
        let events = try Self.pushed(machine.deliver(changes, output: Self.roomy))
        #expect(events.map(\.seq) == [6, 7])
        #expect(events.allSatisfy { $0.subscription == 1 })
        // The same batch again (a shard that re-delivers) pushes nothing: each change is handled once.
        #expect(try Self.pushed(machine.deliver(changes, output: Self.roomy)).isEmpty)
        // Nothing is pushed to a connection that cannot take pushes (closing).
        let later = PreparedChanges([Self.entry(8)])
        #expect(machine.deliver(later, output: .init(canPush: false, bufferedBytes: 0)).isEmpty)
    }

    @Test func collectionFilterAndRoleLimitDecideWhatIsPushed() throws {
        let cheap = Filter.compare(try FieldPath("price"), .lt, 50)
        var machine = try Self.watching(WatchRequest(collection: "items", filter: cheap))
        let changes = PreparedChanges([
            Self.entry(6, "items", price: 10), Self.entry(7, "other", price: 10), Self.entry(8, "items", price: 90),
        ])
        #expect(try Self.pushed(machine.deliver(changes, output: Self.roomy)).map(\.seq) == [6])

        // A token limited to `notes` sees nothing of `items`, whatever the subscription asked for.
        var limited = try Self.watching(allowed: ["notes"])
        let mixed = PreparedChanges([Self.entry(6, "items"), Self.entry(7, "notes")])
        #expect(try Self.pushed(limited.deliver(mixed, output: Self.roomy)).map(\.seq) == [7])
    }

    @Test func aFullBufferAsksForRoomFirstThenGapsAndEndsTheSubscription() throws {
        let limits = Limits(maxWatchBufferBytes: 1000)
        var machine = try Self.watching(limits: limits)
        let changes = PreparedChanges([Self.entry(6), Self.entry(7)])

        // Over the bound: the shell is asked to offer the socket what is queued before anything is decided.
        let first = machine.deliver(changes, output: .init(canPush: true, bufferedBytes: 1001))
        #expect(first.count == 1)
        guard case .makeRoom = first.first else { Issue.record("expected makeRoom, got \(first)"); return }

        // The socket took nothing: the subscriber gets a gap at the last change it handled, and the subscription ends.
        let after = machine.continueDelivery(output: .init(canPush: true, bufferedBytes: 1001))
        let events = try Self.pushed(after)
        #expect(events.map(\.kind) == [.gap] && events.first?.seq == 5)
        #expect(Self.has(after) { if case .ended(1) = $0 { true } else { false } })
        #expect(Self.has(after) { if case .watching(false) = $0 { true } else { false } })
        #expect(machine.subscriptions.isEmpty && !machine.isWatching)
    }

    @Test func roomMadeMidBatchLetsTheBatchGoOn() throws {
        var machine = try Self.watching(limits: Limits(maxWatchBufferBytes: 1000))
        let changes = PreparedChanges([Self.entry(6), Self.entry(7)])
        let first = machine.deliver(changes, output: .init(canPush: true, bufferedBytes: 1001))
        guard case .makeRoom = first.last else { Issue.record("expected makeRoom, got \(first)"); return }
        let rest = machine.continueDelivery(output: .init(canPush: true, bufferedBytes: 0))
        #expect(try Self.pushed(rest).map(\.seq) == [6, 7])
        #expect(machine.subscriptions[1]?.lastSeq == 7)
        // Each pushed event is counted against the buffer at its full size: a batch larger than the buffer asks again.
        var small = try Self.watching(limits: Limits(maxWatchBufferBytes: 1000))
        let many = PreparedChanges((6...40).map { Self.entry(Int64($0)) })
        let actions = small.deliver(many, output: Self.roomy)
        guard case .makeRoom = actions.last else { Issue.record("expected makeRoom, got \(actions)"); return }
        let pushedBytes = actions.reduce(0) { total, action in
            if case .push(_, let json) = action { total + Frame.prefixSize + json.count } else { total }
        }
        #expect(pushedBytes > 1000 && pushedBytes < 1000 + 400)
    }

    @Test func unwatchEndsOneSubscriptionAndAnUnknownOneIsNotFound() throws {
        var machine = try Self.watching()
        let unknown = machine.unwatch(
            Frame(opcode: .unwatch, requestID: 2, json: UnwatchRequest(subscription: 9).json.bytes))
        #expect(unknown.0.status == .notFound && unknown.1.isEmpty)
        let (reply, actions) = machine.unwatch(
            Frame(opcode: .unwatch, requestID: 3, json: UnwatchRequest(subscription: 1).json.bytes))
        #expect(reply.status == .ok)
        #expect(Self.has(actions) { if case .ended(1) = $0 { true } else { false } })
        #expect(Self.has(actions) { if case .watching(false) = $0 { true } else { false } })
        #expect(try Self.pushed(machine.deliver(PreparedChanges([Self.entry(6)]), output: Self.roomy)).isEmpty)
    }

    @Test func theSubscriptionLimitAndBadRequestsAreRefused() throws {
        var machine = Machine(limits: Limits(maxWatches: 1))
        #expect(machine.watch(Self.watchFrame(WatchRequest()), lastChangeSeq: 0, allowed: nil).0.status == .ok)
        let (over, actions) = machine.watch(Self.watchFrame(WatchRequest(), id: 2), lastChangeSeq: 0, allowed: nil)
        #expect(over.status == .resourceExhausted && actions.isEmpty)
        let binary = Frame(opcode: .watch, requestID: 3, json: WatchRequest().json.bytes, binary: [1])
        #expect(machine.watch(binary, lastChangeSeq: 0, allowed: nil).0.status == .invalidArgument)
        let badCollection = Self.watchFrame(WatchRequest(collection: ""), id: 4)
        #expect(machine.watch(badCollection, lastChangeSeq: 0, allowed: nil).0.status == .invalidArgument)
        #expect(machine.subscriptions.count == 1)
    }

    @Test func sinceReplaysTheLogPageByPageThenGoesLive() throws {
        var machine = try Self.watching(WatchRequest(since: 2), seq: 9)
        #expect(machine.subscriptions[1]?.state == .catchingUp)
        // Paced by the subscriber: nothing is read while the output is over half the buffer.
        let half = Limits.default.maxWatchBufferBytes / 2
        #expect(machine.continueCatchUps(canPush: true, unsentBytes: half + 1).isEmpty)
        let reads = machine.continueCatchUps(canPush: true, unsentBytes: 0)
        guard case .readLog(let read) = reads.first, reads.count == 1 else { Issue.record("\(reads)"); return }
        #expect(read.subscription.lastSeq == 2 && machine.subscriptions[1]?.state == .reading)
        // A read is not started twice.
        #expect(machine.continueCatchUps(canPush: true, unsentBytes: 0).isEmpty)

        let first = ChangePage(entries: [Self.entry(3), Self.entry(4)], more: true, lastSeq: 9, prunedThrough: 0)
        let page1 = machine.logRead(
            1, .success(LogPage(first, for: read.subscription)), publishedSeq: 9, canPush: true)
        #expect(try Self.pushed(page1).map(\.seq) == [3, 4])
        #expect(machine.subscriptions[1]?.state == .catchingUp && machine.subscriptions[1]?.lastSeq == 4)

        guard case .readLog(let next) = machine.continueCatchUps(canPush: true, unsentBytes: 0).first else {
            Issue.record("no second read")
            return
        }
        let last = ChangePage(entries: [Self.entry(8)], more: false, lastSeq: 9, prunedThrough: 0)
        let page2 = machine.logRead(1, .success(LogPage(last, for: next.subscription)), publishedSeq: 9, canPush: true)
        #expect(try Self.pushed(page2).map(\.seq) == [8])
        #expect(machine.subscriptions[1]?.state == .live && machine.subscriptions[1]?.lastSeq == 9)
        // Live now: the next change is pushed as it is published.
        #expect(try Self.pushed(machine.deliver(PreparedChanges([Self.entry(10)]), output: Self.roomy)).map(\.seq) == [10])
    }

    @Test func sinceOlderThanTheLogIsAResyncNeverASilentGap() throws {
        var machine = try Self.watching(WatchRequest(since: 2), seq: 50)
        guard case .readLog(let read) = machine.continueCatchUps(canPush: true, unsentBytes: 0).first else {
            Issue.record("no read")
            return
        }
        let page = ChangePage(entries: [Self.entry(31)], more: false, lastSeq: 50, prunedThrough: 30)
        let actions = machine.logRead(1, .success(LogPage(page, for: read.subscription)), publishedSeq: 50, canPush: true)
        let events = try Self.pushed(actions)
        #expect(events.map(\.kind) == [.resync])
        #expect(events.first?.seq == 50 && events.first?.oldestSeq == 31)
        #expect(Self.has(actions) { if case .delivered(0, 0, 1) = $0 { true } else { false } })
        #expect(machine.subscriptions[1]?.state == .live && machine.subscriptions[1]?.lastSeq == 50)
    }

    @Test func aFailedLogReadEndsTheSubscriptionWithAGap() throws {
        var machine = try Self.watching(WatchRequest(since: 2), seq: 9)
        _ = machine.continueCatchUps(canPush: true, unsentBytes: 0)
        let actions = machine.logRead(1, .failure(LarderError(.internal, "disk on fire")), publishedSeq: 9, canPush: true)
        #expect(try Self.pushed(actions).map(\.kind) == [.gap])
        #expect(machine.subscriptions.isEmpty)
    }

    @Test func aReadThePoolRefusedIsTriedAgain() throws {
        var machine = try Self.watching(WatchRequest(since: 2), seq: 9)
        #expect(machine.continueCatchUps(canPush: true, unsentBytes: 0).count == 1)
        machine.logReadNotStarted(1)
        #expect(machine.subscriptions[1]?.state == .catchingUp)
        #expect(machine.continueCatchUps(canPush: true, unsentBytes: 0).count == 1)
    }

    @Test func droppedChangesEndLiveSubscriptionsButNotCatchUps() throws {
        var machine = try Self.watching(seq: 5)
        _ = machine.watch(Self.watchFrame(WatchRequest(since: 1), id: 2), lastChangeSeq: 5, allowed: nil)
        let actions = machine.endLiveSubscriptionsWithGap(canPush: true)
        let events = try Self.pushed(actions)
        #expect(events.map(\.kind) == [.gap] && events.first?.subscription == 1)
        #expect(machine.subscriptions.keys.sorted() == [2])
        #expect(machine.isWatching)
    }

    @Test func closingEndsEverySubscription() throws {
        var machine = try Self.watching()
        _ = machine.watch(Self.watchFrame(WatchRequest(), id: 2), lastChangeSeq: 5, allowed: nil)
        let actions = machine.closed()
        #expect(Self.has(actions) { if case .ended(2) = $0 { true } else { false } })
        #expect(Self.has(actions) { if case .watching(false) = $0 { true } else { false } })
        #expect(machine.closed().isEmpty)
    }
}

/// A reload of the token file narrows what a connection's token reaches (`grantChanged`).
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct WatchGrantTests {
    typealias T = WatchStateMachineTests

    /// Subscriptions on alpha (1), beta (2) and every collection (3), for a token limited to alpha and beta.
    static func machine() throws -> WatchStateMachine {
        var machine = WatchStateMachine(limits: .default)
        let allowed: Set<String> = ["alpha", "beta"]
        for (id, collection) in [(1, "alpha"), (2, "beta"), (3, nil)] as [(UInt32, String?)] {
            let (reply, _) = machine.watch(
                T.watchFrame(WatchRequest(collection: collection), id: id), lastChangeSeq: 7, allowed: allowed)
            try #require(reply.status == .ok)
        }
        return machine
    }

    @Test func narrowingEndsWhatTheTokenLostWithAGapCarryingPermissionDenied() throws {
        var machine = try Self.machine()
        let actions = machine.grantChanged(collections: ["alpha"], canPush: true)
        let ended = try T.pushed(actions)
        #expect(ended.map(\.subscription) == [2, 3])
        for event in ended {
            #expect(event.kind == .gap && event.seq == 7)
            #expect(event.error?.status == .permissionDenied)
            #expect(event.error?.details["opcode"]?.stringValue == "WATCH")
            #expect(event.error?.message.contains("now limited to alpha") == true)
        }
        #expect(T.has(actions) { if case .ended(2) = $0 { true } else { false } })
        #expect(machine.subscriptions.keys.sorted() == [1])
        // The one kept goes on; nothing reaches the ones that ended.
        let changes = PreparedChanges([T.entry(8, "beta"), T.entry(9, "alpha")])
        let events = try T.pushed(machine.deliver(changes, output: T.roomy))
        #expect(events.map(\.subscription) == [1] && events.map(\.seq) == [9])
    }

    @Test func anUnchangedOrWidenedTokenKeepsEverySubscription() throws {
        for collections in [["alpha", "beta"], ["alpha", "beta", "gamma"], nil] as [Set<String>?] {
            var machine = try Self.machine()
            #expect(machine.grantChanged(collections: collections, canPush: true).isEmpty)
            #expect(machine.subscriptions.count == 3)
        }
    }

    @Test func anUnrestrictedTokenNarrowedLosesItsWatchOnEveryCollection() throws {
        var machine = WatchStateMachine(limits: .default)
        _ = machine.watch(T.watchFrame(WatchRequest()), lastChangeSeq: 3, allowed: nil)
        let actions = machine.grantChanged(collections: ["alpha"], canPush: false)
        #expect(try T.pushed(actions).isEmpty, "nothing is pushed to a closing connection")
        #expect(machine.subscriptions.isEmpty && !machine.isWatching)
    }
}
