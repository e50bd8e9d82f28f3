#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderIO
import LarderWire

/// `larder-bench replica`: what a local replica costs and gives, each figure beside its peer in the same run: a
/// first load of N records against paging LIST alone, a local write against a CREATE through LarderClient, the
/// outbox's drain rate against sequential CREATEs, and a change on the server to visible in an online replica.
enum ReplicaBench {
    struct Options: SubcommandOptions {
        var host = "127.0.0.1"
        var port = 7411
        var records = 10_000
        var writes = 1_000
        var changes = 200

        static let usage =
            "Usage: larder-bench replica [--host H] [--port N] [--records N] [--writes N] [--changes N]"

        static let help = """
            larder-bench replica: a local replica (LarderReplica) against the plain client, same run

            \(usage)

            On a running server, in a collection of its own:
              bootstrap   --records N (default 10000) records are created, then read by paging LIST (500 a page)
                          alone, then loaded by a new replica (subscribe, the same pages, into its SQLite file):
                          seconds each, and this process's resident memory after each
              writes      --writes N (default 1000) local creates into a replica not started (each a synced SQLite
                          transaction), p50/p99; then the replica started and its outbox drained: writes/s; beside
                          them N CREATEs through LarderClient one after another: p50/p99 and writes/s
              changes     --changes N (default 200) creates through LarderClient, one at a time, each timed until an
                          online replica's query shows it: p50/p99

            """

        mutating func take(
            _ argument: ArgumentScanner.Argument, from scanner: inout ArgumentScanner
        ) throws(BenchUsage) -> Bool {
            func count(_ minimum: Int) throws(BenchUsage) -> Int {
                let text = try scanner.string(argument)
                guard let n = Int(text), n >= minimum else {
                    throw BenchUsage("\(argument.name) must be a whole number of at least \(minimum), not '\(text)'")
                }
                return n
            }
            switch argument.name {
            case "--host": host = try scanner.string(argument)
            case "--port": port = try count(1)
            case "--records": records = try count(1)
            case "--writes": writes = try count(10)
            case "--changes": changes = try count(10)
            default: return false
            }
            return true
        }
    }

    struct Note: Codable, Sendable {
        var title: String
        var n: Int
        var body: String
    }

    /// This process's resident set, in MiB.
    static func residentMiB() -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kb = Double(line.split(separator: " ").dropFirst().first ?? "")
        else { return 0 }
        return kb / 1024
    }

    static func percentile(_ values: [Duration], _ p: Double) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
        let d = sorted[max(0, index)]
        return Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
    }

    static func run(_ options: Options) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-bench-replica-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let client = LarderClient(host: options.host, port: options.port)
        let run = UUID().uuidString.prefix(8).lowercased()
        let body = String(repeating: "x", count: 120)
        try waitForTask { () async throws in
            // Bootstrap.
            let seeded = "bench_replica_load_\(run)"
            let notes = client.collection(seeded, of: Note.self)
            for n in 0..<options.records { _ = try await notes.create(Note(title: "note \(n)", n: n, body: body)) }
            let before = residentMiB()
            var t0 = ContinuousClock.now
            var cursor: String?
            var paged = 0
            repeat {
                let page = try await client.list(seeded, limit: 500, cursor: cursor)
                paged += page.records.count
                cursor = page.nextCursor
            } while cursor != nil
            let listSeconds = (ContinuousClock.now - t0) / .seconds(1)
            let afterList = residentMiB()
            let loader = try LarderReplica(path: directory.appendingPathComponent("load.sqlite").path, client: client)
            let loaded = loader.collection(seeded, of: Note.self)
            t0 = ContinuousClock.now
            loader.start()
            try await loader.synchronize(timeout: .seconds(600))
            let loadSeconds = (ContinuousClock.now - t0) / .seconds(1)
            let count = try loaded.count()
            let afterLoad = residentMiB()
            loader.close()
            guard paged == options.records, count == options.records else {
                throw BenchFailure("bootstrap: LIST paged \(paged), the replica holds \(count) of \(options.records)")
            }
            print(String(format: "bootstrap records=%d list_s=%.3f replica_s=%.3f ratio=%.2f rss_mib_start=%.1f "
                + "rss_mib_after_list=%.1f rss_mib_after_replica=%.1f", options.records, listSeconds, loadSeconds,
                loadSeconds / listSeconds, before, afterList, afterLoad))

            // Local writes and the drain, against CREATE through the client.
            let written = "bench_replica_writes_\(run)"
            let writer = try LarderReplica(path: directory.appendingPathComponent("writes.sqlite").path, client: client)
            let local = writer.collection(written, of: Note.self)
            var localTimes: [Duration] = []
            for n in 0..<options.writes {
                let start = ContinuousClock.now
                try local.create(Note(title: "local \(n)", n: n, body: body))
                localTimes.append(ContinuousClock.now - start)
            }
            t0 = ContinuousClock.now
            writer.start()
            try await writer.synchronize(timeout: .seconds(600))
            let drainSeconds = (ContinuousClock.now - t0) / .seconds(1)
            writer.close()
            let direct = client.collection("bench_replica_creates_\(run)", of: Note.self)
            var createTimes: [Duration] = []
            t0 = ContinuousClock.now
            for n in 0..<options.writes {
                let start = ContinuousClock.now
                _ = try await direct.create(Note(title: "direct \(n)", n: n, body: body))
                createTimes.append(ContinuousClock.now - start)
            }
            let createSeconds = (ContinuousClock.now - t0) / .seconds(1)
            guard try await client.count(written) == options.writes else {
                throw BenchFailure("writes: the server holds \(try await client.count(written)) of \(options.writes)")
            }
            print(String(format: "writes n=%d local_p50_ms=%.3f local_p99_ms=%.3f drain_per_s=%.0f "
                + "create_p50_ms=%.3f create_p99_ms=%.3f create_per_s=%.0f", options.writes,
                percentile(localTimes, 0.5), percentile(localTimes, 0.99), Double(options.writes) / drainSeconds,
                percentile(createTimes, 0.5), percentile(createTimes, 0.99), Double(options.writes) / createSeconds))

            // A change on the server to visible in an online replica.
            let followed = "bench_replica_changes_\(run)"
            let follower = try LarderReplica(
                path: directory.appendingPathComponent("changes.sqlite").path, client: client)
            let view = follower.collection(followed, of: Note.self)
            follower.start()
            try await follower.synchronize(timeout: .seconds(600))
            let seen = AsyncStream<Int>.makeStream()
            let watcher = Task {
                for await records in try view.changes() { seen.continuation.yield(records.count) }
            }
            var shown = seen.stream.makeAsyncIterator()
            _ = await shown.next()
            var visible: [Duration] = []
            let remote = client.collection(followed, of: Note.self)
            for n in 0..<options.changes {
                let start = ContinuousClock.now
                _ = try await remote.create(Note(title: "change \(n)", n: n, body: body))
                while let count = await shown.next(), count < n + 1 {}
                visible.append(ContinuousClock.now - start)
            }
            watcher.cancel()
            follower.close()
            print(String(format: "changes n=%d visible_p50_ms=%.2f visible_p99_ms=%.2f", options.changes,
                percentile(visible, 0.5), percentile(visible, 0.99)))
        }
        client.close()
    }
}

/// A run that did not give what it measured.
struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
