import Foundation
import LarderClient
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// `client.watch` and typed `changes` mend a broken connection by themselves: the loop that reads them sees every
/// change once, in order, across a killed server, a consumer that fell behind, and a server that is gone for good.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct WatchResumeTests {
    struct Item: Codable, Sendable, Equatable {
        var n: Int
    }

    /// Runs `body` within 120 s.
    static func within<T: Sendable>(
        _ what: String, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await WatchClientTests.within(120, what, body)
    }

    @Test func aWatchAndTypedChangesResumeAfterTheServerIsKilledAndRestarted() async throws {
        let directory = NSTemporaryDirectory() + "larder-watch-resume-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try ServerChild(dataDirectory: directory)
        let watching = LarderClient(port: first.port)
        defer { watching.close() }
        let feed = try await watching.watch(collection: "items")
        let changes = try await watching.collection("items", of: Item.self).changes()
        var writer = LarderClient(port: first.port)
        for n in 1...3 { _ = try await writer.create("items", ["n": .int(Int64(n))]) }

        // Both read on their own tasks, as an app's loops do, through the whole test.
        let events = Task {
            var seen: [ChangeEvent] = []
            for try await event in feed {
                seen.append(event)
                if seen.count == 8 { break }
            }
            return seen
        }
        let typed = Task {
            var seen: [CollectionChange<Item>] = []
            for try await change in changes {
                seen.append(change)
                if seen.count == 8 { break }
            }
            return seen
        }
        // Once the first three are in, the server dies without a word (SIGKILL) and comes back on its port and data.
        #expect(await waitUntil(120) { feed.lastSeq == 3 && changes.lastSeq == 3 })
        first.kill()
        writer.close()
        let second = try ServerChild(dataDirectory: directory, arguments: ["--port", "\(first.port)"])
        defer { _ = second.stop() }
        writer = LarderClient(port: second.port)
        defer { writer.close() }
        // Written while the subscriptions may or may not be back: replayed or live, each comes once.
        for n in 4...6 { _ = try await writer.create("items", ["n": .int(Int64(n))]) }
        #expect(await waitUntil(120) { feed.lastSeq == 6 && changes.lastSeq == 6 })
        for n in 7...8 { _ = try await writer.create("items", ["n": .int(Int64(n))]) }

        let raw = try await Self.within("8 events") { try await events.value }
        #expect(raw.map(\.seq) == Array(1...8))
        #expect(raw.map { $0.record?.data["n"] } == (1...8).map { .int(Int64($0)) })
        let values = try await Self.within("8 changes") { try await typed.value }
        #expect(values.map(\.seq) == Array(1...8))
        #expect(values.map { change -> Int? in if case .created(let item) = change.kind { item.value.n } else { nil } }
            == Array(1...8))
        #expect(feed.reconnects >= 1 && changes.subscription.reconnects >= 1)
        feed.cancel()
        changes.cancel()
    }

    @Test func aConsumerThatFallsBehindResumesByItself() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let feed = try await client.watch(collection: "log", idsOnly: true, bufferLimit: 5)
        for n in 0..<20 { _ = try await client.create("log", ["n": .int(Int64(n))]) }
        // The sixth event overflowed the buffer of five and ended the subscription (the server counts none).
        try await WatchClientTests.waitForSubscriptions(0, via: client)
        let seen = try await WatchClientTests.take(20, from: feed)
        #expect(seen.map(\.seq) == Array(1...20))
        // At least once: the replay may overflow the small buffer again, and is resumed again.
        #expect(feed.reconnects >= 1 && feed.lastSeq == 20)
        try await WatchClientTests.waitForSubscriptions(1, via: client)
        feed.cancel()
        let after = try await Self.within("the end of the feed") { try await WatchClientTests.take(1, from: feed) }
        #expect(after.isEmpty)
    }

    @Test func withoutResumeTheSequenceThrowsAsBefore() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let feed = try await client.watch(collection: "log", idsOnly: true, bufferLimit: 5, resume: false)
        for n in 0..<20 { _ = try await client.create("log", ["n": .int(Int64(n))]) }
        try await WatchClientTests.waitForSubscriptions(0, via: client)
        #expect(try await WatchClientTests.take(5, from: feed).map(\.seq) == Array(1...5))
        let gap = await #expect(throws: LarderError.self) { _ = try await WatchClientTests.take(1, from: feed) }
        #expect(gap?.details["reason"] == "gap" && feed.reconnects == 0)
    }

    /// Cancelling while the subscription waits for a server that is gone ends the loop at once.
    @Test func cancellingWhileWaitingToResumeEndsTheSequence() async throws {
        let directory = NSTemporaryDirectory() + "larder-watch-cancel-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let child = try ServerChild(dataDirectory: directory)
        let client = LarderClient(port: child.port)
        defer { client.close() }
        let feed = try await client.watch(collection: "items")
        let loop = Task {
            var count = 0
            for try await _ in feed { count += 1 }
            return count
        }
        child.kill()
        // Resuming is under way (it fails and waits); cancel() ends the wait and the loop.
        #expect(await waitUntil(120) { (try? await client.ping()) == nil })
        feed.cancel()
        #expect(try await Self.within("the end of the loop") { try await loop.value } == 0)
    }

    /// A subscriber whose server is gone for good resumes on another server of the same database, by itself.
    @Test func aWatchResumesOnAnotherServerByItself() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let servers = try ScaleOutTests.Servers(count: 2, url: schema.url)
        defer { servers.stop() }
        let watching = servers.clientOfAll(connections: 1)  // its first connection goes to server 0
        defer { watching.close() }
        let writer = servers.client(1)
        defer { writer.close() }
        let feed = try await watching.watch(collection: "w")
        for k in 0..<5 { _ = try await writer.create("w", ["k": .int(Int64(k))]) }
        var seen = try await WatchClientTests.take(5, from: feed).map(\.seq)
        servers.children[0].kill()
        for k in 5..<10 { _ = try await writer.create("w", ["k": .int(Int64(k))]) }
        seen += try await WatchClientTests.take(5, from: feed).map(\.seq)
        #expect(seen == Array(seen[0]...(seen[0] + 9)), "\(seen)")
        #expect(feed.reconnects >= 1)
        feed.cancel()
    }
}
