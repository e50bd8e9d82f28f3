#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// One second's sample of the server process.
struct SoakSample: Sendable {
    var second: Int
    var residentBytes: Int
    var descriptors: Int
    var operations: Int
}

/// Soak: mixed load against a real `larder-server` while its RSS and open descriptors are sampled every
/// second. `scripts/soak MINUTES` runs it for minutes and fails if either keeps growing; the suite runs a few seconds
/// and checks that every descriptor is given back once the clients leave.
@Suite(.ownThreads, ReliabilityKnobs.timeLimit(plus: ReliabilityKnobs.int("LARDER_SOAK_MINUTES", default: 0)))
struct ReliabilitySoakTests {
    /// Counts shared by the load tasks.
    final class Tally: Sendable {
        let operations = SharedCounter()
        let failures = SharedCounter()
        let hostile = SharedCounter()
        /// Connections the load may have opened (a pool's whole size counts, used or not).
        let connections = SharedCounter()
        let firstFailure = Locked<String?>(nil)

        func fail(_ what: String) {
            failures.add(1)
            firstFailure.withLock { if $0 == nil { $0 = what } }
        }
    }

    /// One worker's mixed load on its own documents and blobs (so nothing it does should fail), reconnecting every
    /// few seconds so connections come and go.
    static func worker(_ number: Int, port: Int, stop: StopFlag, tally: Tally) async {
        let collection = "soak\(number % 3)"
        var documents: [(id: UUID, rev: Int64)] = []
        var blobs: [UUID] = []
        var client = LarderClient(port: port, connections: 1 + number % 2, requestTimeout: .seconds(30))
        tally.connections.add(1 + number % 2)
        var reconnectAt = monotonicSeconds() + Double.random(in: 2...6)
        var n = 0
        while !stop.isStopped {
            n += 1
            if monotonicSeconds() > reconnectAt {
                client.close()
                client = LarderClient(port: port, connections: 1 + number % 2, requestTimeout: .seconds(30))
                tally.connections.add(1 + number % 2)
                reconnectAt = monotonicSeconds() + Double.random(in: 2...6)
            }
            let roll = Int.random(in: 0..<100)
            do throws(LarderError) {
                switch roll {
                case 0..<20:
                    let data: JSONObject = [
                        "worker": .int(Int64(number)), "n": .int(Int64(n)), "kind": .string(["a", "b", "c"][n % 3]),
                        "text": .string("soak \(n) " + String(repeating: "北京 larder ", count: .random(in: 1...30))),
                    ]
                    let record = try await client.create(collection, data)
                    documents.append((record.id, record.rev))
                    if documents.count > 200 {
                        let old = documents.removeFirst()
                        try await client.delete(collection, id: old.id)
                    }
                case 20..<45:
                    if let doc = documents.randomElement() { _ = try await client.get(collection, id: doc.id) }
                case 45..<55:
                    if let index = documents.indices.randomElement() {
                        let record = try await client.patch(
                            collection, id: documents[index].id, patch: ["patched": .int(Int64(n))],
                            rev: documents[index].rev)
                        documents[index].rev = record.rev
                    }
                case 55..<63:
                    let filter = try Filter(json: ["field": "n", "op": "gt", "value": .int(Int64(n / 2))])
                    let sort = [SortKey(field: try FieldPath("n"), descending: true)]
                    _ = try await client.search(collection, SearchQuery(filter: filter, sort: sort, limit: 20))
                case 63..<67:
                    _ = try await client.count(collection, text: TextQuery(query: "北京"))
                case 67..<70:
                    _ = try await client.group(collection, by: "kind", perGroup: 3)
                case 70..<74:
                    let page = try await client.list(collection, limit: 50)
                    if let cursor = page.nextCursor { _ = try await client.list(collection, limit: 50, cursor: cursor) }
                case 74..<79:
                    let bytes = uniqueJPEG(commentBytes: Int.random(in: 2_000...20_000))
                    let info = try await client.blobPut(Data(bytes), sha256: SHA256.hex(bytes))
                    blobs.append(info.id)
                    if blobs.count > 30 { try await client.blobDelete(blobs.removeFirst()) }
                case 79..<85:
                    if let id = blobs.randomElement() { _ = try await client.blobGet(id) }
                case 85..<88:
                    if !documents.isEmpty {
                        let doc = documents.remove(at: Int.random(in: 0..<documents.count))
                        try await client.delete(collection, id: doc.id, rev: doc.rev)
                    }
                case 88..<92:
                    _ = try await client.getMany(collection, ids: documents.prefix(20).map(\.id) + [UUID()])
                case 92..<94:
                    _ = try await client.stats()
                default:
                    try await client.ping()
                }
                tally.operations.add(1)
            } catch {
                if !stop.isStopped { tally.fail("worker \(number) roll \(roll): \(error)") }
            }
        }
        client.close()
    }

