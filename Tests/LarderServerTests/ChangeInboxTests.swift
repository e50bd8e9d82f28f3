import Foundation
import LarderStore
import LarderTestThreads
import Testing

@testable import LarderServer

/// A loop's inbox of committed changes, without the writer's thread or the loop: one drain scheduled per batch of
/// publishes, commit order kept, and past the bound everything pending dropped and said once.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ChangeInboxTests {
    static func entries(_ seqs: ClosedRange<Int64>) -> [ChangeEntry] {
        seqs.map { ChangeEntry(seq: $0, kind: .drop, collection: "items", time: 1, record: nil) }
    }

    @Test func oneDrainIsScheduledForManyPublishesAndOrderIsKept() {
        var inbox = ChangeInbox(limit: 10)
        #expect(inbox.publish(Self.entries(1...2)) == (schedule: true, overflowed: false))
        #expect(inbox.publish(Self.entries(3...4)) == (schedule: false, overflowed: false))
        let (taken, dropped) = inbox.take()
        #expect(taken.map(\.seq) == [1, 2, 3, 4] && dropped == nil)
        // Taken: the next publish schedules a drain again.
        #expect(inbox.publish(Self.entries(5...5)).schedule)
    }

    @Test func pastTheBoundEverythingPendingIsDroppedAndSaidOnce() {
        var inbox = ChangeInbox(limit: 4)
        _ = inbox.publish(Self.entries(1...3))
        #expect(inbox.publish(Self.entries(4...5)) == (schedule: false, overflowed: true))
        // Still behind: later batches are dropped too, without counting a second overflow.
        #expect(inbox.publish(Self.entries(6...6)) == (schedule: false, overflowed: false))
        #expect(inbox.pending.isEmpty)
        let (taken, dropped) = inbox.take()
        #expect(taken.isEmpty && dropped == 6)
        // Caught up: the inbox takes changes again.
        _ = inbox.publish(Self.entries(7...8))
        #expect(inbox.take().entries.map(\.seq) == [7, 8])
    }
}
