import Foundation
import LarderWire

extension SQLiteStore: ThumbnailStore {
    public func thumbnail(_ id: UUID, maxSide: Int) throws(LarderError)
        -> (meta: BlobInfo, thumbnail: StoredThumbnail?)
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
