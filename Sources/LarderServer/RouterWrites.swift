import Dispatch
import Foundation
import LarderStore
import LarderWire

// The writes: each request becomes a body the store's group-commit writer runs in its transaction.
extension Router {
    typealias WriteBody = @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8])

    /// CREATE and REPLACE in their usual form, read from the request's bytes straight to the stored ones without a
    /// tree (`DocumentWrite.fast`); nil for every other request.
    /// `schemas`: the store, when the record is to be checked against its collection's schema here rather than on the
    /// writer (`DocumentStore.checkSchemaAhead`; on the work pool, never on an event loop).
    static func fastWriteBody(_ frame: Frame, schemas: Store? = nil) -> WriteBody? {
        guard let write = DocumentWrite.fast(frame.json, opcode: frame.opcode) else { return nil }
        return documentWriteBody(
            frame.opcode, write.collection, id: write.id, rev: write.rev, PreparedDocument(write.data),
            key: write.requestKey, schemas: schemas)
    }

    /// The body of a CREATE (`opcode` .create) or REPLACE of `document`, checked against its collection's schema here
    /// when `schemas` is given, keyed with `key` when the request carried one; the one shape both readers of a
    /// CREATE or REPLACE end in, so that they store, check and fingerprint a request alike.
    private static func documentWriteBody(
        _ opcode: Opcode, _ collection: String, id: UUID?, rev: Int64?, _ document: PreparedDocument, key: UUID?,
        schemas: Store?
    ) -> WriteBody {
        var prepared = document
        schemas?.checkSchemaAhead(collection, &prepared)
        let document = prepared
        if opcode == .replace, let id {
            let body: WriteBody = { (c) throws(LarderError) in
                (try c.replace(collection, id: id, document: document, expectedRev: rev).bytes, [])
            }
            guard let key else { return body }
            return RequestKey.document(key, opcode, collection: collection, id: id, rev: rev, data: document.data)
                .wrap(body)
        }
        guard let key else {
            return { (c) throws(LarderError) in (try c.create(collection, id: id, document: document).bytes, []) }
        }
        return RequestKey.document(key, opcode, collection: collection, id: id, rev: rev, data: document.data)
            .create(collection, id: id, document: document)
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
        store.submitSingleWrite(body) { [self] result in completion(reply(to: frame, sequenced(frame, result))) }
    }

    /// A document write's (or DROP_COLLECTION's) answer with `seq`, the newest change this server's writes have
    /// committed or its follower has applied: called as the write is answered, so it is at or after the write's own
    /// change (Protocol.md section 5.1). A client sends the highest it has seen as a GET's `afterSeq`. A retry answered
    /// from its request key gets the answering server's number too, not the one the first answer carried.
    func sequenced(_ frame: Frame, _ result: Result<([UInt8], [UInt8]), LarderError>)
        -> Result<([UInt8], [UInt8]), LarderError>
    {
        guard Router.isSingleWrite(frame.opcode) || frame.opcode == .dropCollection,
            case .success(let (json, binary)) = result
        else { return result }
        return .success((SeqMember.appending(max(store.writtenSeq, store.lastChangeSeq), to: json), binary))
    }

    /// BLOB_DELETE by a token limited to `collections`: the blob goes only when it is attached to one of them; any
    /// other id, a missing one included, gets `Grant.blobRefused` (`visibleBlob`). The check runs on the writer just
    /// before the delete, against the last commit; a blob's attachment never changes once stored (a BLOB_PUT of an id
    /// in use is CONFLICT), so what it checks is what it deletes, unless the blob was deleted and stored again under
    /// the same id, elsewhere, earlier in the same group commit.
    func limitedBlobDelete(_ frame: Frame, _ collections: Set<String>) throws(LarderError) -> WriteBody {
        var object = try frame.jsonObject()
        let key = try RequestKey.take(from: &object)
        let r = try BlobIDRequest(json: object)
        let body: WriteBody = { [self] (c) throws(LarderError) in
            _ = try visibleBlob(r.id, .blobDelete, collections)
            try c.blobDelete(r.id)
            return (BlobDeleteResponse(id: r.id).json.bytes, [])
        }
        return key.map { RequestKey.request($0, frame.opcode, object).wrap(body) } ?? body
    }

    /// The writes that take a `requestKey` (Protocol.md section 5.10); BLOB_UPLOAD_FINISH takes one too
    /// (`RouterUploads`).
    static func takesRequestKey(_ opcode: Opcode) -> Bool {
        isSingleWrite(opcode) || opcode == .blobPut || opcode == .blobDelete || opcode == .blobUploadFinish
    }

    /// The writes whose body is one call to `WriteContext.create`, `replace`, `patch` or `delete`
    /// (`DocumentStore.submitSingleWrite`).
    static func isSingleWrite(_ opcode: Opcode) -> Bool {
        opcode == .create || opcode == .replace || opcode == .patch || opcode == .delete
    }

    /// Parses a write request and returns what to run inside the group-commit transaction. A request carrying a
    /// `requestKey` runs keyed (`RequestKey.wrap`, a CREATE `RequestKey.create`); a write without one pays nothing for
    /// keys (the tree-free reader looks for the member only among names it does not know, the general one with one
    /// lookup).
    /// `schemas`: as for `fastWriteBody`.
    static func writeBody(_ frame: Frame, schemas: Store? = nil) throws(LarderError) -> WriteBody {
        if let body = fastWriteBody(frame, schemas: schemas) { return body }
        var object = try frame.jsonObject()
        let key = takesRequestKey(frame.opcode) ? try RequestKey.take(from: &object) : nil
        return try writeBody(frame, object, key: key, schemas: schemas)
    }

    /// The body of a write request parsed into `object`, its request key (if any) taken out, keyed with it.
    private static func writeBody(_ frame: Frame, _ object: JSONObject, key: UUID?, schemas: Store?)
        throws(LarderError) -> WriteBody
    {
        switch frame.opcode {
        case .create:
            let r = try CreateRequest(json: object)
            // Encoded and folded here, on the work pool: the writer's time is the scarce resource.
            return documentWriteBody(
                .create, r.collection, id: r.id, rev: nil, PreparedDocument(r.data), key: key, schemas: schemas)
        case .replace:
            let r = try ReplaceRequest(json: object)
            return documentWriteBody(
                .replace, r.collection, id: r.id, rev: r.rev, PreparedDocument(r.data), key: key, schemas: schemas)
        default:
            let body = try otherWriteBody(frame, object)
            return key.map { RequestKey.request($0, frame.opcode, object).wrap(body) } ?? body
        }
    }

    /// The body of a write other than CREATE and REPLACE, parsed into `object`.
    private static func otherWriteBody(_ frame: Frame, _ object: JSONObject) throws(LarderError) -> WriteBody {
        switch frame.opcode {
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
                let (name, created) = try c.createIndex(
                    r.collection, field: r.field, collation: r.collation, strength: r.strength)
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
