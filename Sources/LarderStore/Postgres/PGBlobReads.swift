import Dispatch
import Foundation
import LarderSync
import LarderWire

/// Blob reads on PostgreSQL: metadata and bytes from the `blobs` table.
extension PostgresStore {

    static let blobColumns =
        "id, size, sha256, content_type, width, height, created_at, attached_collection, attached_id"

    static func blobMeta(_ result: PGResult, _ row: Int) -> BlobInfo {
        var attachment: BlobAttachment?
        if !result.isNull(row, 7) {
            attachment = BlobAttachment(collection: result.text(row, 7), id: result.uuid(row, 8))
        }
        return BlobInfo(
            id: result.uuid(row, 0), size: result.int(row, 1), sha256: result.text(row, 2),
            contentType: result.text(row, 3), width: Int(result.int(row, 4)), height: Int(result.int(row, 5)),
            createdAtMs: result.int(row, 6), attachedTo: attachment)
    }

    public func blobGet(_ id: UUID) throws(LarderError) -> (meta: BlobInfo, bytes: [UInt8]) {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT \(PostgresStore.blobColumns), bytes, chunks FROM blobs WHERE id = $1", [.uuid(id)],
                    name: "blob_get")
            ])[0]
        }
        guard result.rows == 1 else { throw StoreRules.blobNotFound(id) }
        let meta = PostgresStore.blobMeta(result, 0)
        if !result.isNull(0, 10) {
            let owner = result.uuid(0, 10)
            let range = 0..<meta.size
            return (meta, try UploadRules.assemble(id, range) { body throws(LarderError) in
                try forEachChunk(owner: owner, overlapping: range, body)
            })
        }
        return (meta, result.bytes(0, 9))
    }

    static func blobHeadStatement(_ id: UUID) -> PGStatement {
        PGStatement("SELECT \(blobColumns) FROM blobs WHERE id = $1", [.uuid(id)], name: "blob_head")
    }

    public func blobHead(_ id: UUID) throws(LarderError) -> BlobInfo {
        let result = try readers.read { db throws(LarderError) in
            try db.run([PostgresStore.blobHeadStatement(id)])[0]
        }
        guard result.rows == 1 else { throw StoreRules.blobNotFound(id) }
        return PostgresStore.blobMeta(result, 0)
    }

    public func blobList(limit: Int, cursor: String?, attachedTo: BlobAttachment?) throws(LarderError)
        -> (blobs: [BlobInfo], nextCursor: String?)
    {
        try StoreRules.checkLimit(limit)
        let position = try SeqPosition.blobList(attachedTo, cursor: cursor)
        // The statement is the dialect twin of `SQLiteStore.blobList`'s: PostgreSQL's column names and parameters.
        var sql = "SELECT \(PostgresStore.blobColumns), seq FROM blobs WHERE seq > $1"
        var values: [PGValue] = [.int(position.after), .int(Int64(limit + 1))]
        if let attachedTo {
            try CollectionName.validate(attachedTo.collection, field: "attachedTo.collection")
            sql += " AND attached_collection = $3 AND attached_id = $4"
            values += [.text(attachedTo.collection), .uuid(attachedTo.id)]
        }
        sql += " ORDER BY seq LIMIT $2"
        let statement = PGStatement(sql, values, name: attachedTo == nil ? "blob_list" : "blob_list_attached")
        let result = try readers.read { db throws(LarderError) in try db.run([statement])[0] }
        let rows = (0..<result.rows).map { (PostgresStore.blobMeta(result, $0), result.int($0, 9)) }
        let page = position.page(rows, limit: limit)
        return (page.items, page.nextCursor)
    }
}
