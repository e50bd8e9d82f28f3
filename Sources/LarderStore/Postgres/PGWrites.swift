import Foundation
import LarderWire

/// Replaces, patches, deletes, collections, indexes and blobs in the batch transaction (creates, which may be
/// deferred, are `PGWriteContext.insert`).
extension PGWriteContext {
    func replace(_ collection: String, id: UUID, document: PreparedDocument, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try CollectionName.validate(collection)
        // Checked before the revision, as on SQLite (which reads the row first, then checks the size at its update):
        // a document over the limit is refused whatever the revision, and the refusal writes nothing.
        let limit = core.configuration.maxDocumentBytes
        let oversized = document.data.count > limit
        // Checked before the statement, which writes: a record that does not match is refused whatever the row,
        // as on SQLite.
        let warning = try checkSchema(collection, document, field: "data")
        let now = nowMillis()
        let result = try one(
            PGStatement(
                """
                WITH cur AS (SELECT rev, created_at, data FROM documents
                    WHERE collection = $1 AND id = $2 FOR UPDATE),
                upd AS (UPDATE documents d SET rev = cur.rev + 1, updated_at = $4, data = $5,
                        q = coalesce($6, $5)::jsonb, search = $7, owner = $8
                    FROM cur WHERE d.collection = $1 AND d.id = $2 AND ($3::int8 IS NULL OR cur.rev = $3) AND NOT $9
                    RETURNING d.rev)
                SELECT cur.rev, cur.created_at, cur.data, (SELECT rev FROM upd) FROM cur
                """,
                [.text(collection), .uuid(id), expectedRev.map { .int($0) } ?? .null, .int(now)]
                    + PGWriteContext.documentValues(document) + [.bool(oversized)],
                name: "doc_replace"), writes: false)
        guard result.rows == 1 else { throw StoreRules.notFound(collection, id) }
        let current = result.int(0, 0)
        if let expectedRev, expectedRev != current {
            throw WriteRules.revisionConflict(current: current, expected: expectedRev)
        }
        try checkSize(document)
        guard !result.isNull(0, 3) else { throw LarderError(.internal, "the replace of \(id.wireString) was lost") }
        jobWrote = true
        let record = StoredRecord(
            id: id, rev: result.int(0, 3), createdAt: result.int(0, 1), updatedAt: now, data: document.data)
        recordChange(.replace, collection, record: record, previous: result.bytes(0, 2))
        warned(collection, id, warning)
        return record
    }

    func patch(_ collection: String, id: UUID, patch: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try CollectionName.validate(collection)
        let current = try one(
            PGStatement(
                "SELECT rev, created_at, data FROM documents WHERE collection = $1 AND id = $2 FOR UPDATE",
                [.text(collection), .uuid(id)], name: "doc_current"), writes: false)
        guard current.rows == 1 else { throw StoreRules.notFound(collection, id) }
        let rev = current.int(0, 0)
        if let expectedRev, expectedRev != rev {
            throw WriteRules.revisionConflict(current: rev, expected: expectedRev)
        }
        let previous = current.bytes(0, 2)
        let document = try PreparedDocument(merging: patch, into: previous)
        try checkSize(document, field: "patch")
        // The merged record is what must match.
        let warning = try checkSchema(collection, document, field: "patch")
        let now = nowMillis()
        try one(
            PGStatement(
                """
                UPDATE documents SET rev = $3, updated_at = $4, data = $5, q = coalesce($6, $5)::jsonb, search = $7,
                    owner = $8
                WHERE collection = $1 AND id = $2
                """, [.text(collection), .uuid(id), .int(rev + 1), .int(now)] + PGWriteContext.documentValues(document),
                name: "doc_update"), writes: true)
        let record = StoredRecord(
            id: id, rev: rev + 1, createdAt: current.int(0, 1), updatedAt: now, data: document.data)
        recordChange(.patch, collection, record: record, previous: previous)
        warned(collection, id, warning)
        return record
    }

