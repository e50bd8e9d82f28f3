import CSQLite
import Foundation
import LarderWire

/// A store that copies itself, consistently and while writers go on, into one file: what `larder backup` streams.
///
/// The PostgreSQL store has no such copy (pg_dump is the way to back PostgreSQL up), so this is a protocol of its
/// own rather than a requirement of `DocumentStore`.
public protocol SnapshotStore: Sendable {
    /// What a snapshot file is, as `BACKUP` answers it (`"sqlite"`: a SQLite database a server can be started on).
    var snapshotFormat: String { get }

    /// Writes a consistent copy of the store to a new file beside the store's own and answers its path; the caller
    /// removes it. The copy holds every write committed before the call and none committed after its read
    /// transaction began. `whileReading` runs once, inside that read transaction (tests hold it there to show that
    /// writers go on meanwhile).
    func snapshot(whileReading: (@Sendable () -> Void)?) throws(LarderError) -> String

    /// Removes the snapshot files a server that stopped abruptly left behind.
    func removeStaleSnapshots()
}

/// Called by SQLite's progress handler while `VACUUM INTO` runs: the first call made inside the read transaction runs
/// the hook, once.
private final class SnapshotHook {
    let handle: OpaquePointer
    var hook: (@Sendable () -> Void)?
    init(handle: OpaquePointer, hook: (@Sendable () -> Void)?) {
        self.handle = handle
        self.hook = hook
    }
}

extension SQLiteStore: SnapshotStore {
    static let snapshotPrefix = ".larder-backup-"

    public var snapshotFormat: String { "sqlite" }

    /// `VACUUM INTO` on a connection of its own: one read transaction, so the copy is one consistent snapshot; in WAL
    /// mode a reader never blocks the writer, so writes go on while it copies (the WAL grows meanwhile, since a
    /// checkpoint cannot pass a reader). The copy is compact and has no WAL of its own. The trigram index is not
    /// copied: a server started on the copy rebuilds it in the background, and text search stays exact meanwhile.
    public func snapshot(whileReading: (@Sendable () -> Void)?) throws(LarderError) -> String {
        let directory = configuration.dataDirectory
        let name = "\(SQLiteStore.snapshotPrefix)\(getpid())-\(UUID().wireString).sqlite"
        let path = (directory as NSString).appendingPathComponent(name)
        let connection = try Connection(path: core.databasePath, readOnly: true)
        let hook = SnapshotHook(handle: connection.handle, hook: whileReading)
        if whileReading != nil {
            // The schema is read now, in a read transaction of its own, so that the hook's first call inside a read
            // transaction is in the copy's (reading the schema at VACUUM's prepare was one, ended before the copy).
            _ = try connection.scalar("SELECT count(*) FROM sqlite_schema")
            sqlite3_progress_handler(
                connection.handle, 100,
                { context in
                    let hook = Unmanaged<SnapshotHook>.fromOpaque(context!).takeUnretainedValue()
                    // Only once the copy's snapshot is taken: before it, the hook would hold nothing.
                    guard let run = hook.hook, sqlite3_txn_state(hook.handle, "main") >= SQLITE_TXN_READ else {
                        return 0
                    }
                    hook.hook = nil
                    run()
                    return 0
                }, Unmanaged.passUnretained(hook).toOpaque())
        }
        defer {
            sqlite3_progress_handler(connection.handle, 0, nil, nil)
            withExtendedLifetime(hook) {}
        }
        do throws(LarderError) {
            try connection.execute("VACUUM main INTO \(SQL.literal(path))")
        } catch {
            unlink(path)
            throw LarderError(.internal, "the backup could not be written in \(directory): \(error.message)")
        }
        return path
    }

    public func removeStaleSnapshots() {
        let directory = configuration.dataDirectory
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for name in names where name.hasPrefix(SQLiteStore.snapshotPrefix) {
            unlink((directory as NSString).appendingPathComponent(name))
        }
    }
}
