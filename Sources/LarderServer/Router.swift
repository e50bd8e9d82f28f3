import Dispatch
import Foundation
import LarderStore
import LarderWire

/// Runs one request against the store and produces its reply. Reads run on the work pool (so a slow SEARCH never
/// holds back a GET); writes are handed to the store's group-commit writer and answered after COMMIT.
package final class Router: Sendable {
    package typealias Store = any DocumentStore & BlobStore

    let store: Store
    let stats: ServerStats
    /// Where reads, the parsing of writes, log reads and large sends run (`WorkPool`).
    let pool: WorkPool
    let searchGate: TestGate?
    let serverName: String
    let maxReplyJSONBytes: Int
    /// The largest binary part an answer carries (`Limits.maxBinaryPartBytes`): a larger blob is read by ranges.
    let maxReplyBinaryBytes: Int
    /// Whether the store answers point reads locally (SQLite), so the event loops may run them (`handleInline`).
    let pointReadsAreLocal: Bool
    /// The thumbnail sizes BLOB_GET makes, and the largest photo it makes them of (HELLO's `limits`).
    let thumbnailSizes: [Int]
    let maxThumbnailSourcePixels: Int

    /// The record bytes a page may carry under a JSON limit, leaving room for what wraps the records (member names,
    /// the cursor, group keys).
    package static func pageBudget(maxJSONBytes: Int) -> Int { maxJSONBytes - max(8 << 10, maxJSONBytes / 16) }

    init(
        store: Store, stats: ServerStats, pool: WorkPool, searchGate: TestGate?, serverName: String,
        maxReplyJSONBytes: Int = Limits.default.maxJSONBytes,
        maxReplyBinaryBytes: Int = Limits.default.maxBinaryPartBytes, thumbnailSizes: [Int] = Limits.default.thumbnailSizes,
        maxThumbnailSourcePixels: Int = Limits.default.maxThumbnailSourcePixels
    ) {
        self.thumbnailSizes = thumbnailSizes
        self.maxThumbnailSourcePixels = maxThumbnailSourcePixels
        self.maxReplyJSONBytes = maxReplyJSONBytes
        self.maxReplyBinaryBytes = maxReplyBinaryBytes
        self.store = store
        self.stats = stats
        self.pool = pool
        self.searchGate = searchGate
        self.serverName = serverName
        self.pointReadsAreLocal = store.pointReadsAreLocal
    }

    /// Point reads answered on the connection's event loop, without a hop to the work pool and back: each is one
    /// indexed lookup (microseconds), cheaper than the two thread switches it would otherwise cost. Everything whose
    /// time depends on the data (searches, lists, blob bytes) still runs on the work pool, so it never holds up a
    /// connection's other requests.
    static func isInline(_ opcode: Opcode) -> Bool { opcode == .get || opcode == .blobHead || opcode == .ping }

    private enum Route {
        case answered(Reply)
        case read
        case write
    }

    /// The checks every request passes before it reaches the store.
    private func route(_ frame: Frame) -> Route {
        let opcode = frame.opcode
        func fail(_ error: LarderError) -> Route {
            .answered(Reply(opcode: opcode, requestID: frame.requestID, error: error))
        }
        if opcode == .event {
            return fail(LarderError(.unknownOpcode, "EVENT frames are pushed by the server; a client never sends one"))
        }
        if opcode == .watch || opcode == .unwatch {
            // They change a connection's subscriptions, so the connection answers them itself.
            return fail(LarderError(.internal, "\(opcode.name) is answered by the connection, not the router"))
        }
        guard Opcode.all.contains(opcode) else {
            return fail(LarderError(.unknownOpcode, "opcode \(opcode.name) is not one this server knows"))
        }
        if opcode != .blobPut && opcode != .blobUploadChunk && !frame.binary.isEmpty {
            return fail(LarderError(.invalidArgument, "\(opcode.name) takes no binary part"))
        }
        return opcode.isWrite ? .write : .read
    }

    /// The reply carrying an answer, or PAYLOAD_TOO_LARGE in its place. The store keeps pages under the limit; this
    /// is the net under every other answer, since a reply over the JSON limit would break the client's connection
    /// rather than fail one request.
    func reply(to frame: Frame, _ result: Result<([UInt8], [UInt8]), LarderError>) -> Reply {
        switch result {
        case .success(let (json, binary)) where json.count <= maxReplyJSONBytes:
            return Reply(opcode: frame.opcode, requestID: frame.requestID, json: json, binary: binary)
        case .success(let (json, _)):
            let limit = maxReplyJSONBytes
            return Reply(
                opcode: frame.opcode, requestID: frame.requestID,
                error: LarderError(
                    .payloadTooLarge, "the answer would be \(json.count) bytes of JSON, over the limit of \(limit); "
                        + "ask for less at a time", details: ["limit": .int(Int64(limit))]))
        case .failure(let error):
            return Reply(opcode: frame.opcode, requestID: frame.requestID, error: error)
        }
    }

    private func readReply(_ frame: Frame, _ reads: (any PointReads)? = nil) -> Reply {
        reply(to: frame, Result { () throws(LarderError) in try read(frame, reads) })
    }

    /// Answers `frame` at once when it is a point read (`isInline`), through `reads` (the caller's burst of
    /// point reads, ended by the caller); nil means: use `handle`.
    package func handleInline(_ frame: Frame, reads: @autoclosure () -> any PointReads) -> Reply? {
        // A store whose point reads wait on the network (PostgreSQL) must not hold up a loop: only PING stays here.
        guard Router.isInline(frame.opcode), pointReadsAreLocal || frame.opcode == .ping else { return nil }
        switch route(frame) {
        case .answered(let reply): return reply
        case .read: return readReply(frame, frame.opcode == .ping ? nil : reads())
        case .write: return nil
        }
    }

    /// A lane of the work pool for one connection's writes: they reach the store's writer in the order the
    /// connection handed them out, which is the order they commit in (Protocol.md section 2.3).
    func makeWriteLane() -> WorkPool.Lane { pool.makeLane() }

    /// The answer to a request the work pool had no room for: the server is overloaded, not the request wrong.
    static func poolFull(_ frame: Frame, _ pool: WorkPool) -> Reply {
        Reply(
            opcode: frame.opcode, requestID: frame.requestID,
            error: LarderError(
                .resourceExhausted,
                "the server is overloaded: \(pool.maxWaiting) requests already wait for its \(pool.threads) worker "
                    + "threads (--max-queued-work, --work-threads); retry after a moment",
                details: ["limit": .int(Int64(pool.maxWaiting))]))
    }

    /// Handles `frame` and calls `completion` exactly once, on any thread. Writes go through `writes`, a lane from
    /// `makeWriteLane` that the caller keeps for the connection. `collections`: the only collections the sender's
    /// token may touch, for the requests whose collection only the store knows (BLOB_DELETE).
    func handle(
        _ frame: Frame, writes: @autoclosure () -> WorkPool.Lane, collections: Set<String>? = nil,
        completion: @escaping @Sendable (Reply) -> Void
    ) {
        switch route(frame) {
        case .answered(let reply):
            completion(reply)
        case .read where frame.opcode == .blobGet:
            // A thumbnail's cache write is answered after its commit, so BLOB_GET has a completion of its own.
            if !pool.submit({ [self] in answerBlobGet(frame, completion: completion) }) {
                completion(Router.poolFull(frame, pool))
            }
        case .read:
            if !pool.submit({ [self] in completion(readReply(frame)) }) { completion(Router.poolFull(frame, pool)) }
        case .write where Router.isUpload(frame.opcode):
            // In the connection's write order (chunks sent back to back arrive in order); each waits for its COMMIT.
            let accepted = writes().submit { [self] in
                completion(reply(to: frame, Result { () throws(LarderError) in try upload(frame) }))
            }
            if !accepted { completion(Router.poolFull(frame, pool)) }
        case .write:
            // Parsed off the loop and off the writer (the writer's time is the scarce resource), one write of the
            // connection after another; writes of different connections are parsed side by side.
            let accepted = writes().submit { [self] in
                let body: WriteBody
                do throws(LarderError) {
                    if let collections, frame.opcode == .blobDelete {
                        body = try limitedBlobDelete(frame, collections)
                    } else {
                        body = try Router.writeBody(frame)
                    }
                } catch {
                    return completion(reply(to: frame, .failure(error)))
                }
                let done: @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void = { [self] result in
                    completion(reply(to: frame, result))
                }
                // A CREATE, REPLACE, PATCH or DELETE is one write that checks before it changes anything.
                if Router.isSingleWrite(frame.opcode) {
                    store.submitSingleWrite(body, completion: done)
                } else {
                    store.submitWrite(body, completion: done)
                }
            }
            if !accepted { completion(Router.poolFull(frame, pool)) }
        }
    }

    // MARK: Reads

    private func get(_ request: GetRequest, _ reads: (any PointReads)?) throws(LarderError) -> ([UInt8], [UInt8]) {
        if let reads { return (try reads.getJSON(request.collection, id: request.id), []) }
        return (try store.get(request.collection, id: request.id).bytes, [])
    }

    private func blobHead(_ request: BlobIDRequest, _ reads: (any PointReads)?) throws(LarderError) -> ([UInt8], [UInt8]) {
        let meta = if let reads { try reads.blobHead(request.id) } else { try store.blobHead(request.id) }
        return (meta.json.bytes, [])
    }

    private func read(_ frame: Frame, _ reads: (any PointReads)?) throws(LarderError) -> ([UInt8], [UInt8]) {
        // The plain forms of the point reads skip building a JSON object (the general path below answers the rest).
        if frame.opcode == .get, let request = GetRequest.fast(frame.json) { return try get(request, reads) }
        if frame.opcode == .blobHead, let request = BlobIDRequest.fast(frame.json) { return try blobHead(request, reads) }
        let object = try frame.jsonObject()
        switch frame.opcode {
        case .ping, .hello:
            _ = try EmptyMessage(json: object)
            return ([], [])  // an empty JSON part, as the ping-response vector has it
        case .get:
            return try get(try GetRequest(json: object), reads)
        case .getMany:
            let request = try GetManyRequest(json: object)
            let (records, missing) = try store.getMany(request.collection, ids: request.ids)
            var out = Array(#"{"records":"#.utf8)
            Router.writeRecords(records, into: &out)
            out.append(contentsOf: #","missing":"#.utf8)
            JSON.array(missing.map { .string($0.wireString) }).write(into: &out)
            out.append(UInt8(ascii: "}"))
            return (out, [])
        case .list:
            let request = try ListRequest(json: object)
            return (Router.pageBytes(try store.list(request.collection, limit: request.limit, cursor: request.cursor)), [])
        case .search:
            let request = try SearchRequest(json: object)
            searchGate?.pass()
            return (Router.pageBytes(try store.search(request.collection, request.query)), [])
        case .count:
            let request = try CountRequest(json: object)
            let count = try store.count(request.collection, filter: request.filter, text: request.text)
            return (CountResponse(count: count).json.bytes, [])
        case .group:
            let request = try GroupRequest(json: object)
            let groups = try store.group(
                request.collection, field: request.field, filter: request.filter, text: request.text,
                perGroup: request.perGroup)
            var out = Array(#"{"groups":["#.utf8)
            for (n, group) in groups.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: #"{"key":"#.utf8)
                group.key.write(into: &out)
                out.append(contentsOf: #","count":"#.utf8)
                JSONWriter.writeInt(Int64(group.count), into: &out)
                out.append(contentsOf: #","records":"#.utf8)
                Router.writeRecords(group.records, into: &out)
                out.append(UInt8(ascii: "}"))
            }
            out.append(contentsOf: "]}".utf8)
            return (out, [])
        case .collections:
            _ = try EmptyMessage(json: object)
            let entries = try store.collections().map { CollectionsResponse.Entry(name: $0.name, count: $0.count) }
            return (CollectionsResponse(collections: entries).json.bytes, [])
        case .blobUploadStatus:
            return (try store.uploadStatus(try BlobUploadIDRequest(json: object).upload).json.bytes, [])
        case .blobHead:
            return try blobHead(try BlobIDRequest(json: object), reads)
        case .blobList:
            let request = try BlobListRequest(json: object)
            let (blobs, cursor) = try store.blobList(
                limit: request.limit, cursor: request.cursor, attachedTo: request.attachedTo)
            return (BlobListResponse(blobs: blobs, nextCursor: cursor).json.bytes, [])
        case .stats:
            _ = try EmptyMessage(json: object)
            var json = stats.json(now: DispatchTime.now().uptimeNanoseconds, server: serverName)
            let work = pool.snapshot
            json["workPool"] = .object([
                "threads": .int(Int64(work.threads)), "maxQueued": .int(Int64(work.maxWaiting)),
                "started": .int(Int64(work.started)), "busy": .int(Int64(work.busy)),
                "queued": .int(Int64(work.waiting)), "refused": .int(Int64(work.refused)),
            ])
            let storeStats = try store.stats()
            json["store"] = .object([
                "documents": .int(Int64(storeStats.documents)), "blobs": .int(Int64(storeStats.blobs)),
                "databaseBytes": .int(storeStats.databaseBytes), "changes": .int(Int64(storeStats.changes)),
                "lastChangeSeq": .int(storeStats.lastChangeSeq),
                "writer": .object([
                    "batches": .int(Int64(storeStats.writer.batches)), "writes": .int(Int64(storeStats.writer.writes)),
                    "cpuMicros": .int(storeStats.writer.cpuMicros),
                ]),
            ])
            json["thumbnails"] = .object(stats.thumbnailsJSON(stored: try store.thumbnailCount()))
            return (json.bytes, [])
        default:
            throw LarderError(.internal, "\(frame.opcode.name) has no read handler")
        }
    }

    /// A whole blob, or a range of one; a blob larger than one answer carries is read by ranges.
    func blobGet(_ request: BlobGetRequest) throws(LarderError) -> ([UInt8], [UInt8]) {
        guard request.isRange else {
            let meta = try store.blobHead(request.id)
            guard meta.size <= Int64(maxReplyBinaryBytes) else {
                throw LarderError(
                    .payloadTooLarge, "the blob is \(meta.size) bytes, more than one answer carries "
                        + "(\(maxReplyBinaryBytes)); read it by ranges: BLOB_GET with offset and length",
                    details: ["limit": .int(Int64(maxReplyBinaryBytes)), "size": .int(meta.size)])
            }
            let (whole, bytes) = try store.blobGet(request.id)
            return (whole.json.bytes, bytes)
        }
        let offset = request.offset ?? 0
        var length = request.length
        if length == nil {  // to the end
            let size = try store.blobHead(request.id).size
            length = max(0, size - offset)
            if offset >= size {
                throw LarderError(
                    .invalidArgument, "offset \(offset) is past the end of the blob, which has \(size) bytes",
                    field: "offset", details: ["size": .int(size)])
            }
        }
        guard let length, length <= Int64(maxReplyBinaryBytes) else {
            throw LarderError(
                .payloadTooLarge, "a range carries at most \(maxReplyBinaryBytes) bytes; ask for less at a time",
                field: "length", details: ["limit": .int(Int64(maxReplyBinaryBytes))])
        }
        let (meta, bytes) = try store.blobRead(request.id, offset: offset, length: Int(length))
        var json = meta.json
        json["offset"] = .int(offset)
        json["length"] = .int(Int64(bytes.count))
        return (json.bytes, bytes)
    }

    static func isUpload(_ opcode: Opcode) -> Bool {
        opcode == .blobUpload || opcode == .blobUploadChunk || opcode == .blobUploadFinish || opcode == .blobUploadAbort
    }

    /// The writes of a resumable upload: each waits for its COMMIT on the calling thread (a write lane's).
    private func upload(_ frame: Frame) throws(LarderError) -> ([UInt8], [UInt8]) {
        let object = try frame.jsonObject()
        switch frame.opcode {
        case .blobUpload:
            return (try store.uploadBegin(try BlobUploadRequest(json: object)).json.bytes, [])
        case .blobUploadChunk:
            let r = try BlobUploadChunkRequest(json: object)
            let info = try store.uploadChunk(r.upload, offset: r.offset, bytes: frame.binary, crc32: r.crc32)
            return (info.json.bytes, [])
        case .blobUploadFinish:
            let r = try BlobUploadFinishRequest(json: object)
            return (try store.uploadFinish(r.upload, sha256: r.sha256).json.bytes, [])
        case .blobUploadAbort:
            let r = try BlobUploadIDRequest(json: object)
            try store.uploadAbort(r.upload)
            return (BlobUploadAbortResponse(upload: r.upload).json.bytes, [])
        default:
            throw LarderError(.internal, "\(frame.opcode.name) is no upload request")
        }
    }

    static func writeRecords(_ records: [StoredRecord], into out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (n, record) in records.enumerated() {
            if n > 0 { out.append(UInt8(ascii: ",")) }
            record.write(into: &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    /// `{"records":[...],"nextCursor":...}` with each record's stored bytes spliced in.
    static func pageBytes(_ page: Page) -> [UInt8] {
        var out = Array(#"{"records":"#.utf8)
        out.reserveCapacity(page.records.reduce(64) { $0 + $1.data.count + 128 })
        writeRecords(page.records, into: &out)
        out.append(contentsOf: #","nextCursor":"#.utf8)
        if let cursor = page.nextCursor {
            JSONWriter.writeString(cursor, into: &out)
        } else {
            out.append(contentsOf: "null".utf8)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    // MARK: Writes

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
        return { (c) throws(LarderError) in (try c.create(write.collection, id: write.id, document: document).bytes, []) }
    }

    /// BLOB_DELETE by a token limited to `collections`: the blob goes only when it is attached to one of them. The
    /// check runs on the writer just before the delete, against the last commit; a blob's attachment never changes
    /// once stored (a BLOB_PUT of an id in use is CONFLICT), so what it checks is what it deletes, unless the blob was
    /// deleted and stored again under the same id, elsewhere, earlier in the same group commit.
    private func limitedBlobDelete(_ frame: Frame, _ collections: Set<String>) throws(LarderError) -> WriteBody {
        let r = try BlobIDRequest(json: try frame.jsonObject())
        let store = self.store
        return { (c) throws(LarderError) in
            let owner = try store.blobHead(r.id).attachedTo?.collection
            guard let owner, collections.contains(owner) else {
                throw LarderError(
                    .permissionDenied,
                    "this token may not delete a blob that is not attached to \(Grant.list(collections))",
                    details: ["opcode": .string(Opcode.blobDelete.name)])
            }
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
                return (DropCollectionResponse(collection: r.collection, documents: documents, blobs: blobs).json.bytes, [])
            }
        case .index:
            let r = try IndexRequest(json: object)
            return { (c) throws(LarderError) in
                let (name, created) = try c.createIndex(r.collection, field: r.field)
                return (IndexResponse(name: name, created: created).json.bytes, [])
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
