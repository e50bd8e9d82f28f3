import Foundation
import LarderWire

/// Ranges and resumable uploads on SQLite (the rules are `Uploads.swift`'s).
extension SQLiteStore: UploadReads {
    static let uploadColumns =
        "id, blobId, size, received, chunkBytes, expiresAt, sha256, attachedCollection, attachedId"

    static func uploadRecord(_ db: SQLiteConnection, _ upload: UUID) throws(LarderError) -> BlobUploadInfo? {
        try db.query("SELECT \(uploadColumns) FROM uploads WHERE id = ?1", [.text(upload.wireString)]) { row in
            BlobUploadInfo(
                upload: row.uuid(0), id: row.uuid(1), size: row.int(2), offset: row.int(3),
                chunkBytes: Int(row.int(4)), expiresAt: row.int(5), sha256: row.isNull(6) ? nil : row.text(6),
                attach: row.isNull(7) ? nil : BlobAttachment(collection: row.text(7), id: row.uuid(8)))
        }.first
    }

    /// The chunks of `owner` overlapping `range`, in order, each read with incremental blob I/O.
    static func forEachChunk(
        _ db: SQLiteConnection, owner: String, overlapping range: Range<Int64>,
        _ body: (Int64, [UInt8]) throws(LarderError) -> Void
    ) throws(LarderError) {
        // The first chunk is the one starting at or before the range; the rest start inside it.
        let chunks = try db.query(
            """
            SELECT rowid, start FROM blob_chunks WHERE owner = ?1 AND start < ?3 AND start >= coalesce(
                (SELECT max(start) FROM blob_chunks WHERE owner = ?1 AND start <= ?2), 0) ORDER BY start
            """, [.text(owner), .int(range.lowerBound), .int(range.upperBound)]
        ) { ($0.int(0), $0.int(1)) }
        for (rowid, start) in chunks {
            try body(start, try db.readBlob(table: "blob_chunks", column: "bytes", rowid: rowid))
        }
    }

    func uploadRecord(_ upload: UUID) throws(LarderError) -> BlobUploadInfo? {
        try readers.read { db throws(LarderError) in try SQLiteStore.uploadRecord(db, upload) }
    }

    public func blobRead(_ id: UUID, offset: Int64, length: Int) throws(LarderError)
        -> (meta: BlobInfo, bytes: [UInt8])
    {
        let (meta, stored) = try storedRange(id, offset: offset, length: length)
        return (meta, try bytes(id, stored))
    }
}

extension SQLiteWriteContext: UploadWriteContext {
    private var writer: SQLiteConnection {
        get throws(LarderError) {
            guard let connection else { throw closedError ?? LarderError(.unavailable, "the store is closed") }
            return connection
        }
    }

    private func blobIdTaken(_ id: UUID) throws(LarderError) -> Bool {
        try writer.scalar("SELECT 1 FROM blobs WHERE id = ?1", [.text(id.wireString)]) != nil
    }