    /// Hostile traffic beside the load: junk, half frames and abandoned connections, a few a second.
    static func hostile(port: Int, stop: StopFlag, tally: Tally) {
        let junk: [[UInt8]] = [
            Array("GET / HTTP/1.1\r\n\r\n".utf8), [0xFF, 0xFF, 0xFF, 0xFF, 0x4C, 0x52], [0, 0, 0, 0, 0x4C, 0x52],
            HostileFrames.request(.create, "[1,2]"), HostileFrames.request(.get, #"{"collection":"x"}"#),
            HostileFrames.compressed(.create, [0x78, 0x9C, 1, 2, 3], uncompressedLength: 100),
        ]
        while !stop.isStopped {
            do {
                tally.connections.add(1)
                let c = try RawClient.tcp(port: port)
                switch Int.random(in: 0..<3) {
                case 0:
                    try c.writeAll(junk.randomElement()!)
                    _ = try c.framesUntilClosed()
                case 1:
                    try c.hello()
                    try c.writeAll(Array(HostileFrames.request(.ping, "{}").prefix(15)))  // half a frame, then gone
                default:
                    try c.hello()
                    _ = try c.call(.count, ["collection": "soak0"])
                }
                tally.hostile.add(1)
            } catch {
                tally.fail("hostile: \(error)")
            }
            usleep(UInt32.random(in: 50_000...250_000))
        }
    }

    static func run(seconds: Int, workers: Int, csvPath: String?) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("larder-soak-\(UUID().wireString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        // Two event loops whatever the machine, so that the database files they open are a known count (below).
        let loops = 2
        let server = try ServerChild(
            dataDirectory: root.appendingPathComponent("data").path, arguments: ["--io-threads", "\(loops)"])
        defer { _ = server.stop() }
        let listeningSockets = server.descriptorTargets.filter { $0 == "socket" }.count

        // Every file SQLite keeps open is open once something was written and read; that is the baseline.
        // Reads run on a pool of connections, each opening the WAL on first use: read concurrently to open them all.
        let warm = LarderClient(port: server.port, connections: 8)
        let warmID = try await warm.create("soak0", ["warm": true]).id
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<64 { group.addTask { _ = try await warm.search("soak0", SearchQuery(limit: 5)) } }
            try await group.waitForAll()
        }
        _ = try await warm.get("soak0", id: warmID)
        warm.close()
        // The baseline once the server has closed the warm-up's connections (a busy machine can take longer than a
        // fixed pause): its sockets are the listener's again.
        let closed = monotonicSeconds() + 120
        while server.descriptorTargets.filter({ $0 == "socket" }).count > listeningSockets && monotonicSeconds() < closed {
            try await Task.sleep(for: .milliseconds(20))
        }
        let baselineDescriptors = try #require(server.openDescriptors)
        let baselineTargets = server.descriptorTargets

        let stop = StopFlag()
        let tally = Tally()
        let samples = Locked<[SoakSample]>([])
        let hostileThread = Thread { hostile(port: server.port, stop: stop, tally: tally) }
        hostileThread.start()
        await withTaskGroup(of: Void.self) { group in
            for n in 0..<workers {
                group.addTask { await worker(n, port: server.port, stop: stop, tally: tally) }
            }
            group.addTask {
                var lastOperations = 0
                for second in 1...seconds {
                    try? await Task.sleep(for: .seconds(1))
                    let operations = tally.operations.value
                    let sample = SoakSample(
                        second: second, residentBytes: server.residentBytes ?? 0,
                        descriptors: server.openDescriptors ?? 0, operations: operations - lastOperations)
                    lastOperations = operations
                    samples.withLock { $0.append(sample) }
                    if second % 60 == 0 {
                        report(
                            "soak: \(second / 60) min, RSS \(sample.residentBytes >> 20) MB, "
                                + "\(sample.descriptors) fds, "
                                + "\(operations) operations, \(tally.failures.value) failures")
                    }
                }
                stop.stop()
            }
        }
        while !hostileThread.isFinished { usleep(10_000) }

        // Every client is gone: the server must give back every descriptor it took for them.
        var descriptorsAfter = server.openDescriptors ?? -1
        let settle = monotonicSeconds() + 120
        let baselineSockets = baselineTargets.filter { $0 == "socket" }.count
        while server.descriptorTargets.filter({ $0 == "socket" }).count > baselineSockets
            && monotonicSeconds() < settle
        {
            usleep(50_000)
            descriptorsAfter = server.openDescriptors ?? -1
        }
        let all = samples.withLock { $0 }
        if let csvPath {
            let lines = ["second,rss_bytes,fds,operations"]
                + all.map { "\($0.second),\($0.residentBytes),\($0.descriptors),\($0.operations)" }
            try lines.joined(separator: "\n").appending("\n").write(toFile: csvPath, atomically: true, encoding: .utf8)
        }
        let verdict = SoakVerdict(all)
        report(
            "soak: \(seconds) s, \(workers) workers: \(tally.operations.value) operations "
                + "(\(tally.operations.value / max(1, seconds))/s), \(tally.hostile.value) hostile connections, "
                + "\(tally.failures.value) failures; fds baseline \(baselineDescriptors), after \(descriptorsAfter)")
        for line in verdict.lines { report("soak: " + line) }
        #expect(tally.failures.value == 0, "first failure: \(tally.firstFailure.withLock { $0 } ?? "")")
        // SQLite's read connections open the WAL on first use, so database files may be a few more than at the
        // baseline; everything else (sockets, pipes, event descriptors) must be exactly as it was, except the pipes
        // of a sanitizer's symbolizer.
        let targetsAfter = server.descriptorTargets
        let database = server.dataDirectory + "/"
        let sanitized = ReliabilityKnobs.sanitized
        let notDatabase = { (targets: [String]) in
            targets.filter { !$0.hasPrefix(database) && !(sanitized && $0.hasPrefix("pipe:")) }
        }
        #expect(notDatabase(targetsAfter) == notDatabase(baselineTargets), "\(baselineTargets) -> \(targetsAfter)")
        // Six connections to the documents' file (the writer, four readers, the text indexer: the database and its
        // WAL each, one shared-memory index) make 13, and each event loop's own point-read connection 2 more; five to
        // the text index's file (the indexer and the readers, which attach it) make 11. The background checkpointer
        // keeps one more, opened at its first checkpoint (the database and its WAL: 2). The four readers of blob
        // chunks and ranges (no mmap) add the database and its WAL each (8).
        let databaseFiles = 34 + 2 * loops
        #expect(
            targetsAfter.filter { $0.hasPrefix(database) }.count <= databaseFiles,
            "database files open: \(targetsAfter)")
        if seconds >= 120 {
            #expect(!verdict.residentGrows, "RSS keeps growing")
            #expect(!verdict.descriptorsGrow, "open descriptors keep growing")
        }
        // Too short to see a trend, a run still sees a leak the size of its load: at no sample did the server hold
        // more descriptors than the baseline, one per connection the load opened, and the database files that
        // SQLite's connections open on first use (`databaseFiles` at most, above); nor, at its peak, memory beyond a
        // bound with room for the read cache (64 MiB) and SQLite's page caches: a request that leaked its document or
        // a photo would pass it in seconds.
        let opened = tally.connections.value
        let mostDescriptors = all.map(\.descriptors).max() ?? 0
        #expect(
            mostDescriptors <= baselineDescriptors + opened + databaseFiles,
            "\(mostDescriptors) fds, \(opened) connections")
        let peak = server.peakResidentBytes ?? 0
        let allowed = SoakBounds.residentBytes + seconds * SoakBounds.residentBytesPerSecond
        let memoryBound = SanitizerBuild.current.residentBound(allowed)
        report("soak: peak RSS \(peak >> 20) MB (bound \(memoryBound >> 20) MB), at most \(mostDescriptors) fds")
        #expect(peak > 0 && peak <= memoryBound, "peak RSS \(peak >> 20) MB")
        let after = LarderClient(port: server.port)
        defer { after.close() }
        _ = try await after.ping()
    }

    @Test func mixedLoadGivesBackEveryDescriptor() async throws {
        let minutes = ReliabilityKnobs.int("LARDER_SOAK_MINUTES", default: 0)
        try await Self.run(
            seconds: minutes > 0 ? minutes * 60 : ReliabilityKnobs.int("LARDER_SOAK_SECONDS", default: 6),
            workers: ReliabilityKnobs.int("LARDER_SOAK_WORKERS", default: 6),
            csvPath: ProcessInfo.processInfo.environment["LARDER_SOAK_CSV"])
    }
}

