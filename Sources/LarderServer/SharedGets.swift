import Dispatch
import Foundation
import LarderIO
import LarderStore
import LarderWire

/// A GET waiting for the shard to apply the change log through `required` (`Shard.sharedGet`).
struct SharedGetWaiter {
    let request: GetRequest
    let required: Int64
    /// When it stops waiting and reads the database (monotonic ms).
    let deadline: UInt64
    let answer: @Sendable (Result<[UInt8], LarderError>) -> Void
}

/// GETs on a store other servers write too (PostgreSQL), on the shard's loop: answered from the read cache once the
/// shard has applied the change log far enough, else read from the database in a batched round trip
/// (`DocumentStore.submitGet`).
///
/// The rule (Protocol.md section 5.1): an answer reflects every change through the request's `afterSeq` and through
/// every write this server has answered. The cache is current through `publishedSeq`, so it answers when that has
/// reached both; a GET whose `afterSeq` is further waits for the follower at most `afterSeqWaitMs`, then reads the
/// database, which holds every committed change. A GET with `afterSeq` is answered with `seq`: a number at or after
/// the change that wrote what it holds, which the client sends as its next `afterSeq`, so that no later read, on any
/// server, answers something older.
extension Shard {
    /// On `loop`: answers `request` through `answer`, on `loop`.
    func sharedGet(_ request: GetRequest, _ answer: @escaping @Sendable (Result<[UInt8], LarderError>) -> Void) {
        let published = applyPublishedChanges()
        let required = max(request.afterSeq ?? 0, store.writtenSeq)
        if publishedSeq >= required {
            return cachedOrStored(request, published: published, answer)
        }
        if let afterSeq = request.afterSeq, afterSeq > publishedSeq, afterSeqWaitMs > 0 {
            afterSeqWaits += 1
            let deadline = monotonicMs() + UInt64(afterSeqWaitMs)
            if sharedGetWaiters.isEmpty || deadline < sharedGetWaiters.map(\.deadline).min()! {
                scheduleWaitEnd(afterMs: afterSeqWaitMs)
            }
            sharedGetWaiters.append(
                SharedGetWaiter(request: request, required: required, deadline: deadline, answer: answer))
            return
        }
        if request.afterSeq.map({ $0 > publishedSeq }) ?? false { afterSeqFallThroughs += 1 }
        readStore(request, published: published, answer)
    }

    /// From the cache when it holds the document, else from the database (and kept when nothing changed meanwhile).
    private func cachedOrStored(
        _ request: GetRequest, published: Int, _ answer: @escaping @Sendable (Result<[UInt8], LarderError>) -> Void
    ) {
        guard readCache.isEnabled, Shard.isASCII(request.collection) else {
            return readStore(request, published: published, answer)
        }
        if let entry = readCache.get(ReadCache.Key(collection: request.collection, id: request.id)) {
            cacheHits += 1
            return answer(.success(Shard.answerBytes(entry.json, max(publishedSeq, entry.seq), request)))
        }
        cacheMisses += 1
        readStore(request, published: published, answer)
    }

    /// Reads the database; the answer is kept in the cache when no change reached the shard between `published`
    /// (taken before the read was sent) and its answer: then any change to it after the read's snapshot reaches the
    /// shard later, and removes it.
    private func readStore(
        _ request: GetRequest, published: Int, _ answer: @escaping @Sendable (Result<[UInt8], LarderError>) -> Void
    ) {
        store.submitGet(request.collection, id: request.id) { [self] result in
            loop.async { [self] in
                switch result {
                case .failure(let error):
                    answer(.failure(error))
                case .success(let read):
                    guard let record = read.record else {
                        return answer(.failure(StoreRules.notFound(request.collection, request.id)))
                    }
                    let json = record.bytes
                    if readCache.isEnabled, Shard.isASCII(request.collection), publishedBatches == published {
                        readCache.insert(
                            ReadCache.Key(collection: request.collection, id: request.id), json, seq: read.seq)
                    }
                    answer(.success(Shard.answerBytes(json, read.seq, request)))
                }
            }
        }
    }

    /// The record's JSON, with `seq` when the request carried `afterSeq`.
    private static func answerBytes(_ json: [UInt8], _ seq: Int64, _ request: GetRequest) -> [UInt8] {
        request.afterSeq == nil ? json : SeqMember.appending(seq, to: json)
    }

    /// Only ASCII names are looked up in the cache (see `CachedPointReads`).
    private static func isASCII(_ collection: String) -> Bool {
        var name = collection
        return name.withUTF8 { $0.allSatisfy { $0 < 0x80 } }
    }

    /// On `loop`, after `publishedSeq` moved: the waiting GETs it now covers go on.
    func resumeSharedGets() {
        let ready = sharedGetWaiters.filter { $0.required <= publishedSeq }
        guard !ready.isEmpty else { return }
        sharedGetWaiters.removeAll { $0.required <= publishedSeq }
        for waiter in ready { sharedGet(waiter.request, waiter.answer) }
    }

    /// On `loop`: the GETs whose wait is over read the database.
    private func endWaits() {
        let now = monotonicMs()
        let expired = sharedGetWaiters.filter { $0.deadline <= now }
        sharedGetWaiters.removeAll { $0.deadline <= now }
        for waiter in expired {
            afterSeqFallThroughs += 1
            readStore(waiter.request, published: publishedBatches, waiter.answer)
        }
        if let next = sharedGetWaiters.map(\.deadline).min() {
            scheduleWaitEnd(afterMs: Int(next > now ? next - now : 0))
        }
    }

    private func scheduleWaitEnd(afterMs: Int) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(max(1, afterMs))) { [self] in
            loop.async { [self] in endWaits() }
        }
    }
}
