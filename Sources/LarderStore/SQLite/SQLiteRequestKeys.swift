import Foundation
import LarderWire

// Request keys on SQLite (`RequestKey`): one writer, so a key's lookup and its insert in the same transaction see
// every other write with that key, committed or earlier in the same group commit. The writer's `RequestKeyIndex`
// spares the lookup of a key the table surely lacks, and sweeps expired keys out.
extension SQLiteWriteContext {
    func claimRequestKey(_ key: RequestKey) throws(LarderError) -> [UInt8]? {
        guard let db = connection, let requestKeys else {
            throw closedError ?? LarderError(.unavailable, "the store is closed")
        }
        guard requestKeys.mayHold(key.key) else { return nil }
        let statement = try db.statement(.selectRequestKey)
        defer { statement.reset() }
        try statement.bindUUID(key.key, at: 1)
        try statement.bind(at: 2, .int(nowMillis() - core.configuration.requestKeyRetentionMs))
        guard try statement.step() else { return nil }
        return try key.answer((request: statement.text(0), digest: statement.text(1), answer: statement.bytes(2)))
    }

    func storeRequestKey(_ key: RequestKey, answer: [UInt8]) throws(LarderError) {
        guard let db = connection, let requestKeys else {
            throw closedError ?? LarderError(.unavailable, "the store is closed")
        }
        // Before the row: the filter may hold a key the table lacks, never the other way round.
        requestKeys.stored(key.key)
        let statement = try db.statement(.storeRequestKey)
        defer { statement.reset() }
        try statement.bindUUID(key.key, at: 1)
        // The document a CREATE's or REPLACE's answer repeats is left out: its retry brings it again. (PostgreSQL
        // keeps whole answers: servers of an older version may share its table and answer from it.)
        let kept = key.kept(answer)
        try statement.bind(at: 2, .text(key.request))
        try statement.bind(at: 3, .text(kept.digest))
        try statement.bind(at: 4, .blob(kept.answer))
        try statement.bind(at: 5, .int(nowMillis()))
        while try statement.step() {}
    }

    /// Deletes the next slice's request keys older than the retention (with the change log's prune, in its
    /// savepoint).
    func pruneRequestKeys(now: Int64) throws(LarderError) {
        guard let db = connection, let requestKeys else { return }
        try requestKeys.sweep(db, oldest: now - core.configuration.requestKeyRetentionMs)
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