/// "Keeps growing", decided from the samples after a warm-up (the first fifth, at least 30 s): the run is cut into
/// four quarters, and a figure keeps growing when each quarter's median is above the last and the final quarter's
/// is clearly above the first (RSS by 10% and 8 MB, descriptors by 5). Caches that fill and then stay are a plateau,
/// not growth; a leak is a staircase.
struct SoakVerdict {
    var lines: [String] = []
    var residentGrows = false
    var descriptorsGrow = false

    init(_ samples: [SoakSample]) {
        let warmUp = max(30, samples.count / 5)
        let steady = Array(samples.dropFirst(warmUp))
        guard steady.count >= 8 else {
            lines.append("too short to judge growth (\(samples.count) samples)")
            return
        }
        func quarters(_ value: (SoakSample) -> Int) -> [Int] {
            (0..<4).map { q in
                let part = steady[(q * steady.count / 4)..<((q + 1) * steady.count / 4)].map(value).sorted()
                return part[part.count / 2]
            }
        }
        let rss = quarters(\.residentBytes)
        let fds = quarters(\.descriptors)
        func rising(_ q: [Int]) -> Bool { zip(q, q.dropFirst()).allSatisfy { $0 < $1 } }
        residentGrows = rising(rss) && Double(rss[3]) > Double(rss[0]) * 1.10 && rss[3] - rss[0] > 8 << 20
        descriptorsGrow = rising(fds) && fds[3] - fds[0] > 5
        let allRSS = samples.map(\.residentBytes)
        let allFDs = samples.map(\.descriptors)
        let ops = steady.map(\.operations).sorted()
        lines.append(
            "RSS MB min/max \(allRSS.min()! >> 20)/\(allRSS.max()! >> 20); after warm-up (\(warmUp) s) quarter medians "
                + rss.map { "\($0 >> 20)" }.joined(separator: " / ") + " MB -> \(residentGrows ? "GROWING" : "flat")")
        lines.append(
            "fds min/max \(allFDs.min()!)/\(allFDs.max()!); quarter medians "
                + fds.map(String.init).joined(separator: " / ") + " -> \(descriptorsGrow ? "GROWING" : "flat")")
        lines.append(
            "operations per second after warm-up: min \(ops.first!) median \(ops[ops.count / 2]) max \(ops.last!)")
    }
}

