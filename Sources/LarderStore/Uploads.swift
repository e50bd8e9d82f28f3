import Foundation
import LarderWire

/// What each store writes for resumable uploads, inside the writer's transaction (its SQL dialect).
protocol UploadWriteContext: PreparedWriteContext {
    /// Inserts `upload`, held by `owner`, after dropping the uploads expired at `now`: CONFLICT when a blob has its
    /// id, NOT_FOUND when the document to attach to is missing, RESOURCE_EXHAUSTED when the owner's open uploads or
    /// everyone's would pass `quota` (`WriteRules.checkUploadQuota`). Uploads expired at `now` never count.
    func uploadInsert(_ upload: BlobUploadInfo, owner: String, quota: UploadQuota, now: Int64) throws(LarderError)
    /// Makes the complete upload the blob `meta` (its chunks become the blob's) and forgets the upload.
    func uploadComplete(_ upload: UUID, meta: BlobInfo) throws(LarderError) -> BlobInfo
    /// Drops an upload and its chunks; false when there was none.
    func uploadDelete(_ upload: UUID) throws(LarderError) -> Bool
    /// Drops every upload whose expiry is at or before `now`, with its chunks; answers how many.
    func uploadsExpire(now: Int64) throws(LarderError) -> Int
}

/// What each store reads for uploads and ranges, on its readers.
protocol UploadReads: GroupCommitStore {
    /// The store's configuration and shared state (the upload limits and clock).
    var core: StoreCore { get }
    /// The upload's row, expired or not; nil when there is none.
    func uploadRecord(_ upload: UUID) throws(LarderError) -> BlobUploadInfo?
}

/// The limits on unfinished uploads (Protocol.md section 8): everyone's declared bytes together, and each owner's
/// uploads and declared bytes (a token's, or a connection's on a server without tokens).
struct UploadQuota: Sendable {
    var totalBytes: Int64
    var ownerUploads: Int64
    var ownerBytes: Int64
}

/// Shared rules of ranges and uploads, the same on both stores.
enum UploadRules {
    static func noUpload(_ upload: UUID) -> LarderError {
        LarderError(
            .notFound, "no upload \(upload.wireString): it finished, expired or was aborted; start a new BLOB_UPLOAD "
                + "(or BLOB_HEAD the blob's id if you sent BLOB_UPLOAD_FINISH)", field: "upload")
    }

    /// The range `offset..<offset+length` of a blob of `size` bytes, cut at the blob's end as an HTTP byte range is
    /// (Protocol.md §5.4): a range that starts inside the blob answers the bytes there are. An offset at or past the
    /// end is INVALID_ARGUMENT (field `offset`, details `size`), as HTTP answers 416.
    static func range(offset: Int64, length: Int, size: Int64) throws(LarderError) -> Range<Int64> {
        guard offset <= size, offset < size || length == 0 else {
            throw LarderError(
                .invalidArgument, "offset \(offset) is past the end of the blob, which has \(size) bytes; "
                    + "start a range below \(size)", field: "offset", details: ["size": .int(size)])
        }
        guard length >= 0 else {
            throw LarderError(
                .invalidArgument, "length must be at least 1, not \(length)", field: "length",
                details: ["size": .int(size)])
        }
        return offset..<(offset + min(Int64(length), size - offset))
    }

    /// The bytes of `range` assembled from the chunks `forEach` gives; NOT_FOUND when some are missing (the blob was
    /// deleted while it was read).
    static func assemble(
        _ id: UUID, _ range: Range<Int64>,
        _ forEach: ((Int64, [UInt8]) throws(LarderError) -> Void) throws(LarderError) -> Void
    ) throws(LarderError) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(range.count)
        try forEach { (start, bytes) throws(LarderError) in
            let from = Int(max(range.lowerBound, start) - start)
            let to = Int(min(range.upperBound, start + Int64(bytes.count)) - start)
            guard from < to, start + Int64(from) == range.lowerBound + Int64(out.count) else { return }
            out.append(contentsOf: bytes[from..<to])
        }
        guard out.count == range.count else { throw StoreRules.blobNotFound(id) }
        return out
    }
}

extension UploadReads {
    /// The upload clock's now (`StoreConfiguration.clock`).
    var now: Int64 { core.configuration.clock() }

    /// Runs `body` in a write job of its own with the store's upload operations, and waits for its COMMIT.
    func uploadWrite<T: Sendable>(_ body: @escaping @Sendable (any UploadWriteContext) throws(LarderError) -> T)
        throws(LarderError) -> T
    {
        try syncWrite { context throws(LarderError) in try body(context as! any UploadWriteContext) }
    }

