import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

// The writer's side of a pass: settling it into the backlog, in a savepoint of a writer transaction.
extension TextIndexer {
    /// Has the writer apply pass `number` to the backlog, in a savepoint of one of its transactions, and waits for that
    /// transaction's COMMIT.
    func settle(_ number: Int64, _ journal: [(Int64, String?)]) throws(LarderError) {
        if failSettles.load(ordering: .relaxed) > 0 {
            failSettles.subtract(1, ordering: .relaxed)
            throw LarderError(.internal, "a settle failed on purpose (test)")
        }
        let box = ResultBox<Void>()
        let generation = self.generation
        let job = TextIndexer.savepointJob({ db throws(LarderError) in
            try TextIndexer.applyToBacklog(number, journal, generation: generation, db)
        }) { error in box.set(error.map { .failure($0) } ?? .success(())) }
        // A writer waiting in `wrote` goes on (and runs this settle in its next batch).
        passLock.withLock {
            settling = true
            passCommitted.broadcast()
        }
        defer { passLock.withLock { settling = false } }
        guard writer.enqueue(job) else { throw LarderError(.unavailable, "the store is closed") }
        try box.wait()
        unsettled = nil
    }

    /// A writer job that runs `body` in a savepoint of the batch's transaction and reports, on the writer thread, its
    /// own failure or else the COMMIT's outcome.
    static func savepointJob(
        _ body: @escaping (SQLiteConnection) throws(LarderError) -> Void, completion: @escaping (LarderError?) -> Void
    ) -> SQLiteWriter.Job {
        SQLiteWriter.Job { context in
            var failure: LarderError?
            if let closedError = context.closedError {
                failure = closedError
            } else if let db = context.connection {
                do throws(LarderError) {
                    try db.run(.savepoint)
                    do throws(LarderError) {
                        try body(db)
                        try db.run(.release)
                    } catch {
                        context.rollbackSavepoint()
                        throw error
                    }
                } catch {
                    failure = error
                }
            }
            return { commitError in completion(commitError ?? failure) }
        }
    }

    /// The settle of pass `number`, on the writer: nothing when the documents' file already has it; refused unless
    /// it is at the previous pass of `generation`. For each pair, the backlog row goes when the document's text is the
    /// one indexed (or both are absent), else it stays with `old` = the text indexed.
    /// `FixedSQL.settleBacklogDelete` / `.settleBacklogKeep`.
    static func applyToBacklog(
        _ number: Int64, _ journal: [(Int64, String?)], generation: Int64, _ db: SQLiteConnection
    ) throws(LarderError) {
        let settled = try db.scalar("SELECT value FROM larder_meta WHERE key = 'textIndexSettled'")
        let paired = try db.scalar("SELECT value FROM larder_meta WHERE key = 'textIndexGeneration'")
        if settled == number && paired == generation { return }
        guard settled == number - 1, paired == generation else {
            throw LarderError(
                .internal,
                "the trigram index was started over by another store on this data directory; reopen the store")
        }
        let delete = try db.statement(.settleBacklogDelete)
        let keep = try db.statement(.settleBacklogKeep)
        for (seq, text) in journal {
            let value: SQLValue = text.map { .text($0) } ?? .null
            defer { delete.reset() }
            try delete.bind(at: 1, .int(seq))
            try delete.bind(at: 2, value)
            _ = try delete.step()
            guard sqlite3_changes(db.handle) == 0 else { continue }
            defer { keep.reset() }
            try keep.bind(at: 1, .int(seq))
            try keep.bind(at: 2, value)
            _ = try keep.step()
        }
        _ = try db.run("UPDATE larder_meta SET value = ?1 WHERE key = 'textIndexSettled'", [.int(number)])
    }
}
