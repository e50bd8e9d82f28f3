#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderStore
import LarderSync
import LarderTestThreads
import LarderWire
import Testing

/// Every write a client saw acknowledged, as the client saw it. Unanswered writes are of unknown outcome (Protocol.md
/// section 7) and are not recorded.
final class AcknowledgedWrites: Sendable {
    struct Document: Sendable {
        var rev: Int64
        var data: JSONObject
        var hasBlob: Bool
    }

    struct State: Sendable {
        var documents: [UUID: Document] = [:]
        var deleted: Set<UUID> = []
        /// Deletes sent and not answered: the document may or may not exist, so it is not checked.
        var deleting: Set<UUID> = []
        /// Blob id to its SHA-256; attached blobs name their document.
        var blobs: [UUID: (sha256: String, attachedTo: UUID?)] = [:]
    }

    let state = Locked(State())

    func created(_ record: Record) {
        state.withLock { $0.documents[record.id] = Document(rev: record.rev, data: record.data, hasBlob: false) }
    }

    func updated(_ record: Record) {
        state.withLock { $0.documents[record.id]?.rev = record.rev; $0.documents[record.id]?.data = record.data }
    }

    /// Called before a DELETE is sent: until its answer, the document's fate is unknown.
    func deleting(_ id: UUID) {
        state.withLock {
            $0.documents[id] = nil
            $0.deleting.insert(id)
        }
    }

    func deleted(_ id: UUID) {
        state.withLock {
            $0.deleting.remove(id)
            $0.deleted.insert(id)
        }
    }

    func blob(_ info: BlobInfo, document: UUID?) {
        state.withLock {
            $0.blobs[info.id] = (info.sha256, document)
            if let document { $0.documents[document]?.hasBlob = true }
        }
    }

    var snapshot: State { state.withLock { $0 } }
}

/// Crash recovery: clients write documents and blobs against a real `larder-server`, which is killed with
/// SIGKILL at a random moment and restarted; every acknowledged write must be there (blobs by SHA-256), every
/// acknowledged delete gone, and `PRAGMA integrity_check` must say ok. `scripts/crash-test ROUNDS` runs many rounds.
@Suite(.ownThreads, ReliabilityKnobs.timeLimit(plus: ReliabilityKnobs.int("LARDER_CRASH_ROUNDS", default: 3)))  // a minute a round
struct ReliabilityCrashTests {
    static let collection = "crash"
    /// Writes each round has acknowledged before its kill.
    static let minimumAcknowledged = 40

    /// One writer: creates, patches (revision-checked), deletes and blob puts in a loop until its server is gone.
    static func writer(
        _ number: Int, port: Int, ledger: AcknowledgedWrites, stop: StopFlag, acknowledged: SharedCounter,
        refused: Locked<[String]>
    ) async -> Int {
        let client = LarderClient(port: port, connections: 1, requestTimeout: .seconds(20))
        defer { client.close() }
        var mine: [UUID] = []
        var operations = 0
        while !stop.isStopped {
            operations += 1
            do throws(LarderError) {
                switch operations % 6 {
                case 0:
                    let bytes = uniqueJPEG(commentBytes: Int.random(in: 1_000...40_000))
                    let target = operations % 12 == 0 ? mine.randomElement() : nil
                    let attach = target.map { BlobAttachment(collection: collection, id: $0) }
                    let info = try await client.blobPut(Data(bytes), sha256: SHA256.hex(bytes), attachTo: attach)
                    ledger.blob(info, document: target)
                    acknowledged.add(1)
                case 1, 3:
                    guard let id = mine.randomElement(), let known = ledger.snapshot.documents[id] else { continue }
                    let record = try await client.patch(
                        collection, id: id, patch: ["patched": .int(Int64(operations))], rev: known.rev)
                    ledger.updated(record)
                    acknowledged.add(1)
                case 5 where mine.count > 4:
                    // Only documents without blobs: deleting one also deletes its blobs, which the ledger keeps.
                    let documents = ledger.snapshot.documents
                    guard let index = mine.indices.first(where: { documents[mine[$0]]?.hasBlob == false }) else {
                        continue
                    }
                    let id = mine.remove(at: index)
                    let rev = ledger.snapshot.documents[id]?.rev
                    ledger.deleting(id)
                    _ = try await client.delete(collection, id: id, rev: rev)
                    ledger.deleted(id)
                    acknowledged.add(1)
                default:
                    let data: JSONObject = [
                        "writer": .int(Int64(number)), "n": .int(Int64(operations)),
                        "text": .string(String(repeating: "crash ", count: Int.random(in: 1...200))),
                    ]
                    let record = try await client.create(collection, data, id: UUID())
                    ledger.created(record)
                    acknowledged.add(1)
                    mine.append(record.id)
                }
            } catch {
                // The server was killed (or is about to be): every later request fails the same way. Anything else
                // but a slow answer is a write the running server refused.
                if !stop.isStopped && error.status != .unavailable && error.status != .deadlineExceeded {
                    refused.withLock { $0.append("\(error.status.name): \(error.message)") }
                }
                if !stop.isStopped { try? await Task.sleep(for: .milliseconds(10)) }
                if stop.isStopped || error.status == .unavailable { break }
            }
        }
        return operations
    }

