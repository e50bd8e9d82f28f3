import Foundation
import LarderIO
import LarderWire

/// How far a blob transfer has come.
public struct BlobTransferProgress: Sendable, Equatable {
    /// Bytes the server committed (an upload) or the file received (a download).
    public var done: Int64
    /// Bytes the whole transfer moves.
    public var total: Int64
    /// Progress of `done` bytes out of `total`.
    public init(done: Int64, total: Int64) {
        self.done = done
        self.total = total
    }
    /// From 0 to 1 (1 for an empty transfer).
    public var fraction: Double { total == 0 ? 1 : Double(done) / Double(total) }
}

/// A blob transfer under way: its progress as an `AsyncSequence`, and its result.
public struct BlobTransfer<Value: Sendable>: Sendable {
    /// Every step of the transfer, ending with `done == total` when it succeeds; finishes with the transfer.
    public let progress: AsyncStream<BlobTransferProgress>
    private let task: Task<Value, any Error>

    typealias Body = @Sendable (@escaping @Sendable (BlobTransferProgress) -> Void) async throws(LarderError) -> Value

    init(_ body: @escaping Body) {
        let (stream, continuation) = AsyncStream<BlobTransferProgress>.makeStream(
            bufferingPolicy: .bufferingNewest(64))
        progress = stream
        task = Task {
            defer { continuation.finish() }
            return try await body { continuation.yield($0) }
        }
    }

    /// Waits for the transfer; its error, if it failed.
    ///
    /// - Throws: the transfer's error: what `putBlob(contentsOf:…)` or `writeBlob(_:to:…)` throws.
    public var value: Value {
        get async throws(LarderError) {
            do {
                return try await task.value
            } catch let error as LarderError {
                throw error
            } catch {
                throw LarderError(.internal, "the transfer failed: \(error)")
            }
        }
    }

    /// Stops the transfer (an upload stays on the server, resumable until it expires).
    public func cancel() { task.cancel() }
}

extension LarderClient {
    /// Errors after which an upload or download goes on over a new connection: the connection broke or timed out.
    static func isTransient(_ error: LarderError) -> Bool {
        error.status == .unavailable || error.status == .deadlineExceeded
    }

    /// Runs `body` again after a transient error until `deadline`, with a short growing pause (the server is
    /// restarting, or the network is back in a moment).
    private func retrying<T: Sendable>(
        until deadline: ContinuousClock.Instant, _ body: () async throws(LarderError) -> T
    ) async throws(LarderError) -> T {
        var pause = Duration.milliseconds(50)
        while true {
            do throws(LarderError) {
                return try await body()
            } catch where LarderClient.isTransient(error) && ContinuousClock.now < deadline {
                if Task.isCancelled { throw LarderError(.unavailable, "the transfer was cancelled") }
                try? await Task.sleep(for: pause)
                pause = min(pause * 2, .seconds(1))
            }
        }
    }

