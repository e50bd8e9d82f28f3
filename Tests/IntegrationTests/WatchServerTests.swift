#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// A raw-socket client that keeps the events it reads while waiting for replies, so a test can interleave requests
/// and pushed frames the way the server sends them.
final class WatchingClient: @unchecked Sendable {
    let raw: RawClient
    private(set) var events: [Frame] = []

    init(port: Int, compression: [String] = ["zlib"]) throws {
        raw = try RawClient.tcp(port: port)
        try raw.hello(compression: compression)
    }

    private init(raw: RawClient) { self.raw = raw }

    /// Connects and sends HELLO and WATCH in one write, so that a server with a short idle timeout finds the connection
    /// watching from its first read on. A machine slow to write them can still find it closed as idle first (its
    /// only frame then is DEADLINE_EXCEEDED, id 0): it connects again, up to 20 times.
    static func watching(port: Int, _ request: WatchRequest) throws -> (WatchingClient, WatchResponse) {
        for _ in 0..<20 {
            let raw = try RawClient.tcp(port: port)
            let hello = HelloRequest(client: "server-tests").json
            let ids = try raw.sendTogether([(.hello, hello), (.watch, request.json)])
            guard let answer = try raw.receive() else { continue }
            if answer.requestID == 0 && answer.status == .deadlineExceeded { continue }
            guard answer.requestID == ids[0] && answer.status == .ok else {
                throw ServerTestError("HELLO failed: \(answer.replyText)")
            }
            guard let watch = try raw.receive(), watch.requestID == ids[1], watch.status == .ok else {
                throw ServerTestError("WATCH failed")
            }
            return (WatchingClient(raw: raw), try WatchResponse(json: watch.jsonObject()))
        }
        throw ServerTestError("the server closed 20 connections as idle before their first request")
    }

    /// Sends a request and returns its reply; EVENT frames read meanwhile are kept.
    func call(_ opcode: Opcode, _ json: JSONObject = [:], binary: [UInt8] = []) throws -> Frame {
        let id = try raw.send(opcode, json, binary: binary)
        while true {
            guard let frame = try raw.receive() else { throw ServerTestError("closed awaiting \(opcode.name)") }
            if frame.isPush {
                events.append(frame)
                continue
            }
            guard frame.requestID == id else { throw ServerTestError("reply to \(frame.requestID), expected \(id)") }
            return frame
        }
    }

    /// CREATEs pipelined within the server's in-flight limit; returns how many succeeded.
    @discardableResult
    func createMany(_ documents: [(collection: String, data: JSONObject)], window: Int = 64) throws -> Int {
        var next = 0
        var pending = 0
        var ok = 0
        while next < documents.count || pending > 0 {
            while pending < window && next < documents.count {
                try raw.send(.create, ["collection": .string(documents[next].collection), "data": .object(documents[next].data)])
                next += 1
                pending += 1
            }
            guard let frame = try raw.receive() else { throw ServerTestError("closed while writing") }
            if frame.isPush {
                events.append(frame)
                continue
            }
            pending -= 1
            if frame.status == .ok { ok += 1 }
        }
        return ok
    }

    /// WATCH; returns the subscription id and the sequence number it started at.
    func watch(_ request: WatchRequest) throws -> WatchResponse {
        let reply = try call(.watch, request.json)
        guard reply.status == .ok else { throw ServerTestError("WATCH failed: \(reply.replyText)") }
        return try WatchResponse(json: reply.jsonObject())
    }

    /// The next `count` events (those already read first), decoded; throws after `timeout` seconds of silence.
    func nextEvents(_ count: Int, timeout: Double = 120) throws -> [ChangeEvent] {
        while events.count < count {
            guard let frame = try raw.receive(timeout: timeout) else { throw ServerTestError("closed awaiting events") }
            guard frame.isPush else { throw ServerTestError("unexpected reply \(frame.replyText)") }
            events.append(frame)
        }
        let taken = events.prefix(count)
        events.removeFirst(count)
        return try taken.map { frame in
            #expect(frame.opcode == .event && frame.isPush && !frame.isResponse && frame.status == .ok)
            let event = try ChangeEvent(json: frame.jsonObject())
            #expect(event.subscription == frame.requestID)
            return event
        }
    }

