import Foundation
import LarderSchema
import LarderWire

/// A write context that takes documents and blobs prepared off the writer's thread (both stores' contexts).
protocol PreparedWriteContext: WriteContext, AnyObject {
    var core: StoreCore { get }
    /// Why no write can run (the store is closed, or its database unreachable); nil while writes can.
    var closedError: LarderError? { get }
    /// The changes logged in this transaction, in order (sequence numbers are set at COMMIT).
    var changes: [ChangeEntry] { get set }
    /// Inserts a document whose collection name and size were checked.
    func insert(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord
    /// Inserts a blob validated and hashed beforehand.
    func insertBlob(_ blob: PreparedBlob) throws(LarderError) -> BlobInfo
    /// Side effects on in-memory state that may happen only once the transaction committed.
    var afterCommit: [() -> Void] { get set }
    /// The schema writes to `collection` are checked against in this transaction (a SCHEMA_SET earlier in it
    /// included); nil when it has none.
    func schemaEntry(_ collection: String) -> SchemaEntry?
}

extension PreparedWriteContext {
    /// PAYLOAD_TOO_LARGE when `document` passes the store's limit; `field` is the request member it came from.
    func checkSize(_ document: PreparedDocument, field: String = "data") throws(LarderError) {
        try document.checkSize(limit: core.configuration.maxDocumentBytes, field: field)
    }

    func create(_ collection: String, id: UUID?, data: JSONObject) throws(LarderError) -> StoredRecord {
        try create(collection, id: id, document: PreparedDocument(data))
    }

    func create(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord {
        try CollectionName.validate(collection)
        try checkSize(document)
        let warning = try checkSchema(collection, document, field: "data")
        let record = try insert(collection, id: id, document: document)
        warned(collection, record.id, warning)
        return record
    }

    func replace(_ collection: String, id: UUID, data: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try replace(collection, id: id, document: PreparedDocument(data), expectedRev: expectedRev)
    }

    func blobPut(id: UUID?, bytes: [UInt8], expectedSHA256: String?, attachTo: BlobAttachment?) throws(LarderError)
        -> BlobInfo
    {
        try insertBlob(
            PreparedBlob(id: id, bytes: bytes, expectedSHA256: expectedSHA256, attachTo: attachTo, core: core))
    }
}

extension PreparedWriteContext {
    /// Runs one write job's body as both stores' writers do. A closed store answers why; a body that throws has its
    /// writes undone (`undo`: to the job's savepoint on SQLite, by the batch's rollback on PostgreSQL) and its log
    /// entries taken back, for they never happened. The returned delivery is called with the COMMIT's outcome.
    func runJob<T>(
        _ body: (any WriteContext) throws(LarderError) -> T, begin: () throws(LarderError) -> Void,
        end: () throws(LarderError) -> Void = {}, undo: () -> Void,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) -> (LarderError?) -> Void {
        let result: Result<T, LarderError>
        if let closedError {
            result = .failure(closedError)
        } else {
            let logged = changes.count
            do throws(LarderError) {
                try begin()
                let value = try body(self)
                try end()
                result = .success(value)
            } catch {
                undo()
                changes.removeSubrange(logged...)
                result = .failure(error)
            }
        }
        return { commitError in completion(commitError.map { .failure($0) } ?? result) }
    }
}