    /// Stores the JPEG in `file` as a blob, streaming it a chunk at a time (`BLOB_UPLOAD`), so a blob of any size
    /// up to `maxBlobBytes` takes a few chunks of memory. After a broken connection it asks the server where the
    /// upload stands and goes on from there, for up to `resumeWithin` after the break (the server may be
    /// restarting). The server checks every chunk's CRC-32 and the whole SHA-256 before the blob appears.
    ///
    /// - Throws: `INVALID_ARGUMENT` when `file` cannot be read; `UNSUPPORTED_MEDIA_TYPE` for an empty file or one that
    ///   is not a JPEG; `PAYLOAD_TOO_LARGE` for more than `maxBlobBytes`; `CONFLICT` when `id` is taken; `NOT_FOUND`
    ///   when the attachment's document does not exist; `RESOURCE_EXHAUSTED` past the server's upload quotas;
    ///   `PERMISSION_DENIED` for a `read` token, or a token limited to collections without `attachTo` one of them;
    ///   `UNAVAILABLE` or `DEADLINE_EXCEEDED` when the server stays away longer than `resumeWithin`, or the task is
    ///   cancelled.
    public func putBlob(
        contentsOf file: URL, id: UUID? = nil, attachTo attachment: BlobAttachment? = nil,
        resumeWithin: Duration = .seconds(60), progress: (@Sendable (BlobTransferProgress) -> Void)? = nil
    ) async throws(LarderError) -> BlobInfo {
        let reader = try FileReader(file)
        let size = reader.size
        guard size > 0 else {
            throw LarderError(.unsupportedMediaType, "\(file.path) is empty; only JPEG photos are stored")
        }
        // The SHA-256 goes with FINISH, hashed from the chunks as they are read to be sent: one pass over the file,
        // not a pass before the first chunk. Bytes a resumed upload skips are read for the hash alone.
        var hasher = SHA256()
        var hashed: Int64 = 0
        func hash(upTo end: Int64) throws(LarderError) {
            while hashed < end {
                let bytes = try reader.read(at: hashed, count: Int(min(Int64(1 << 20), end - hashed)))
                hasher.update(bytes)
                hashed += Int64(bytes.count)
            }
        }
        let blobID = id ?? UUID()
        var deadline = ContinuousClock.now + resumeWithin
        let begin = BlobUploadRequest(size: size, id: blobID, attach: attachment)
        // Sent again after a lost answer, a begin finds its id taken by the upload it made: that one is resumed.
        var upload = try await retrying(until: deadline) { () throws(LarderError) -> BlobUploadInfo in
            try await message(BlobUploadInfo.self, .blobUpload, begin.json)
        }
        progress?(BlobTransferProgress(done: upload.offset, total: size))
        // Up to `window` chunks in flight, sent in order on the connection (each is handed to it before the next is
        // read from the file), so the server, which applies one connection's chunks in order, is never idle between
        // them. Any refusal or break: wait for the rest to settle, ask the server where it stands, go on from there.
        let window = 4
        var inFlight: [Task<BlobUploadInfo, any Error>] = []
        defer { for task in inFlight { task.cancel() } }
        var offset = upload.offset
        var next = offset
        var damaged = 0
        let uploadID = upload.upload
        while offset < size {
            while inFlight.count < window && next < size {
                let count = Int(min(Int64(upload.chunkBytes), size - next))
                let bytes = try reader.read(at: next, count: count)
                try hash(upTo: next)
                if next == hashed {
                    hasher.update(bytes)
                    hashed += Int64(count)
                }
                let request = BlobUploadChunkRequest(upload: uploadID, offset: next, crc32: CRC32.checksum(bytes))
                let (handedOver, signal) = AsyncStream<Void>.makeStream()
                inFlight.append(
                    Task { [self] in
                        defer { signal.finish() }
                        let frame = try await call(
                            .blobUploadChunk, jsonBytes: request.json.bytes, binary: bytes,
                            enqueued: { signal.finish() })
                        return try BlobUploadInfo(json: try frame.jsonObject())
                    })
                for await _ in handedOver {}
                next += Int64(count)
            }
            do throws(LarderError) {
                let task = inFlight.removeFirst()
                do {
                    upload = try await task.value
                } catch let error as LarderError {
                    throw error
                } catch {
                    throw LarderError(.internal, "the upload failed: \(error)")
                }
                offset = upload.offset
                deadline = ContinuousClock.now + resumeWithin
                progress?(BlobTransferProgress(done: offset, total: size))
            } catch {
                if error.field == "crc32" {  // damaged on the way: nothing was written, send it again
                    damaged += 1
                    if damaged > 3 { throw error }
                } else if !LarderClient.isTransient(error) && error.status != .conflict {
                    throw error
                }
                for task in inFlight { _ = try? await task.value }
                inFlight = []
                upload = try await retrying(until: deadline) { () throws(LarderError) -> BlobUploadInfo in
                    try await message(BlobUploadInfo.self, .blobUploadStatus, BlobUploadIDRequest(upload: uploadID).json)
                }
                offset = upload.offset
                next = offset
            }
        }
        try hash(upTo: size)
        let digest = hasher.finalizeHex()
        let finish = BlobUploadFinishRequest(upload: upload.upload, sha256: digest)
        let info = try await retrying(until: deadline) { () throws(LarderError) -> BlobInfo in
            do throws(LarderError) {
                return try await message(BlobInfo.self, .blobUploadFinish, finish.json)
            } catch where error.status == .notFound && error.field == "upload" {
                // A FINISH whose answer was lost: the blob exists under the id we chose.
                let info = try await blobHead(blobID)
                guard info.sha256 == digest else { throw error }
                return info
            }
        }
        progress?(BlobTransferProgress(done: size, total: size))
        return info
    }

    /// `putBlob(contentsOf:…)` with its progress as an `AsyncSequence`; its `value` throws what `putBlob` throws.
    public func blobUpload(
        contentsOf file: URL, id: UUID? = nil, attachTo attachment: BlobAttachment? = nil,
        resumeWithin: Duration = .seconds(60)
    ) -> BlobTransfer<BlobInfo> {
        BlobTransfer { (report) throws(LarderError) in
            try await self.putBlob(
                contentsOf: file, id: id, attachTo: attachment, resumeWithin: resumeWithin, progress: report)
        }
    }

