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

    /// Rows whose search text one writer job fills while a collection is being covered: each job holds the writer
    /// for a few milliseconds, not for the whole collection.
    static let fillRows = 4_096

    /// Covers `collection` (if it exists and is not yet covered), in writer jobs. Its rows hold no search text while
    /// uncovered (`CoveredCollections`): jobs of `fillRows` rows each fill it in id order first; then one job
    /// fills what writes cleared or added meanwhile, has it join `text_collections` and its documents the backlog, in
    /// one savepoint. Then passes are asked for.
    private func cover(_ collection: String, _ done: @escaping @Sendable (LarderError?, _ covered: Bool) -> Void) {
        fill(collection, after: "", done)
    }

    private func fill(
        _ collection: String, after: String, _ done: @escaping @Sendable (LarderError?, _ covered: Bool) -> Void
    ) {
        var last: String?
        let job = TextIndexer.savepointJob({ db throws(LarderError) in
            // Through the collection's id index: each job goes on where the last stopped, so the collection is read
            // once over all of them, and no other collection's rows are.
            last = try db.query(
                "SELECT max(id) FROM (SELECT id FROM documents INDEXED BY documents_id "
                    + "WHERE collection = ?1 AND id > ?2 ORDER BY id LIMIT \(TextIndexer.fillRows))",
                [.text(collection), .text(after)]
            ) { $0.isNull(0) ? nil : $0.text(0) }.first ?? nil
            guard let last else { return }
            try db.run(
                "UPDATE documents INDEXED BY documents_id SET search = larder_search(data) "
                    + "WHERE collection = ?1 AND id > ?2 AND id <= ?3 AND search IS NULL",
                [.text(collection), .text(after), .text(last)])
        }) { [self] error in
            if let error {
                done(error, false)
            } else if let last {
                fill(collection, after: last, done)
            } else {
                join(collection, done)
            }
        }
        if !writer.enqueue(job) { done(LarderError(.unavailable, "the store is closed"), false) }
    }

    /// The last of a cover's jobs (internal for tests that place it in a batch).
    func join(_ collection: String, _ done: @escaping @Sendable (LarderError?, _ covered: Bool) -> Void) {
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
                // The rows written since their fill job: their backlog rows are in already.
                try db.run(
                    "UPDATE documents SET search = larder_search(data) WHERE collection = ?1 AND search IS NULL",
                    [.text(collection)])
                // Last, once nothing above can fail: the writes after this one keep the collection's text and
                // backlog. Should the batch not commit, the completion takes it back.
                self.writer.coveredCollections.covered(collection)
            }
        }) { [self] error in
            if error != nil && covered > 0 { writer.coveredCollections.uncovered(collection) }
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
