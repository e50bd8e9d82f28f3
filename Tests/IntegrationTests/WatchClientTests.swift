#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderServer
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// The change feed through the client library (`LarderSubscription`) and the `larder watch` command.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct WatchClientTests {
    /// The next `count` events of `feed`, failing the test after `seconds`.
    static func take(_ count: Int, from feed: LarderSubscription, seconds: Double = 120) async throws -> [ChangeEvent] {
        try await within(seconds, "\(count) events") {
            var events: [ChangeEvent] = []
            for try await event in feed {
                events.append(event)
                if events.count == count { break }
            }
            return events
        }
    }

    /// Runs `body`, failing with DEADLINE_EXCEEDED if it has not given `what` after `seconds` (generous: the net
    /// under a hang, never a wait for something to happen).
    static func within<T: Sendable>(
        _ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                throw LarderError(.deadlineExceeded, "no \(what) within \(seconds) s")
            }
            let value = try await group.next()!
            group.cancelAll()
            return value
        }
    }

    /// Waits (30 s at most) until the server counts `count` open subscriptions; fails the test otherwise.
    static func waitForSubscriptions(_ count: Int, via client: LarderClient) async throws {
        let open = try await waitUntil(120) {
            try await client.stats()["watch"]?["subscriptions"] == .int(Int64(count))
        }
        #expect(open, "subscriptions open")
    }

    @Test(arguments: ServerStore.allCases) func twoClientsSeeEachOthersWritesInOrder(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let phone = server.client()
        let tablet = server.client()
        defer {
            phone.close()
            tablet.close()
        }
        let feed = try await tablet.watch(collection: "items")
        #expect(feed.startSeq == 0 && feed.lastSeq == 0)
        let bought = try await phone.create("items", ["item": "鮪魚飯糰", "price": 35])
        let discounted = try await phone.patch("items", id: bought.id, patch: ["discount": true])
        try await phone.delete("items", id: bought.id)
        let events = try await Self.take(3, from: feed)
        #expect(events.map(\.kind) == [.create, .patch, .delete])
        #expect(events.map(\.seq) == [1, 2, 3])
        #expect(events[0].record == bought && events[1].record == discounted)
        #expect(feed.lastSeq == 3)
        // Cancelling sends UNWATCH: the server's count drops, and the sequence ends.
        feed.cancel()
        try await Self.waitForSubscriptions(0, via: phone)
        var after: [ChangeEvent] = []
        for try await event in feed { after.append(event) }
        #expect(after.isEmpty)
    }

    @Test(arguments: ServerStore.allCases) func resumingWithLastSeqYieldsExactlyTheMissedEventsEvenAcrossARestart(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let writer = server.client()
        let reader = server.client()
        defer {
            writer.close()
            reader.close()
        }
        let first = try await reader.watch(collection: "todos", filter: .compare(try FieldPath("done"), .eq, false))
        for n in 0..<3 { _ = try await writer.create("todos", ["n": .int(Int64(n)), "done": false]) }
        _ = try await writer.create("todos", ["n": 99, "done": true])  // not for this filter
        #expect(try await Self.take(3, from: first).map(\.seq) == [1, 2, 3])
        let resumeAt = first.lastSeq
        first.cancel()
        for n in 3..<6 { _ = try await writer.create("todos", ["n": .int(Int64(n)), "done": .bool(n == 4)]) }

        // The server restarts: the change log is on disk; a subscription open then that does not resume by itself
        // fails with UNAVAILABLE.
        let open = try await reader.watch(collection: "todos", resume: false)
        try server.restart()
        let broken = await #expect(throws: LarderError.self) { _ = try await Self.take(1, from: open) }
        #expect(broken?.status == .unavailable)
        // The writer reconnects now: its client hears of the old connection's end on a reader thread that a busy
        // machine may run late, and a write sent on that connection meanwhile would fail.
        writer.close()

        let second = try await reader.watch(
            collection: "todos", filter: .compare(try FieldPath("done"), .eq, false), since: resumeAt)
        let missed = try await Self.take(2, from: second)
        #expect(missed.map { $0.record?.data["n"] } == [3, 5])
        #expect(missed.map(\.seq) == [5, 7])
        _ = try await writer.create("todos", ["n": 6, "done": false])
        #expect(try await Self.take(1, from: second).map(\.seq) == [8])
    }

    @Test(arguments: ServerStore.allCases) func aConsumerThatFallsBehindGetsAGapErrorAndResumes(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let feed = try await client.watch(collection: "log", idsOnly: true, bufferLimit: 5, resume: false)
        for n in 0..<20 { _ = try await client.create("log", ["n": .int(Int64(n))]) }
        // The sixth event overflows the client's buffer of five, which ends the subscription and sends UNWATCH: once
        // the server counts no subscription, the overflow has happened (however long it took to come).
        try await Self.waitForSubscriptions(0, via: client)
        let (received, gap) = try await Self.within(30, "end of the feed") { () -> ([Int64], LarderError?) in
            var received: [Int64] = []
            do {
                for try await event in feed { received.append(event.seq) }
                return (received, nil)
            } catch let error as LarderError {
                return (received, error)
            }
        }
        #expect(received == [1, 2, 3, 4, 5])
        #expect(gap?.status == .resourceExhausted && gap?.details["reason"] == "gap" && gap?.details["seq"] == 5)
        let resumed = try await client.watch(collection: "log", since: feed.lastSeq, idsOnly: true)
        #expect(try await Self.take(15, from: resumed).map(\.seq) == Array(6...20))
    }

    @Test func aResyncComesFirstWhenTheLogNoLongerReachesBack() async throws {
        let server = try ClientTestServer { $0.changeRetentionEvents = 2 }
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        for n in 0..<6 { _ = try await client.create("c", ["n": .int(Int64(n))]) }
        let feed = try await client.watch(collection: "c", since: 1)
        let events = try await Self.take(1, from: feed)
        #expect(events.map(\.kind) == [.resync] && events[0].seq == 6 && events[0].oldestSeq == 5)
        #expect(feed.lastSeq == 6)
    }

    @Test(arguments: ServerStore.allCases) func theReadmeWatchExampleRuns(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = LarderClient(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        let (seen, saw) = AsyncStream.makeStream(of: ChangeEvent.self)
        let following = Task {
            // As README.md writes it (the last line of the loop is the test's, to see what came):
            let feed = try await client.watch(collection: "items", filter: try (Field("price") < 50).filter())
            for try await event in feed {
                switch event.kind {
                case .create, .replace, .patch: print(event.matches ? "show" : "hide", event.id!, event.record?.data ?? [:])
                case .delete: print("hide", event.id!)
                case .resync: print("reload the list")  // `since` was older than the server's change log
                default: break                           // kinds a later server may add
                }
                saw.yield(event)
            }
            saw.finish()
        }
        let writer = server.client()
        defer { writer.close() }
        // Subscribed before the writes and the cancel (a busy machine can start the task late; cancelled inside
        // watch(), it would throw instead of ending the loop).
        try await Self.waitForSubscriptions(1, via: writer)
        let item = try await writer.create("items", ["item": "茶葉蛋", "price": 13])
        _ = try await writer.create("items", ["item": "Bento 便當", "price": 89])  // not under 50: not shown
        try await writer.delete("items", id: item.id)
        let events = try await Self.within(30, "two events") { () -> [ChangeEvent] in
            var events: [ChangeEvent] = []
            for await event in seen {
                events.append(event)
                if events.count == 2 { break }
            }
            return events
        }
        #expect(events.map(\.kind) == [.create, .delete] && events.map(\.id) == [item.id, item.id])
        #expect(events[0].matches && events[0].record == item)
        following.cancel()  // cancelling the task ends the sequence (and sends UNWATCH)
        try await following.value
        try await Self.waitForSubscriptions(0, via: writer)
    }

    // MARK: larder watch

    /// The `larder` binary running in the background, its stdout read line by line.
    final class Background: @unchecked Sendable {
        let process = ChildProcess()
        private let pipe = Pipe()
        private var buffer = Data()

        init(_ arguments: [String]) throws {
            process.executableURL = CLITests.binary
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment
            for key in ["LARDER_HOST", "LARDER_PORT", "LARDER_SOCKET", "LARDER_TOKEN"] { environment[key] = nil }
            process.environment = environment
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            try process.run()
        }

        /// The next `count` lines of stdout as JSON; throws after `seconds`.
        func lines(_ count: Int, seconds: Double = 120) throws -> [JSON] {
            let deadline = Date().addingTimeInterval(seconds)
            let fd = pipe.fileHandleForReading.fileDescriptor
            var lines: [JSON] = []
            while lines.count < count {
                if let newline = buffer.firstIndex(of: 0x0A) {
                    lines.append(try JSONParser.parse(Array(buffer[..<newline])))
                    buffer.removeSubrange(...newline)
                    continue
                }
                var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard Date() < deadline else { throw ServerTestError("larder watch printed \(lines.count) lines") }
                guard poll(&pfd, 1, 100) > 0 else { continue }
                var chunk = [UInt8](repeating: 0, count: 65536)
                let n = read(fd, &chunk, chunk.count)
                guard n > 0 else { throw ServerTestError("larder watch closed its output") }
                buffer.append(contentsOf: chunk[0..<n])
            }
            return lines
        }

        /// Ctrl-C, then the exit status.
        func interrupt() -> Int32 {
            kill(process.processIdentifier, SIGINT)
            process.waitUntilExit()
            return process.terminationStatus
        }
    }

    @Test(arguments: ServerStore.allCases) func larderWatchPrintsEventsUntilCtrlC(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let port = ["--port", String(server.port)]
        // --since 0, so no write can come before the command has subscribed.
        let all = try Background(["watch", "items", "--since", "0"] + port)
        let cheap = try Background(["watch", "items", "--where", "price<50", "--ids-only", "--since", "0"] + port)
        let first = try await client.create("items", ["item": "茶葉蛋", "price": 13])
        _ = try await client.create("items", ["item": "Bento 便當", "price": 89])
        _ = try await client.patch("items", id: first.id, patch: ["price": 60])
        _ = try await client.create("todos", ["title": "not followed"])

        let lines = try all.lines(3)
        #expect(lines.map { $0["kind"] } == ["create", "create", "patch"])
        #expect(lines.map { $0["seq"] } == [1, 2, 3])
        #expect(lines[0]["record"]?["data"]?["item"] == "茶葉蛋")
        let filtered = try cheap.lines(2)
        #expect(filtered.map { $0["seq"] } == [1, 3])
        #expect(filtered[1]["matches"] == false && filtered.allSatisfy { $0["record"] == nil })
        #expect(all.interrupt() == 0)
        #expect(cheap.interrupt() == 0)
    }

    @Test func larderWatchUsageErrors() throws {
        var r = try CLITests.run(["watch", "items", "--since", "-1", "--port", "1"])
        #expect(r.status == 64 && r.stderr.contains("--since"))
        r = try CLITests.run(["watch", "a", "b", "--port", "1"])
        #expect(r.status == 64)
        r = try CLITests.run(["help", "watch"])
        #expect(r.status == 0 && r.stdout.contains("--ids-only"))
    }
}
