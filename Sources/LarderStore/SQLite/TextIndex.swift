import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// The trigram index, kept in a database file of its own (`larder-text.sqlite`) and brought up to date by a thread of
/// its own, so that the single writer (whose time bounds every write's throughput) only records which documents
/// changed (`fts_backlog`, in the documents' file, committed with the writes that fill it) and never writes the index.
///
/// The rule that keeps searches exact: a document whose `seq` is not in `fts_backlog` is in the index with its current
/// text; a `seq` in `fts_backlog` has exactly one row there, whose `old` is the text the index holds for it (NULL when
/// it holds none). Text search therefore reads the index's matches plus every backlog document, and the exact `instr`
/// test decides (SQLiteQueryBuilder `text`).
///
/// A pass (on `queue`), in one transaction of this connection, which reads the documents' file (`docs`) at one
/// snapshot and writes only the index's file:
/// 1. takes backlog rows in `seq` order (at most `passDocuments` of them, or `passBytes` of text);
/// 2. removes from the index what each row's `old` says it holds, and adds the text each document has in the snapshot
///    (nothing for a deleted one), both in `seq` order (FTS5 starts a new segment whenever rowids stop increasing);
/// 3. numbers itself (`text_meta.pass`, one more than the last) and commits.
/// Then the writer *settles* it (the `(seq, text indexed)` pairs, kept in memory), in one of its own transactions: a
/// backlog row whose document still has the text just indexed goes; a row whose document changed since the snapshot
/// stays, with `old` set to the text just indexed; and `larder_meta.textIndexSettled` takes the pass's number. The
/// settle checks that the documents' file is at the previous pass of the same index generation (else it changes
/// nothing), and a settle that failed is tried again before the next pass reads the backlog.
///
/// Crashes: the two files commit separately and, with `synchronous=NORMAL`, either may lose its last commits on a
/// power failure. At open the index's pass number must equal the documents' settled number and the generations must
/// match; otherwise (a pass committed but its settle lost, or the reverse, or a missing, foreign or older index such as
/// the `documents_fts` table inside the documents' file that earlier versions kept) the index is started over: empty,
/// with every document in the backlog, which the passes then work through in the background while text search stays
/// exact (it checks the backlog documents one by one meanwhile). A pass refuses to run when the numbers disagree at
/// run time (another store opened on the same directory): one store per data directory.
///
/// Which collections: the index covers the collections in `text_collections` (documents' file). A collection is added
/// the first time a substring search of any length asks for it (`requestIndex`; its rows then keep the search text,
/// which even a one-character search reads: `CoveredCollections`): its documents enter the backlog in the same
/// transaction, so that search and the ones after it stay exact (they check the backlog) while the passes work
/// through them. The writer enters documents into the backlog for covered collections only
/// (`SQLiteWriteContext.enterBacklog`), and keeps no search text in other collections' rows, so a collection nobody
/// searches by substring costs its writes nothing here. Dropping a collection uncovers it (its documents' backlog rows,
/// written by the deletions, have the passes remove them from the index). Whether a search uses the index is decided
/// inside its snapshot of the documents (`SQLiteStore.read(_:text:transaction:_:)`). Covering a collection puts
/// all its documents in the backlog in one writer transaction (writes wait for it: ~0.4 s per million
/// documents, once), and until the passes have worked through them every text search checks them one by one.
///
/// Readers and passes: a reader takes its documents' snapshot, then its index snapshot. Between a pass's snapshot and
/// its settle, the backlog still lists every document the pass touches, so a reader can only go wrong if a pass commits
/// between its two snapshots (the index then holds a text newer than the reader's document). A text search takes both
/// snapshots under `snapshotLock` (microseconds), and a pass holds it only for its COMMIT.

