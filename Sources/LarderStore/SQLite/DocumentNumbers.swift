import LarderWire

/// The numbers of new documents' rows (`documents.seq`, which LIST pages by): always above every number used
/// before, including a deleted document's, so a cursor past the newest row sees every later one. A number in use is
/// its row's; before rows are deleted the highest number given so far is recorded in `larder_meta` (`documentsSeq`),
/// so the numbers that rows no longer hold are remembered too. A create costs nothing more, where SQLite's
/// AUTOINCREMENT reads and rewrites `sqlite_sequence` for every insert. A write that fails gives back the numbers it
/// took (`rewind`), as AUTOINCREMENT's counter rolled back with the write's savepoint: LIST cursors number rows alike
/// on both stores. Only on the writer's queue.
final class DocumentNumbers {
    private var committed: Int64
    private(set) var last: Int64

    /// Starts after `highest`, the greatest number the database holds or recorded.
    init(highest: Int64) {
        committed = highest
        last = highest
    }

    func next() -> Int64 {
        last += 1
        return last
    }

    /// Takes back the numbers given after `mark` (a `last` read before a write that failed).
    func rewind(to mark: Int64) { last = min(last, mark) }

    /// Called after COMMIT.
    func committedPending() { committed = last }

    /// Called after a rolled-back batch: nothing it numbered exists.
    func forgetPending() { last = committed }

    /// The highest number `db` holds or recorded.
    static func highest(_ db: SQLiteConnection) throws(LarderError) -> Int64 {
        try db.scalar(
            "SELECT max(coalesce((SELECT max(seq) FROM documents), 0), "
                + "coalesce((SELECT value FROM larder_meta WHERE key = 'documentsSeq'), 0))") ?? 0
    }
}