    func delete(_ collection: String, id: UUID, expectedRev: Int64?) throws(LarderError)
        -> (rev: Int64, blobsDeleted: Int)
    {
        try CollectionName.validate(collection)
        let result = try one(
            PGStatement(
                """
                WITH cur AS (SELECT rev, created_at, updated_at, data FROM documents
                    WHERE collection = $1 AND id = $2 FOR UPDATE),
                del AS (DELETE FROM documents d USING cur
                    WHERE d.collection = $1 AND d.id = $2 AND ($3::int8 IS NULL OR cur.rev = $3) RETURNING 1),
                b AS (DELETE FROM blobs WHERE attached_collection = $1 AND attached_id = $2
                    AND EXISTS (SELECT 1 FROM del) RETURNING 1)
                SELECT cur.rev, cur.created_at, cur.updated_at, cur.data, EXISTS (SELECT 1 FROM del),
                    (SELECT count(*) FROM b) FROM cur
                """, [.text(collection), .uuid(id), expectedRev.map { .int($0) } ?? .null], name: "doc_delete"),
            writes: false)
        guard result.rows == 1 else { throw StoreRules.notFound(collection, id) }
        let rev = result.int(0, 0)
        guard result.bool(0, 4) else { throw WriteRules.revisionConflict(current: rev, expected: expectedRev ?? rev) }
        jobWrote = true
        recordChange(
            .delete, collection,
            record: StoredRecord(
                id: id, rev: rev, createdAt: result.int(0, 1), updatedAt: result.int(0, 2), data: result.bytes(0, 3)))
        return (rev, Int(result.int(0, 5)))
    }

    func dropCollection(_ name: String) throws(LarderError) -> (documents: Int, blobs: Int) {
        try CollectionName.validate(name)
        let found = try run(
            [
                PGStatement("SELECT 1 FROM collections WHERE name = $1 FOR UPDATE", [.text(name)], name: "coll_lock"),
                PGStatement("SELECT pg_name FROM field_indexes WHERE collection = $1", [.text(name)], name: "coll_ix"),
            ], writes: false)
        guard found[0].rows == 1 else { throw LarderError(.notFound, "no collection '\(name)'", field: "collection") }
        var statements: [PGStatement] = (0..<found[1].rows).map {
            // Index names are "lx_" and hex digits (see `createIndex`).
            PGStatement("DROP INDEX IF EXISTS \(PGSQL.identifier(found[1].text($0, 0)))")
        }
        let first = statements.count
        statements += [
            PGStatement("DELETE FROM text_collections WHERE name = $1", [.text(name)], name: "drop_text"),
            PGStatement("DELETE FROM field_indexes WHERE collection = $1", [.text(name)], name: "drop_ix"),
            PGStatement("DELETE FROM blobs WHERE attached_collection = $1", [.text(name)], name: "drop_blobs"),
            PGStatement("DELETE FROM documents WHERE collection = $1", [.text(name)], name: "drop_docs"),
            PGStatement("DELETE FROM collections WHERE name = $1", [.text(name)], name: "drop_coll"),
        ]
        let results = try run(statements, writes: true)
        recordChange(.drop, name, record: nil)
        let textIndexer = self.textIndexer
        // The trigram index (which a build may be making right now) is dropped by the indexer, after any build.
        afterCommit.append { textIndexer?.drop(name) }
        return (results[first + 3].affected, results[first + 2].affected)
    }

