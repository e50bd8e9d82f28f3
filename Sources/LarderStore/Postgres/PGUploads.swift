import Foundation
import LarderWire

/// Ranges and resumable uploads on PostgreSQL: the dialect twin of `SQLiteUploads.swift`.
extension PostgresStore: UploadReads {
    static let uploadColumns = "id, blob_id, size, received, chunk_bytes, expires_at, sha256, attached_collection, "
        + "attached_id"

    static func uploadRecord(_ result: PGResult) -> BlobUploadInfo? {
        guard result.rows == 1 else { return nil }
        return BlobUploadInfo(
            upload: result.uuid(0, 0), id: result.uuid(0, 1), size: result.int(0, 2), offset: result.int(0, 3),
            chunkBytes: Int(result.int(0, 4)), expiresAt: result.int(0, 5),
            sha256: result.isNull(0, 6) ? nil : result.text(0, 6),
            attach: result.isNull(0, 7) ? nil : BlobAttachment(collection: result.text(0, 7), id: result.uuid(0, 8)))
    }

    func uploadRecord(_ upload: UUID) throws(LarderError) -> BlobUploadInfo? {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT \(PostgresStore.uploadColumns) FROM uploads WHERE id = $1", [.uuid(upload)],
                    name: "upload_get")
            ])[0]
        }
        return PostgresStore.uploadRecord(result)
    }

    /// Calls `body` with the chunks of `owner` (an upload id, or a blob's) that overlap `range`, in order, each chunk's
    /// start offset and bytes. Their starts come in one query, then each chunk in its own (one chunk in
    /// memory at a time, whatever the blob's size).
    func forEachChunk(
        owner: UUID, overlapping range: Range<Int64>, _ body: (Int64, [UInt8]) throws(LarderError) -> Void
    ) throws(LarderError) {
        let starts = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    """
                    SELECT start FROM blob_chunks WHERE owner = $1 AND start < $3 AND start >= coalesce(
                        (SELECT max(start) FROM blob_chunks WHERE owner = $1 AND start <= $2), 0) ORDER BY start
                    """, [.uuid(owner), .int(range.lowerBound), .int(range.upperBound)], name: "chunk_starts")
            ])[0]
        }
        for row in 0..<starts.rows {
            let start = starts.int(row, 0)
            let chunk = try readers.read { db throws(LarderError) in
                try db.run([
                    PGStatement(
                        "SELECT bytes FROM blob_chunks WHERE owner = $1 AND start = $2", [.uuid(owner), .int(start)],
                        name: "chunk_get")
                ])[0]
            }
            guard chunk.rows == 1 else { return }  // deleted meanwhile: `UploadRules.assemble` says NOT_FOUND
            try body(start, chunk.bytes(0, 0))
        }
    }

    public func blobRead(_ id: UUID, offset: Int64, length: Int) throws(LarderError)
        -> (meta: BlobInfo, bytes: [UInt8])
    {
        // An inline blob's range comes out of the row with substring (its bytes are stored uncompressed, so
        // PostgreSQL fetches only the TOAST chunks the range needs).
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    """
                    SELECT \(PostgresStore.blobColumns),
                        CASE WHEN chunks IS NULL AND $2 < size THEN substring(
                            bytes FROM (least($2, 2147483646) + 1)::int4 FOR least($3, 2147483647)::int4) END,
                        chunks
                    FROM blobs WHERE id = $1
                    """, [.uuid(id), .int(offset), .int(Int64(length))], name: "blob_read")
            ])[0]
        }
        guard result.rows == 1 else { throw StoreRules.blobNotFound(id) }
        let meta = PostgresStore.blobMeta(result, 0)
        let range = try UploadRules.range(offset: offset, length: length, size: meta.size)
        if result.isNull(0, 10) { return (meta, result.bytes(0, 9)) }
        let owner = result.uuid(0, 10)
        return (meta, try UploadRules.assemble(id, range) { body throws(LarderError) in
            try forEachChunk(owner: owner, overlapping: range, body)
        })
    }

    /// Checks the chunk's CRC-32, then appends it in a write job of its own (a row of `blob_chunks`).
    package func uploadChunk(_ upload: UUID, offset: Int64, bytes: [UInt8], crc32: UInt32) throws(LarderError)
        -> BlobUploadInfo
    {
        try checkChunkCRC(upload, offset: offset, bytes: bytes, crc32: crc32)
        let now = self.now
        let expiresAt = now + core.configuration.uploadExpiryMs
        return try uploadWrite { context throws(LarderError) in
            try (context as! PGWriteContext).uploadAppend(
                upload, offset: offset, bytes: bytes, now: now, expiresAt: expiresAt)
        }
    }

    /// Reads the whole upload once, a chunk at a time (the SHA-256 of what is stored, not of what was sent), walks
    /// its JPEG structure, then commits the blob. The reading happens off the writer: other writes go on meanwhile.
    public func uploadFinish(_ upload: UUID, sha256: String?, requestKey: RequestKey?) throws(LarderError)
        -> BlobInfo
    {
        let record = try finishableUpload(upload)
        var hasher = SHA256()
        var head: (start: Int64, bytes: [UInt8]) = (0, [])
        try forEachChunk(owner: upload, overlapping: 0..<record.size) { (start, bytes) throws(LarderError) in
            hasher.update(bytes)
            if start == 0 { head = (start, bytes) }
        }
        // The structure walk reads a few hundred bytes, nearly always inside the first chunk; any other byte comes
        // from the chunk holding it, kept until the walk leaves it.
        var cached = head
        return try completeUpload(record, digest: hasher.finalizeHex(), sha256: sha256, requestKey: requestKey) {
            () throws(LarderError) -> JPEGInfo in
            try JPEG.inspect(count: Int(record.size)) { (index) throws(LarderError) -> UInt8 in
                let at = Int64(index)
                if at < cached.start || at >= cached.start + Int64(cached.bytes.count) {
                    try forEachChunk(owner: upload, overlapping: at..<(at + 1)) { (start, bytes) throws(LarderError) in
                        cached = (start, bytes)
                    }
                }
                guard at >= cached.start, at < cached.start + Int64(cached.bytes.count) else {
                    throw UploadRules.noUpload(upload)
                }
                return cached.bytes[Int(at - cached.start)]
            }
        }
    }
}