    public func uploadBegin(_ request: BlobUploadRequest, owner: String) throws(LarderError) -> BlobUploadInfo {
        let upload = try newUpload(request)
        try insertUpload(upload, owner: owner)
        return upload
    }

    /// The upload `request` asks for, checked against the limits, not yet stored.
    func newUpload(_ request: BlobUploadRequest) throws(LarderError) -> BlobUploadInfo {
        let configuration = core.configuration
        guard request.size <= Int64(configuration.maxBlobBytes) else {
            throw LarderError(
                .payloadTooLarge, "the blob would be \(request.size) bytes; the limit is \(configuration.maxBlobBytes)",
                field: "size", details: ["limit": .int(Int64(configuration.maxBlobBytes))])
        }
        if let attach = request.attach {
            try CollectionName.validate(attach.collection, field: "attach.collection")
        }
        return BlobUploadInfo(
            upload: UUID(), id: request.id ?? UUID(), size: request.size, offset: 0,
            chunkBytes: configuration.blobChunkBytes, expiresAt: now + configuration.uploadExpiryMs,
            sha256: request.sha256, attach: request.attach)
    }

    /// Commits `upload`'s row, held by `owner` (within the quotas of unfinished uploads).
    func insertUpload(_ upload: BlobUploadInfo, owner: String) throws(LarderError) {
        let configuration = core.configuration
        let quota = UploadQuota(
            totalBytes: configuration.maxUploadBytes, ownerUploads: configuration.maxUploadsPerOwner,
            ownerBytes: configuration.maxUploadBytesPerOwner)
        let now = self.now
        try uploadWrite { context throws(LarderError) in
            try context.uploadInsert(upload, owner: owner, quota: quota, now: now)
        }
    }

    /// INVALID_ARGUMENT (details `actualCRC32`, and the committed `offset`) when `bytes` do not have `crc32`.
    func checkChunkCRC(_ upload: UUID, offset: Int64, bytes: [UInt8], crc32: UInt32) throws(LarderError) {
        let computed = CRC32.checksum(bytes)
        guard computed == crc32 else {
            var details: JSONObject = ["actualCRC32": .int(Int64(computed))]
            if let record = try uploadRecord(upload) { details["offset"] = .int(record.offset) }
            throw LarderError(
                .invalidArgument, "the chunk at offset \(offset) arrived damaged (its CRC-32 is \(computed), not "
                    + "\(crc32)); nothing was written, send it again", field: "crc32", details: details)
        }
    }

    public func uploadStatus(_ upload: UUID) throws(LarderError) -> BlobUploadInfo {
        guard let record = try uploadRecord(upload), record.expiresAt > now else { throw UploadRules.noUpload(upload) }
        return record
    }

    public func uploadAbort(_ upload: UUID) throws(LarderError) {
        let deleted = try uploadWrite { context throws(LarderError) in try context.uploadDelete(upload) }
        guard deleted else { throw UploadRules.noUpload(upload) }
    }

    public func expireUploads() throws(LarderError) -> Int {
        let now = self.now
        return try uploadWrite { context throws(LarderError) in try context.uploadsExpire(now: now) }
    }

    /// The row of `upload` when it has all its bytes: NOT_FOUND when there is none, CONFLICT (details `offset`) when
    /// bytes are missing.
    func finishableUpload(_ upload: UUID) throws(LarderError) -> BlobUploadInfo {
        let record = try uploadStatus(upload)
        guard record.offset == record.size else {
            throw LarderError(
                .conflict, "the upload has \(record.offset) of its \(record.size) bytes; send the rest from offset "
                    + "\(record.offset), then finish", field: "upload", details: ["offset": .int(record.offset)])
        }
        return record
    }