    /// What a check of a restarted server found.
    struct Check {
        var documents = 0
        var blobs = 0
        /// Deletes sent but never answered, and how many of them had committed before the kill.
        var unansweredDeletes = 0
        var unansweredDeletesCommitted = 0
        /// Each one is also recorded as a test issue.
        var problems: [String] = []

        mutating func expect(_ condition: Bool, _ problem: @autoclosure () -> String) {
            if !condition { problems.append(problem()) }
        }
    }

    /// Checks a restarted server against the ledger.
    static func verify(port: Int, ledger: AcknowledgedWrites) async throws -> Check {
        let client = LarderClient(port: port, connections: 2, requestTimeout: .seconds(30))
        defer { client.close() }
        let expected = ledger.snapshot
        var check = Check(documents: expected.documents.count, blobs: expected.blobs.count)
        let ids = Array(expected.documents.keys)
        for start in stride(from: 0, to: ids.count, by: 1000) {
            let found = try await client.getMany(collection, ids: Array(ids[start..<min(ids.count, start + 1000)]))
            for id in found.missing { check.expect(false, "acknowledged document \(id) lost") }
            for record in found.records {
                guard let want = expected.documents[record.id] else { continue }
                // A write that was sent but never answered may have committed too: the revision can only be ahead.
                check.expect(record.rev >= want.rev, "document \(record.id) went back to rev \(record.rev)")
                check.expect(record.rev != want.rev || record.data == want.data, "document \(record.id) changed")
            }
        }
        let deleted = Array(expected.deleted)
        for start in stride(from: 0, to: deleted.count, by: 1000) {
            let chunk = Array(deleted[start..<min(deleted.count, start + 1000)])
            let found = try await client.getMany(collection, ids: chunk)
            for record in found.records { check.expect(false, "acknowledged delete of \(record.id) undone") }
        }
        if !expected.deleting.isEmpty {
            let found = try await client.getMany(collection, ids: Array(expected.deleting.prefix(1000)))
            check.unansweredDeletes = found.records.count + found.missing.count
            check.unansweredDeletesCommitted = found.missing.count
        }
        for (id, want) in expected.blobs {
            let blob = try await client.blobGet(id)
            check.expect(
                blob.info.sha256 == want.sha256 && SHA256.hex(Array(blob.bytes)) == want.sha256, "blob \(id) changed")
            check.expect(blob.info.attachedTo?.id == want.attachedTo, "blob \(id) lost its attachment")
        }
        // No torn blob anywhere, acknowledged or not: each one's bytes hash to its recorded digest.
        var cursor: String?
        var all = 0
        repeat {
            let page = try await client.blobList(limit: 200, cursor: cursor)
            for info in page.blobs where expected.blobs[info.id] == nil {
                let blob = try await client.blobGet(info.id)
                check.expect(SHA256.hex(Array(blob.bytes)) == info.sha256, "unacknowledged blob \(info.id) is torn")
            }
            all += page.blobs.count
            cursor = page.nextCursor
        } while cursor != nil
        check.expect(all >= expected.blobs.count, "\(expected.blobs.count - all) acknowledged blobs lost")
        for problem in check.problems { Issue.record(Comment(rawValue: problem)) }
        return check
    }

