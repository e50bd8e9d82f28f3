import CSQLite
import Foundation
import LarderWire

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
    /// The SQLite store makes snapshots itself.
    public var snapshots: (any SnapshotStore)? { self }

    static let snapshotPrefix = ".larder-backup-"

    public var snapshotFormat: String { "sqlite" }

    /// `VACUUM INTO` on a connection of its own: one read transaction, so the copy is one consistent snapshot; in WAL
    /// mode a reader never blocks the writer, so writes go on while it copies (the WAL grows meanwhile, since a
    /// checkpoint cannot pass a reader). The copy is compact and has no WAL of its own. The trigram index is not
    /// copied: a server started on the copy rebuilds it in the background, and text search stays exact meanwhile.
    ///
    /// Blobs whose bytes are files (`BlobFiles`) have them copied into the copy's `blob_chunks`, so the copy is still
    /// one file that serves every blob: a server started on it reads them from there. The files are held meanwhile
    /// (none is unlinked, so every blob the copy's snapshot holds still has its file). Uploads under way are not
    /// copied: their bytes are not a blob yet, and a client resuming one on a restored server starts it again.
    public func snapshot(whileReading: (@Sendable () -> Void)?) throws(LarderError) -> String {
        defer { collectFiles() }
        return try files.holding { () throws(LarderError) -> String in
            let path = try copyDatabase(whileReading: whileReading)
            do throws(LarderError) {
                try inlineBlobFiles(into: path)
            } catch {
                unlink(path)
                throw LarderError(.internal, "the backup could not be written: \(error.message)")
            }
            return path
        }
    }

    /// Writes the bytes of every blob whose bytes are a file into the copy at `path` as chunk rows of the file's
    /// name, in one transaction.
    private func inlineBlobFiles(into path: String) throws(LarderError) {
        let copy = try SQLiteConnection(path: path, readOnly: false)
        try copy.execute("BEGIN IMMEDIATE")
        do throws(LarderError) {
            let blobs = try copy.query(
                "SELECT id, file, size FROM blobs WHERE file IS NOT NULL", [], { ($0.uuid(0), $0.text(1), $0.int(2)) })
            for (id, name, size) in blobs {
                var start: Int64 = 0
                while start < size {
                    let range = start..<min(size, start + Int64(configuration.blobChunkBytes))
                    let stored = StoredBytes.file(name, range)
                    try copy.run(
                        "INSERT INTO blob_chunks(owner, start, bytes) VALUES (?1, ?2, ?3)",
                        [.text(name), .int(start), .blob(try bytes(id, stored))])
                    start = range.upperBound
                }
                try copy.run("UPDATE blobs SET chunks = file, file = NULL WHERE file = ?1", [.text(name)])
            }
            try copy.execute("DELETE FROM uploads; DELETE FROM blob_files_deleted; COMMIT")
        } catch {
            try? copy.execute("ROLLBACK")
            throw error
        }
    }

    private func copyDatabase(whileReading: (@Sendable () -> Void)?) throws(LarderError) -> String {
        let directory = configuration.dataDirectory
        let name = "\(SQLiteStore.snapshotPrefix)\(getpid())-\(UUID().wireString).sqlite"
        let path = (directory as NSString).appendingPathComponent(name)
        let connection = try SQLiteConnection(path: core.databasePath, readOnly: true)
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
            // VACUUM INTO takes an empty file as its target: made first, it has mode 0600 rather than SQLite's 0644.
            try PrivateFiles.createFile(path)
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
