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
    /// Slots for the thumbnails being made: a BLOB_GET that must make one waits here, on its work-pool thread, before
    /// it reads the photo's bytes, so at most `thumbnailThreads` photos and their decodes are in memory at once.
    let thumbnailSlots: DispatchSemaphore

    /// The record bytes a page may carry under a JSON limit, leaving room for what wraps the records (member names,
    /// the cursor, group keys).
    package static func pageBudget(maxJSONBytes: Int) -> Int { maxJSONBytes - max(8 << 10, maxJSONBytes / 16) }

    init(
        store: Store, stats: ServerStats, pool: WorkPool, searchGate: TestGate?, serverName: String,
        maxReplyJSONBytes: Int = Limits.default.maxJSONBytes,
        maxReplyBinaryBytes: Int = Limits.default.maxBinaryPartBytes,
        thumbnailSizes: [Int] = Limits.default.thumbnailSizes,
        maxThumbnailSourcePixels: Int = Limits.default.maxThumbnailSourcePixels,
        thumbnailThreads: Int = ProcessInfo.processInfo.activeProcessorCount
    ) {
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

    private func readReply(_ frame: Frame, _ reads: (any PointReads)? = nil, _ collections: Set<String>? = nil)
        -> Reply
    {
        reply(to: frame, Result { () throws(LarderError) in try read(frame, reads, collections) })
    }

    /// Answers `frame` at once when it is a point read (`isInline`), through `reads` (the caller's burst of
    /// point reads, ended by the caller); nil means: use `handle`. `collections`: as for `handle`.
    package func handleInline(
        _ frame: Frame, reads: @autoclosure () -> any PointReads, collections: Set<String>? = nil
    ) -> Reply? {
        // A store whose point reads wait on the network (PostgreSQL) must not hold up a loop: only PING stays here.
        guard Router.isInline(frame.opcode), pointReadsAreLocal || frame.opcode == .ping else { return nil }
        switch route(frame) {
        case .answered(let reply): return reply
        case .read: return readReply(frame, frame.opcode == .ping ? nil : reads(), collections)
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
    /// token may touch, for the requests whose collection only the store knows (BLOB_GET, BLOB_HEAD, BLOB_DELETE,
    /// refused before any work by `visibleBlob`). `uploader`: who the sender is for the upload quota (its token's
    /// digest, or its connection's name). `sendFiles`: the
    /// connection can send a blob's range straight from its file (sendfile; not through TLS).
    func handle(
        _ frame: Frame, writes: @autoclosure () -> WorkPool.Lane, collections: Set<String>? = nil,
        uploader: String = "", sendFiles: Bool = false, completion: @escaping @Sendable (Reply) -> Void
    ) {
        switch route(frame) {
        case .answered(let reply):
            completion(reply)
        case .read where frame.opcode == .blobGet:
            // A thumbnail's cache write is answered after its commit, so BLOB_GET has a completion of its own.
            let accepted = pool.submit { [self] in
                answerBlobGet(frame, sendFiles: sendFiles, collections: collections, completion: completion)
            }
            if !accepted { completion(Router.poolFull(frame, pool)) }
        case .read:
            if !pool.submit({ [self] in completion(readReply(frame, nil, collections)) }) {
                completion(Router.poolFull(frame, pool))
            }
        case .write where Router.isUpload(frame.opcode):
            // In the connection's write order (chunks sent back to back arrive in order); each waits for its COMMIT.
            let accepted = writes().submit { [self] in
                completion(reply(to: frame, Result { () throws(LarderError) in try upload(frame, uploader: uploader) }))
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
}
