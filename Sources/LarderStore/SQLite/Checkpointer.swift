import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// Runs the WAL checkpoints the writer's commits call for on a queue of their own, so that copying pages into the
/// database file (and its fsync) is not paid on the single writer thread.
///
/// SQLite's own rule (`wal_autocheckpoint`, 1000 pages) runs a PASSIVE checkpoint inside the COMMIT that passes the
/// threshold, on the committing thread. This replaces that hook: past 1000 pages a commit only schedules a PASSIVE
/// checkpoint here, on a connection of its own, opened at the first checkpoint and kept until `close` (an idle
/// connection holds no lock; opening one per checkpoint cost two opens and a read of the schema each time). A
/// checkpoint never changes what is durable: the WAL holds every commit either way. The WAL file starts over only
/// when a write begins with every frame copied, which under steady writes a checkpoint on another thread rarely
/// achieves; so at `writerFrames` the committing writer checkpoints itself, as SQLite would (by then the background
/// has copied nearly everything, so little is left to copy), and the WAL stays within ~2000 pages (~8 MiB) plus one
/// transaction. Between the two, a background checkpoint is asked for only once the WAL has grown by
/// `backgroundSpacing` pages since the last one was: back to back, each copied the few pages the last commits
/// rewrote (the same hot index pages again and again) and paid two fsyncs for them. A PASSIVE checkpoint never waits:
/// whichever side finds the other checkpointing leaves it be.
final class Checkpointer: @unchecked Sendable {
    /// SQLite's default `wal_autocheckpoint`.
    static let backgroundFrames: Int32 = 1000
    /// Where the writer takes over.
    static let writerFrames: Int32 = 2000
    /// The WAL's growth, in pages, between two background checkpoints.
    static let backgroundSpacing: Int32 = 500

    private let path: String
    private let queue = DispatchQueue(label: "larder.store.checkpoint", qos: .userInitiated)
    private let lock = Lock()
    private var running = false  // under `lock`
    private var closed = false  // under `lock`
    /// The WAL's size when the last background checkpoint was asked for (only on the writer's thread, in the hook).
    private var scheduledAt: Int32 = 0
    /// The background checkpoints' connection (only on `queue`).
    private var connection: SQLiteConnection?

    init(path: String) { self.path = path }

    /// Replaces the connection's automatic checkpoint with `committed(frames:)`. The connection must not outlive
    /// this object (the writer owns both).
    func install(on connection: SQLiteConnection) {
        sqlite3_wal_hook(
            connection.handle,
            { context, db, name, frames in
                Unmanaged<Checkpointer>.fromOpaque(context!).takeUnretainedValue().committed(
                    db: db!, name: name!, frames: frames)
                return SQLITE_OK
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Called by SQLite on the writer thread after each COMMIT, with the WAL's size in pages.
    private func committed(db: OpaquePointer, name: UnsafePointer<CChar>, frames: Int32) {
        // A smaller WAL than at the last request: it started over.
        if frames < scheduledAt { scheduledAt = 0 }
        if frames >= Checkpointer.writerFrames {
            // What SQLite's own hook does at its threshold (an error leaves the WAL as it was; the commit stands).
            sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        } else if frames >= Checkpointer.backgroundFrames,
            scheduledAt == 0 || frames >= scheduledAt + Checkpointer.backgroundSpacing, schedule()
        {
            scheduledAt = frames
        }
    }

    /// Asks for a background checkpoint; false when one is running already or the checkpointer is closed.
    private func schedule() -> Bool {
        let start: Bool = lock.withLock {
            guard !running, !closed else { return false }
            running = true
            return true
        }
        guard start else { return false }
        queue.async { [self] in
            defer { lock.withLock { running = false } }
            guard !lock.withLock({ closed }) else { return }
            // Failures (busy: another checkpoint runs; cannot open) leave it to the next commit or to the writer.
            guard let connection = openConnection() else { return }
            let status = sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
            if status != SQLITE_OK && status != SQLITE_BUSY {
                // Opened afresh next time: whatever went wrong may have been this connection's (BUSY only says
                // that the writer was checkpointing).
                self.connection = nil
            }
        }
        return true
    }

    /// The kept connection, opened now if there is none; on `queue`.
    private func openConnection() -> SQLiteConnection? {
        if let connection { return connection }
        guard let opened = try? SQLiteConnection(path: path, readOnly: false),
            // A new connection learns that the database is in WAL mode from its first read of it.
            (try? opened.execute("PRAGMA schema_version")) != nil
        else { return nil }
        connection = opened
        return opened
    }

    /// Waits for a running checkpoint, refuses new ones and closes the kept connection.
    func close() {
        lock.withLock { closed = true }
        queue.sync { connection = nil }
    }
}
