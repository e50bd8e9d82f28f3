import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

// Which collections the index covers: a collection joins at its first substring search (see TextIndexer).
extension TextIndexer {
    /// Has the index cover `collection` from now on (a substring search found it uncovered): once per collection, in
    /// the background; the next searches use the index once this has committed. A failure lets a later search ask
    /// again.
    func requestIndex(_ collection: String) {
        let first = lock.withLock { !closed && requested.insert(collection).inserted }
        guard first else { return }
        cover(collection) { [self] _, _ in
            // Done either way: searches from now on see it covered; if this failed, or the collection was dropped
            // and made again, a later search asks again.
            _ = lock.withLock { requested.remove(collection) }
        }
    }

    /// `requestIndex`, waiting for the commit (tests, and callers that want the index at once).
    package func indexCollection(_ collection: String) throws(LarderError) {
        _ = lock.withLock { requested.insert(collection) }
        let box = ResultBox<Void>()
        cover(collection) { [self] error, _ in
            _ = lock.withLock { requested.remove(collection) }
            box.set(error.map { .failure($0) } ?? .success(()))
        }
        try box.wait()
    }

    /// The writer job that covers `collection` (if it exists and is not yet covered): it joins `text_collections`
    /// and its documents the backlog, in one savepoint; then passes are asked for.
    private func cover(_ collection: String, _ done: @escaping @Sendable (LarderError?, _ covered: Bool) -> Void) {
        var added = 0
        var covered = 0
        let job = TextIndexer.savepointJob({ db throws(LarderError) in
            covered = try db.run(
                "INSERT OR IGNORE INTO text_collections(name) SELECT name FROM collections WHERE name = ?1",
                [.text(collection)])
            if covered > 0 {
                added = try db.run(
                    "INSERT OR IGNORE INTO fts_backlog(seq, old) SELECT seq, NULL FROM documents "
                        + "WHERE collection = ?1 ORDER BY seq", [.text(collection)])
            }
        }) { [self] error in
            if error == nil && added > 0 {
                catchUpRows.add(added, ordering: .relaxed)
                backlogEstimate.add(added, ordering: .relaxed)
                poke()
            }
            done(error, covered > 0)
        }
        if !writer.enqueue(job) { done(LarderError(.unavailable, "the store is closed"), false) }
    }
}
