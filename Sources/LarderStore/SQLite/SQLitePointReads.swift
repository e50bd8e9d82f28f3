import CSQLite
import Foundation
import LarderWire

extension SQLiteStore {
    public func pointReads() -> any PointReads { SQLitePointReads(self) }
}

/// Keeps one read transaction across point reads while the writer has committed nothing since the transaction began
/// (`StoreCore.commits`). The count is read before the snapshot is taken, so a snapshot is never older than the count
/// it is filed under: a write acknowledged after that (its commit counted first) starts a new snapshot at the next
/// read.
///
/// The connection is this object's own, opened at its first read and kept: never one borrowed from the `ReaderPool`
/// that searches use, so an event loop that owns this never waits for a search to give a connection back.
final class SQLitePointReads: PointReads {
    private let store: SQLiteStore
    private var connection: SQLiteConnection?
    /// `StoreCore.commits` when the open transaction began.
    private var generation: UInt64 = 0
    private var inTransaction = false

    init(_ store: SQLiteStore) { self.store = store }

    deinit { end() }

    func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord {
        try CollectionName.validate(collection)
        return try read { db throws(LarderError) in try SQLiteStore.getRecord(db, collection, id) }
    }

    func getJSON(_ collection: String, id: UUID) throws(LarderError) -> [UInt8] {
        try ownedJSON(collection, id: id, ownedBy: nil)
    }

    /// The owner is compared in the store, through the owner index alone (`FixedSQL.selectOwnedRecord`), when the
    /// owner column can hold it; otherwise in the record, as every store does.
    func getJSON(_ collection: String, id: UUID, ownedBy owner: String) throws(LarderError) -> [UInt8]? {
        guard let column = PreparedDocument.columnOwner(owner) else {
            return try PointReadsOwnership.owned(getJSON(collection, id: id), by: owner, collection, id)
        }
        return try ownedJSON(collection, id: id, ownedBy: column)
    }

    private func ownedJSON(_ collection: String, id: UUID, ownedBy owner: String?) throws(LarderError) -> [UInt8] {
        try CollectionName.validate(collection)
        return try read { db throws(LarderError) in
            // The row's id is the one asked for (matched as text); the data column is spliced from SQLite's memory.
            try SQLiteStore.withRecordRow(db, collection, id, ownedBy: owner) { row in
                var out: [UInt8] = []
                row.withBytes(4) { data in
                    RecordWriter.write(
                        id: id, rev: row.int(1), createdAt: row.int(2), updatedAt: row.int(3), data: data, into: &out)
                }
                return out
            }
        }
    }

    func blobHead(_ id: UUID) throws(LarderError) -> BlobInfo {
        try read { db throws(LarderError) in try SQLiteStore.getBlobMeta(db, id) }
    }

    private func read<T>(_ body: (SQLiteConnection) throws(LarderError) -> T) throws(LarderError) -> T {
        let current = store.core.commits.load(ordering: .acquiring)
        if inTransaction && current != generation {
            try? connection?.run(.endRead)
            inTransaction = false
        }
        if !inTransaction {
            // A closed store's files may belong to another process next: the connection goes with the store.
            guard !store.readers.isClosed else {
                connection = nil
                throw LarderError(.unavailable, "the store is closed")
            }
            let db: SQLiteConnection
            if let connection {
                db = connection
            } else {
                db = try store.readers.openOwn()
                connection = db
            }
            // Deferred: the snapshot is taken by the first SELECT, after `current` was read.
            try db.run(.beginRead)
            inTransaction = true
            generation = current
        }
        do throws(LarderError) {
            return try body(connection!)
        } catch {
            // NOT_FOUND leaves the transaction usable; anything else ends it, so the next read starts clean.
            if error.status != .notFound { end() }
            throw error
        }
    }

    func end() {
        if inTransaction { try? connection?.run(.endRead) }
        inTransaction = false
    }
}
