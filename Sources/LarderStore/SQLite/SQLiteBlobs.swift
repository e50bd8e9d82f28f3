import CSQLite
import Foundation
import LarderWire

/// Blob reads: metadata, bytes (read with incremental blob I/O) and listings.
extension SQLiteStore {
    static let blobColumns = "id, size, sha256, contentType, width, height, createdAt, attachedCollection, attachedId"

    static func blobMeta(_ row: SQLiteStatement) -> BlobInfo {
        var attachment: BlobAttachment?
        if !row.isNull(7) { attachment = BlobAttachment(collection: row.text(7), id: row.uuid(8)) }
        return BlobInfo(
            id: row.uuid(0), size: row.int(1), sha256: row.text(2), contentType: row.text(3), width: Int(row.int(4)),
            height: Int(row.int(5)), createdAtMs: row.int(6), attachedTo: attachment)
    }

    public func blobGet(_ id: UUID) throws(LarderError) -> (meta: BlobInfo, bytes: [UInt8]) {
        // One transaction: the metadata and the bytes come from the same snapshot.
        let (meta, stored) = try readers.read(transaction: true) { db throws(LarderError) in
            try SQLiteStore.readBlob(db, id) { (_) throws(LarderError) -> Range<Int64>? in nil }
        }
        return (meta, try bytes(id, stored))
    }

    /// Where a read found a blob's bytes: in the database (read inside its transaction), or `range` of a file
    /// (`BlobFiles`), read after it: a blob's file never changes, and a deleted one is unlinked only after the commit.
    enum StoredBytes: Sendable {
        case bytes([UInt8])
        case file(String, Range<Int64>)
    }

    /// The bytes `stored` stands for.
    func bytes(_ id: UUID, _ stored: StoredBytes) throws(LarderError) -> [UInt8] {
        switch stored {
        case .bytes(let bytes): return bytes
        case .file(let name, let range):
            do throws(LarderError) {
                return try readFile(id, name, range)
            } catch where error.field == BlobFiles.missingMarker.field {
                throw explainMissing(id, name)
            }
        }
    }

    /// Blob `id`'s metadata and the bytes `range` picks once the metadata is known (nil: all of them), from its own
    /// row, from its upload's chunks (read with `db`, inside the caller's transaction, so from one snapshot), or from
    /// its file.
    static func readBlob(
        _ db: SQLiteConnection, _ id: UUID, range: (BlobInfo) throws(LarderError) -> Range<Int64>?
    ) throws(LarderError) -> (meta: BlobInfo, bytes: StoredBytes) {
        let statement = try db.statement(.selectBlobMetaAndSeq)
        defer { statement.reset() }
        try statement.bind([.text(id.wireString)])
        guard try statement.step() else { throw StoreRules.blobNotFound(id) }
        let meta = SQLiteStore.blobMeta(statement)
        let wanted = try range(meta)
        if !statement.isNull(11) { return (meta, .file(statement.text(11), wanted ?? 0..<meta.size)) }
        if statement.isNull(10) {
            let rowid = statement.int(9)
            guard let wanted else { return (meta, .bytes(try db.readBlob(table: "blobs", column: "bytes", rowid: rowid))) }
            return (
                meta,
                .bytes(try db.readBlob(
                    table: "blobs", column: "bytes", rowid: rowid, range: Int(wanted.lowerBound)..<Int(wanted.upperBound)))
            )
        }
        let owner = statement.text(10)
        let all = wanted ?? 0..<meta.size
        return (meta, .bytes(try UploadRules.assemble(id, all) { body throws(LarderError) in
            try SQLiteStore.forEachChunk(db, owner: owner, overlapping: all, body)
        }))
    }

    public func blobHead(_ id: UUID) throws(LarderError) -> BlobInfo {
        try readers.read { db throws(LarderError) in try SQLiteStore.getBlobMeta(db, id) }
    }

    /// The metadata of blob `id` read with `db`, or NOT_FOUND.
    static func getBlobMeta(_ db: SQLiteConnection, _ id: UUID) throws(LarderError) -> BlobInfo {
        let statement = try db.statement(.selectBlobMeta)
        defer { statement.reset() }
        try statement.bind([.text(id.wireString)])
        guard try statement.step() else { throw StoreRules.blobNotFound(id) }
        return SQLiteStore.blobMeta(statement)
    }

    public func blobList(limit: Int, cursor: String?, attachedTo: BlobAttachment?) throws(LarderError)
        -> (blobs: [BlobInfo], nextCursor: String?)
    {
        try StoreRules.checkLimit(limit)
        let position = try SeqPosition.blobList(attachedTo, cursor: cursor)
        var sql = "SELECT \(SQLiteStore.blobColumns), seq FROM blobs WHERE seq > ?1"
        var values: [SQLValue] = [.int(position.after), .int(Int64(limit + 1))]
        if let attachedTo {
            try CollectionName.validate(attachedTo.collection, field: "attachedTo.collection")
            sql += " AND attachedCollection = ?3 AND attachedId = ?4"
            values += [.text(attachedTo.collection), .text(attachedTo.id.wireString)]
        }
        sql += " ORDER BY seq LIMIT ?2"
        let rows = try readers.read { [sql, values] db throws(LarderError) in
            try db.query(sql, values) { (SQLiteStore.blobMeta($0), $0.int(9)) }
        }
        let page = position.page(rows, limit: limit)
        return (page.items, page.nextCursor)
    }
}

/// A blob validated and hashed before it reaches the writer.
struct PreparedBlob: Sendable {
    var meta: BlobInfo
    var bytes: [UInt8]

    init(id: UUID?, bytes: [UInt8], expectedSHA256: String?, attachTo: BlobAttachment?, core: StoreCore)
        throws(LarderError)
    {
        let limit = core.configuration.maxBlobBytes
        guard bytes.count <= limit else {
            // The binary part is no request member: no `field`.
            throw LarderError(
                .payloadTooLarge, "the blob is \(bytes.count) bytes; the limit is \(limit)",
                details: ["limit": .int(Int64(limit))])
        }
        let info = try JPEG.inspect(bytes)
        let digest = SHA256.hex(bytes)
        if let expectedSHA256, expectedSHA256.lowercased() != digest {
            throw LarderError(
                .invalidArgument, "the blob's SHA-256 differs from the expected one; it was damaged in transit, resend it",
                field: "sha256", details: ["actualSHA256": .string(digest)])
        }
        if let attachTo { try CollectionName.validate(attachTo.collection, field: "attach.collection") }
        meta = BlobInfo(
            id: id ?? UUID(), size: Int64(bytes.count), sha256: digest, contentType: "image/jpeg", width: info.width,
            height: info.height, createdAtMs: nowMillis(), attachedTo: attachTo)
        self.bytes = bytes
    }
}
