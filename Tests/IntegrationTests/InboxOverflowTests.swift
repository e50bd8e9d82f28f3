import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

/// An event loop that falls far behind the writer (an overloaded server) must not let committed changes pile up for it
/// without bound: past `maxInboxChanges` they are dropped, its live subscriptions end with a gap at the last change each
/// handled (so resuming with `since` loses nothing), and its read cache starts over (no stale GET).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct InboxOverflowTests {
    @Test func aLoopThatFallsBehindEndsItsLiveSubscriptionsWithAGapAndLosesNothing() throws {
        try withServerOnPort0({
            $0.ioQueues = 2
            $0.maxInboxChanges = 8
        }) { server, port in
            let watcher = try RawClient.tcp(port: port)
            try watcher.hello()
            let writer = try RawClient.tcp(port: port)  // connections take the loops in turn: the other one
            try writer.hello()
            let seed = try writer.call(.create, ["collection": "items", "data": ["n": -1]])
            guard case .string(let seedID)? = seed.replyJSON["id"] else { throw ServerTestError("no id") }
            // The watcher reads the seed through its loop's cache, then watches.
            #expect(try watcher.call(.get, ["collection": "items", "id": .string(seedID)]).replyJSON["data"]?["n"] == -1)
            let start = try watcher.call(.watch, ["collection": "items"])
            guard case .int(let startSeq)? = start.replyJSON["seq"] else { throw ServerTestError("no seq") }
            let watcherShard = try #require(
                server.shards.firstIndex { shard in shard.loop.sync { !shard.watchers.isEmpty } })
            let shard = server.shards[watcherShard]
            #expect(shard.loop.sync { shard.connections.count } == 1)  // the writer is on the other loop

            // Hold the watcher's loop while 30 changes commit: more than its inbox takes.
            let held = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            shard.loop.async {
                held.signal()
                release.wait()
            }
            held.wait()
            _ = try writer.call(.patch, ["collection": "items", "id": .string(seedID), "patch": ["n": 99]])
            for n in 0..<29 { _ = try writer.call(.create, ["collection": "items", "data": ["n": .int(Int64(n))]]) }
            #expect(shard.inboxOverflows.load(ordering: .relaxed) == 1)
            release.signal()

            let gap = try #require(try watcher.receive())
            #expect(gap.opcode == .event && gap.replyJSON["kind"] == "gap" && gap.replyJSON["seq"] == .int(startSeq))
            // Not stale: the cached answer went with the dropped changes.
            #expect(try watcher.call(.get, ["collection": "items", "id": .string(seedID)]).replyJSON["data"]?["n"] == 99)
            // Resuming from the gap's seq replays all 30 changes, in order.
            #expect(try watcher.call(.watch, ["collection": "items", "since": .int(startSeq)]).status == .ok)
            var seqs: [Int64] = []
            while seqs.count < 30 {
                let frame = try #require(try watcher.receive())
                if frame.opcode == .event, case .int(let seq)? = frame.replyJSON["seq"] { seqs.append(seq) }
            }
            #expect(seqs == Array((startSeq + 1)...(startSeq + 30)))
        }
    }
}