    /// The bytes of `range` of blob `id`, in one request: at most what a frame carries (`maxBinaryPartBytes`, else
    /// PAYLOAD_TOO_LARGE). A range that runs past the end of the blob is cut there, as an HTTP byte range is, so
    /// the first 64 KiB of a photo of any size are:
    ///
    /// ```swift
    /// let head = try await client.blob(photo, range: 0..<65_536)   // 65,536 bytes, or the whole of a smaller photo
    /// ```
    ///
    /// - Throws: `INVALID_ARGUMENT` for a range that starts at or past the end (field `offset`, the blob's `size` in
    ///   the details); `PAYLOAD_TOO_LARGE` for a range longer than one answer carries; `NOT_FOUND` when no such blob;
    ///   and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func blob(_ id: UUID, range: Range<Int64>) async throws(LarderError) -> Data {
        guard !range.isEmpty else { return Data() }
        let request = BlobGetRequest(id: id, offset: range.lowerBound, length: Int64(range.count))
        return Data(try await call(.blobGet, request.json).binary)
    }

    /// Writes blob `id` to `file`, read in ranges of `blobChunkBytes` (a few chunks of memory whatever its size),
    /// reading on after a broken connection for up to `resumeWithin`. The file appears only once complete and its
    /// SHA-256 checked (it is written beside it first, then renamed). `range` writes only those bytes, cut at the
    /// end of the blob as `blob(_:range:)` cuts it.
    ///
    /// - Throws: `NOT_FOUND` when no such blob, or it is deleted while it is read; `INVALID_ARGUMENT` for a `range`
    ///   that starts at or past the end; `INTERNAL` when `file` cannot be written or the blob arrives damaged;
    ///   `PERMISSION_DENIED` as any request; `UNAVAILABLE` or `DEADLINE_EXCEEDED` when the server stays away longer
    ///   than `resumeWithin`, or the task is cancelled.
    @discardableResult
    public func writeBlob(
        _ id: UUID, to file: URL, range: Range<Int64>? = nil, resumeWithin: Duration = .seconds(60),
        progress: (@Sendable (BlobTransferProgress) -> Void)? = nil
    ) async throws(LarderError) -> BlobInfo {
        try await writeBlob(
            id, to: file, range: range, resumeWithin: resumeWithin, window: LarderClient.downloadWindow,
            rangeBytes: nil, progress: progress)
    }

    /// Ranges a download keeps in flight (`larder-bench blobs --window` measures others).
    package static let downloadWindow = 4

    /// `writeBlob` with `window` ranges in flight, each of `rangeBytes` (nil: the server's `blobChunkBytes`; never
    /// more than one answer carries).
    @discardableResult
    package func writeBlob(
        _ id: UUID, to file: URL, range: Range<Int64>? = nil, resumeWithin: Duration = .seconds(60), window: Int,
        rangeBytes: Int?, progress: (@Sendable (BlobTransferProgress) -> Void)? = nil
    ) async throws(LarderError) -> BlobInfo {
        let deadline = ContinuousClock.now + resumeWithin
        let info = try await retrying(until: deadline) { () throws(LarderError) in try await blobHead(id) }
        let whole = 0..<info.size
        if let range, range.lowerBound < 0 || range.lowerBound >= info.size {
            throw LarderError(
                .invalidArgument, "the range starts at \(range.lowerBound), outside the blob, which has \(info.size) "
                    + "bytes; start it from 0 to \(info.size - 1)", field: "range", details: ["size": .int(info.size)])
        }
        let wanted = range?.clamped(to: whole) ?? whole
        let limits = try await serverHello().limits
        let chunk = Int64(max(1, min(rangeBytes ?? limits.blobChunkBytes, limits.maxBinaryPartBytes)))
        let partial = file.path + ".partial"
        let writer = try FileWriter(partial)
        var complete = false
        defer {
            writer.close()
            if !complete { unlink(partial) }
        }
        var hasher = SHA256()
        var offset = wanted.lowerBound
        progress?(BlobTransferProgress(done: 0, total: Int64(wanted.count)))
        // A few ranges in flight at once (each a request of its own, answered in any order, each retried after a
        // broken connection), written in order: memory stays `window` chunks.
        let window = max(1, window)
        var pending: [Task<[UInt8], any Error>] = []
        defer { for task in pending { task.cancel() } }
        var next = wanted.lowerBound
        func start() {
            let length = min(chunk, wanted.upperBound - next)
            let request = BlobGetRequest(id: id, offset: next, length: length)
            next += length
            let sha256 = info.sha256
            pending.append(
                Task { [self] in
                    let until = ContinuousClock.now + resumeWithin
                    let frame = try await retrying(until: until) { () throws(LarderError) in
                        try await call(.blobGet, request.json)
                    }
                    let got = try BlobInfo(json: try frame.jsonObject())
                    guard got.sha256 == sha256, frame.binary.count == Int(length) else {
                        throw LarderError(.notFound, "blob \(id.wireString) was deleted while it was read", field: "id")
                    }
                    return frame.binary
                })
        }
        while next < wanted.upperBound && pending.count < window { start() }
        while !pending.isEmpty {
            let bytes: [UInt8]
            do {
                bytes = try await pending.removeFirst().value
            } catch let error as LarderError {
                throw error
            } catch {
                throw LarderError(.internal, "reading blob \(id.wireString) failed: \(error)")
            }
            try writer.write(bytes)
            hasher.update(bytes)
            offset += Int64(bytes.count)
            progress?(BlobTransferProgress(done: offset - wanted.lowerBound, total: Int64(wanted.count)))
            if next < wanted.upperBound { start() }
        }
        if range == nil {
            let digest = hasher.finalizeHex()
            guard digest == info.sha256 else {
                throw LarderError(
                    .internal,
                    "the blob arrived damaged (SHA-256 \(digest), the server's \(info.sha256)); read it again")
            }
        }
        try writer.sync()
        guard rename(partial, file.path) == 0 else {
            throw LarderError(
                .internal, "cannot rename \(partial) to \(file.path): \(String(cString: strerror(errno)))")
        }
        complete = true
        return info
    }

    /// `writeBlob(_:to:…)` with its progress as an `AsyncSequence`; its `value` throws what `writeBlob` throws.
    public func blobDownload(
        _ id: UUID, to file: URL, range: Range<Int64>? = nil, resumeWithin: Duration = .seconds(60)
    ) -> BlobTransfer<BlobInfo> {
        BlobTransfer { (report) throws(LarderError) in
            try await self.writeBlob(id, to: file, range: range, resumeWithin: resumeWithin, progress: report)
        }
    }
}

