import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

// How a text search takes its two snapshots together (see TextIndexer's comment, "Readers and passes").
extension TextIndexer {
    /// Runs `body` in a read transaction of `db` (a reader with the index attached as `ix`) whose two snapshots were
    /// taken together (see the type's comment).
    func withSnapshots<T>(_ db: SQLiteConnection, _ body: (SQLiteConnection) throws(LarderError) -> T) throws(LarderError) -> T {
        try db.run(.beginRead)
        defer { try? db.run(.endRead) }
        try takeSnapshots(db)
        return try body(db)
    }

    /// Starts the read transaction's snapshots: the documents' first, then the index's, both under `snapshotLock`.
    private func takeSnapshots(_ db: SQLiteConnection) throws(LarderError) {
        snapshotLock.lock()
        defer { snapshotLock.unlock() }
        _ = try db.scalar("SELECT count(*) FROM main.larder_meta")
        let pause = pauseBetweenSnapshotsMicros.load(ordering: .relaxed)
        if pause > 0 { usleep(UInt32(pause)) }
        _ = try db.scalar("SELECT count(*) FROM ix.text_meta")
    }
}
