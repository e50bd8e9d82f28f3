import Foundation
import LarderBench
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Byte ranges and the upload limits over the wire (Protocol.md §5.4 and §8): each limit announced in HELLO, and
/// crossed once, with the error a client would see; the connection stays open after each.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct BlobRangeLimitTests {
    static func jpeg(_ size: Int) -> [UInt8] { Payloads.syntheticJPEG(size: size) }

    static func upload(_ c: RawClient, _ bytes: [UInt8], chunk: Int) throws -> Frame {
        let begin = try c.call(.blobUpload, BlobUploadRequest(size: Int64(bytes.count)).json)
        let info = try BlobUploadInfo(json: try begin.jsonObject())
        var offset = 0
        while offset < bytes.count {
            let part = Array(bytes[offset..<min(offset + chunk, bytes.count)])
            let request = BlobUploadChunkRequest(upload: info.upload, offset: Int64(offset), crc32: CRC32.checksum(part))
            let answer = try c.call(.blobUploadChunk, request.json, binary: part)
            guard answer.status == .ok else { return answer }
            offset += part.count
        }
        return try c.call(.blobUploadFinish, BlobUploadFinishRequest(upload: info.upload).json)
    }

    @Test func rangesAnswerTheirBytesCutAtTheEndAndAStartPastTheEndNamesTheSize() throws {
        let bytes = Self.jpeg(200_000)
        try withServerWithoutListener({ $0.limits.blobChunkBytes = 32 << 10 }) { server in
            let c = try RawClient.connected(to: server)
            let hello = try c.hello()
            #expect(hello.limits.blobChunkBytes == 32 << 10 && hello.limits.maxBlobBytes == 256 << 20)
            let finished = try Self.upload(c, bytes, chunk: 32 << 10)
            #expect(finished.status == .ok, "\(finished.replyText)")
            let id = try BlobInfo(json: try finished.jsonObject()).id
            for (offset, length) in [(0, 1), (bytes.count - 1, 1), (0, bytes.count), (40_000, 70_000)] {
                let answer = try c.call(.blobGet, BlobGetRequest(id: id, offset: Int64(offset), length: Int64(length)).json)
                #expect(answer.status == .ok)
                #expect(answer.binary == Array(bytes[offset..<(offset + length)]))
                #expect(answer.replyJSON["offset"]?.intValue == Int64(offset))
                #expect(answer.replyJSON["length"]?.intValue == Int64(length))
            }
            // Only an offset: to the end.
            let tail = try c.call(.blobGet, BlobGetRequest(id: id, offset: Int64(bytes.count - 2)).json)
            #expect(tail.binary == [0xFF, 0xD9])
            // A range that runs past the end is cut there; the answer's length says how much came.
            for (offset, length) in [(bytes.count - 1, 2), (bytes.count - 100, 65_536), (0, bytes.count + 1)] {
                let request = BlobGetRequest(id: id, offset: Int64(offset), length: Int64(length))
                let cut = try c.call(.blobGet, request.json)
                #expect(cut.status == .ok)
                #expect(cut.binary == Array(bytes[offset...]))
                #expect(cut.replyJSON["offset"]?.intValue == Int64(offset))
                #expect(cut.replyJSON["length"]?.intValue == Int64(bytes.count - offset))
            }
            // One that starts at or past the end is refused, naming the size.
            for (offset, length) in [(bytes.count, 1), (bytes.count + 10, 5)] {
                let past = try c.call(.blobGet, BlobGetRequest(id: id, offset: Int64(offset), length: Int64(length)).json)
                #expect(past.status == .invalidArgument && past.replyJSON["field"] == "offset")
                #expect(past.replyJSON["size"]?.intValue == Int64(bytes.count))
            }
            // A blob larger than one answer carries: the whole read is refused and points at ranges.
            #expect(try c.call(.ping).status == .ok)
        }
    }

    @Test func aWholeReadOfABlobLargerThanAFrameIsRefusedWithItsSize() throws {
        let bytes = Self.jpeg(3 << 20)
        try withServerOnPort0({
            $0.limits.maxFrameBytes = (2 << 20) + (1 << 20)
            $0.limits.maxJSONBytes = 1 << 20
            $0.limits.maxDocumentBytes = 256 << 10
        }) { _, port in
            let c = try RawClient.tcp(port: port)
            let hello = try c.hello()
            let finished = try Self.upload(c, bytes, chunk: hello.limits.blobChunkBytes)
            #expect(finished.status == .ok, "\(finished.replyText)")
            let id = try BlobInfo(json: try finished.jsonObject()).id
            let whole = try c.call(.blobGet, BlobIDRequest(id: id).json)
            #expect(whole.status == .payloadTooLarge)
            #expect(whole.replyJSON["size"]?.intValue == Int64(bytes.count))
            #expect(whole.replyText.contains("range"))
            let limit = hello.limits.maxBinaryPartBytes
            let tooLong = try c.call(.blobGet, BlobGetRequest(id: id, offset: 0, length: Int64(limit + 1)).json)
            #expect(tooLong.status == .payloadTooLarge && tooLong.replyJSON["limit"]?.intValue == Int64(limit))
            let ranged = try c.call(.blobGet, BlobGetRequest(id: id, offset: 0, length: Int64(limit)).json)
            #expect(ranged.status == .ok && ranged.binary == Array(bytes[0..<limit]))
        }
    }

    @Test func aChunkOverBlobChunkBytesIsRefusedAndTheConnectionStaysOpen() throws {
        try withServerWithoutListener({ $0.limits.blobChunkBytes = 16 << 10 }) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let begin = try c.call(.blobUpload, BlobUploadRequest(size: 100_000).json)
            let info = try BlobUploadInfo(json: try begin.jsonObject())
            #expect(info.chunkBytes == 16 << 10)
            let part = [UInt8](repeating: 0xFF, count: (16 << 10) + 1)
            let request = BlobUploadChunkRequest(upload: info.upload, offset: 0, crc32: CRC32.checksum(part))
            let over = try c.call(.blobUploadChunk, request.json, binary: part)
            #expect(over.status == .payloadTooLarge && over.replyJSON["limit"]?.intValue == Int64(16 << 10))
            let status = try c.call(.blobUploadStatus, BlobUploadIDRequest(upload: info.upload).json)
            #expect(status.status == .ok && status.replyJSON["offset"]?.intValue == 0)
        }
    }

    // Promise: Protocol §5.4 "a chunk past size is INVALID_ARGUMENT with size"
    /// A chunk that would carry the upload past its declared `size` is INVALID_ARGUMENT naming the size, nothing of it
    /// is committed, and the upload goes on from where it was.
    @Test func aChunkPastTheDeclaredSizeIsRefusedNamingTheSize() throws {
        let bytes = Self.jpeg(10_000)
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let begin = try c.call(.blobUpload, BlobUploadRequest(size: Int64(bytes.count)).json)
            let info = try BlobUploadInfo(json: try begin.jsonObject())
            let first = Array(bytes[0..<6_000])
            let sent = try c.call(
                .blobUploadChunk, BlobUploadChunkRequest(upload: info.upload, offset: 0, crc32: CRC32.checksum(first)).json,
                binary: first)
            #expect(sent.status == .ok && sent.replyJSON["offset"] == 6_000, "\(sent.replyText)")
            // 4,001 bytes from 6,000 pass the 10,000 declared by one.
            let over = Array(bytes[6_000...]) + [0xD9]
            let past = try c.call(
                .blobUploadChunk,
                BlobUploadChunkRequest(upload: info.upload, offset: 6_000, crc32: CRC32.checksum(over)).json, binary: over)
            #expect(past.status == .invalidArgument, "\(past.replyText)")
            #expect(past.replyJSON["size"] == .int(Int64(bytes.count)), "\(past.replyText)")
            let status = try c.call(.blobUploadStatus, BlobUploadIDRequest(upload: info.upload).json)
            #expect(status.replyJSON["offset"] == 6_000, "\(status.replyText)")
            let rest = Array(bytes[6_000...])
            let last = try c.call(
                .blobUploadChunk,
                BlobUploadChunkRequest(upload: info.upload, offset: 6_000, crc32: CRC32.checksum(rest)).json, binary: rest)
            #expect(last.status == .ok, "\(last.replyText)")
            let finished = try c.call(.blobUploadFinish, BlobUploadFinishRequest(upload: info.upload).json)
            #expect(finished.status == .ok, "\(finished.replyText)")
            let read = try c.call(.blobGet, BlobIDRequest(id: info.id).json)
            #expect(read.binary == bytes)
        }
    }

    // Promise: Protocol §5.4 "a CRC mismatch is INVALID_ARGUMENT with offset and actualCRC32, and nothing is written"
    /// A chunk damaged in transit (its bytes no longer match `crc32`) is INVALID_ARGUMENT (field `crc32`) whose
    /// details give the CRC-32 of what arrived and the committed offset; nothing is written, and sending it again
    /// intact goes on from there.
    @Test func aDamagedChunkNamesTheCRCOfWhatArrivedAndWritesNothing() throws {
        let bytes = Self.jpeg(10_000)
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let begin = try c.call(.blobUpload, BlobUploadRequest(size: Int64(bytes.count)).json)
            let info = try BlobUploadInfo(json: try begin.jsonObject())
            let first = Array(bytes[0..<4_000])
            let crc = CRC32.checksum(first)
            _ = try c.call(
                .blobUploadChunk, BlobUploadChunkRequest(upload: info.upload, offset: 0, crc32: crc).json, binary: first)
            var damaged = Array(bytes[4_000...])
            damaged[100] ^= 0x40
            let intact = Array(bytes[4_000...])
            let refused = try c.call(
                .blobUploadChunk,
                BlobUploadChunkRequest(upload: info.upload, offset: 4_000, crc32: CRC32.checksum(intact)).json,
                binary: damaged)
            #expect(refused.status == .invalidArgument, "\(refused.replyText)")
            #expect(refused.replyJSON["field"] == "crc32", "\(refused.replyText)")
            #expect(refused.replyJSON["actualCRC32"] == .int(Int64(CRC32.checksum(damaged))), "\(refused.replyText)")
            #expect(refused.replyJSON["offset"] == 4_000, "\(refused.replyText)")
            let status = try c.call(.blobUploadStatus, BlobUploadIDRequest(upload: info.upload).json)
            #expect(status.replyJSON["offset"] == 4_000, "\(status.replyText)")
            let again = try c.call(
                .blobUploadChunk,
                BlobUploadChunkRequest(upload: info.upload, offset: 4_000, crc32: CRC32.checksum(intact)).json,
                binary: intact)
            #expect(again.status == .ok, "\(again.replyText)")
            let finished = try c.call(.blobUploadFinish, BlobUploadFinishRequest(upload: info.upload).json)
            #expect(finished.status == .ok, "\(finished.replyText)")
            #expect(try c.call(.blobGet, BlobIDRequest(id: info.id).json).binary == bytes)
        }
    }

    @Test func theUploadQuotaAndExpiryAreAnnouncedAndTheQuotaIsCrossed() throws {
        try withServerOnPort0({
            $0.limits.maxUploadBytes = 1_000_000
            $0.limits.uploadExpiryMs = 3_600_000
        }) { _, port in
            let c = try RawClient.tcp(port: port)
            let hello = try c.hello()
            #expect(hello.limits.maxUploadBytes == 1_000_000 && hello.limits.uploadExpiryMs == 3_600_000)
            let first = try c.call(.blobUpload, BlobUploadRequest(size: 600_000).json)
            #expect(first.status == .ok)
            let expires = try BlobUploadInfo(json: try first.jsonObject()).expiresAt
            #expect(abs(expires - (Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)) < 600_000)
            let second = try c.call(.blobUpload, BlobUploadRequest(size: 600_000).json)
            #expect(second.status == .resourceExhausted && second.replyJSON["limit"]?.intValue == 1_000_000)
            let tooBig = try c.call(.blobUpload, BlobUploadRequest(size: (256 << 20) + 1).json)
            #expect(tooBig.status == .payloadTooLarge && tooBig.replyJSON["field"]?.stringValue == "size")
            #expect(try c.call(.ping).status == .ok)
        }
    }

    @Test func aTokenLimitedToCollectionsUploadsOnlyAttachedToThem() throws {
        let directory = temporaryTestDirectory("upload-roles")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let tokens = directory.appendingPathComponent("tokens").path
        try "write w-token items\nadmin a-token\n".write(toFile: tokens, atomically: true, encoding: .utf8)
        try withServerWithoutListener({ $0.tokenFile = tokens }) { server in
            let c = try RawClient.connected(to: server)
            try c.hello(token: "w-token")
            let bare = try c.call(.blobUpload, BlobUploadRequest(size: 1000).json)
            #expect(bare.status == .permissionDenied)
            let item = try c.call(.create, ["collection": "items", "data": [:]])
            let id = try #require(UUID(wireString: item.replyJSON["id"]?.stringValue ?? ""))
            let attached = try c.call(
                .blobUpload, BlobUploadRequest(size: 1000, attach: BlobAttachment(collection: "items", id: id)).json)
            #expect(attached.status == .ok)
        }
    }
}