extension PGWriteContext: UploadWriteContext {
    private func lockedUpload(_ upload: UUID) throws(LarderError) -> BlobUploadInfo? {
        // FOR UPDATE: servers sharing the database append to one upload one at a time.
        PostgresStore.uploadRecord(
            try one(
                PGStatement(
                    "SELECT \(PostgresStore.uploadColumns) FROM uploads WHERE id = $1 FOR UPDATE", [.uuid(upload)],
                    name: "upload_lock"), writes: false))
    }

    private func document(_ attach: BlobAttachment) throws(LarderError) -> StoredRecord? {
        let result = try one(
            PGStatement(
                "SELECT \(PostgresStore.recordColumns) FROM documents WHERE collection = $1 AND id = $2 FOR KEY SHARE",
                [.text(attach.collection), .uuid(attach.id)], name: "upload_doc"), writes: false)
        return result.rows == 1 ? PostgresStore.record(result, 0) : nil
    }

    private func blobIdTaken(_ id: UUID) throws(LarderError) -> Bool {
        let result = try one(
            PGStatement(
                "SELECT EXISTS (SELECT 1 FROM blobs WHERE id = $1) "
                    + "OR EXISTS (SELECT 1 FROM uploads WHERE blob_id = $1)",
                [.uuid(id)], name: "upload_id_taken"), writes: false)
        return result.bool(0, 0)
    }

