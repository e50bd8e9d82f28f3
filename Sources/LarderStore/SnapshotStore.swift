import LarderWire

/// A store that copies itself, consistently and while writers go on, into one file: what `larder backup` streams.
///
/// A store that makes such copies answers itself as `DocumentStore.snapshots`; the PostgreSQL store makes none
/// (pg_dump is the way to back PostgreSQL up).
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
