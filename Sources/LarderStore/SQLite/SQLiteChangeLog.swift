import CSQLite
import Foundation
import LarderWire

extension SQLiteWriteContext {
    static let changeColumns = "seq, collection, kind, time, id, rev, createdAt, updatedAt, data, blob, previous"

    /// Appends a change to the log inside the open transaction; the listeners hear of it after COMMIT.
    func recordChange(
        _ kind: ChangeKind, _ collection: String, record: StoredRecord?, blob: BlobInfo? = nil,
        previous: [UInt8]? = nil
    ) throws(LarderError) {
        guard let db = connection else { return }
        let time = nowMillis()
        let seq = nextChangeSeq()
        let statement = try db.statement(.insertChange)
        defer { statement.reset() }
        try statement.bind(at: 11, .int(seq))
        try statement.bind(at: 1, .text(collection))
        try statement.bind(at: 2, .text(kind.rawValue))
        try statement.bind(at: 3, .int(time))
        if let record {
            try statement.bindUUID(record.id, at: 4)
            try statement.bind(at: 5, .int(record.rev))
            try statement.bind(at: 6, .int(record.createdAt))
            try statement.bind(at: 7, .int(record.updatedAt))
            try statement.bindText(record.data, at: 8)
        }
        if let blob { try statement.bindText(blob.json.bytes, at: 9) }
        if let previous { try statement.bindText(previous, at: 10) }
        while try statement.step() {}
        changes.append(
            ChangeEntry(
                seq: seq, kind: kind, collection: collection, time: time, record: record, blob: blob, previous: previous))
    }

    /// Deletes what the retention no longer covers: all but the newest `retainEvents` changes, and those older than
    /// `retainMs`. Runs inside the writer's transaction, so pruning commits (or not) with the batch.
    func pruneChanges(retainEvents: Int, retainMs: Int64, now: Int64) throws(LarderError) {
        guard let db = connection else { return }
        guard let last = try db.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'changes'") else { return }
        let pruned = try db.scalar("SELECT value FROM larder_meta WHERE key = 'changesPrunedThrough'") ?? 0
        var bound = last - Int64(retainEvents)
        // The first change young enough to keep, in `changes` or a create still in its row; the scans walk only the
        // old ones, which are deleted (or, in rows, fall behind `changesPrunedThrough`).
        let young = [
            try db.scalar(
                "SELECT seq FROM changes WHERE seq > ?1 AND time >= ?2 ORDER BY seq LIMIT 1",
                [.int(max(pruned, bound)), .int(now - retainMs)]),
            try db.scalar(
                "SELECT createSeq FROM documents WHERE createSeq > ?1 AND createdAt >= ?2 ORDER BY createSeq LIMIT 1",
                [.int(max(pruned, bound)), .int(now - retainMs)]),
        ].compactMap { $0 }.min()
        if let young {
            bound = max(bound, young - 1)
        } else {
            bound = last
        }
        guard bound > pruned else { return }
        try db.run("DELETE FROM changes WHERE seq <= ?1", [.int(bound)])
        try db.run("UPDATE larder_meta SET value = ?1 WHERE key = 'changesPrunedThrough'", [.int(bound)])
    }
}

extension SQLiteStore {
    /// The sequence number of the last committed change (0 before the first).
    public var lastChangeSeq: Int64 { feed.lastSeq }

    /// Calls `listener` on the writer queue after every COMMIT that logged changes, with those changes, in commit
    /// order. Keep it short and never block in it: every write waits for it.
    public func addChangeListener(_ listener: @escaping @Sendable ([ChangeEntry]) -> Void) {
        feed.add(listener)
    }

    /// Up to `limit` changes after `seq` (of `collection`, or of every collection when nil), oldest first, stopping
    /// early once their documents pass `maxBytes` (a page holds at least one change).
    public func changes(after seq: Int64, collection: String?, limit: Int, maxBytes: Int) throws(LarderError)
        -> ChangePage
    {
        if let collection { try CollectionName.validate(collection) }
        // The log is `changes` and the create events still in their documents' rows, merged by number. The rows are
        // walked by event number (the planner would rather read a whole collection by id and sort it).
        let only = collection == nil ? "" : " AND collection = ?3"
        let sql =
            "SELECT \(SQLiteWriteContext.changeColumns) FROM changes WHERE seq > ?1\(only) UNION ALL "
            + "SELECT createSeq, collection, 'create', createdAt, id, 1, createdAt, createdAt, data, NULL, NULL "
            + "FROM documents INDEXED BY documents_create_seq WHERE createSeq > ?1\(only) ORDER BY 1 LIMIT ?2"
        let limit = max(1, limit)
        return try readers.read(transaction: true) { db throws(LarderError) in
            let last = try db.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'changes'") ?? 0
            let pruned = try db.scalar("SELECT value FROM larder_meta WHERE key = 'changesPrunedThrough'") ?? 0
            // One row more than asked for says whether another page follows. Creates in rows are never deleted:
            // those pruning passed are left out here.
            var values: [SQLValue] = [.int(max(seq, pruned)), .int(Int64(limit) + 1)]
            if let collection { values.append(.text(collection)) }
            var entries: [ChangeEntry] = []
            var bytes = 0
            var more = false
            try db.forEachRow(sql, values) { row in
                if entries.count >= limit || (!entries.isEmpty && bytes >= maxBytes) {
                    more = true
                    return false
                }
                let entry = SQLiteStore.changeEntry(row)
                bytes += (entry.record?.data.count ?? 0) + (entry.previous?.count ?? 0) + 256
                entries.append(entry)
                return true
            }
            return ChangePage(entries: entries, more: more, lastSeq: last, prunedThrough: pruned)
        }
    }

    static func changeEntry(_ row: SQLiteStatement) -> ChangeEntry {
        var record: StoredRecord?
        if !row.isNull(4) {
            record = StoredRecord(
                id: row.uuid(4), rev: row.int(5), createdAt: row.int(6), updatedAt: row.int(7), data: row.bytes(8))
        }
        var blob: BlobInfo?
        if !row.isNull(9) { blob = try? BlobInfo(json: JSONParser.parseObject(row.bytes(9))) }
        return ChangeEntry(
            seq: row.int(0), kind: ChangeKind(rawValue: row.text(2)), collection: row.text(1), time: row.int(3),
            record: record, blob: blob, previous: row.isNull(10) ? nil : row.bytes(10))
    }
}
