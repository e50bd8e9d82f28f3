import CSQLite
import Foundation
import LarderWire

/// The statements the writer runs for every write or every batch. Each is a single statement (a prepared statement
/// holds one), kept prepared on the writer connection.
enum FixedSQL: Int, CaseIterable {
    case begin, commit, rollback
    case savepoint, release, rollbackToSavepoint
    case ensureCollection, insertDocument, selectCurrent, updateDocument, insertChange, moveCreateToLog, raiseChangeSeq
    case raiseDocumentSeq
    /// A covered collection's document into the trigram index's backlog (`SQLiteWriteContext.enterBacklog`).
    case enterBacklog
    /// A keyed write's lookup and store of its request key (`SQLiteRequestKeys`).
    case selectRequestKey, storeRequestKey, selectRowKey
    /// The writer's side of the trigram index (`TextIndexer.applyToBacklog`).
    case settleBacklogDelete, settleBacklogKeep
    /// Readers' point reads (`PointReads`).
    case beginRead, endRead, selectRecord, selectOwnedRecord, selectBlobMeta, selectBlobMetaAndSeq

    var sql: String {
        switch self {
        case .begin: "BEGIN IMMEDIATE"
        case .commit: "COMMIT"
        case .rollback: "ROLLBACK"
        case .savepoint: "SAVEPOINT w"
        case .release: "RELEASE w"
        case .rollbackToSavepoint: "ROLLBACK TO w"
        case .ensureCollection: "INSERT OR IGNORE INTO collections(name, createdAt) VALUES (?1, ?2)"
        case .insertDocument:
            // `search` is NULL unless the trigram index covers the collection (`CoveredCollections`); `createKey` NULL
            // unless the CREATE carried a request key (`RequestKey.rowMark`).
            "INSERT INTO documents(seq, collection, id, rev, createdAt, updatedAt, data, search, createSeq, owner, "
                + "createKey) VALUES (?8, ?1, ?2, 1, ?3, ?3, ?4, ?5, ?6, ?7, ?9)"
        case .selectCurrent:
            "SELECT seq, rev, createdAt, updatedAt, data, createSeq, search, createKey FROM documents "
                + "WHERE collection = ?1 AND id = ?2"
        case .updateDocument:
            "UPDATE documents SET rev = rev + 1, updatedAt = ?1, data = ?2, search = ?3, createSeq = NULL, owner = ?5 "
                + "WHERE seq = ?4"
        case .moveCreateToLog:
            // The create event leaves the row (which is about to change) for the log, unless pruning passed it.
            "INSERT INTO changes(seq, collection, kind, time, id, rev, createdAt, updatedAt, data) "
                + "SELECT createSeq, collection, 'create', createdAt, id, 1, createdAt, createdAt, data FROM documents "
                + "WHERE seq = ?1 AND createSeq > (SELECT value FROM larder_meta WHERE key = 'changesPrunedThrough')"
        case .raiseChangeSeq: "UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'changes'"
        case .enterBacklog: "INSERT OR IGNORE INTO fts_backlog(seq, old) VALUES (?1, ?2)"
        case .raiseDocumentSeq: "UPDATE larder_meta SET value = max(value, ?1) WHERE key = 'documentsSeq'"
        case .insertChange:
            "INSERT INTO changes(seq, collection, kind, time, id, rev, createdAt, updatedAt, data, blob, previous) "
                + "VALUES (?11, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        case .selectRequestKey: "SELECT request, digest, answer FROM request_keys WHERE key = ?1 AND createdAt >= ?2"
        case .selectRowKey: "SELECT collection, id, createdAt, createKey FROM documents WHERE seq = ?1"
        case .storeRequestKey:
            // REPLACE: an expired key's row may still be there, waiting for the prune.
            "INSERT OR REPLACE INTO request_keys(key, request, digest, answer, createdAt) VALUES (?1, ?2, ?3, ?4, ?5)"
        case .settleBacklogDelete:
            "DELETE FROM fts_backlog WHERE seq = ?1 AND (SELECT search FROM documents WHERE seq = ?1 "
                + "AND collection IN (SELECT name FROM text_collections)) IS ?2"
        case .settleBacklogKeep: "UPDATE fts_backlog SET old = ?2 WHERE seq = ?1"
        case .beginRead: "BEGIN"
        case .endRead: "COMMIT"
        case .selectRecord: "SELECT \(SQLiteStore.recordColumns) FROM documents WHERE collection = ?1 AND id = ?2"
        case .selectOwnedRecord:
            // Through the owner index alone: another user's record is not found by the same steps as a missing id.
            "SELECT \(SQLiteStore.recordColumns) FROM documents INDEXED BY documents_owner "
                + "WHERE collection = ?1 AND owner = ?3 AND id = ?2"
        case .selectBlobMeta: "SELECT \(SQLiteStore.blobColumns) FROM blobs WHERE id = ?1"
        case .selectBlobMetaAndSeq: "SELECT \(SQLiteStore.blobColumns), seq, chunks, file FROM blobs WHERE id = ?1"
        }
    }
}
