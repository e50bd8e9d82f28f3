import Dispatch
import Foundation
import LarderStore
import LarderWire

/// Runs one request against the store and produces its reply. Reads run on the concurrent work queue (so a slow
/// SEARCH never holds back a GET); writes are handed to the store's group-commit writer and answered after COMMIT.
package final class Router: Sendable {
    package typealias Store = any DocumentStore & BlobStore

    let store: Store
    let stats: ServerStats
    let workQueue: DispatchQueue
    let searchGate: TestGate?
    let serverName: String
    let maxReplyJSONBytes: Int
    /// Whether the store answers point reads locally (SQLite), so the event loops may run them (`handleInline`).
    let pointReadsAreLocal: Bool
    /// The thumbnail sizes BLOB_GET makes, and the largest photo it makes them of (HELLO's `limits`).
    let thumbnailSizes: [Int]
    let maxThumbnailSourcePixels: Int

    /// The record bytes a page may carry under a JSON limit, leaving room for what wraps the records (member names,
    /// the cursor, group keys).
    package static func pageBudget(maxJSONBytes: Int) -> Int { maxJSONBytes - max(8 << 10, maxJSONBytes / 16) }

    package init(
        store: Store, stats: ServerStats, workQueue: DispatchQueue, searchGate: TestGate?, serverName: String,
        maxReplyJSONBytes: Int = Limits.default.maxJSONBytes, thumbnailSizes: [Int] = Limits.default.thumbnailSizes,
        maxThumbnailSourcePixels: Int = Limits.default.maxThumbnailSourcePixels
    ) {
        self.thumbnailSizes = thumbnailSizes
        self.maxThumbnailSourcePixels = maxThumbnailSourcePixels
        self.maxReplyJSONBytes = maxReplyJSONBytes
        self.store = store
        self.stats = stats
        self.workQueue = workQueue
        self.searchGate = searchGate
        self.serverName = serverName
        self.pointReadsAreLocal = store.pointReadsAreLocal
    }

    /// Point reads answered on the connection's event loop, without a hop to the work queue and back: each is one
    /// indexed lookup (microseconds), cheaper than the two thread switches it would otherwise cost. Everything whose
    /// time depends on the data (searches, lists, blob bytes) still runs on the work queue, so it never holds up a
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
        if opcode != .blobPut && !frame.binary.isEmpty {
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

    /// A serial queue on the work queue for one connection's writes: they reach the store's writer in the order the
    /// connection handed them out, which is the order they commit in (Protocol.md section 2.3).
    package func makeWriteLane() -> DispatchQueue {
        DispatchQueue(label: "larder.server.writes", target: workQueue)
    }

    /// Handles `frame` and calls `completion` exactly once, on any thread. Writes go through `writes`, a lane from
    /// `makeWriteLane` that the caller keeps for the connection.
    package func handle(
        _ frame: Frame, writes: @autoclosure () -> DispatchQueue, completion: @escaping @Sendable (Reply) -> Void
    ) {
        switch route(frame) {
        case .answered(let reply):
            completion(reply)
        case .read where frame.opcode == .blobGet:
            // A thumbnail's cache write is answered after its commit, so BLOB_GET has a completion of its own.
            workQueue.async { [self] in answerBlobGet(frame, completion: completion) }
        case .read:
            workQueue.async { [self] in completion(readReply(frame)) }
        case .write:
            // Parsed off the loop and off the writer (the writer's time is the scarce resource), one write of the
            // connection after another; writes of different connections are parsed side by side.
            writes().async { [self] in
                let body: WriteBody
                do throws(LarderError) {
                    body = try Router.writeBody(frame)
                } catch {
                    return completion(reply(to: frame, .failure(error)))
                }
                store.submitWrite(body) { [self] result in completion(reply(to: frame, result)) }
            }
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
            let storeStats = try store.stats()
            json["store"] = .object([
                "documents": .int(Int64(storeStats.documents)), "blobs": .int(Int64(storeStats.blobs)),
                "databaseBytes": .int(storeStats.databaseBytes), "changes": .int(Int64(storeStats.changes)),
                "lastChangeSeq": .int(storeStats.lastChangeSeq),
            ])
            json["thumbnails"] = .object(stats.thumbnailsJSON(stored: try store.thumbnailCount()))
            return (json.bytes, [])
        default:
            throw LarderError(.internal, "\(frame.opcode.name) has no read handler")
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

    /// Parses a write request and returns what to run inside the group-commit transaction.
    static func writeBody(_ frame: Frame) throws(LarderError) -> WriteBody {
        if let body = fastWriteBody(frame) { return body }
        let object = try frame.jsonObject()
        switch frame.opcode {
        case .create:
            let r = try CreateRequest(json: object)
            // Encoded and folded here, on the work queue: the writer's time is the scarce resource.
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
