import Foundation
import LarderClient
import LarderServer
import LarderStore
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Runs blocking `work` (waiting on a process, a socket or a gate) on a thread of its own and awaits it, so that an
/// async test does not hold one of the few threads every async test of the run shares (in a whole-suite run, tests
/// that blocked them starved others past their time limits).
func offThePool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
    }
}

/// `larder backup` against a running server: a consistent online snapshot, taken while writers go on, that a new
/// server starts on.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct BackupTests {
    // Promise: OPERATING.md "the test holds a backup open while 100 more writes are acknowledged"
    /// Writers create documents without pause. Once a hundred are acknowledged, `larder backup` starts and is held
    /// inside its snapshot's read transaction (a test gate) until the writers have had 100 more writes acknowledged:
    /// writes are not blocked by the backup. Then the backup finishes. A server started on the file
    /// holds every write acknowledged before the backup began, none sent after its snapshot was taken, and passes
    /// the store's integrity check.
    @Test func backupUnderWriteLoadHoldsEveryAcknowledgedWrite() async throws {
        let gate = try ServerGate()
        let server = try ClientTestServer(hooks: ServerHooks(backup: gate.gate))
        defer { server.stop() }
        let client = server.client(connections: 4)
        defer { client.close() }
        struct Writes {
            var acknowledged: [UUID] = []
            /// Ids of the writes sent after the snapshot was known to be taken.
            var sentAfterSnapshot: Set<UUID> = []
            var snapshotTaken = false
            var stop = false
            var failures: [String] = []
        }
        let writes = Locked(Writes())
        let writers = (0..<4).map { writer in
            Task {
                var n = 0
                while !writes.withLock({ $0.stop }) {
                    n += 1
                    let id = UUID()
                    let after = writes.withLock { $0.snapshotTaken }
                    if after { writes.withLock { _ = $0.sentAfterSnapshot.insert(id) } }
                    do {
                        let data: JSONObject = ["writer": .int(Int64(writer)), "n": .int(Int64(n))]
                        _ = try await client.create("orders", data, id: id)
                        writes.withLock { $0.acknowledged.append(id) }
                    } catch {
                        writes.withLock { $0.failures.append("\(error)") }
                        return
                    }
                }
            }
        }
        defer { writes.withLock { $0.stop = true } }
        let started = await waitUntil(600) { writes.withLock { $0.acknowledged.count >= 100 || !$0.failures.isEmpty } }
        try #require(started && writes.withLock { $0.failures }.isEmpty, "\(writes.withLock { $0.failures })")
        let before = Set(writes.withLock { $0.acknowledged })

        let directory = NSTemporaryDirectory() + "larder-backup-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory + "/restored", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/backup.sqlite"
        let process = ChildProcess()
        process.executableURL = CLITests.binary
        process.arguments = ["--port", String(server.port), "backup", file]
        let output = directory + "/out"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle(forWritingAtPath: output)
        try process.run()

        try await offThePool { try gate.waitForHeld(1) }
        writes.withLock { $0.snapshotTaken = true }
        let heldAt = writes.withLock { $0.acknowledged.count }
        // 600 s: in a whole-suite run on 2 busy cores, 300 writes took more than 120 s.
        let wroteWhileHeld = await waitUntil(600) { writes.withLock { $0.acknowledged.count >= heldAt + 100 } }
        #expect(wroteWhileHeld, "writes stopped while the backup held its snapshot")
        #expect(!FileManager.default.fileExists(atPath: file), "the file appears only once the backup is complete")
        gate.open()
        try await offThePool { process.waitUntilExit() }
        let said = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        #expect(process.terminationStatus == 0, "larder backup: \(said)")
        #expect(said.contains("\"format\":\"sqlite\""))
        writes.withLock { $0.stop = true }
        for writer in writers { await writer.value }
        #expect(writes.withLock { $0.failures }.isEmpty)
        let sentAfter = writes.withLock { $0.sentAfterSnapshot }
        #expect(sentAfter.count > 0)
        // No snapshot files are left in the server's data directory.
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: server.directory)
            .filter { $0.hasPrefix(".larder-backup-") }
        #expect(leftovers.isEmpty)

        // Restore: a data directory holding the file as larder.sqlite.
        try FileManager.default.copyItem(atPath: file, toPath: directory + "/restored/larder.sqlite")
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory + "/restored"
        configuration.logLevel = .error
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory + "/restored"))
        let restored = LarderServer(configuration: configuration, store: store)
        let port = try restored.start()
        defer { restored.shutdown() }
        let reader = LarderClient(port: port)
        defer { reader.close() }
        var found = Set<UUID>()
        var missing = Set<UUID>()
        let ids = Array(before) + Array(sentAfter)
        for start in stride(from: 0, to: ids.count, by: 1000) {
            let page = try await reader.getMany("orders", ids: Array(ids[start..<min(ids.count, start + 1000)]))
            found.formUnion(page.records.map(\.id))
            missing.formUnion(page.missing)
        }
        let lost = before.subtracting(found).count
        let extra = sentAfter.subtracting(missing).count
        #expect(lost == 0, "\(lost) of \(before.count) writes acknowledged before the backup are missing")
        #expect(extra == 0, "\(extra) of \(sentAfter.count) writes sent after the snapshot was taken are in it")
        #expect(try store.integrityCheck() == "ok")
    }

    /// A frame carries less than maxBlobBytes: BACKUP_READ answers at most `maxFrameBytes - 24 - maxJSONBytes`
    /// bytes, as Protocol.md section 5.8 says, derived from HELLO's limits; exactly that many are read, one byte more
    /// is PAYLOAD_TOO_LARGE naming it.
    @Test func backupReadIsBoundedByWhatAFrameCarries() throws {
        let protocolText = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("Protocol.md"), encoding: .utf8)
        let section = try #require(
            protocolText.components(separatedBy: "### 5.8 ").dropFirst().first?.components(separatedBy: "## 6.").first)
        #expect(section.contains("One answer carries at most `maxFrameBytes - 24 - maxJSONBytes` bytes"))
        #expect(section.contains("A `length` over it is `PAYLOAD_TOO_LARGE`"))
        #expect(Limits.default.maxBinaryPartBytes == 37_748_712 && section.contains("37,748,712 with the defaults"))

        try withServerOnPort0({
            $0.limits.maxDocumentBytes = 16 << 10
            $0.limits.maxJSONBytes = 32 << 10
            $0.limits.blobChunkBytes = 16 << 10
            $0.limits.maxFrameBytes = 24 + (32 << 10) + (48 << 10)
        }) { _, port in
            let c = try RawClient.tcp(port: port)
            let limits = try c.hello().limits
            let largest = min(limits.maxBlobBytes, limits.maxFrameBytes - 24 - limits.maxJSONBytes)
            #expect(largest == 48 << 10 && limits.maxBlobBytes > largest, "the test needs a frame smaller than a blob")
            for n in 0..<300 { _ = try c.call(.create, ["collection": "notes", "data": ["n": .int(Int64(n))]]) }
            let snapshot = try BackupResponse(json: try c.call(.backup).jsonObject())
            #expect(snapshot.size > Int64(largest), "the test needs a backup larger than one read")
            let at = try c.call(
                .backupRead, BackupReadRequest(backup: snapshot.backup, offset: 0, length: largest).json)
            #expect(at.status == .ok && at.binary.count == largest)
            let over = try c.call(
                .backupRead, BackupReadRequest(backup: snapshot.backup, offset: 0, length: largest + 1).json)
            #expect(over.status == .payloadTooLarge)
            #expect(over.replyJSON["limit"]?.intValue == Int64(largest))
            #expect(over.replyJSON["field"]?.stringValue == "length")
            #expect(try c.call(.ping).status == .ok)
        }
    }

    /// BACKUP_READ answers at most maxBlobBytes: one byte more is PAYLOAD_TOO_LARGE with the limit, and the
    /// connection goes on; a backup number the connection does not hold is NOT_FOUND.
    @Test func backupReadIsBoundedByMaxBlobBytes() throws {
        let limit = 64 << 10
        try withServerOnPort0({ $0.limits.maxBlobBytes = limit }) { _, port in
            let c = try RawClient.tcp(port: port)
            _ = try c.hello()
            for n in 0..<300 { _ = try c.call(.create, ["collection": "notes", "data": ["n": .int(Int64(n))]]) }
            let started = try c.call(.backup)
            #expect(started.status == .ok)
            let snapshot = try BackupResponse(json: try started.jsonObject())
            #expect(snapshot.size > Int64(limit), "the test needs a backup larger than the limit")
            let over = try c.call(
                .backupRead, BackupReadRequest(backup: snapshot.backup, offset: 0, length: limit + 1).json)
            #expect(over.status == .payloadTooLarge)
            #expect(over.replyJSON["limit"]?.intValue == Int64(limit))
            #expect(over.replyJSON["field"]?.stringValue == "length")
            let at = try c.call(.backupRead, BackupReadRequest(backup: snapshot.backup, offset: 0, length: limit).json)
            #expect(at.status == .ok)
            #expect(at.binary.count == limit)
            // SQLite's header: the file is a database.
            #expect(Array(at.binary.prefix(16)) == Array("SQLite format 3\0".utf8))
            let wrong = try c.call(
                .backupRead, BackupReadRequest(backup: snapshot.backup + 1, offset: 0, length: 16).json)
            #expect(wrong.status == .notFound)
            let past = try c.call(
                .backupRead, BackupReadRequest(backup: snapshot.backup, offset: snapshot.size + 1, length: 16).json)
            #expect(past.status == .invalidArgument)
        }
    }

    /// Reads the whole snapshot over `c` in ranges of `chunk` bytes.
    static func readAll(_ c: RawClient, _ snapshot: BackupResponse, chunk: Int = 1 << 20) throws -> [UInt8] {
        var bytes: [UInt8] = []
        while Int64(bytes.count) < snapshot.size {
            let part = try c.call(
                .backupRead, BackupReadRequest(backup: snapshot.backup, offset: Int64(bytes.count), length: chunk).json)
            guard part.status == .ok, !part.binary.isEmpty else { throw ServerTestError("BACKUP_READ: \(part.replyText)") }
            bytes += part.binary
        }
        return bytes
    }

    /// Starts a server on a new data directory holding `snapshot` as `larder.sqlite` (a restore) and lets `body`
    /// read it over a raw connection.
    static func withRestored(_ snapshot: [UInt8], _ body: (RawClient) throws -> Void) throws {
        let directory = temporaryTestDirectory("larder-restored")
        defer { try? FileManager.default.removeItem(at: directory) }
        let data = directory.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        try Data(snapshot).write(to: data.appendingPathComponent("larder.sqlite"))
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.ioQueues = 2
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        let c = try RawClient.tcp(port: port)
        try c.hello()
        try body(c)
    }

    /// The snapshots this process holds open in `directory`: a server unlinks each snapshot file once it is open, so
    /// what is left of it on disk is the descriptor (`... (deleted)` in /proc).
    static func openSnapshots(in directory: URL) -> Int {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
            .filter { $0.contains(directory.lastPathComponent) && $0.contains("/.larder-backup-") }.count
    }

    // Promise: Protocol §5.8 "a second BACKUP on a connection replaces the first"
    /// A second BACKUP on one connection replaces the first: the first's number is NOT_FOUND from then on, the
    /// second holds the write made between them, and the server holds one snapshot for the connection, none once it
    /// closes.
    @Test func aSecondBackupOnAConnectionReplacesTheFirst() async throws {
        let directory = temporaryTestDirectory("larder-backup-twice")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.ioQueues = 2
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        // The connection closes at the end of this block.
        do {
            let client = try RawClient.tcp(port: port)
            try client.hello()
            let ids = ["00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"]
            _ = try client.call(.create, ["collection": "notes", "id": .string(ids[0]), "data": [:]])
            let first = try BackupResponse(json: try client.call(.backup).jsonObject())
            _ = try client.call(.create, ["collection": "notes", "id": .string(ids[1]), "data": [:]])
            let second = try BackupResponse(json: try client.call(.backup).jsonObject())
            #expect(second.backup != first.backup)
            let old = try client.call(.backupRead, BackupReadRequest(backup: first.backup, offset: 0, length: 16).json)
            #expect(old.status == .notFound && old.replyJSON["field"] == "backup", "\(old.replyText)")
            #expect(Self.openSnapshots(in: directory) == 1, "the server holds more than one snapshot for one connection")
            let bytes = try Self.readAll(client, second)
            #expect(SHA256.hex(bytes) == second.sha256)
            try Self.withRestored(bytes) { restored in
                for id in ids {
                    let got = try restored.call(.get, ["collection": "notes", "id": .string(id)])
                    #expect(got.status == .ok, "\(id): \(got.replyText)")
                }
            }
        }
        let released = await waitUntil(120) { Self.openSnapshots(in: directory) == 0 }
        #expect(released, "the snapshot outlived its connection")
    }

    // Promise: Protocol §5.8 "BACKUP_READ at offset = size answers 0 bytes"
    /// Reading at the snapshot's end answers OK with no bytes and `length` 0; a read that starts inside and runs
    /// past the end answers the bytes that are left.
    @Test func aBackupReadAtTheEndAnswersNoBytes() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            _ = try c.call(.create, ["collection": "notes", "data": ["n": 1]])
            let snapshot = try BackupResponse(json: try c.call(.backup).jsonObject())
            let end = try c.call(.backupRead, BackupReadRequest(backup: snapshot.backup, offset: snapshot.size, length: 16).json)
            #expect(end.status == .ok, "\(end.replyText)")
            #expect(end.binary.isEmpty && end.replyJSON["length"] == 0, "\(end.replyText)")
            #expect(end.replyJSON["offset"] == .int(snapshot.size))
            let tail = try c.call(
                .backupRead, BackupReadRequest(backup: snapshot.backup, offset: snapshot.size - 10, length: 16).json)
            #expect(tail.status == .ok && tail.binary.count == 10 && tail.replyJSON["length"] == 10, "\(tail.replyText)")
        }
    }

    // Promise: Protocol §5.8 "a BACKUP holds every write sent before it on the same connection"
    /// Writes and a BACKUP sent together in one write, without waiting for any answer: the snapshot holds every one
    /// of the writes, as a read after them would see them.
    @Test func aBackupPipelinedAfterWritesHoldsThem() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            let ids = (0..<40).map { _ in UUID() }
            var requests: [(Opcode, JSONObject)] = ids.map { id -> (Opcode, JSONObject) in
                (.create, ["collection": "notes", "id": .string(id.wireString), "data": ["text": "pipelined"]])
            }
            requests.append((.backup, [:]))
            let sent = try c.sendTogether(requests)
            var answers: [UInt32: Frame] = [:]
            while answers.count < sent.count {
                let frame = try #require(try c.receive(timeout: 120))
                answers[frame.requestID] = frame
            }
            for id in sent.dropLast() { #expect(answers[id]?.status == .ok, "\(answers[id]?.replyText ?? "")") }
            let backup = try #require(answers[sent.last!])
            #expect(backup.status == .ok, "\(backup.replyText)")
            let snapshot = try BackupResponse(json: try backup.jsonObject())
            let bytes = try Self.readAll(c, snapshot)
            try Self.withRestored(bytes) { restored in
                let many = try restored.call(
                    .getMany, ["collection": "notes", "ids": .array(ids.map { .string($0.wireString) })])
                #expect(many.replyJSON["records"]?.arrayValue?.count == ids.count, "\(many.replyText.prefix(300))")
                #expect(many.replyJSON["missing"]?.arrayValue?.isEmpty == true, "\(many.replyText.prefix(300))")
            }
        }
    }

    // Promise: OPERATING.md "the photos' bytes in blobs/ are copied into the backup"
    /// Photos whose bytes live in `blobs/` (uploaded in chunks) and one sent whole are all in the server's backup: a
    /// server restored from it serves each byte for byte, with no `blobs/` of its own to read from.
    @Test func photosInBlobFilesAreInTheBackup() throws {
        try withServerOnPort0({ $0.limits.blobChunkBytes = 16 << 10 }) { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            var photos: [UUID: [UInt8]] = [:]
            for size in [40_000, 100_000] {
                let bytes = uniqueJPEG(commentBytes: size)
                let finished = try BlobRangeLimitTests.upload(c, bytes, chunk: 16 << 10)
                #expect(finished.status == .ok, "\(finished.replyText)")
                photos[try BlobInfo(json: try finished.jsonObject()).id] = bytes
            }
            let whole = uniqueJPEG(commentBytes: 5_000)
            let put = try c.call(.blobPut, [:], binary: whole)
            photos[try BlobInfo(json: try put.jsonObject()).id] = whole
            let snapshot = try BackupResponse(json: try c.call(.backup).jsonObject())
            let bytes = try Self.readAll(c, snapshot)
            try Self.withRestored(bytes) { restored in
                for (id, photo) in photos {
                    let got = try restored.call(.blobGet, BlobIDRequest(id: id).json)
                    #expect(got.status == .ok, "\(got.replyText)")
                    #expect(got.binary == photo, "photo \(id) came back with \(got.binary.count) bytes")
                }
            }
        }
    }
}
