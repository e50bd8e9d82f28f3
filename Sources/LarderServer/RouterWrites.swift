import Dispatch
import Foundation
import LarderStore
import LarderWire

// The writes: each request becomes a body the store's group-commit writer runs in its transaction.
extension Router {
    typealias WriteBody = @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8])

    /// CREATE and REPLACE in their usual form, read from the request's bytes straight to the stored ones without a
    /// tree (`DocumentWrite.fast`); nil for every other request.
    static func fastWriteBody(_ frame: Frame) -> WriteBody? {
        guard let write = DocumentWrite.fast(frame.json, opcode: frame.opcode) else { return nil }
        let document = PreparedDocument(write.data)
        if let id = write.id, frame.opcode == .replace {
            return { (c) throws(LarderError) in
                (try c.replace(write.collection, id: id, document: document, expectedRev: write.rev).bytes, [])
            }
        }
        return { (c) throws(LarderError) in
            (try c.create(write.collection, id: write.id, document: document).bytes, [])
        }
    }

    /// Parses a write planned `writer` (a small CREATE, REPLACE, PATCH or DELETE) on the calling event loop and hands
    /// it straight to the store's writer, skipping the hop through the work pool (its lane's lock and queue, and often
    /// a worker thread woken for the one write). Calls `completion` exactly once, on any thread.
    func submitToWriter(_ frame: Frame, completion: @escaping @Sendable (Reply) -> Void) {
        let body: WriteBody
        do throws(LarderError) {
            body = try Router.writeBody(frame)
        } catch {
            return completion(reply(to: frame, .failure(error)))
        }
        store.submitSingleWrite(body) { [self] result in completion(reply(to: frame, result)) }
    }

    /// BLOB_DELETE by a token limited to `collections`: the blob goes only when it is attached to one of them; any
    /// other id, a missing one included, gets `Grant.blobRefused` (`visibleBlob`). The check runs on the writer just
    /// before the delete, against the last commit; a blob's attachment never changes once stored (a BLOB_PUT of an id
    /// in use is CONFLICT), so what it checks is what it deletes, unless the blob was deleted and stored again under
    /// the same id, elsewhere, earlier in the same group commit.
    func limitedBlobDelete(_ frame: Frame, _ collections: Set<String>) throws(LarderError) -> WriteBody {
        let r = try BlobIDRequest(json: try frame.jsonObject())
        return { [self] (c) throws(LarderError) in
            _ = try visibleBlob(r.id, .blobDelete, collections)
            try c.blobDelete(r.id)
            return (BlobDeleteResponse(id: r.id).json.bytes, [])
        }
    }

    /// The writes whose body is one call to `WriteContext.create`, `replace`, `patch` or `delete`
    /// (`DocumentStore.submitSingleWrite`).
    static func isSingleWrite(_ opcode: Opcode) -> Bool {
        opcode == .create || opcode == .replace || opcode == .patch || opcode == .delete
    }

    /// Parses a write request and returns what to run inside the group-commit transaction.
    static func writeBody(_ frame: Frame) throws(LarderError) -> WriteBody {
        if let body = fastWriteBody(frame) { return body }
        let object = try frame.jsonObject()
        switch frame.opcode {
        case .create:
            let r = try CreateRequest(json: object)
            // Encoded and folded here, on the work pool: the writer's time is the scarce resource.
            let document = PreparedDocument(r.data)
            return { (c) throws(LarderError) in (try c.create(r.collection, id: r.id, document: document).bytes, []) }
        case .replace:
            let r = try ReplaceRequest(json: object)
            let document = PreparedDocument(r.data)
            return { (c) throws(LarderError) in
                (try c.replace(r.collection, id: r.id, document: document, expectedRev: r.rev).bytes, [])
            }
        case .patch:
            let r = try PatchRequest(json: object)
            return { (c) throws(LarderError) in
                (try c.patch(r.collection, id: r.id, patch: r.patch, expectedRev: r.rev).bytes, [])
            }
        case .delete:
            let r = try DeleteRequest(json: object)
            return { (c) throws(LarderError) in
                let (rev, blobs) = try c.delete(r.collection, id: r.id, expectedRev: r.rev)
                return (DeleteResponse(id: r.id, rev: rev, blobsDeleted: blobs).json.bytes, [])
            }
        case .dropCollection:
            let r = try DropCollectionRequest(json: object)
            return { (c) throws(LarderError) in
                let (documents, blobs) = try c.dropCollection(r.collection)
                let response = DropCollectionResponse(collection: r.collection, documents: documents, blobs: blobs)
                return (response.json.bytes, [])
            }
        case .index:
            let r = try IndexRequest(json: object)
            return { (c) throws(LarderError) in
                let (name, created) = try c.createIndex(r.collection, field: r.field)
                return (IndexResponse(name: name, created: created).json.bytes, [])
            }
        case .rulesSet:
            let r = try RulesSetRequest(json: object)
            return { (c) throws(LarderError) in
                try c.setCollectionRules(r.collection, r.rules)
                return (RulesResponse(collection: r.collection, rules: r.rules).json.bytes, [])
            }
        case .blobPut:
            let r = try BlobPutRequest(json: object)
            let bytes = frame.binary
            return { (c) throws(LarderError) in
                (try c.blobPut(id: r.id, bytes: bytes, expectedSHA256: r.sha256, attachTo: r.attach).json.bytes, [])
            }
        case .blobDelete:
            let r = try BlobIDRequest(json: object)
            return { (c) throws(LarderError) in
                try c.blobDelete(r.id)
                return (BlobDeleteResponse(id: r.id).json.bytes, [])
            }
        default:
            throw LarderError(.internal, "\(frame.opcode.name) has no write handler")
        }
    }
}