    func uploadInsert(_ upload: BlobUploadInfo, owner: String, quota: UploadQuota, now: Int64) throws(LarderError) {
        _ = try uploadsExpire(now: now)
        if try blobIdTaken(upload.id) { throw WriteRules.blobIdTaken(upload.id) }
        if let attach = upload.attach, try document(attach) == nil { throw WriteRules.attachMissing(attach) }
        // One BLOB_UPLOAD at a time counts the open uploads, across every server sharing the database. An expired
        // upload another transaction holds (the sweep skips those) is not counted either.
        let counts = try run(
            [
                PGStatement(
                    "SELECT pg_advisory_xact_lock($1)", [.int(PGSchema.lockKey + 1)], name: "upload_quota_lock"),
                PGStatement(
                    """
                    SELECT coalesce(sum(size), 0)::int8, count(*) FILTER (WHERE owner = $2)::int8,
                        coalesce(sum(size) FILTER (WHERE owner = $2), 0)::int8
                    FROM uploads WHERE expires_at > $1
                    """, [.int(now), .text(owner)], name: "upload_open_bytes"),
            ], writes: false)[1]
        try WriteRules.checkUploadQuota(
            own: (counts.int(0, 1), counts.int(0, 2)), allBytes: counts.int(0, 0), adding: upload.size, quota: quota)
        try one(
            PGStatement(
                "INSERT INTO uploads(\(PostgresStore.uploadColumns), created_at, owner) "
                    + "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                [
                    .uuid(upload.upload), .uuid(upload.id), .int(upload.size), .int(upload.offset),
                    .int(Int64(upload.chunkBytes)), .int(upload.expiresAt), upload.sha256.map { .text($0) } ?? .null,
                    upload.attach.map { .text($0.collection) } ?? .null, upload.attach.map { .uuid($0.id) } ?? .null,
                    .int(now), .text(owner),
                ], name: "upload_insert"), writes: true)
    }

    /// Appends a chunk at the committed offset and moves the expiry to `expiresAt`; answers the upload after it.
    func uploadAppend(_ upload: UUID, offset: Int64, bytes: [UInt8], now: Int64, expiresAt: Int64)
        throws(LarderError) -> BlobUploadInfo
    {
        guard var record = try lockedUpload(upload), record.expiresAt > now else { throw UploadRules.noUpload(upload) }
        try WriteRules.checkChunk(record, offset: offset, count: bytes.count)
        record.offset += Int64(bytes.count)
        record.expiresAt = expiresAt
        try run(
            [
                PGStatement(
                    "INSERT INTO blob_chunks(owner, start, bytes) VALUES ($1, $2, $3)",
                    [.uuid(upload), .int(offset), .bytes(bytes)], name: "chunk_insert"),
                PGStatement(
                    "UPDATE uploads SET received = $2, expires_at = $3 WHERE id = $1",
                    [.uuid(upload), .int(record.offset), .int(expiresAt)], name: "upload_advance"),
            ], writes: true)
        return record
    }

    func uploadComplete(_ upload: UUID, meta: BlobInfo) throws(LarderError) -> BlobInfo {
        guard let record = try lockedUpload(upload), record.offset == record.size else {
            throw UploadRules.noUpload(upload)
        }
        let taken = try one(
            PGStatement("SELECT EXISTS (SELECT 1 FROM blobs WHERE id = $1)", [.uuid(meta.id)], name: "blob_id_taken"),
            writes: false)
        if taken.bool(0, 0) { throw WriteRules.blobIdTaken(meta.id) }
        var document: StoredRecord?
        if let attach = meta.attachedTo {
            document = try self.document(attach)
            if document == nil { throw WriteRules.attachMissing(attach) }
        }
        try run(
            [
                PGStatement(
                    """
                    INSERT INTO blobs(id, size, sha256, content_type, width, height, created_at, attached_collection,
                        attached_id, bytes, chunks) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, ''::bytea, $10)
                    """,
                    [
                        .uuid(meta.id), .int(meta.size), .text(meta.sha256), .text(meta.contentType),
                        .int(Int64(meta.width)), .int(Int64(meta.height)), .int(meta.createdAtMs),
                        meta.attachedTo.map { .text($0.collection) } ?? .null,
                        meta.attachedTo.map { .uuid($0.id) } ?? .null, .uuid(upload),
                    ], name: "upload_blob_insert"),
                PGStatement("DELETE FROM uploads WHERE id = $1", [.uuid(upload)], name: "upload_delete_row"),
            ], writes: true)
        if let attach = meta.attachedTo, let document {
            recordChange(.blobAttach, attach.collection, record: document, blob: meta)
        }
        return meta
    }

    func uploadDelete(_ upload: UUID) throws(LarderError) -> Bool {
        let results = try run(
            [
                PGStatement("DELETE FROM blob_chunks WHERE owner = $1", [.uuid(upload)], name: "upload_chunks_delete"),
                PGStatement(
                    "WITH d AS (DELETE FROM uploads WHERE id = $1 RETURNING 1) SELECT count(*)::int8 FROM d",
                    [.uuid(upload)], name: "upload_delete"),
            ], writes: true)
        return results[1].int(0, 0) > 0
    }

    func uploadsExpire(now: Int64) throws(LarderError) -> Int {
        let expired = try one(
            PGStatement(
                "SELECT id FROM uploads WHERE expires_at <= $1 FOR UPDATE SKIP LOCKED", [.int(now)],
                name: "uploads_expired"), writes: false)
        for row in 0..<expired.rows { _ = try uploadDelete(expired.uuid(row, 0)) }
        return expired.rows
    }
}
