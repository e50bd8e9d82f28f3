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
/// checkpoint here, on a short-lived connection of its own (none stays open between checkpoints). A checkpoint never
/// changes what is durable: the WAL holds every commit either way. The WAL file starts over only when a write begins
/// with every frame copied, which under steady writes a checkpoint on another thread rarely achieves; so at
/// `writerFrames` the committing writer checkpoints itself, as SQLite would (by then the background has copied
/// nearly everything, so little is left to copy), and the WAL stays within ~2000 pages (~8 MiB) plus one
/// transaction. A PASSIVE checkpoint never waits: whichever side finds the other checkpointing leaves it be.
final class Checkpointer: @unchecked Sendable {
    /// SQLite's default `wal_autocheckpoint`.
    static let backgroundFrames: Int32 = 1000
    /// Where the writer takes over.
    static let writerFrames: Int32 = 2000

    private let path: String
    private let queue = DispatchQueue(label: "larder.store.checkpoint", qos: .userInitiated)
    private let lock = Lock()
    private var running = false  // under `lock`
    private var closed = false  // under `lock`

    init(path: String) { self.path = path }

    /// Replaces the connection's automatic checkpoint with `committed(frames:)`. The connection must not outlive
    /// this object (the writer owns both).
    func install(on connection: Connection) {
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
        if frames >= Checkpointer.writerFrames {
            // What SQLite's own hook does at its threshold (an error leaves the WAL as it was; the commit stands).
            sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        } else if frames >= Checkpointer.backgroundFrames {
            schedule()
        }
    }

    private func schedule() {
        let start: Bool = lock.withLock {
            guard !running, !closed else { return false }
            running = true
            return true
        }
        guard start else { return }
        queue.async { [self] in
            defer { lock.withLock { running = false } }
            guard !lock.withLock({ closed }) else { return }
            // Failures (busy: another checkpoint runs; cannot open) leave it to the next commit or to the writer.
            guard let connection = try? Connection(path: path, readOnly: false),
                // A new connection learns that the database is in WAL mode from its first read of it.
                (try? connection.execute("PRAGMA schema_version")) != nil
            else { return }
            sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        }
    }

    /// Waits for a running checkpoint and refuses new ones.
    func close() {
        lock.withLock { closed = true }
        queue.sync {}
    }
}
