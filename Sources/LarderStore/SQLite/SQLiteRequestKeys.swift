import Foundation
import LarderWire

// Request keys on SQLite (`RequestKey`): one writer, so a key's lookup and its insert in the same transaction see
// every other write with that key, committed or earlier in the same group commit.
extension SQLiteWriteContext {
    func claimRequestKey(_ key: RequestKey) throws(LarderError) -> [UInt8]? {
        guard let db = connection else { throw closedError ?? LarderError(.unavailable, "the store is closed") }
        let oldest = nowMillis() - core.configuration.requestKeyRetentionMs
        let stored = try db.query(
            "SELECT request, digest, answer FROM request_keys WHERE key = ?1 AND createdAt >= ?2",
            [.text(key.key.wireString), .int(oldest)]
        ) { row in (request: row.text(0), digest: row.text(1), answer: row.bytes(2)) }
        guard let stored = stored.first else { return nil }
        return try key.answer(stored)
    }

    func storeRequestKey(_ key: RequestKey, answer: [UInt8]) throws(LarderError) {
        guard let db = connection else { throw closedError ?? LarderError(.unavailable, "the store is closed") }
        // REPLACE: an expired key's row may still be there, waiting for the prune.
        try db.run(
            "INSERT OR REPLACE INTO request_keys(key, request, digest, answer, createdAt) VALUES (?1, ?2, ?3, ?4, ?5)",
            [.text(key.key.wireString), .text(key.request), .text(key.digest), .blob(answer), .int(nowMillis())])
    }

    /// Deletes the request keys older than the retention (with the change log's prune, in its savepoint).
    func pruneRequestKeys(now: Int64) throws(LarderError) {
        guard let db = connection else { return }
        try db.run(
            "DELETE FROM request_keys WHERE createdAt < ?1", [.int(now - core.configuration.requestKeyRetentionMs)])
    }
}

extension SQLiteStore {
    public func requestKeyAnswer(_ key: RequestKey) throws(LarderError) -> [UInt8]? {
        let oldest = nowMillis() - core.configuration.requestKeyRetentionMs
        let stored = try readers.read { db throws(LarderError) in
            try db.query(
                "SELECT request, digest, answer FROM request_keys WHERE key = ?1 AND createdAt >= ?2",
                [.text(key.key.wireString), .int(oldest)]
            ) { row in (request: row.text(0), digest: row.text(1), answer: row.bytes(2)) }.first
        }
        return try stored.map { (stored) throws(LarderError) in try key.answer(stored) }
    }
}