/// Reads a file by ranges (POSIX `pread`: no position shared between reads).
final class FileReader: @unchecked Sendable {  // the descriptor is only read with pread
    let fd: Int32
    let size: Int64
    let path: String

    init(_ file: URL) throws(LarderError) {
        path = file.path
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw LarderError(.invalidArgument, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            throw LarderError(.invalidArgument, "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        size = Int64(info.st_size)
    }

    deinit { close(fd) }

    func read(at offset: Int64, count: Int) throws(LarderError) -> [UInt8] {
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var done = 0
            while done < count {
                let n = pread(fd, buffer.baseAddress! + done, count - done, off_t(offset) + off_t(done))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 {
                    failure = n == 0 ? -1 : errno
                    break
                }
                done += n
            }
            initialized = done
        }
        guard bytes.count == count else {
            let why = failure == -1 ? "the file got shorter while it was read" : String(cString: strerror(failure))
            throw LarderError(.invalidArgument, "cannot read \(path): \(why)")
        }
        return bytes
    }
}

/// Writes a new file front to back, its bytes on their way to disk as they are written (so `sync` waits only for the
/// last of them).
final class FileWriter: @unchecked Sendable {  // used by one task at a time
    private var fd: Int32
    private var size: Int64 = 0
    let path: String

    init(_ path: String) throws(LarderError) {
        self.path = path
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw LarderError(.internal, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
    }

    func write(_ bytes: [UInt8]) throws(LarderError) {
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                #if canImport(Glibc)
                Glibc.write(fd, raw.baseAddress! + written, raw.count - written)
                #else
                Darwin.write(fd, raw.baseAddress! + written, raw.count - written)
                #endif
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw LarderError(.internal, "cannot write \(path): \(String(cString: strerror(errno)))")
            }
            written += n
        }
        startWriteback(fd, offset: size, count: bytes.count)
        size += Int64(bytes.count)
    }

    func sync() throws(LarderError) {
        guard fsync(fd) == 0 else {
            throw LarderError(.internal, "cannot flush \(path) to disk: \(String(cString: strerror(errno)))")
        }
    }

    func close() {
        guard fd >= 0 else { return }
        #if canImport(Glibc)
        _ = Glibc.close(fd)
        #else
        _ = Darwin.close(fd)
        #endif
        fd = -1
    }
}