    func createIndex(_ collection: String, field: FieldPath, collation: String?, strength: Int?) throws(LarderError)
        -> (name: String, created: Bool)
    {
        // The name answered is the one SQLite answers; PostgreSQL's own (at most 63 bytes, unique per database) is a
        // hash of both, so no collection name reaches the index's identifier.
        let tag = try Collation.indexTag(field, collation, strength)
        let name = try WriteRules.indexName(collection, field, tag: tag)
        let path = Collation.indexPath(field, tag)
        let pgName = "lx_" + String(SHA256.hex(Array((collection + "\u{0}" + path).utf8)).prefix(32))
        // Servers declaring the same index at once take turns (two CREATE INDEX of one name would collide): the
        // lock lasts until this batch commits, and the second then finds the index declared.
        let exists = try run(
            [
                PGStatement("SELECT pg_advisory_xact_lock(hashtext($1))", [.text(pgName)], name: "ix_lock"),
                PGStatement(
                    "SELECT 1 FROM field_indexes WHERE collection = $1 AND path = $2",
                    [.text(collection), .text(path)], name: "ix_exists"),
            ], writes: false)[1]
        if exists.rows > 0 { return (name, false) }
        let pgField = PGField(path: field)
        var build = [PGStatement(pgField.createIndex(PGSQL.identifier(pgName), collection: collection))]
        if let tag {
            build = [
                PGStatement(PGCollations.createSQL(tag)),
                PGStatement(pgField.createCollatedIndex(PGSQL.identifier(pgName), collection: collection, tag: tag)),
            ]
        }
        try run(
            [
                PGStatement(
                    "INSERT INTO collections(name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                    [.text(collection), .int(nowMillis())], name: "coll_ensure")
            ] + build + [
                PGStatement(
                    "INSERT INTO field_indexes(collection, path, name, pg_name) VALUES ($1, $2, $3, $4)",
                    [.text(collection), .text(path), .text(name), .text(pgName)], name: "ix_insert")
            ], writes: true)
        return (name, true)
    }

    func insertBlob(_ blob: PreparedBlob) throws(LarderError) -> BlobInfo {
        let meta = blob.meta
        let result = try one(
            PGStatement(
                """
                WITH doc AS (SELECT id, rev, created_at, updated_at, data FROM documents
                    WHERE $9::text IS NOT NULL AND collection = $9 AND id = $10 FOR KEY SHARE),
                ins AS (INSERT INTO blobs(id, size, sha256, content_type, width, height, created_at,
                        attached_collection, attached_id, bytes)
                    SELECT $1, $2, $3, $4, $5, $6, $7, $9, $10, $8
                    WHERE ($9::text IS NULL OR EXISTS (SELECT 1 FROM doc))
                        AND NOT EXISTS (SELECT 1 FROM blobs WHERE id = $1)
                    ON CONFLICT (id) DO NOTHING
                    RETURNING 1)
                SELECT EXISTS (SELECT 1 FROM ins), d.id, d.rev, d.created_at, d.updated_at, d.data
                FROM (SELECT 1) AS one LEFT JOIN doc d ON true
                """,
                [
                    .uuid(meta.id), .int(meta.size), .text(meta.sha256), .text(meta.contentType),
                    .int(Int64(meta.width)), .int(Int64(meta.height)), .int(meta.createdAtMs), .bytes(blob.bytes),
                    meta.attachedTo.map { .text($0.collection) } ?? .null,
                    meta.attachedTo.map { .uuid($0.id) } ?? .null,
                ], name: "blob_insert"), writes: false)
        if let attachment = meta.attachedTo, result.isNull(0, 1) {
            throw LarderError(
                .notFound,
                "cannot attach the blob: no document \(attachment.id.wireString) in '\(attachment.collection)'",
                field: "attach.id")
        }
        guard result.bool(0, 0) else {
            throw WriteRules.blobIdTaken(meta.id)
        }
        jobWrote = true
        if let attachment = meta.attachedTo {
            recordChange(.blobAttach, attachment.collection, record: PostgresStore.record(result, 0, at: 1), blob: meta)
        }
        return meta
    }

    func blobDelete(_ id: UUID) throws(LarderError) {
        let result = try one(
            PGStatement(
                """
                WITH b AS (DELETE FROM blobs WHERE id = $1 RETURNING \(PostgresStore.blobColumns))
                SELECT b.*, d.id, d.rev, d.created_at, d.updated_at, d.data
                FROM b LEFT JOIN documents d ON d.collection = b.attached_collection AND d.id = b.attached_id
                """, [.uuid(id)], name: "blob_delete"), writes: false)
        guard result.rows == 1 else { throw StoreRules.blobNotFound(id) }
        jobWrote = true
        let meta = PostgresStore.blobMeta(result, 0)
        if let attachment = meta.attachedTo, !result.isNull(0, 9) {
            recordChange(.blobDelete, attachment.collection, record: PostgresStore.record(result, 0, at: 9), blob: meta)
        }
    }
}
