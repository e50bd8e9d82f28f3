import Foundation
import LarderStore
import LarderWire

/// The synchronous writes tests make on a store: each one write job through the store's group-commit writer that
/// returns after its COMMIT (`GroupCommitStore.syncWrite`), with the refusals the `WriteContext` operation answers.
/// Production code makes these writes through `submitWrite` and `submitSingleWrite`.
extension GroupCommitStore {
    /// `WriteContext.create` in a job of its own.
    package func create(_ collection: String, id: UUID?, data: JSONObject) throws(LarderError) -> StoredRecord {
        try syncWrite(single: true) { context throws(LarderError) in
            try context.create(collection, id: id, data: data)
        }
    }

    /// `WriteContext.replace` in a job of its own.
    package func replace(_ collection: String, id: UUID, data: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try syncWrite(single: true) { context throws(LarderError) in
            try context.replace(collection, id: id, data: data, expectedRev: expectedRev)
        }
    }

    /// `WriteContext.patch` in a job of its own.
    package func patch(_ collection: String, id: UUID, patch: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try syncWrite(single: true) { context throws(LarderError) in
            try context.patch(collection, id: id, patch: patch, expectedRev: expectedRev)
        }
    }

    /// `WriteContext.delete` in a job of its own: the deleted revision and how many attached blobs went with it.
    package func delete(_ collection: String, id: UUID, expectedRev: Int64?) throws(LarderError)
        -> (rev: Int64, blobsDeleted: Int)
    {
        try syncWrite(single: true) { context throws(LarderError) in
            try context.delete(collection, id: id, expectedRev: expectedRev)
        }
    }

    /// `WriteContext.dropCollection` in a job of its own: how many documents and blobs went.
    package func dropCollection(_ name: String) throws(LarderError) -> (documents: Int, blobs: Int) {
        try syncWrite { context throws(LarderError) in try context.dropCollection(name) }
    }

    /// `WriteContext.createIndex` in a job of its own: the index's name, and whether it is new.
    package func createIndex(
        _ collection: String, field: FieldPath, collation: String? = nil, strength: Int? = nil
    ) throws(LarderError) -> (name: String, created: Bool) {
        try syncWrite { context throws(LarderError) in
            try context.createIndex(collection, field: field, collation: collation, strength: strength)
        }
    }

    /// `WriteContext.blobPut` in a job of its own.
    package func blobPut(id: UUID?, bytes: [UInt8], expectedSHA256: String?, attachTo: BlobAttachment?)
        throws(LarderError) -> BlobInfo
    {
        try syncWrite { context throws(LarderError) in
            try context.blobPut(id: id, bytes: bytes, expectedSHA256: expectedSHA256, attachTo: attachTo)
        }
    }

    /// `WriteContext.blobDelete` in a job of its own.
    package func blobDelete(_ id: UUID) throws(LarderError) {
        try syncWrite { context throws(LarderError) in try context.blobDelete(id) }
    }
}
