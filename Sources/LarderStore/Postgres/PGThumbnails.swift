import Foundation
import LarderWire

extension PostgresStore: ThumbnailStore {
    public func thumbnail(_ id: UUID, maxSide: Int) throws(LarderError)
        -> (meta: BlobInfo, thumbnail: StoredThumbnail?)
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
        guard result.rows == 1 else { throw StoreRules.blobNotFound(id) }
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