    static func integrityCheck(_ directory: String) throws -> String {
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        defer { store.close() }
        return try store.integrityCheck()
    }

    /// The whole run: `rounds` kills, each after `maxWriteMs` or less of writing by `writers` clients.
    static func run(rounds: Int, writers: Int, maxWriteMs: Int) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("larder-crash-\(UUID().wireString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appendingPathComponent("data").path
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let ledger = AcknowledgedWrites()
        var server = try ServerChild(dataDirectory: directory)
        for round in 1...rounds {
            let stop = StopFlag()
            let killAfter = Int.random(in: (maxWriteMs / 5)...maxWriteMs)
            let current = server
            let acknowledged = SharedCounter()
            let refused = Locked<[String]>([])
            let killedAtMs = SharedCounter()
            let started = monotonicSeconds()
            let operations = await withTaskGroup(of: Int.self) { group in
                for n in 0..<writers {
                    group.addTask {
                        await writer(
                            n, port: current.port, ledger: ledger, stop: stop, acknowledged: acknowledged,
                            refused: refused)
                    }
                }
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(killAfter))
                    // On a busy machine the writers may have done little yet: wait for the round's minimum of
                    // acknowledged writes, so every round kills a server with writes behind it and in flight. The
                    // deadline only runs out on a server that refuses or loses them (the round then fails).
                    let patience = monotonicSeconds() + 300
                    while acknowledged.value < minimumAcknowledged && refused.withLock({ $0.isEmpty })
                        && monotonicSeconds() < patience
                    {
                        try? await Task.sleep(for: .milliseconds(10))
                    }
                    killedAtMs.add(Int((monotonicSeconds() - started) * 1000))
                    current.kill()
                    stop.stop()
                    return 0
                }
                return await group.reduce(0, +)
            }
            #expect(server.process.terminationReason == .uncaughtSignal)
            // The server took writes before it died: one that refused them all would leave nothing to check.
            #expect(
                acknowledged.value >= minimumAcknowledged,
                "round \(round): \(acknowledged.value) writes acknowledged before the kill")
            let refusals = refused.withLock { $0 }
            #expect(refusals.isEmpty, "round \(round): writes refused: \(refusals.prefix(3))")
            let integrity = try integrityCheck(directory)
            #expect(integrity == "ok", "round \(round): integrity_check says \(integrity)")
            server = try ServerChild(dataDirectory: directory)
            let check = try await verify(port: server.port, ledger: ledger)
            report(
                "crash-test round \(round)/\(rounds): killed after \(killedAtMs.value) ms and \(operations) operations; "
                    + "\(check.documents) documents, \(check.blobs) blobs, \(ledger.snapshot.deleted.count) deletes "
                    + "acknowledged so far (\(check.unansweredDeletesCommitted) of \(check.unansweredDeletes) "
                    + "unanswered deletes had committed), "
                    + (check.problems.isEmpty ? "all as acknowledged" : "\(check.problems.count) PROBLEMS")
                    + "; integrity_check \(integrity)")
        }
        #expect(server.stop() == 0)
        #expect(try integrityCheck(directory) == "ok")
    }

    @Test func acknowledgedWritesSurviveSIGKILL() async throws {
        try await Self.run(
            rounds: ReliabilityKnobs.int("LARDER_CRASH_ROUNDS", default: 3),
            writers: ReliabilityKnobs.int("LARDER_CRASH_WRITERS", default: 4),
            maxWriteMs: ReliabilityKnobs.int("LARDER_CRASH_MAX_WRITE_MS", default: 600))
    }
}