package final class TextIndexer: @unchecked Sendable {
    static let fileName = "larder-text.sqlite"
    /// The most backlog documents one pass takes (a catch-up after an upgrade goes by this many at a time)...
    static let passDocuments = 4_096
    /// ...and the most text (the pass keeps it in memory for its settle); a pass takes at least one document.
    static let passBytes = 16 << 20

    static let indexSchema = """
        CREATE VIRTUAL TABLE IF NOT EXISTS text_index USING fts5(
            search, content='', tokenize='trigram case_sensitive 1', detail=none);
        CREATE TABLE IF NOT EXISTS text_meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        CREATE VIRTUAL TABLE IF NOT EXISTS text_vocab USING fts5vocab(text_index, row);
        """

    let path: String
    /// Held by readers while they start their two snapshots, and by a pass for its COMMIT.
    let snapshotLock = Lock()
    private let core: StoreCore
    let queue = DispatchQueue(label: "larder.store.text-index", qos: .utility)
    let connection: SQLiteConnection  // only on `queue` (and in `init`)
    unowned let writer: SQLiteWriter
    /// The index generation this store opened (fixed: a start-over happens only at open).
    let generation: Int64
    let lock = Lock()
    private var scheduled = false  // under `lock`
    var closed = false  // under `lock`
    /// Whether the last pass failed (under `lock`): the writer does not wait for passes then.
    private var failing = false
    /// Passes that committed.
    let passes = Atomic<Int>(0)
    /// Guards `settling`; `passCommitted` is broadcast under it when a settle starts and when the backlog was counted.
    let passLock = Lock()
    let passCommitted = Condition()
    /// Whether a settle is waiting for the writer (under `passLock`): the writer must then not wait for a pass.
    var settling = false
    /// A committed pass whose settle failed: settled before the next pass reads the backlog (on `queue`).
    var unsettled: (number: Int64, journal: [(Int64, String?)])?
    /// About how many documents the backlog holds: counted before each pass (and after a catch-up or a cover).
    let backlogEstimate = Atomic<Int>(0)
    /// Of those, about how many came from newly covered collections (or a start-over) rather than from writes: the
    /// writer does not wait for them (`wrote`).
    let catchUpRows = Atomic<Int>(0)
    /// Collections whose covering was asked for and has not committed yet (under `lock`).
    var requested: Set<String> = []
    /// Times a commit found the backlog past `fullTextBacklogLimit` (the writer then waits for a pass, unless one is
    /// already settling), and times no pass came within the second it waits (for tests).
    let writerWaits = Atomic<Int>(0)
    let writerWaitTimeouts = Atomic<Int>(0)
    /// Test hooks: settles that fail on purpose (as a crash between a pass's commit and its settle would leave it), and
    /// a pause between a text search's two snapshots (which widens the window the snapshot lock closes).
    let failSettles = Atomic<Int>(0)
    let pauseBetweenSnapshotsMicros = Atomic<Int>(0)

    /// Opens (or creates) the index file next to the documents' and pairs it with them. `documents` is the writer's
    /// connection, before the writer starts: a start-over empties and refills the backlog through it.
    init(directory: String, documents: SQLiteConnection, core: StoreCore, writer: SQLiteWriter) throws(LarderError) {
        self.core = core
        self.writer = writer
        path = (directory as NSString).appendingPathComponent(TextIndexer.fileName)
        connection = try SQLiteConnection(path: path, readOnly: false)
        try connection.execute("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=NORMAL")
        try connection.execute(TextIndexer.indexSchema)
        let meta = { (db: SQLiteConnection, sql: String) throws(LarderError) -> Int64? in try db.scalar(sql) }
        let indexGeneration = try meta(connection, "SELECT value FROM text_meta WHERE key = 'generation'")
        let indexPass = try meta(connection, "SELECT value FROM text_meta WHERE key = 'pass'")
        let documentsGeneration = try meta(documents, "SELECT value FROM larder_meta WHERE key = 'textIndexGeneration'")
        let documentsSettled = try meta(documents, "SELECT value FROM larder_meta WHERE key = 'textIndexSettled'")
        if let indexGeneration, indexGeneration == documentsGeneration, let indexPass, indexPass == documentsSettled {
            generation = indexGeneration
        } else {
            generation = try TextIndexer.startOver(index: connection, documents: documents)
            catchUpRows.store(Int(try documents.scalar("SELECT count(*) FROM fts_backlog") ?? 0), ordering: .relaxed)
        }
        try connection.execute("ATTACH DATABASE \(SQL.literal(core.databasePath)) AS docs")
    }

    /// An empty index with a new generation, then every document in the backlog with nothing indexed, in that order:
    /// a crash in between leaves the generations different, so the next open starts over again.
    private static func startOver(index: SQLiteConnection, documents: SQLiteConnection) throws(LarderError) -> Int64 {
        let generation = Int64.random(in: 1...Int64.max)
        try index.execute(
            "BEGIN IMMEDIATE; DROP TABLE IF EXISTS text_index; DELETE FROM text_meta; \(indexSchema) "
                + "INSERT INTO text_meta(key, value) VALUES ('generation', \(generation)), ('pass', 0); COMMIT")
        try documents.execute(
            """
            BEGIN IMMEDIATE;
            DELETE FROM fts_backlog;
            INSERT INTO fts_backlog(seq, old)
                SELECT seq, NULL FROM documents WHERE collection IN (SELECT name FROM text_collections);
            INSERT OR REPLACE INTO larder_meta(key, value)
                VALUES ('textIndexGeneration', \(generation)), ('textIndexSettled', 0);
            COMMIT;
            """)
        return generation
    }

    /// Called by the writer once it has committed `fullTextBacklog` more document writes, and at open: schedules passes
    /// (which run while the backlog holds at least `fullTextBacklog` documents).
    func poke() {
        let start: Bool = lock.withLock {
            guard !closed, !scheduled else { return false }
            scheduled = true
            return true
        }
        if start { queue.async { self.runPasses() } }
    }

    /// Called by the writer after each commit. Past `fullTextBacklogLimit` documents in the backlog (as counted before
    /// the last pass, less those of newly covered collections), waits (at most a second) until the next pass has
    /// committed and its settle waits for the writer, which needs the writer itself: so the writer goes on at the
    /// passes' pace. Not while passes fail (they would not come).
    func wrote() {
        let limit = core.configuration.fullTextBacklogLimit
        func excess() -> Bool {
            backlogEstimate.load(ordering: .relaxed) - catchUpRows.load(ordering: .relaxed) > limit
        }
        guard excess(), lock.withLock({ !closed && !failing }) else { return }
        writerWaits.add(1, ordering: .relaxed)
        poke()
        let deadline = ContinuousClock.now + core.configuration.fullTextWriterWaitLimit
        passLock.withLock {
            guard !settling else { return }
            // Until a pass has committed, or a fresh count finds the backlog within the limit after all.
            while !settling && excess() {
                if !passCommitted.wait(on: passLock, until: deadline) {
                    writerWaitTimeouts.add(1, ordering: .relaxed)
                    break
                }
            }
        }
    }

    private func runPasses() {
        lock.withLock { scheduled = false }
        // Passes while the backlog holds at least `fullTextBacklog` documents, or more than the writer waits at (it
        // waits for a pass), until one fails (the next poke tries again).
        let configuration = core.configuration
        while !lock.withLock({ closed }) {
            guard let left = try? connection.scalar("SELECT count(*) FROM docs.fts_backlog") else { return }
            backlogEstimate.store(Int(left), ordering: .relaxed)
            passLock.withLock { passCommitted.broadcast() }  // a waiting writer re-reads the estimate
            let due =
                left >= Int64(max(1, configuration.fullTextBacklog))
                || left > Int64(configuration.fullTextBacklogLimit)
            guard due, (try? pass()) != nil else { return }
        }
    }

    /// Runs passes on the index's queue until the backlog is empty (or only holds what concurrent writes keep adding:
    /// at most `rounds` passes). For `integrityCheck`, `close` and tests.
    package func catchUp(rounds: Int = 8) throws(LarderError) {
        let result: Result<Void, LarderError> = queue.sync {
            do throws(LarderError) {
                for _ in 0..<rounds {
                    if try pass() == 0 { break }
                }
                if let left = try connection.scalar("SELECT count(*) FROM docs.fts_backlog") {
                    backlogEstimate.store(Int(left), ordering: .relaxed)
                }
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    /// One pass (see the type's comment). Returns how many backlog documents it indexed.
    @discardableResult
    private func pass() throws(LarderError) -> Int {
        do throws(LarderError) {
            let indexed = try passOnce()
            lock.withLock { failing = false }
            return indexed
        } catch {
            lock.withLock { failing = true }
            throw error
        }
    }

    private func passOnce() throws(LarderError) -> Int {
        try connection.execute("BEGIN")
        var open = true
        defer { if open { try? connection.execute("ROLLBACK") } }
        let number = try lockIndexFileAndSettleLeftovers() + 1
        // The documents' snapshot was fixed by the check above (after any leftover settle); the rows, in seq order.
        var journal: [(Int64, String?)] = []
        var bytes = 0
        try connection.forEachRow(
            "SELECT b.seq, d.search FROM docs.fts_backlog AS b LEFT JOIN docs.documents AS d ON d.seq = b.seq "
                + "AND d.collection IN (SELECT name FROM docs.text_collections) ORDER BY b.seq"
        ) { row in
            let text = row.isNull(1) ? nil : row.text(1)
            journal.append((row.int(0), text))
            bytes += text?.utf8.count ?? 0
            return journal.count < TextIndexer.passDocuments && bytes < TextIndexer.passBytes
        }
        guard let bound = journal.last?.0 else { return 0 }
        _ = try connection.run(
            "INSERT INTO text_index(text_index, rowid, search) SELECT 'delete', seq, old FROM docs.fts_backlog "
                + "WHERE seq <= ?1 AND old IS NOT NULL ORDER BY seq", [.int(bound)])
        _ = try connection.run(
            "INSERT INTO text_index(rowid, search) SELECT d.seq, d.search FROM docs.fts_backlog AS b "
                + "JOIN docs.documents AS d ON d.seq = b.seq WHERE b.seq <= ?1 "
                + "AND d.collection IN (SELECT name FROM docs.text_collections) ORDER BY b.seq", [.int(bound)])
        _ = try connection.run("UPDATE text_meta SET value = ?1 WHERE key = 'pass'", [.int(number)])
        do {
            snapshotLock.lock()
            defer { snapshotLock.unlock() }
            try connection.execute("COMMIT")
            open = false
        }
        passes.add(1, ordering: .relaxed)
        let caughtUp = min(journal.count, catchUpRows.load(ordering: .relaxed))
        catchUpRows.subtract(caughtUp, ordering: .relaxed)
        unsettled = (number, journal)
        try settle(number, journal)
        return journal.count
    }

    /// Inside an open transaction: takes the index file's write lock (a write that changes nothing), settles a pass
    /// whose settle failed, then checks that the documents' file is settled up to this index's last pass (which also
    /// fixes the transaction's snapshot of the documents). Returns that pass's number.
    func lockIndexFileAndSettleLeftovers() throws(LarderError) -> Int64 {
        _ = try connection.run("UPDATE text_meta SET value = value WHERE key = 'generation'")
        if let unsettled { try settle(unsettled.number, unsettled.journal) }
        let last = try connection.scalar("SELECT value FROM text_meta WHERE key = 'pass'") ?? -1
        let settled = try connection.scalar("SELECT value FROM docs.larder_meta WHERE key = 'textIndexSettled'")
        let paired = try connection.scalar("SELECT value FROM docs.larder_meta WHERE key = 'textIndexGeneration'")
        guard settled == last, paired == generation else {
            throw LarderError(
                .internal,
                "the trigram index and the documents disagree (is another store open on this data directory?); "
                    + "reopening the store rebuilds the index")
        }
        return last
    }

    /// Once: finishes the pass under way and brings the index up to date with what is left (a few passes at most),
    /// then refuses further pokes. The writer must still be open (and this not called on its queue, where a settle
    /// could not run: then the backlog simply stays for the next open).
    func close() {
        let first: Bool = lock.withLock {
            defer { closed = true }
            return !closed
        }
        guard first, !writer.isOnQueue else { return }
        try? catchUp(rounds: 4)
    }
}
