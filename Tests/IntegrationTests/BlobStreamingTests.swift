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

/// Blobs larger than a frame against a real `larder-server` process: streamed uploads that resume after
/// the server is killed, downloads by ranges, and the server's memory while a 200 MB photo goes through.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct BlobStreamingTests {
    /// Writes a JPEG of `size` bytes to `path` a block at a time: SOI, a 4000x3000 frame header, comment segments of
    /// filler (each stamped with its number, so that no two are alike), EOI. Never more than a block in memory.
    static func writeJPEG(size: Int, to path: String, seed: UInt64 = 7) throws {
        var block = [UInt8](repeating: 0, count: 65_533)
        var state = seed
        for i in 0..<block.count {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            block[i] = UInt8(truncatingIfNeeded: state >> 56)
        }
        guard FileManager.default.createFile(atPath: path, contents: nil),
            let handle = FileHandle(forWritingAtPath: path)
        else { throw ServerTestError("cannot create \(path)") }
        defer { try? handle.close() }
        var head: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x0B, 0xB8, 0x0F, 0xA0, 3]
        head += [1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]
        var written = head.count
        var pending = head
        var segment: UInt64 = 0
        while written < size - 2 {
            let room = size - 2 - written
            if room < 4 {
                pending += [UInt8](repeating: 0xFF, count: room)  // fill bytes before EOI
                written += room
                break
            }
            let length = min(room - 2, 65_535)
            pending += [0xFF, 0xFE, UInt8(length >> 8), UInt8(length & 0xFF)]
            var body = block[0..<(length - 2)]
            segment += 1
            withUnsafeBytes(of: segment.bigEndian) { stamp in
                for (n, byte) in stamp.enumerated() where n < body.count { body[n] = byte }
            }
            pending += body
            written += 2 + length
            if pending.count >= 4 << 20 {
                try handle.write(contentsOf: pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
        pending += [0xFF, 0xD9]
        try handle.write(contentsOf: pending)
    }

    /// The SHA-256 and size of a file, read a block at a time.
    static func digest(_ path: String) throws -> (String, Int) {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw ServerTestError("cannot read \(path)") }
        defer { try? handle.close() }
        var hasher = SHA256()
        var size = 0
        while let data = try handle.read(upToCount: 4 << 20), !data.isEmpty {
            hasher.update(Array(data))
            size += data.count
        }
        return (hasher.finalizeHex(), size)
    }

    static func directory(_ name: String) throws -> URL {
        let root = temporaryTestDirectory(name)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        return root
    }

    /// Starts `putBlob` of `source` and SIGKILLs `server` once `at` bytes are committed; returns when it was killed
    /// (waiting with a generous deadline), with the upload still going, to resume once a server is back.
    static func putKillingTheServer(_ client: LarderClient, _ source: String, server: ServerChild, at: Int64)
        async throws -> Task<BlobInfo, any Error>
    {
        let claimed = Locked(false)
        // Set once the killed server has exited: until then it holds the data directory, and a second server on it
        // would be refused.
        let killed = Locked(false)
        let upload = Task {
            try await client.putBlob(contentsOf: URL(fileURLWithPath: source), resumeWithin: .seconds(120)) { step in
                guard step.done >= at, step.done < step.total else { return }
                let kill = claimed.withLock { (done: inout Bool) -> Bool in
                    defer { done = true }
                    return !done
                }
                guard kill else { return }
                server.kill()
                killed.withLock { $0 = true }
            }
        }
        guard await waitUntil(300, { killed.withLock { $0 } }) else {
            throw ServerTestError("the upload never reached \(at) bytes")
        }
        return upload
    }

    /// A 200 MB JPEG goes up in chunks and comes back by ranges over a Unix socket, byte-exact, while the server's
    /// peak resident memory grows by less than 64 MB (it holds a few 1 MiB chunks at a time, never the photo).
    @Test func a200MBPhotoRoundTripsInBoundedServerMemory() async throws {
        let root = try Self.directory("blob-200mb")
        defer { try? FileManager.default.removeItem(at: root) }
        let socket = root.appendingPathComponent("s").path
        let source = root.appendingPathComponent("big.jpg").path
        let copy = root.appendingPathComponent("copy.jpg").path
        let size = 200_000_000
        try Self.writeJPEG(size: size, to: source)
        let server = try ServerChild(
            dataDirectory: root.appendingPathComponent("data").path, arguments: ["--socket", socket])
        defer { _ = server.stop() }
        let client = LarderClient(socketPath: socket)
        defer { client.close() }
        // Warm up (connection, statements, the first blob) before the baseline.
        let small = root.appendingPathComponent("small.jpg").path
        try Self.writeJPEG(size: 3 << 20, to: small, seed: 3)
        let warm = try await client.putBlob(contentsOf: URL(fileURLWithPath: small))
        try await client.writeBlob(warm.id, to: URL(fileURLWithPath: copy))
        let before = try #require(server.residentBytes)
        let steps = Locked<[BlobTransferProgress]>([])
        let info = try await client.putBlob(
            contentsOf: URL(fileURLWithPath: source), progress: { step in steps.withLock { $0.append(step) } })
        let (sha256, _) = try Self.digest(source)
        #expect(info.size == Int64(size) && info.sha256 == sha256 && info.width == 4000 && info.height == 3000)
        #expect(steps.withLock { $0.last } == BlobTransferProgress(done: Int64(size), total: Int64(size)))
        // A whole BLOB_GET of it is refused with a pointer to ranges; the ranged read writes it byte-exact.
        do {
            _ = try await client.blobGet(info.id)
            Issue.record("a 200 MB blob was answered in one frame")
        } catch {
            #expect(error.status == .payloadTooLarge && error.details["size"]?.intValue == Int64(size))
        }
        try await client.writeBlob(info.id, to: URL(fileURLWithPath: copy))
        let (copySHA, copySize) = try Self.digest(copy)
        #expect(copySize == size && copySHA == sha256)
        let peak = try #require(server.peakResidentBytes)
        report("200 MB photo: server RSS \(before >> 20) MiB before, peak \(peak >> 20) MiB")
        #expect(
            peak - before < SanitizerBuild.current.residentBound(64 << 20), "the server's peak RSS grew by \((peak - before) >> 20) MiB")
    }

    /// An upload whose server is killed (SIGKILL) at a random offset goes on, by itself, once a server is back on
    /// the same data directory: the blob has the file's SHA-256, and the disk holds one copy of it.
    @Test func anUploadResumesAfterTheServerIsKilledMidway() async throws {
        let root = try Self.directory("blob-resume")
        defer { try? FileManager.default.removeItem(at: root) }
        let socket = root.appendingPathComponent("s").path
        let data = root.appendingPathComponent("data").path
        let source = root.appendingPathComponent("photo.jpg").path
        let size = 24 << 20
        try Self.writeJPEG(size: size, to: source, seed: UInt64.random(in: 1...1000))
        let (sha256, _) = try Self.digest(source)
        let first = try ServerChild(dataDirectory: data, arguments: ["--socket", socket])
        let killAt = Int64.random(in: Int64(4 << 20)...Int64(20 << 20))
        let client = LarderClient(socketPath: socket)
        defer { client.close() }
        let upload = try await Self.putKillingTheServer(client, source, server: first, at: killAt)
        let second = try ServerChild(dataDirectory: data, arguments: ["--socket", socket])
        let info = try await upload.value
        #expect(info.sha256 == sha256 && info.size == Int64(size))
        let copy = root.appendingPathComponent("copy.jpg").path
        try await client.writeBlob(info.id, to: URL(fileURLWithPath: copy))
        #expect(try Self.digest(copy) == (sha256, size))
        #expect(second.stop() == 0)
        // One copy on disk: one file anywhere under the data directory holds the photo's bytes, and all of them
        // together (the database checkpointed at shutdown, the blob files) come to about its size, not twice it.
        var copies: [String] = []
        var bytes = 0
        let walker = FileManager.default.enumerator(atPath: data)
        while let relative = walker?.nextObject() as? String {
            let path = data + "/" + relative
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            guard attributes[.type] as? FileAttributeType == .typeRegular else { continue }
            let fileSize = attributes[.size] as? Int ?? 0
            bytes += fileSize
            if fileSize == size, try Self.digest(path).0 == sha256 { copies.append(relative) }
        }
        #expect(copies.count == 1, "files holding the photo: \(copies)")
        #expect(bytes < size + size / 4, "the data directory holds \(bytes) bytes for a \(size)-byte blob")
    }

    /// An upload whose connection is cut mid-way (a proxy between client and server closes both ends once 5 to 7 of
    /// its 8 chunks went through) goes on over a new connection from the offset the server committed: the server
    /// held a partial upload at the cut, the chunks sent after it start there and come to less than the file, and
    /// the blob has the file's SHA-256.
    @Test func anUploadResumesAfterItsConnectionIsCut() async throws {
        let root = try Self.directory("blob-cut")
        defer { try? FileManager.default.removeItem(at: root) }
        let socket = root.appendingPathComponent("s").path
        let source = root.appendingPathComponent("photo.jpg").path
        let size = 8 << 20
        try Self.writeJPEG(size: size, to: source, seed: UInt64.random(in: 1...1000))
        let (sha256, _) = try Self.digest(source)
        let server = try ServerChild(
            dataDirectory: root.appendingPathComponent("data").path, arguments: ["--socket", socket])
        defer { _ = server.stop() }
        // With 1 MiB chunks and 4 in flight, at least one chunk was answered (committed) before the cut.
        let cutAfter = Int.random(in: 5...7) << 20
        let proxy = try CuttingProxy(path: root.appendingPathComponent("p").path, upstream: socket, cutAfter: cutAfter)
        defer { proxy.stop() }
        let client = LarderClient(socketPath: proxy.path)
        defer { client.close() }
        let upload = Task {
            try await client.putBlob(contentsOf: URL(fileURLWithPath: source), resumeWithin: .seconds(120))
        }
        try #require(await waitUntil(120) { proxy.wasCut }, "the connection was never cut")
        // The server's own account of the upload, asked directly while the client cannot reach it.
        let direct = try RawClient.unix(path: socket)
        try direct.hello()
        let uploadID = try #require(proxy.upload)
        let status = try direct.call(.blobUploadStatus, BlobUploadIDRequest(upload: uploadID).json)
        let committed = try BlobUploadInfo(json: status.jsonObject()).offset
        #expect(committed > 0 && committed < Int64(size), "the server committed \(committed) of \(size) bytes")
        proxy.release()
        let info = try await upload.value
        #expect(info.sha256 == sha256 && info.size == Int64(size))
        let after = proxy.chunks.filter { $0.connection > 1 }
        let resumedAt = try #require(after.map(\.offset).min(), "no chunk was sent after the cut")
        #expect(resumedAt >= committed, "resumed at \(resumedAt), before the committed \(committed)")
        let sentAfter = after.reduce(0) { $0 + $1.bytes }
        report("cut after \(cutAfter >> 20) MiB of chunks: \(committed) bytes committed, resumed at \(resumedAt), "
            + "\(sentAfter) bytes sent after the cut over \(proxy.connections - 1) more connection(s)")
        #expect(sentAfter < size, "\(sentAfter) bytes sent after the cut: the upload started again")
        #expect(Int64(sentAfter) >= Int64(size) - resumedAt)
        let copy = root.appendingPathComponent("copy.jpg").path
        try await client.writeBlob(info.id, to: URL(fileURLWithPath: copy))
        #expect(try Self.digest(copy) == (sha256, size))
        #expect(try await client.blobList().blobs.count == 1)
    }

    /// The same on the PostgreSQL store: the upload lives in the database, so a server started again on it (as
    /// another server sharing it would) resumes it; ranges read the chunks.
    @Test func anUploadResumesOnPostgreSQLAfterTheServerIsKilled() async throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let root = try Self.directory("blob-resume-pg")
        defer { try? FileManager.default.removeItem(at: root) }
        let socket = root.appendingPathComponent("s").path
        let source = root.appendingPathComponent("photo.jpg").path
        let size = 6 << 20
        try Self.writeJPEG(size: size, to: source, seed: UInt64.random(in: 1...1000))
        let (sha256, _) = try Self.digest(source)
        let arguments = ["--socket", socket, "--postgres", schema.url]
        let data = root.appendingPathComponent("data").path
        let first = try ServerChild(dataDirectory: data, arguments: arguments)
        let client = LarderClient(socketPath: socket)
        defer { client.close() }
        let upload = try await Self.putKillingTheServer(client, source, server: first, at: 3 << 20)
        let second = try ServerChild(dataDirectory: data, arguments: arguments)
        defer { _ = second.stop() }
        let info = try await upload.value
        #expect(info.sha256 == sha256)
        let copy = root.appendingPathComponent("copy.jpg").path
        try await client.writeBlob(info.id, to: URL(fileURLWithPath: copy))
        #expect(try Self.digest(copy) == (sha256, size))
        let last = try await client.blob(info.id, range: Int64(size - 1)..<Int64(size))
        #expect(last == Data([0xD9]))
    }
}
