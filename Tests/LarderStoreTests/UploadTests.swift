import Foundation
import LarderSync
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// A clock the tests move by hand (upload expiry never waits).
final class ManualClock: @unchecked Sendable {
    private let lock = Lock()
    private var now: Int64 = 1_780_000_000_000
    var read: @Sendable () -> Int64 { { [self] in lock.withLock { now } } }
    func advance(ms: Int64) { lock.withLock { now += ms } }
}

/// A JPEG of `size` bytes: SOI, a frame header, then COM segments of filler up to EOI (no pixel data is needed:
/// the store checks the structure).
func syntheticJPEG(size: Int, width: Int = 4000, height: Int = 3000, seed: UInt64 = 1) -> [UInt8] {
    var out: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08]
    out += [UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8), UInt8(width & 0xFF), 3]
    out += [1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]
    out.reserveCapacity(size)
    var state = seed
    while out.count < size - 2 {
        let room = size - 2 - out.count
        guard room >= 4 else {
            out += [UInt8](repeating: 0xFF, count: room)  // fill bytes before EOI
            break
        }
        let length = min(room - 2, 65535)
        out += [0xFF, 0xFE, UInt8(length >> 8), UInt8(length & 0xFF)]
        for _ in 0..<(length - 2) {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            out.append(UInt8(truncatingIfNeeded: state >> 56))
        }
    }
    out += [0xFF, 0xD9]
    return out
}

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct UploadTests {
    /// Sends `bytes` as an upload in chunks of `chunk` bytes.
    static func send(_ store: AnyStore, _ upload: BlobUploadInfo, _ bytes: [UInt8], from: Int = 0, chunk: Int)
        throws -> BlobUploadInfo
    {
        var info = upload
        var offset = from
        while offset < bytes.count {
            let part = Array(bytes[offset..<min(offset + chunk, bytes.count)])
            info = try store.uploadChunk(upload.upload, offset: Int64(offset), bytes: part, crc32: CRC32.checksum(part))
            offset += part.count
        }
        return info
    }

    @Test(arguments: StoreKind.allCases) func chunksBecomeABlobReadableByRanges(_ kind: StoreKind) throws {
        let jpeg = syntheticJPEG(size: 300_000)
        try withStore(kind, { $0.blobChunkBytes = 64 << 10 }) { store in
            let document = try store.create("items", id: nil, data: ["item": "相機"])
            let attach = BlobAttachment(collection: "items", id: document.id)
            let upload = try store.uploadBegin(
                BlobUploadRequest(size: Int64(jpeg.count), sha256: SHA256.hex(jpeg), attach: attach))
            #expect(upload.offset == 0 && upload.chunkBytes == 64 << 10)
            // Nothing is a blob before FINISH.
            expectError(.notFound) { _ = try store.blobHead(upload.id) }
            let sent = try Self.send(store, upload, jpeg, chunk: 64 << 10)
            #expect(sent.offset == Int64(jpeg.count))
            #expect(try store.uploadStatus(upload.upload).offset == Int64(jpeg.count))
            let meta = try store.uploadFinish(upload.upload, sha256: nil)
            #expect(meta.id == upload.id && meta.size == Int64(jpeg.count) && meta.sha256 == SHA256.hex(jpeg))
            #expect(meta.width == 4000 && meta.height == 3000 && meta.attachedTo == attach)
            expectError(.notFound, field: "upload") { _ = try store.uploadStatus(upload.upload) }
            #expect(try store.blobGet(meta.id).bytes == jpeg)
            // Ranges: the first byte, the last byte, across chunk boundaries, the whole blob, cut at the end, and
            // starting past it.
            #expect(try store.blobRead(meta.id, offset: 0, length: 1).bytes == [0xFF])
            #expect(try store.blobRead(meta.id, offset: Int64(jpeg.count - 1), length: 1).bytes == [0xD9])
            let across = (64 << 10) - 10
            #expect(try store.blobRead(meta.id, offset: Int64(across), length: 70_000).bytes
                == Array(jpeg[across..<(across + 70_000)]))
            #expect(try store.blobRead(meta.id, offset: 0, length: jpeg.count).bytes == jpeg)
            #expect(try store.blobRead(meta.id, offset: Int64(jpeg.count - 1), length: 2).bytes == [0xD9])
            #expect(try store.blobRead(meta.id, offset: 0, length: jpeg.count + 65_536).bytes == jpeg)
            for (offset, length) in [(jpeg.count, 1), (jpeg.count + 5, 1)] {
                do {
                    _ = try store.blobRead(meta.id, offset: Int64(offset), length: length)
                    Issue.record("a range starting past the end was answered")
                } catch let error as LarderError {
                    #expect(error.status == .invalidArgument && error.field == "offset")
                    #expect(error.details["size"]?.intValue == Int64(jpeg.count))
                }
            }
            // Ranges of a blob stored whole (BLOB_PUT) too.
            let small = syntheticJPEG(size: 5000, seed: 2)
            let put = try store.blobPut(id: nil, bytes: small, expectedSHA256: nil, attachTo: nil)
            #expect(try store.blobRead(put.id, offset: 4990, length: 10).bytes == Array(small[4990...]))
            #expect(try store.blobRead(put.id, offset: 4990, length: 11).bytes == Array(small[4990...]))
            expectError(.invalidArgument) { _ = try store.blobRead(put.id, offset: 5000, length: 1) }
            // Deleting the document deletes the blob and its chunks.
            _ = try store.delete("items", id: document.id, expectedRev: nil)
            expectError(.notFound) { _ = try store.blobRead(meta.id, offset: 0, length: 1) }
        }
    }

    @Test(arguments: StoreKind.allCases) func wrongOffsetsAndDamagedChunksAreRefusedWithTheCommittedOffset(
        _ kind: StoreKind
    ) throws {
        let jpeg = syntheticJPEG(size: 10_000)
        try withStore(kind, { $0.blobChunkBytes = 4096 }) { store in
            let upload = try store.uploadBegin(BlobUploadRequest(size: Int64(jpeg.count)))
            let first = Array(jpeg[0..<4096])
            _ = try store.uploadChunk(upload.upload, offset: 0, bytes: first, crc32: CRC32.checksum(first))
            let second = Array(jpeg[4096..<8192])
            // A chunk sent again (its answer was lost), and one that skips ahead: CONFLICT naming 4096.
            for offset in [0, 8192] {
                do {
                    _ = try store.uploadChunk(
                        upload.upload, offset: Int64(offset), bytes: second, crc32: CRC32.checksum(second))
                    Issue.record("a chunk at the wrong offset was taken")
                } catch let error as LarderError {
                    #expect(error.status == .conflict && error.field == "offset")
                    #expect(error.details["offset"]?.intValue == 4096)
                }
            }
            // Damaged on the way: INVALID_ARGUMENT on crc32, nothing written.
            do {
                _ = try store.uploadChunk(upload.upload, offset: 4096, bytes: second, crc32: CRC32.checksum(second) ^ 1)
                Issue.record("a damaged chunk was taken")
            } catch let error as LarderError {
                #expect(error.status == .invalidArgument && error.field == "crc32")
                #expect(error.details["offset"]?.intValue == 4096)
            }
            #expect(try store.uploadStatus(upload.upload).offset == 4096)
            // Over the chunk size, past the declared size.
            let big = Array(jpeg[4096..<(4096 + 4097)])
            expectError(.payloadTooLarge) {
                _ = try store.uploadChunk(upload.upload, offset: 4096, bytes: big, crc32: CRC32.checksum(big))
            }
            // FINISH before the last byte names where to go on.
            expectError(.conflict, field: "upload") { _ = try store.uploadFinish(upload.upload, sha256: nil) }
            _ = try Self.send(store, upload, jpeg, from: 4096, chunk: 4096)
            expectError(.invalidArgument, field: "sha256") {
                _ = try store.uploadFinish(upload.upload, sha256: String(repeating: "0", count: 64))
            }
            // A failed check drops the upload.
            expectError(.notFound, field: "upload") { _ = try store.uploadStatus(upload.upload) }
        }
    }

    @Test(arguments: StoreKind.allCases) func whatIsNotAJPEGIsRefusedAtFinish(_ kind: StoreKind) throws {
        var bytes = syntheticJPEG(size: 20_000)
        bytes[bytes.count - 1] = 0  // no EOI: truncated
        try withStore(kind, { $0.blobChunkBytes = 8192 }) { store in
            let upload = try store.uploadBegin(BlobUploadRequest(size: Int64(bytes.count)))
            _ = try Self.send(store, upload, bytes, chunk: 8192)
            expectError(.unsupportedMediaType) { _ = try store.uploadFinish(upload.upload, sha256: nil) }
            #expect(try store.stats().blobs == 0)
        }
    }

    @Test(arguments: StoreKind.allCases) func beginChecksSizeIdAttachmentAndQuota(_ kind: StoreKind) throws {
        try withStore(kind, {
            $0.maxBlobBytes = 1 << 20
            $0.maxUploadBytes = 1_500_000
        }) { store in
            expectError(.payloadTooLarge, field: "size") {
                _ = try store.uploadBegin(BlobUploadRequest(size: (1 << 20) + 1))
            }
            expectError(.notFound, field: "attach.id") {
                _ = try store.uploadBegin(
                    BlobUploadRequest(size: 10, attach: BlobAttachment(collection: "items", id: UUID())))
            }
            let first = try store.uploadBegin(BlobUploadRequest(size: 1 << 20))
            expectError(.conflict, field: "id") { _ = try store.uploadBegin(BlobUploadRequest(size: 10, id: first.id)) }
            // The quota: 1 MiB is open; 500,000 more would pass 1,500,000.
            do {
                _ = try store.uploadBegin(BlobUploadRequest(size: 500_000))
                Issue.record("an upload past the quota was begun")
            } catch let error as LarderError {
                #expect(error.status == .resourceExhausted && error.details["limit"]?.intValue == 1_500_000)
            }
            _ = try store.uploadBegin(BlobUploadRequest(size: 1_500_000 - (1 << 20)))
            // Aborting frees its share.
            try store.uploadAbort(first.upload)
            expectError(.notFound, field: "upload") { try store.uploadAbort(first.upload) }
            _ = try store.uploadBegin(BlobUploadRequest(size: 500_000))
        }
    }

    /// An abandoned upload expires on the injected clock: its status is NOT_FOUND at once, and the sweep frees its
    /// bytes and its share of the quota.
    @Test(arguments: StoreKind.allCases) func abandonedUploadsExpireAndFreeTheirSpace(_ kind: StoreKind) throws {
        let clock = ManualClock()
        let jpeg = syntheticJPEG(size: 50_000)
        try withStore(kind, {
            $0.clock = clock.read
            $0.uploadExpiryMs = 60_000
            $0.maxUploadBytes = 60_000
            $0.blobChunkBytes = 16 << 10
        }) { store in
            let upload = try store.uploadBegin(BlobUploadRequest(size: Int64(jpeg.count)))
            _ = try store.uploadChunk(
                upload.upload, offset: 0, bytes: Array(jpeg[0..<16384]), crc32: CRC32.checksum(Array(jpeg[0..<16384])))
            clock.advance(ms: 59_000)
            // A chunk moves the expiry on.
            let part = Array(jpeg[16384..<32768])
            _ = try store.uploadChunk(upload.upload, offset: 16384, bytes: part, crc32: CRC32.checksum(part))
            clock.advance(ms: 59_000)
            #expect(try store.uploadStatus(upload.upload).offset == 32768)
            #expect(try store.expireUploads() == 0)
            expectError(.resourceExhausted) { _ = try store.uploadBegin(BlobUploadRequest(size: 20_000)) }
            clock.advance(ms: 1_000)
            expectError(.notFound, field: "upload") { _ = try store.uploadStatus(upload.upload) }
            let last = Array(jpeg[32768...])
            expectError(.notFound, field: "upload") {
                _ = try store.uploadChunk(upload.upload, offset: 32768, bytes: last, crc32: CRC32.checksum(last))
            }
            #expect(try store.expireUploads() == 1)
            #expect(try Self.chunkRows(store) == 0)
            _ = try store.uploadBegin(BlobUploadRequest(size: 60_000))
        }
    }

    /// Each owner's share of the upload quota, counted from the store: its own uploads and declared bytes, apart from
    /// another owner's, with expired uploads not counted (even before the sweep drops them); the answer names only
    /// the caller's own usage.
    @Test(arguments: StoreKind.allCases) func eachOwnerHasItsShareAndExpiredUploadsDoNotCount(_ kind: StoreKind) throws {
        let clock = ManualClock()
        try withStore(kind, {
            $0.clock = clock.read
            $0.uploadExpiryMs = 60_000
            $0.maxUploadBytes = 10_000
            $0.maxUploadsPerOwner = 2
            $0.maxUploadBytesPerOwner = 4_000
        }) { store in
            func refusal(_ size: Int64, _ owner: String) -> LarderError? {
                do throws(LarderError) {
                    _ = try store.uploadBegin(BlobUploadRequest(size: size), owner: owner)
                    return nil
                } catch {
                    return error
                }
            }
            let first = try store.uploadBegin(BlobUploadRequest(size: 1_000), owner: "a")
            _ = try store.uploadBegin(BlobUploadRequest(size: 1_000), owner: "a")
            let count = refusal(1, "a")
            #expect(count?.status == .resourceExhausted && count?.details == ["limit": 2, "uploads": 2])
            // Another owner has a share of its own.
            _ = try store.uploadBegin(BlobUploadRequest(size: 3_500), owner: "b")
            let bytes = refusal(501, "b")
            #expect(bytes?.status == .resourceExhausted && bytes?.field == "size")
            #expect(bytes?.details == ["limit": 4_000, "bytes": 3_500], "\(String(describing: bytes))")
            #expect(bytes?.message.contains("2000") == false, "another owner's usage reached the message")
            // Everyone's together: 8,500 held, 1,600 more asked by an owner that holds none.
            _ = try store.uploadBegin(BlobUploadRequest(size: 3_000), owner: "c")
            let total = refusal(1_600, "d")
            #expect(total?.status == .resourceExhausted && total?.details == ["limit": 10_000, "bytes": 0])
            #expect(total?.message.contains("8500") == false, "everyone's usage reached the message")
            // Aborting frees its share; an expired upload counts no more.
            try store.uploadAbort(first.upload)
            _ = try store.uploadBegin(BlobUploadRequest(size: 1_000), owner: "a")
            #expect(refusal(1, "a")?.status == .resourceExhausted)
            clock.advance(ms: 60_000)
            _ = try store.uploadBegin(BlobUploadRequest(size: 4_000), owner: "a")
            _ = try store.uploadBegin(BlobUploadRequest(size: 4_000), owner: "b")
        }
    }

    /// Rows left in `blob_chunks`, and on SQLite files in `blobs/`: what an expired or deleted upload must not leave
    /// behind.
    static func chunkRows(_ store: AnyStore) throws -> Int {
        if let sqlite = store as? SQLiteStore {
            let files = try FileManager.default.contentsOfDirectory(atPath: sqlite.files.directory).count
            return files + Int(try sqlite.readers.read { db throws(LarderError) in
                try db.scalar("SELECT count(*) FROM blob_chunks") ?? -1
            })
        }
        let postgres = try #require(store as? PostgresStore)
        return Int(try postgres.readers.read { db throws(LarderError) in
            try db.run([PGStatement("SELECT count(*)::int8 FROM blob_chunks")])[0].int(0, 0)
        })
    }

    /// A blob deleted by id takes its chunks with it; so does a dropped collection.
    @Test(arguments: StoreKind.allCases) func deletingABlobDeletesItsChunks(_ kind: StoreKind) throws {
        let jpeg = syntheticJPEG(size: 40_000)
        try withStore(kind, { $0.blobChunkBytes = 8192 }) { store in
            let a = try store.uploadBegin(BlobUploadRequest(size: Int64(jpeg.count)))
            _ = try Self.send(store, a, jpeg, chunk: 8192)
            let blob = try store.uploadFinish(a.upload, sha256: SHA256.hex(jpeg))
            // Five chunk rows on PostgreSQL; one file on SQLite.
            #expect(try Self.chunkRows(store) == (kind == .sqlite ? 1 : 5))
            try store.blobDelete(blob.id)
            #expect(try Self.chunkRows(store) == 0)
            let document = try store.create("items", id: nil, data: [:])
            let b = try store.uploadBegin(
                BlobUploadRequest(size: Int64(jpeg.count), attach: BlobAttachment(collection: "items", id: document.id)))
            _ = try Self.send(store, b, jpeg, chunk: 8192)
            _ = try store.uploadFinish(b.upload, sha256: nil)
            _ = try store.dropCollection("items")
            #expect(try Self.chunkRows(store) == 0)
        }
    }
}
