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
        keyKeptInRow = false
        let hash = RequestKeyIndex.hash(key.key)
        claimedKey = (key.key, hash)
        // Nearly every key is new: no row keeps it and the filter says the table lacks it, all in one look.
        let (rows, inTable) = requestKeys.find(hash)
        guard !rows.isEmpty || inTable else { return nil }
        let oldest = core.oldestLiveRequestKey()
        if let answer = try SQLiteStore.rowKeyAnswer(key, rows: rows, db, oldest: oldest) { return answer }
        guard inTable else { return nil }
        let statement = try db.statement(.selectRequestKey)
        defer { statement.reset() }
        try statement.bindUUID(key.key, at: 1)
        try statement.bind(at: 2, .int(oldest))
        guard try statement.step() else { return nil }
        return try key.answer((request: statement.text(0), digest: statement.text(1), answer: statement.bytes(2)))
    }

    func storeRequestKey(_ key: RequestKey, answer: [UInt8]) throws(LarderError) {
        guard let db = connection, let requestKeys else {
            throw closedError ?? LarderError(.unavailable, "the store is closed")
        }
        // A CREATE kept its key in the row it made (`keyed`): its answer is that record, which a retry is given again.
        if keyKeptInRow {
            keyKeptInRow = false
            return
        }
        // The document a CREATE's or REPLACE's answer repeats is left out: its retry brings it again. (PostgreSQL
        // keeps whole answers: servers of an older version may share its table and answer from it.)
        let kept = key.kept(answer)
        try insertKeyRow(
            key.key, (request: key.request, digest: kept.digest, answer: kept.answer), createdAt: nowMillis(), db,
            requestKeys)
    }

    /// Puts `key`'s row in the key table (`request_keys`), after the filter learns of it: the filter may hold a key
    /// the table lacks, never the other way round.
    func insertKeyRow(
        _ key: UUID, _ stored: (request: String, digest: String, answer: [UInt8]), createdAt: Int64,
        _ db: SQLiteConnection, _ requestKeys: RequestKeyIndex
    ) throws(LarderError) {
        requestKeys.stored(hash(of: key))
        let statement = try db.statement(.storeRequestKey)
        defer { statement.reset() }
        try statement.bindUUID(key, at: 1)
        try statement.bind(at: 2, .text(stored.request))
        try statement.bind(at: 3, .text(stored.digest))
        try statement.bind(at: 4, .blob(stored.answer))
        try statement.bind(at: 5, .int(createdAt))
        while try statement.step() {}
    }

    /// `key`'s hash in the writer's index (`RequestKeyIndex.hash`): the one the running write's claim made, when it
    /// is that key's.
    func hash(of key: UUID) -> UInt64 {
        if let claimedKey, claimedKey.key == key { return claimedKey.hash }
        return RequestKeyIndex.hash(key)
    }

    /// Deletes the next slice's request keys older than the retention and moves the mark of rows that may keep a
    /// CREATE's key (with the change log's prune, in its savepoint); answers the new mark, for after the commit.
    func pruneRequestKeys(now: Int64) throws(LarderError) -> Int64? {
        guard let db = connection, let requestKeys else { return nil }
        return try requestKeys.sweep(db, oldest: core.oldestLiveRequestKey(now: now), newest: documentNumbers.last)
    }
}

extension SQLiteStore {
    /// The answer to `key` when one of `rows` (those the index gives for it) keeps it (`RequestKey.rowMark`) and it
    /// was stored from `oldest` on; the refusal when it went with another request.
    static func rowKeyAnswer(_ key: RequestKey, rows: [Int64], _ db: SQLiteConnection, oldest: Int64)
        throws(LarderError) -> [UInt8]?
    {
        for row in rows {
            let statement = try db.statement(.selectRowKey)
            defer { statement.reset() }
            try statement.bind(at: 1, .int(row))
            guard try statement.step(), !statement.isNull(3) else { continue }
            let mark = statement.bytes(3)
            guard RequestKey.key(ofMark: mark) == key.key, statement.int(2) >= oldest else { continue }
            let stored = RequestKey.tableRow(
                collection: statement.text(0), id: statement.uuid(1), createdAt: statement.int(2), mark: mark)
            return try key.answer(stored)
        }
        return nil
    }

    public func requestKeyAnswer(_ key: RequestKey) throws(LarderError) -> [UInt8]? {
        let oldest = core.oldestLiveRequestKey()
        let index = writer.requestKeys
        return try readers.read { db throws(LarderError) in
            let rows = index.find(RequestKeyIndex.hash(key.key)).rows
            if let answer = try Self.rowKeyAnswer(key, rows: rows, db, oldest: oldest) { return answer }
            let stored = try db.query(
                "SELECT request, digest, answer FROM request_keys WHERE key = ?1 AND createdAt >= ?2",
                [.text(key.key.wireString), .int(oldest)]
            ) { row in (request: row.text(0), digest: row.text(1), answer: row.bytes(2)) }.first
            return try stored.map { (stored) throws(LarderError) in try key.answer(stored) }
        }
    }
}
