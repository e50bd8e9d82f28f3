import Dispatch
import Foundation
import LarderStore
import LarderWire

// The reads, run on the work pool (point reads also inline on the event loop), and how a page of records is written.
extension Router {
    private func get(_ request: GetRequest, _ reads: (any PointReads)?) throws(LarderError) -> ([UInt8], [UInt8]) {
        guard request.afterSeq != nil else {
            if let reads { return (try reads.getJSON(request.collection, id: request.id), []) }
            return (try store.get(request.collection, id: request.id).bytes, [])
        }
        // Every change this server answered is applied before its answer, and the database read is current: the
        // answer reflects `afterSeq`, and says through which number (Protocol.md section 5.1).
        if let reads, !store.isShared {
            let json = try reads.getJSON(request.collection, id: request.id)
            return (SeqMember.appending(store.lastChangeSeq, to: json), [])
        }
        let read = try store.getSequenced(request.collection, id: request.id)
        guard let record = read.record else { throw StoreRules.notFound(request.collection, request.id) }
        return (SeqMember.appending(read.seq, to: record.bytes), [])
    }

    private func blobHead(_ request: BlobIDRequest, _ reads: (any PointReads)?, _ collections: Set<String>?)
        throws(LarderError) -> ([UInt8], [UInt8])
    {
        if let collections { return (try visibleBlob(request.id, .blobHead, collections, reads).json.bytes, []) }
        let meta = if let reads { try reads.blobHead(request.id) } else { try store.blobHead(request.id) }
        return (meta.json.bytes, [])
    }

    /// The blob `id` for a token limited to `collections`: its metadata when it is attached to a document of one of
    /// them, else `Grant.blobRefused`, the same answer whether the blob is attached elsewhere, to nothing, or missing.
    /// Called before anything else is read, checked or made of the blob, so that no other answer (a range past its
    /// end, a photo too large for a thumbnail) and no work (a thumbnail made and cached) comes of a blob the token may
    /// not see. A blob's attachment never changes once stored, so what this finds is what the request then reads.
    func visibleBlob(_ id: UUID, _ opcode: Opcode, _ collections: Set<String>, _ reads: (any PointReads)? = nil)
        throws(LarderError) -> BlobInfo
    {
        let meta: BlobInfo
        do throws(LarderError) {
            meta = if let reads { try reads.blobHead(id) } else { try store.blobHead(id) }
        } catch where error.status == .notFound {
            throw Grant.blobRefused(opcode, collections)
        }
        guard let owner = meta.attachedTo?.collection, collections.contains(owner) else {
            throw Grant.blobRefused(opcode, collections)
        }
        return meta
    }

    /// `collections`: the only collections the sender's token may touch (nil: every one), for BLOB_HEAD.
    func read(_ frame: Frame, _ reads: (any PointReads)?, _ collections: Set<String>? = nil) throws(LarderError)
        -> ([UInt8], [UInt8])
    {
        // The plain forms of the point reads skip building a JSON object (the general path below answers the rest).
        if frame.opcode == .get, let request = GetRequest.fast(frame.json) { return try get(request, reads) }
        if frame.opcode == .blobHead, let request = BlobIDRequest.fast(frame.json) {
            return try blobHead(request, reads, collections)
        }
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
            return (Router.getManyBytes(records, missing), [])
        case .list:
            let request = try ListRequest(json: object)
            let page = try store.list(request.collection, limit: request.limit, cursor: request.cursor)
            return (Router.pageBytes(page), [])
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
        case .rulesGet:
            let request = try RulesGetRequest(json: object)
            let rules = try store.collectionRules(request.collection)
            return (RulesResponse(collection: request.collection, rules: rules).json.bytes, [])
        case .blobUploadStatus:
            return (try store.uploadStatus(try BlobUploadIDRequest(json: object).upload).json.bytes, [])
        case .blobHead:
            return try blobHead(try BlobIDRequest(json: object), reads, collections)
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
            if let lag = store.followerLag {
                json["follower"] = .object([
                    "appliedSeq": .int(lag.appliedSeq), "knownSeq": .int(lag.knownSeq),
                    "lagChanges": .int(lag.changes), "lagMs": .int(lag.ms),
                ])
            }
            json["thumbnails"] = .object(stats.thumbnailsJSON(stored: try store.thumbnailCount()))
            var warnings = JSONObject()
            for (collection, count) in store.schemaWarnings.sorted(by: { $0.key < $1.key }) {
                warnings[collection] = .int(Int64(count))
            }
            json["schemaWarnings"] = .object(warnings)
            return (json.bytes, [])
        case .schemaGet:
            let request = try SchemaGetRequest(json: object)
            let stored = try store.schema(request.collection)
            let response = SchemaGetResponse(
                collection: request.collection, schema: stored?.schema,
                validationAction: stored?.schema == nil ? .error : stored?.action ?? .error,
                version: stored?.version ?? 0)
            return (response.json.bytes, [])
        default:
            throw LarderError(.internal, "\(frame.opcode.name) has no read handler")
        }
    }

    /// GET_MANY's answer: `{"records":[...],"missing":[...]}` with each record's stored bytes spliced in.
    static func getManyBytes(_ records: [StoredRecord], _ missing: [UUID]) -> [UInt8] {
        var out = Array(#"{"records":"#.utf8)
        writeRecords(records, into: &out)
        out.append(contentsOf: #","missing":"#.utf8)
        JSON.array(missing.map { .string($0.wireString) }).write(into: &out)
        out.append(UInt8(ascii: "}"))
        return out
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
}