    /// Checks a complete upload's SHA-256 (`digest`, of the stored bytes) against the expected ones and its JPEG
    /// structure (`inspect`), then commits its blob. A failed check drops the upload: its bytes will not change.
    func completeUpload(
        _ record: BlobUploadInfo, digest: String, sha256: String?, requestKey: RequestKey? = nil,
        inspect: () throws(LarderError) -> JPEGInfo
    ) throws(LarderError) -> BlobInfo {
        let upload = record.upload
        func discard(_ error: LarderError) throws(LarderError) -> Never {
            _ = try? uploadWrite { context throws(LarderError) in try context.uploadDelete(upload) }
            throw LarderError(
                error.status, error.message + "; the upload was dropped, start again", field: error.field,
                details: error.details)
        }
        for expected in [record.sha256, sha256].compactMap({ $0 }) where expected != digest {
            try discard(
                LarderError(
                    .invalidArgument, "the blob's SHA-256 differs from the expected one; it was damaged in transit",
                    field: "sha256", details: ["actualSHA256": .string(digest)]))
        }
        let info: JPEGInfo
        do throws(LarderError) {
            info = try inspect()
        } catch where error.status == .unsupportedMediaType {
            try discard(error)
        }
        let meta = BlobInfo(
            id: record.id, size: record.size, sha256: digest, contentType: "image/jpeg", width: info.width,
            height: info.height, createdAtMs: nowMillis(), attachedTo: record.attach)
        return try uploadWrite { context throws(LarderError) in
            if let requestKey, let stored = try context.claimRequestKey(requestKey) {
                return try BlobInfo(json: JSONParser.parseObject(stored))
            }
            let info = try context.uploadComplete(upload, meta: meta)
            if let requestKey { try context.storeRequestKey(requestKey, answer: info.json.bytes) }
            return info
        }
    }
}

extension WriteRules {
    /// NOT_FOUND for a blob to attach to a document that does not exist.
    package static func attachMissing(_ attach: BlobAttachment) -> LarderError {
        LarderError(
            .notFound, "cannot attach the blob: no document \(attach.id.wireString) in '\(attach.collection)'",
            field: "attach.id")
    }

    /// RESOURCE_EXHAUSTED when one upload of `adding` bytes more would take its owner's unfinished uploads (`own`:
    /// how many, and their declared bytes) or everyone's (`allBytes`) past `quota`. The message tells the caller its
    /// own usage and the limits, never what other owners hold.
    static func checkUploadQuota(
        own: (uploads: Int64, bytes: Int64), allBytes: Int64, adding: Int64, quota: UploadQuota
    ) throws(LarderError) {
        let advice = "finish or abort some of them, or wait for abandoned ones to expire"
        guard own.uploads < quota.ownerUploads else {
            throw LarderError(
                .resourceExhausted, "this token holds \(own.uploads) unfinished uploads, the most it may "
                    + "(maxUploadsPerToken): \(advice)",
                details: ["limit": .int(quota.ownerUploads), "uploads": .int(own.uploads)])
        }
        guard own.bytes + adding <= quota.ownerBytes else {
            throw LarderError(
                .resourceExhausted, "this token's unfinished uploads declare \(own.bytes) of the \(quota.ownerBytes) "
                    + "bytes it may hold (maxUploadBytesPerToken) and this one needs \(adding): \(advice)",
                field: "size", details: ["limit": .int(quota.ownerBytes), "bytes": .int(own.bytes)])
        }
        guard allBytes + adding <= quota.totalBytes else {
            throw LarderError(
                .resourceExhausted, "the server's unfinished uploads leave no room for \(adding) bytes more "
                    + "(maxUploadBytes, \(quota.totalBytes) for every token together); this token's declare "
                    + "\(own.bytes) bytes: finish or abort some of them, or retry later",
                field: "size", details: ["limit": .int(quota.totalBytes), "bytes": .int(own.bytes)])
        }
    }

    /// The checks on a chunk of `count` bytes at `offset` of `upload`: the committed offset (CONFLICT, details
    /// `offset`), the chunk size (PAYLOAD_TOO_LARGE), the declared size (INVALID_ARGUMENT).
    static func checkChunk(_ upload: BlobUploadInfo, offset: Int64, count: Int) throws(LarderError) {
        guard offset == upload.offset else {
            throw LarderError(
                .conflict, "the upload's committed offset is \(upload.offset), not \(offset); send from "
                    + "\(upload.offset)", field: "offset", details: ["offset": .int(upload.offset)])
        }
        guard count > 0 else {
            throw LarderError(.invalidArgument, "a chunk carries at least one byte in the binary part")
        }
        guard count <= upload.chunkBytes else {
            throw LarderError(
                .payloadTooLarge, "the chunk is \(count) bytes; an upload's chunks carry at most \(upload.chunkBytes)",
                details: ["limit": .int(Int64(upload.chunkBytes))])
        }
        guard Int64(count) <= upload.size - offset else {
            throw LarderError(
                .invalidArgument, "the chunk passes the upload's declared size of \(upload.size) bytes by "
                    + "\(Int64(count) - (upload.size - offset))", field: "offset", details: ["size": .int(upload.size)])
        }
    }
}