    func uploadInsert(_ upload: BlobUploadInfo, owner: String, quota: UploadQuota, now: Int64) throws(LarderError) {
        let db = try writer
        _ = try uploadsExpire(now: now)
        let taken = try db.scalar(
            "SELECT 1 FROM uploads WHERE blobId = ?1", [.text(upload.id.wireString)])
        if try blobIdTaken(upload.id) || taken != nil { throw WriteRules.blobIdTaken(upload.id) }
        if let attach = upload.attach, try document(attach, in: try writer) == nil {
            throw WriteRules.attachMissing(attach)
        }
        let all = try db.scalar("SELECT coalesce(sum(size), 0) FROM uploads WHERE expiresAt > ?1", [.int(now)]) ?? 0
        let own = try db.query(
            "SELECT count(*), coalesce(sum(size), 0) FROM uploads WHERE owner = ?1 AND expiresAt > ?2",
            [.text(owner), .int(now)]
        ) { ($0.int(0), $0.int(1)) }.first ?? (0, 0)
        try WriteRules.checkUploadQuota(own: own, allBytes: all, adding: upload.size, quota: quota)
        try db.run(
            "INSERT INTO uploads(\(SQLiteStore.uploadColumns), createdAt, owner) "
                + "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            [
                .text(upload.upload.wireString), .text(upload.id.wireString), .int(upload.size), .int(upload.offset),
                .int(Int64(upload.chunkBytes)), .int(upload.expiresAt), upload.sha256.map { .text($0) } ?? .null,
                upload.attach.map { .text($0.collection) } ?? .null,
                upload.attach.map { .text($0.id.wireString) } ?? .null, .int(now), .text(owner),
            ])
    }

    /// Records that the `count` bytes at `offset` of `upload`'s file are written: the committed offset moves past
    /// them and the expiry to `expiresAt`. Checked again here, on the writer: the upload may have gone meanwhile.
    func advanceUpload(_ upload: UUID, offset: Int64, count: Int, now: Int64, expiresAt: Int64)
        throws(LarderError) -> BlobUploadInfo
    {
        let db = try writer
        guard var record = try SQLiteStore.uploadRecord(db, upload), record.expiresAt > now else {
            throw UploadRules.noUpload(upload)
        }
        try WriteRules.checkChunk(record, offset: offset, count: count)
        record.offset += Int64(count)
        record.expiresAt = expiresAt
        try db.run(
            "UPDATE uploads SET received = ?2, expiresAt = ?3 WHERE id = ?1",
            [.text(upload.wireString), .int(record.offset), .int(expiresAt)])
        return record
    }

    func uploadComplete(_ upload: UUID, meta: BlobInfo) throws(LarderError) -> BlobInfo {
        let db = try writer
        guard let record = try SQLiteStore.uploadRecord(db, upload), record.offset == record.size else {
            throw UploadRules.noUpload(upload)
        }
        if try blobIdTaken(meta.id) { throw WriteRules.blobIdTaken(meta.id) }
        var document: StoredRecord?
        if let attach = meta.attachedTo {
            document = try self.document(attach, in: try writer)
            if document == nil { throw WriteRules.attachMissing(attach) }
        }
        // The upload's file becomes the blob's: the row names it, nothing is copied.
        try insertBlobRow(meta, bytes: .blob([]), chunks: .null, file: .text(upload.wireString), in: db)
        try db.run("DELETE FROM uploads WHERE id = ?1", [.text(upload.wireString)])
        if let attach = meta.attachedTo, let document {
            try recordChange(.blobAttach, attach.collection, record: document, blob: meta)
        }
        return meta
    }

    func uploadDelete(_ upload: UUID) throws(LarderError) -> Bool {
        let db = try writer
        // An upload's chunk rows come only from a data directory written before migration 12, and the start-up moves
        // them to its file (`recoverFiles`); deleting them here keeps this complete whatever the upload's history.
        try db.run("DELETE FROM blob_chunks WHERE owner = ?1", [.text(upload.wireString)])
        guard try db.run("DELETE FROM uploads WHERE id = ?1", [.text(upload.wireString)]) > 0 else { return false }
        try db.run("INSERT OR IGNORE INTO blob_files_deleted(name) VALUES (?1)", [.text(upload.wireString)])
        collectBlobFilesAfterCommit()
        return true
    }

    /// Unlinks the files whose rows this transaction deleted, once it committed (`BlobFiles`).
    func collectBlobFilesAfterCommit() {
        guard let files = core.blobFiles, let db = connection, !collectsFiles else { return }
        collectsFiles = true
        afterCommit.append { SQLiteStore.collectFiles(files, db) }
    }

    func uploadsExpire(now: Int64) throws(LarderError) -> Int {
        let db = try writer
        let expired = try db.query("SELECT id FROM uploads WHERE expiresAt <= ?1", [.int(now)]) { $0.uuid(0) }
        for upload in expired { _ = try uploadDelete(upload) }
        return expired.count
    }
}
