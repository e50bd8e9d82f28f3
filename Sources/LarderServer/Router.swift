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
    /// Whether the store answers point reads locally (SQLite), so the event loops may run them (`RequestPlan.inline`).
    let pointReadsAreLocal: Bool
    /// The thumbnail sizes BLOB_GET makes, and the largest photo it makes them of (HELLO's `limits`).
    let thumbnailSizes: [Int]
    let maxThumbnailSourcePixels: Int
    /// Slots for the thumbnails being made: a BLOB_GET that must make one waits here, on its work-pool thread, before
    /// it reads the photo's bytes, so at most `thumbnailThreads` photos and their decodes are in memory at once.
    let thumbnailSlots: DispatchSemaphore
    /// The bounds SCHEMA_SET compiles schemas within (HELLO's `limits`).
    let schemaLimits: SchemaLimits
    /// The sessions and rules a user's request is checked against.
    let access: AccessCache

    /// The record bytes a page may carry under a JSON limit, leaving room for what wraps the records (member names,
    /// the cursor, group keys).
    package static func pageBudget(maxJSONBytes: Int) -> Int { maxJSONBytes - max(8 << 10, maxJSONBytes / 16) }

    init(
        store: Store, stats: ServerStats, pool: WorkPool, searchGate: TestGate?, serverName: String,
        maxReplyJSONBytes: Int = Limits.default.maxJSONBytes,
        maxReplyBinaryBytes: Int = Limits.default.maxBinaryPartBytes,
        thumbnailSizes: [Int] = Limits.default.thumbnailSizes,
        maxThumbnailSourcePixels: Int = Limits.default.maxThumbnailSourcePixels,
        thumbnailThreads: Int = ProcessInfo.processInfo.activeProcessorCount,
        schemaLimits: SchemaLimits = .default, accessCacheMs: Int = AccountLimits().accessCacheMs
    ) {
        self.access = AccessCache(store: store, sharedWindowMs: accessCacheMs)
        self.schemaLimits = schemaLimits
        self.thumbnailSizes = thumbnailSizes
        self.thumbnailSlots = DispatchSemaphore(value: thumbnailThreads)
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

    /// The answer to a request its plan refused (`RequestPlan.refused`): the checks every request passes before it
    /// reaches the store.
    static func refusal(_ frame: Frame) -> Reply {
        let opcode = frame.opcode
        let error =
            if opcode == .event {
                LarderError(.unknownOpcode, "EVENT frames are pushed by the server; a client never sends one")
            } else if !Opcode.all.contains(opcode) {
                LarderError(.unknownOpcode, "opcode \(opcode.name) is not one this server knows")
            } else {
                LarderError(.invalidArgument, "\(opcode.name) takes no binary part")
            }
        return Reply(opcode: opcode, requestID: frame.requestID, error: error)
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

    private func readReply(_ frame: Frame, _ reads: (any PointReads)? = nil, _ collections: Set<String>? = nil)
        -> Reply
    {
        reply(to: frame, Result { () throws(LarderError) in try read(frame, reads, collections) })
    }

    /// Answers a request planned `inline` (PING, or a point read) at once, through `reads` (the caller's burst of point
    /// reads, ended by the caller). `collections`: as for `submitRead`.
    func answerInline(_ frame: Frame, reads: @autoclosure () -> any PointReads, collections: Set<String>?) -> Reply {
        readReply(frame, frame.opcode == .ping ? nil : reads(), collections)
    }

    /// A lane of the work pool for one connection's writes: they reach the store's writer in the order the
    /// connection handed them out, which is the order they commit in (Protocol.md section 2.3).
    func makeWriteLane() -> WorkPool.Lane { pool.makeLane() }

    /// The answer to a request the work pool had no room for: the server is overloaded, not the request wrong.
    static func poolFull(_ frame: Frame, _ pool: WorkPool) -> Reply {
        Reply(opcode: frame.opcode, requestID: frame.requestID, error: poolFullError(pool))
    }

    /// RESOURCE_EXHAUSTED for a request the work pool has no room for.
    static func poolFullError(_ pool: WorkPool) -> LarderError {
        LarderError(
            .resourceExhausted,
            "the server is overloaded: \(pool.maxWaiting) requests already wait for its \(pool.threads) worker "
                + "threads (--max-queued-work, --work-threads); retry after a moment",
            details: ["limit": .int(Int64(pool.maxWaiting))])
    }

    /// Runs a request planned `workPool` there and calls `completion` exactly once, on any thread. `collections`: the
    /// only collections the sender's token may touch, for the requests whose collection only the store knows
    /// (BLOB_GET, BLOB_HEAD, refused before any work by `visibleBlob`). `sendFiles`: the connection can send a blob's
    /// range straight from its file (sendfile; not through TLS).
    func submitRead(
        _ frame: Frame, collections: Set<String>?, sendFiles: Bool, completion: @escaping @Sendable (Reply) -> Void
    ) {
        let accepted =
            if frame.opcode == .blobGet {
                // A thumbnail's cache write is answered after its commit, so BLOB_GET has a completion of its own.
                pool.submit { [self] in
                    answerBlobGet(frame, sendFiles: sendFiles, collections: collections, completion: completion)
                }
            } else {
                pool.submit { [self] in completion(readReply(frame, nil, collections)) }
            }
        if !accepted { completion(Router.poolFull(frame, pool)) }
    }

    /// Runs a write planned `writeLane` on `lane`, the connection's lane from `makeWriteLane`, and calls `completion`
    /// exactly once, on any thread. `collections`: as for `submitRead` (BLOB_DELETE). `uploader`: who the sender is for
    /// the upload quota (its token's digest, or its connection's name).
    func submitWrite(
        _ frame: Frame, on lane: WorkPool.Lane, collections: Set<String>?, uploader: String,
        completion: @escaping @Sendable (Reply) -> Void
    ) {
        let accepted =
            if frame.opcode == .schemaSet {
                // Waits on the lane for its COMMIT, then reads the collection's records in pages (`schemaSet`).
                lane.submit { [self] in completion(reply(to: frame, Result { () throws(LarderError) in try schemaSet(frame) })) }
            } else if Router.isUpload(frame.opcode) {
                // In the connection's write order (chunks sent back to back arrive in order); each waits for its
                // COMMIT.
                lane.submit { [self] in
                    completion(
                        reply(to: frame, Result { () throws(LarderError) in try upload(frame, uploader: uploader) }))
                }
            } else {
                // Parsed off the loop and off the writer (the writer's time is the scarce resource), one write of the
                // connection after another; writes of different connections are parsed side by side.
                lane.submit { [self] in
                    let body: WriteBody
                    do throws(LarderError) {
                        if let collections, frame.opcode == .blobDelete {
                            body = try limitedBlobDelete(frame, collections)
                        } else {
                            // On the work pool: a record's schema is checked here, off the writer.
                            body = try Router.writeBody(frame, schemas: store)
                        }
                    } catch {
                        return completion(reply(to: frame, .failure(error)))
                    }
                    let done: @Sendable (Result<([UInt8], [UInt8]), LarderError>) -> Void = { [self] result in
                        completion(reply(to: frame, sequenced(frame, result)))
                    }
                    // A CREATE, REPLACE, PATCH or DELETE is one write that checks before it changes anything.
                    if Router.isSingleWrite(frame.opcode) {
                        store.submitSingleWrite(body, completion: done)
                    } else {
                        store.submitWrite(body, completion: done)
                    }
                }
            }
        if !accepted { completion(Router.poolFull(frame, pool)) }
    }
}
