import LarderStore
import LarderWire

extension IOShard {
    /// A GET on a store whose point reads wait on the network (PostgreSQL): answered from this loop's read cache when
    /// it holds the document, else read on the work queue (never on the loop) and kept in the cache when nothing
    /// committed meanwhile, as `CachedPointReads` does for a local store. `completion` runs on the loop. False when
    /// the request is not one for this path (the router answers it as usual). On `loop`.
    func readThrough(_ frame: Frame, router: Router, _ completion: @escaping @Sendable (Reply) -> Void) -> Bool {
        guard frame.opcode == .get, !router.pointReadsAreLocal, readCache.isEnabled,
            let request = GetRequest.fast(frame.json),
            // ASCII names only: the cache compares `String`s, the store bytes (see `CachedPointReads`).
            request.collection.utf8.allSatisfy({ $0 < 0x80 })
        else { return false }
        if !turnReadsOpen {
            turnReadsOpen = true
            loop.flushAtEndOfTurn(self)
        }
        let key = ReadCache.Key(collection: request.collection, id: request.id)
        let published = applyPublishedChanges()
        if let json = readCache.get(key) {
            cacheHits += 1
            completion(Reply(opcode: .get, requestID: frame.requestID, json: json))
            return true
        }
        cacheMisses += 1
        // A GET is no write: the lane (an autoclosure) is never made.
        router.handle(frame, writes: router.makeWriteLane()) { [self] reply in
            loop.async { [self] in
                if reply.status == .ok && publishedBatches == published { readCache.insert(key, reply.json) }
                completion(reply)
            }
        }
        return true
    }
}
