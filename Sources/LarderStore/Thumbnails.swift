import Foundation
import LarderWire

// Thumbnails are cached with their blob: a `thumbnails` table keyed by (blob id, longer side), written through the
// group-commit writer like every other write and deleted with the blob, whatever deletes it (BLOB_DELETE, the
// document it is attached to, DROP_COLLECTION): a trigger on SQLite, a foreign key ON DELETE CASCADE on PostgreSQL,
// so no deleting path has to remember them.

// The store's twin of LarderThumbnails' `Thumbnail` (what the
// thumbnailer makes), kept apart because LarderStore does not link the thumbnailer (libturbojpeg); its
// memberwise init has the shape of every small value type's (`Group`, `GroupResponse.Section`).
/// A thumbnail as the store keeps it.
public struct StoredThumbnail: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// The baseline JPEG.
    public var bytes: [UInt8]

    public init(width: Int, height: Int, bytes: [UInt8]) {
        self.width = width
        self.height = height
        self.bytes = bytes
    }
}

/// The thumbnail cache's reads (its write is `WriteContext.thumbnailPut`).
public protocol ThumbnailStore: Sendable {
    /// The blob's metadata and its cached thumbnail of `maxSide`, when there is one, from one snapshot; NOT_FOUND for
    /// an unknown blob.
    func thumbnail(_ id: UUID, maxSide: Int) throws(LarderError) -> (meta: BlobMeta, thumbnail: StoredThumbnail?)
    /// How many thumbnails the store holds (STATS).
    func thumbnailCount() throws(LarderError) -> Int
}

extension SQLiteStore: ThumbnailStore {
    public func thumbnail(_ id: UUID, maxSide: Int) throws(LarderError)
        -> (meta: BlobMeta, thumbnail: StoredThumbnail?)
    {
        try readers.read(transaction: true) { db throws(LarderError) in
            let meta = try SQLiteStore.getBlobMeta(db, id)
            let found = try db.query(
                "SELECT width, height, bytes FROM thumbnails WHERE blobId = ?1 AND maxSide = ?2",
                [.text(id.wireString), .int(Int64(maxSide))]
            ) { StoredThumbnail(width: Int($0.int(0)), height: Int($0.int(1)), bytes: $0.bytes(2)) }
            return (meta, found.first)
        }
    }

    public func thumbnailCount() throws(LarderError) -> Int {
        try readers.read { db throws(LarderError) in Int(try db.scalar("SELECT count(*) FROM thumbnails") ?? 0) }
    }
}

extension SQLiteWriteContext {
    func thumbnailPut(_ id: UUID, sha256: String, maxSide: Int, thumbnail: StoredThumbnail) throws(LarderError)
        -> Bool
    {
        // Only while the blob it was made of is still there, with the same bytes: a blob deleted (or deleted and put
        // again under its id) while the thumbnail was being made gets no stale one.
        guard let db = connection else { throw closedError ?? LarderError(.unavailable, "the store is closed") }
        return try db.run(
            """
            INSERT OR IGNORE INTO thumbnails(blobId, maxSide, width, height, bytes, createdAt)
                SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE EXISTS (SELECT 1 FROM blobs WHERE id = ?1 AND sha256 = ?7)
            """,
            [
                .text(id.wireString), .int(Int64(maxSide)), .int(Int64(thumbnail.width)), .int(Int64(thumbnail.height)),
                .blob(thumbnail.bytes), .int(nowMillis()), .text(sha256),
            ]) == 1
    }
}

extension PostgresStore: ThumbnailStore {
    public func thumbnail(_ id: UUID, maxSide: Int) throws(LarderError)
        -> (meta: BlobMeta, thumbnail: StoredThumbnail?)
    {
        let columns = PostgresStore.blobColumns.split(separator: ", ").map { "b.\($0)" }.joined(separator: ", ")
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    """
                    SELECT \(columns), t.width, t.height, t.bytes FROM blobs b
                    LEFT JOIN thumbnails t ON t.blob_id = b.id AND t.max_side = $2 WHERE b.id = $1
                    """, [.uuid(id), .int(Int64(maxSide))], name: "thumbnail_get")
            ])[0]
        }
        guard result.rows == 1 else { throw SQLiteStore.blobNotFound(id) }
        let meta = PostgresStore.blobMeta(result, 0)
        guard !result.isNull(0, 9) else { return (meta, nil) }
        return (
            meta,
            StoredThumbnail(width: Int(result.int(0, 9)), height: Int(result.int(0, 10)), bytes: result.bytes(0, 11))
        )
    }

    public func thumbnailCount() throws(LarderError) -> Int {
        let result = try readers.read { db throws(LarderError) in
            try db.run([PGStatement("SELECT count(*) FROM thumbnails", name: "thumbnail_count")])[0]
        }
        return Int(result.int(0, 0))
    }
}

extension PGWriteContext {
    func thumbnailPut(_ id: UUID, sha256: String, maxSide: Int, thumbnail: StoredThumbnail) throws(LarderError)
        -> Bool
    {
        // As on SQLite: only while the blob is there with the same bytes. A blob deleted by another server between
        // this check and the foreign key's fails this write alone (the writer runs the batch's others again without
        // it); the thumbnail is then answered uncached.
        let result = try one(
            PGStatement(
                """
                INSERT INTO thumbnails(blob_id, max_side, width, height, bytes, created_at)
                    SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM blobs WHERE id = $1 AND sha256 = $7)
                    ON CONFLICT (blob_id, max_side) DO NOTHING
                    RETURNING 1
                """,
                [
                    .uuid(id), .int(Int64(maxSide)), .int(Int64(thumbnail.width)), .int(Int64(thumbnail.height)),
                    .bytes(thumbnail.bytes), .int(nowMillis()), .text(sha256),
                ], name: "thumbnail_put"), writes: false)
        if result.rows == 1 { jobWrote = true }
        return result.rows == 1
    }
}