/// What a short soak may use at most: a baseline with room for the read cache and SQLite's caches, and a little more
/// for each second of load (what a long run adds is judged by `SoakVerdict`).
enum SoakBounds {
    static let residentBytes = 160 << 20
    static let residentBytesPerSecond = 1 << 20
}

/// The judge of a long soak, on samples made up to show each case: the suite's short run is too short for it.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SoakVerdictTests {
    static func samples(_ count: Int, rss: (Int) -> Int, fds: (Int) -> Int) -> [SoakSample] {
        (1...count).map { SoakSample(second: $0, residentBytes: rss($0), descriptors: fds($0), operations: 1000) }
    }

    @Test func aStaircaseIsGrowthAndAPlateauIsNot() {
        let mb = 1 << 20
        // Leaks: 1 MB and one descriptor more every 10 s, over 10 minutes.
        let leak = SoakVerdict(Self.samples(600, rss: { 100 * mb + $0 / 10 * mb }, fds: { 40 + $0 / 10 }))
        #expect(leak.residentGrows && leak.descriptorsGrow, "\(leak.lines)")
        // Caches that fill during the warm-up and then stay, with noise on top.
        let plateau = SoakVerdict(
            Self.samples(600, rss: { (min($0, 60) + 100 + $0 % 7) * mb }, fds: { 40 + $0 % 3 }))
        #expect(!plateau.residentGrows && !plateau.descriptorsGrow, "\(plateau.lines)")
        // Growth too small to matter (a few MB over the run) is not a leak.
        let slight = SoakVerdict(Self.samples(600, rss: { 100 * mb + $0 * 4096 }, fds: { _ in 40 }))
        #expect(!slight.residentGrows, "\(slight.lines)")
        // Too short to judge: said so, and nothing is called growth.
        let short = SoakVerdict(Self.samples(20, rss: { $0 * 10 * mb }, fds: { $0 }))
        #expect(!short.residentGrows && !short.descriptorsGrow && short.lines.first?.hasPrefix("too short") == true)
    }
}