    /// Reads for `seconds` and fails on any event: nothing more is due.
    func expectSilence(_ seconds: Double = 0.3) throws {
        #expect(events.isEmpty)
        do {
            let frame = try raw.receive(timeout: seconds)
            Issue.record("unexpected frame \(frame?.replyText ?? "close")")
        } catch {}
    }
}

/// WATCH end to end over real sockets: ordering, filters, replay, resync, gaps, limits, restarts.
///
/// Serialized: these tests block on sockets, and run side by side they would hold both of a 2-core machine's
/// cooperative threads and starve the async tests of other suites.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct WatchServerTests {
    static func record(_ frame: Frame) throws -> Record { try Record(json: frame.jsonObject()) }

    @Test func theWritesOfOneClientReachAnotherInOrder() throws {
        try withServerOnPort0 { server, port in
            let watcher = try WatchingClient(port: port)
            let writer = try WatchingClient(port: port)
            let start = try watcher.watch(WatchRequest(collection: "items"))
            #expect(start.subscription == 1 && start.seq == 0)

            let created = try Self.record(writer.call(.create, ["collection": "items", "data": ["item": "茶葉蛋", "price": 13]]))
            let id = JSON.string(created.id.wireString)
            let patched = try Self.record(writer.call(.patch, ["collection": "items", "id": id, "patch": ["price": 15]]))
            let replaced = try Self.record(writer.call(.replace, ["collection": "items", "id": id, "data": ["item": "蛋"]]))
            _ = try writer.call(.create, ["collection": "other", "data": [:]])  // not followed
            let jpeg = try ServerFixtures.data("rocket.jpg")
            let blob = try BlobInfo(json: writer.call(.blobPut, ["attach": ["collection": "items", "id": id]], binary: jpeg).jsonObject())
            _ = try writer.call(.blobDelete, ["id": .string(blob.id.wireString)])
            _ = try writer.call(.delete, ["collection": "items", "id": id])
            _ = try writer.call(.dropCollection, ["collection": "items"])

            let events = try watcher.nextEvents(7)
            #expect(events.map(\.kind) == [.create, .patch, .replace, .blobAttach, .blobDelete, .delete, .drop])
            #expect(events.map(\.seq) == [1, 2, 3, 5, 6, 7, 8])  // 4 went to "other"
            #expect(events.allSatisfy { $0.subscription == start.subscription && $0.collection == "items" })
            #expect(events[0].record == created && events[1].record == patched && events[2].record == replaced)
            #expect(events[1].rev == 2 && events[2].rev == 3 && events[5].rev == 3)
            #expect(events[3].blob == blob && events[3].record == nil && events[3].id == created.id)
            #expect(events[4].blob?.id == blob.id)
            #expect(events[5].record == nil && events[5].id == created.id)  // a deletion carries no document
            #expect(events[6].id == nil && events[6].rev == nil)
            #expect(events.allSatisfy { ($0.timeMs ?? 0) > 0 })
            try watcher.expectSilence()

            let stats = try writer.call(.stats).replyJSON
            #expect(stats["watch"]?["subscriptions"] == 1 && stats["watch"]?["events"] == 7)
            #expect(stats["store"]?["lastChangeSeq"] == 8)
            #expect(stats["requests"]?["byOpcode"]?["WATCH"]?["count"] == 1)
            _ = server
        }
    }

    @Test func aFilterDeliversOnlyMatchingRecordsAndIdsOnlyLeavesThemOut() throws {
        try withServerOnPort0 { _, port in
            let watcher = try WatchingClient(port: port)
            let cheap = try watcher.watch(
                WatchRequest(collection: "items", filter: .compare(try FieldPath("price"), .lt, 50)))
            let ids = try watcher.watch(WatchRequest(idsOnly: true))  // every collection
            let writer = try WatchingClient(port: port)
            var expensive: Record?
            for (n, price) in [35, 99, 13, 120].enumerated() {
                let record = try Self.record(writer.call(.create, ["collection": "items", "data": ["n": .int(Int64(n)), "price": .int(Int64(price))]]))
                if price == 99 { expensive = record }
            }
            _ = try writer.call(.create, ["collection": "todos", "data": ["price": 1]])
            // The expensive one drops to 40: it matches now; back to 60 it leaves the filter (sent, matches: false);
            // another rise is none of the subscription's business; deleting it matches on its last data... no more.
            let id = JSON.string(expensive!.id.wireString)
            _ = try writer.call(.patch, ["collection": "items", "id": id, "patch": ["price": 40]])
            _ = try writer.call(.patch, ["collection": "items", "id": id, "patch": ["price": 60]])
            _ = try writer.call(.replace, ["collection": "items", "id": id, "data": ["price": 70]])
            _ = try writer.call(.replace, ["collection": "items", "id": id, "data": ["price": 10]])
            _ = try writer.call(.delete, ["collection": "items", "id": id])

            let events = try watcher.nextEvents(6 + 10)
            let filtered = events.filter { $0.subscription == cheap.subscription }
            let all = events.filter { $0.subscription == ids.subscription }
            #expect(filtered.map { $0.record?.data["price"] } == [35, 13, 40, 60, 10, nil])
            #expect(filtered.map(\.kind) == [.create, .create, .patch, .patch, .replace, .delete])
            #expect(filtered.map(\.matches) == [true, true, true, false, true, true])
            #expect(all.count == 10 && all.allSatisfy { $0.record == nil && $0.id != nil && $0.matches })
            #expect(all.map(\.seq) == Array(1...10))
            #expect(Set(all.map(\.collection)) == ["items", "todos"])
        }
    }

    @Test func reconnectingWithSinceYieldsExactlyTheMissedEvents() throws {
        // A small buffer makes the replay span many pages, paced by the subscriber's reading.
        try withServerOnPort0({ $0.limits.maxWatchBufferBytes = 64 << 10 }) { _, port in
            let writer = try WatchingClient(port: port)
            // Connected throughout: what a subscriber that never left saw, in commit order.
            let truth = try WatchingClient(port: port, compression: [])
            _ = try truth.watch(WatchRequest(collection: "items"))
            var seen: Int64 = 0
            do {
                let watcher = try WatchingClient(port: port)
                _ = try watcher.watch(WatchRequest(collection: "items"))
                try writer.createMany((0..<3).map { ("items", ["n": .int(Int64($0))]) })
                seen = try watcher.nextEvents(3).last!.seq
            }  // the watcher disconnects
            let pad = String(repeating: "x", count: 700)
            let missed = (3..<700).map { n -> (collection: String, data: JSONObject) in
                (n % 10 == 0 ? "other" : "items", ["n": .int(Int64(n)), "pad": .string(pad)])
            }
            #expect(try writer.createMany(missed) == missed.count)
            let again = try WatchingClient(port: port, compression: [])
            let resumed = try again.watch(WatchRequest(collection: "items", since: seen))
            #expect(resumed.seq == 700)
            // Writes keep coming while the replay runs: no loss and no repeat at the switch to live events.
            try writer.createMany((700..<760).map { ("items", ["n": .int(Int64($0))]) })
            let all = try truth.nextEvents(3 + 628 + 60)
            let expected = all.filter { $0.seq > seen }
            let events = try again.nextEvents(expected.count)
            #expect(events.map(\.seq) == expected.map(\.seq))
            #expect(events.map(\.record) == expected.map(\.record))
            #expect(Set(events.compactMap { $0.record?.data["n"]?.intValue }).count == 688)
            try again.expectSilence()
        }
    }

    @Test func aSubscriberBeyondRetentionGetsResyncThenLiveEvents() throws {
        try withServerOnPort0({ $0.changeRetentionEvents = 5 }) { _, port in
            let writer = try WatchingClient(port: port)
            for n in 0..<20 { _ = try writer.call(.create, ["collection": "items", "data": ["n": .int(Int64(n))]]) }
            let watcher = try WatchingClient(port: port)
            let old = try watcher.watch(WatchRequest(collection: "items", since: 3))
            var events = try watcher.nextEvents(1)
            #expect(events[0].kind == .resync && events[0].subscription == old.subscription)
            #expect(events[0].seq == 20 && events[0].oldestSeq == 16)
            // Within the retention: a plain replay. From the future: resync too.
            let recent = try watcher.watch(WatchRequest(collection: "items", since: 17))
            let future = try watcher.watch(WatchRequest(collection: "items", since: 999))
            events = try watcher.nextEvents(4)
            #expect(events.filter { $0.subscription == recent.subscription }.map(\.seq) == [18, 19, 20])
            #expect(events.filter { $0.subscription == future.subscription }.map(\.kind) == [.resync])
            _ = try writer.call(.create, ["collection": "items", "data": [:]])
            events = try watcher.nextEvents(3)
            #expect(events.map(\.seq) == [21, 21, 21] && events.allSatisfy { $0.kind == .create })
            let stats = try writer.call(.stats).replyJSON
            #expect(stats["watch"]?["resyncs"] == 2)
        }
    }

    @Test func aStalledSubscriberGetsAGapWhileOthersKeepFullSpeed() throws {
        // The default buffer (1 MiB): a reader that keeps up never comes near it, even on a busy machine.
        try withServerOnPort0 { server, port in
            let pad = String(repeating: "z", count: 16 << 10)
            let writer = try WatchingClient(port: port, compression: [])
            func writes(_ range: Range<Int>) throws {
                let written = try writer.createMany(range.map { ("items", ["n": .int(Int64($0)), "pad": .string(pad)]) })
                #expect(written == range.count)
            }
            try writes(0..<150)

            // Stalled: watches, then reads nothing until the writes are over. The kernel's socket buffers take a few
            // MB of events first (loopback autotuning), so the writes add up to well past them.
            let stalled = try WatchingClient(port: port, compression: [])
            let stalledWatch = try stalled.watch(WatchRequest(collection: "items"))
            // Reading: follows the same collection from another thread while the writes go on (ids only, so that a
            // busy machine delaying this thread cannot put it behind by a megabyte).
            let reader = try WatchingClient(port: port, compression: [])
            _ = try reader.watch(WatchRequest(collection: "items", idsOnly: true))
            let readerDone = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var readerSeqs: [Int64] = []
            DispatchQueue.global().async {
                readerSeqs = (try? reader.nextEvents(600, timeout: 120).map(\.seq)) ?? []
                readerDone.signal()
            }

            // The writer does not wait for the stalled subscriber: these writes finish while it reads nothing (a
            // server that waited for it would never answer them). How fast they go is for the benchmarks.
            try writes(150..<750)
            #expect(readerDone.wait(timeout: .now() + 600) == .success, "the reader did not see 600 events")
            #expect(readerSeqs == Array(151...750))
            // The server held about the buffer for the stalled subscriber, not the megabytes the kernel could not take
            // (the margin covers the writer's window of replies). A bound on memory, not time: a slow writer or
            // reader only leaves more in the kernel's buffers.
            #expect(server.peakUnsentBytes < 5 << 19, "peak unsent \(server.peakUnsentBytes)")
            #expect(try writer.call(.ping).status == .ok)

            // The stalled one now reads: a few events (its bounded buffer), the gap naming the last change it handled,
            // then nothing.
            var received: [ChangeEvent] = []
            while received.last?.kind != .gap { received += try stalled.nextEvents(1) }
            let gap = received.removeLast()
            #expect(gap.subscription == stalledWatch.subscription)
            #expect(received.count < 450, "\(received.count) of 600 events reached a stalled subscriber")
            #expect(received.map(\.seq) == Array(readerSeqs.prefix(received.count)))
            #expect(gap.seq == received.last?.seq ?? 150)
            _ = try writer.call(.create, ["collection": "items", "data": [:]])
            #expect(try reader.nextEvents(1).first?.seq == 751)
            try stalled.expectSilence()
            let stats = try writer.call(.stats).replyJSON
            #expect(stats["watch"]?["gaps"] == 1 && stats["watch"]?["subscriptions"] == 1)
            // The ended subscription cannot be unwatched; the connection is still fine.
            let unwatch = try stalled.call(.unwatch, ["subscription": .int(Int64(stalledWatch.subscription))])
            #expect(unwatch.status == .notFound)
        }
    }

    @Test func eventsSurviveARestartInTheChangeLog() throws {
        let directory = NSTemporaryDirectory() + "larder-watch-restart-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func serve(_ body: (Int) throws -> Void) throws {
            var configuration = ServerConfiguration()
            configuration.port = 0
            configuration.dataDirectory = directory
            configuration.logLevel = .error
            configuration.ioQueues = 1
            let server = try LarderServer(configuration: configuration)
            let port = try server.start()
            defer { server.shutdown() }
            try body(port)
        }
        var before: [Record] = []
        try serve { port in
            let writer = try WatchingClient(port: port)
            for n in 0..<5 {
                before.append(try Self.record(writer.call(.create, ["collection": "todos", "data": ["n": .int(Int64(n))]])))
            }
        }
        try serve { port in
            let watcher = try WatchingClient(port: port)
            let start = try watcher.watch(WatchRequest(collection: "todos", since: 2))
            #expect(start.seq == 5)
            var events = try watcher.nextEvents(3)
            #expect(events.map(\.seq) == [3, 4, 5] && events.map(\.record) == Array(before[2...]))
            let writer = try WatchingClient(port: port)
            _ = try writer.call(.create, ["collection": "todos", "data": [:]])
            events = try watcher.nextEvents(1)
            #expect(events.map(\.seq) == [6])
        }
    }

    @Test func unwatchLimitsAndBadRequests() throws {
        try withServerOnPort0({
            $0.limits.maxWatches = 2
            $0.limits.idleTimeoutMs = 300
            // One loop: one tick judges every connection, so the idle one's close proves the watching one was judged.
            $0.ioQueues = 1
        }) { _, port in
            // Watching from its first request: with nothing to watch it could be closed as idle between requests.
            let (c, a) = try WatchingClient.watching(port: port, WatchRequest(collection: "items"))
            let b = try c.watch(WatchRequest())
            let third = try c.call(.watch, [:])
            #expect(third.status == .resourceExhausted && third.replyJSON["limit"] == 2)
            var reply = try c.call(.unwatch, ["subscription": .int(Int64(a.subscription))])
            #expect(reply.status == .ok && reply.replyJSON == ["subscription": .int(Int64(a.subscription)), "ended": true])
            reply = try c.call(.unwatch, ["subscription": .int(Int64(a.subscription))])
            #expect(reply.status == .notFound && reply.replyJSON["field"] == "subscription")
            #expect(try c.call(.watch, ["collection": "no such"]).replyJSON["field"] == "collection")
            #expect(try c.call(.watch, ["since": -1]).status == .invalidArgument)
            #expect(try c.call(.watch, ["filter": ["field": "a", "op": "near", "value": 1]]).replyJSON["field"] == "filter.op")
            #expect(try c.call(.watch, [:], binary: [1]).status == .invalidArgument)
            #expect(try c.call(.event, [:]).status == .unknownOpcode)
            // Subscription ids are never reused on a connection.
            #expect(try c.watch(WatchRequest()).subscription == b.subscription + 1)

            // Waiting for events is not idleness; a connection without a subscription is closed as idle. The watching
            // connection was silent since before the idle one connected: the tick that closed the idle one found it
            // idle longer still, and let it be.
            let idle = try RawClient.tcp(port: port)
            #expect(try idle.framesUntilClosed().map(\.status) == [.deadlineExceeded])
            #expect(try c.call(.ping).status == .ok)
            // After UNWATCH's answer, no event of that subscription follows (the watching connection writes itself:
            // a new one could be closed as idle before its write on a busy machine).
            reply = try c.call(.unwatch, ["subscription": .int(Int64(b.subscription))])
            _ = try c.call(.create, ["collection": "items", "data": [:]])
            let events = try c.nextEvents(1)
            #expect(events.map(\.subscription) == [b.subscription + 1])
            try c.expectSilence()
        }
    }

    @Test func concurrentWritersAreSeenInCommitOrderWithoutGapsOrRepeats() throws {
        try withServerOnPort0 { _, port in
            let watcher = try WatchingClient(port: port)
            _ = try watcher.watch(WatchRequest())
            let writers = try (0..<3).map { _ in try WatchingClient(port: port) }
            DispatchQueue.concurrentPerform(iterations: 3) { w in
                _ = try? writers[w].createMany((0..<100).map { ("c\(w)", ["n": .int(Int64($0))]) })
            }
            let events = try watcher.nextEvents(300)
            #expect(events.map(\.seq) == Array(1...300))
            for w in 0..<3 {
                // Pipelined writes of one connection may commit in any order; each is seen exactly once.
                let numbers = events.filter { $0.collection == "c\(w)" }.compactMap { $0.record?.data["n"]?.intValue }
                #expect(numbers.sorted() == (0..<100).map { Int64($0) })
            }
        }
    }
}
