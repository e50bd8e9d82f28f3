import Foundation
import LarderIO
import LarderSync
import LarderWire

/// What a queued write of a replica does to its record.
public enum ReplicaOperation: String, Sendable, Equatable {
    /// Creates the record (CREATE with the id the replica chose).
    case create
    /// Replaces its data (REPLACE).
    case replace
    /// Applies a merge patch (PATCH).
    case patch
    /// Deletes it (DELETE).
    case delete
    /// Uploads a photo and attaches it to the record.
    case photo
}

/// A queued write of the outbox, as the drain sends it.
struct OutboxWrite: Sendable {
    /// The write's kind: what it does to the record (a photo's `body` holds its blob id, `blob`).
    typealias Operation = ReplicaOperation

    /// Its place in the outbox (writes are sent in this order).
    var position: Int64
    var collection: String
    var id: UUID
    var operation: Operation
    /// The data of a create or replace, the merge patch of a patch; nil for a delete.
    var body: JSONObject?
    /// The revision the write was made over; nil for a create, and for a write that follows another queued write of
    /// the same record until that one is answered.
    var baseRev: Int64?
    /// The request key, the same for every try.
    var requestKey: UUID
}

/// One record as the replica holds it for reads: the local view (the server's version with the queued writes
/// applied over it), and whether queued writes are in it.
struct LocalRecord: Sendable {
    var item: RecordQuery.Item
    var pending: Bool
}

/// The replica's file under its lock: the server's versions (`synced`), the local view reads answer from (`local`,
/// the server's version with the outbox's writes applied over it, rebuilt whenever either changes), the ordered
/// outbox, and each collection's feed position. Every change is one transaction.
final class ReplicaStore: @unchecked Sendable {
    private let lock = Lock()
    private let db: ReplicaDatabase
    private var keys = TimeOrderedUUIDGenerator()
    /// The view of the collections read so far, decoded (under the lock): reads filter and sort it without parsing
    /// the file's JSON again. The rows a call rebuilt (`touched`) reach it when the call succeeded; a failed call
    /// drops the collections it touched, to be read from the file again.
    private var cache: [String: [UUID: LocalRecord]] = [:]
    private var touched: [String: [UUID: LocalRecord?]] = [:]

    /// Set once `close()` closed the file.
    private var isClosed = false

    init(path: String) throws(LarderError) {
        db = try ReplicaDatabase(path: path)
        OpenReplicaFiles.opened(path)
    }

    deinit { close() }

    /// Closes the file (once): every later call throws UNAVAILABLE.
    func close() {
        let closing = lock.withLock { () -> Bool in
            guard !isClosed else { return false }
            isClosed = true
            db.close()
            return true
        }
        if closing { OpenReplicaFiles.closed(db.path) }
    }

    /// Runs `body` on the file under the lock.
    func locked<T>(_ body: (ReplicaDatabase) throws(LarderError) -> T) throws(LarderError) -> T {
        lock.lock()
        defer {
            touched = [:]
            lock.unlock()
        }
        guard !isClosed else {
            throw LarderError(.unavailable, "the replica is closed: open a new LarderReplica on its file to use it")
        }
        do throws(LarderError) {
            let result = try body(db)
            for (collection, rows) in touched where cache[collection] != nil {
                for (id, row) in rows { cache[collection]?[id] = row }
            }
            return result
        } catch {
            for collection in touched.keys { cache[collection] = nil }
            throw error
        }
    }

    /// A new time-ordered id for a record made here.
    func newID() -> UUID {
        lock.withLock { keys.next() }
    }

    // MARK: Reads

    /// Every record of `collection` as reads see it.
    func records(_ collection: String) throws(LarderError) -> [LocalRecord] {
        try locked { db throws(LarderError) in
            if cache[collection] == nil {
                var rows: [UUID: LocalRecord] = [:]
                for row in try db.query(
                    "SELECT id, rev, created, updated, data, pending FROM local WHERE collection = ?1",
                    [.text(collection)], ReplicaStore.localRecord)
                {
                    rows[row.item.envelope.id] = row
                }
                cache[collection] = rows
            }
            return (cache[collection] ?? [:]).values.sorted { a, b in
                let (x, y) = (a.item.envelope, b.item.envelope)
                return x.createdAt != y.createdAt ? x.createdAt < y.createdAt : x.id.wireString < y.id.wireString
            }
        }
    }

    /// One record as reads see it; nil when there is none (or it was deleted locally).
    func record(_ collection: String, _ id: UUID) throws(LarderError) -> LocalRecord? {
        try locked { db throws(LarderError) in try ReplicaStore.local(db, collection, id) }
    }

    private static func local(_ db: ReplicaDatabase, _ collection: String, _ id: UUID) throws(LarderError)
        -> LocalRecord?
    {
        try db.query(
            "SELECT id, rev, created, updated, data, pending FROM local WHERE collection = ?1 AND id = ?2",
            [.text(collection), .text(id.wireString)], localRecord
        ).first
    }

    private static func localRecord(_ row: [ReplicaDatabase.Value]) throws(LarderError) -> LocalRecord {
        LocalRecord(
            item: RecordQuery.Item(
                envelope: RecordEnvelope(
                    id: UUID(uuidString: row[0].text ?? "") ?? UUID(), rev: row[1].int ?? 0,
                    createdAt: row[2].int ?? 0, updatedAt: row[3].int ?? 0),
                data: try JSONParser.parseObject(row[4].blob ?? [])),
            pending: row[5].int != 0)
    }

    /// How many writes wait in the outbox.
    func pendingCount() throws(LarderError) -> Int {
        try locked { db throws(LarderError) in
            Int(try db.query("SELECT count(*) FROM outbox") { $0[0].int ?? 0 }.first ?? 0)
        }
    }

    // MARK: The file's user

    /// Whose records the file holds: nil while no server has been reached, `.some(nil)` for a client without a user
    /// (a role token, or none), `.some(id)` for a signed-in user.
    func owner() throws(LarderError) -> String?? {
        try locked { db throws(LarderError) in
            try db.query("SELECT user FROM owner") { $0[0].text }.first
        }
    }

    /// Makes the file `user`'s when it is no one's yet, in one transaction; the file's user afterwards.
    func bindOwner(_ user: String?) throws(LarderError) -> String? {
        try locked { db throws(LarderError) in
            try db.transaction {
                () throws(LarderError) -> String? in
                try db.run("INSERT OR IGNORE INTO owner (one, user) VALUES (1, ?1)", [user.map { .text($0) } ?? .null])
                return try db.query("SELECT user FROM owner") { $0[0].text }.first ?? nil
            }
        }
    }

    // MARK: Local writes

    /// Applies a local write to the view and queues it, in one transaction (with what `alsoIn` writes); the record as
    /// reads now see it (nil after a delete).
    ///
    /// - Throws: `NOT_FOUND` for a replace, patch or delete of a record the view does not hold; `CONFLICT` for a
    ///   create of an id it holds.
    func write(
        _ collection: String, _ id: UUID, _ operation: OutboxWrite.Operation, _ body: JSONObject?,
        alsoIn: ((ReplicaDatabase) throws(LarderError) -> Void)? = nil
    ) throws(LarderError) -> LocalRecord? {
        try locked { db throws(LarderError) in
            try db.transaction { () throws(LarderError) -> LocalRecord? in
                let current = try ReplicaStore.local(db, collection, id)
                if operation == .create, current != nil {
                    throw LarderError(
                        .conflict, "\(collection)/\(id.wireString) exists in the replica; create it with another id",
                        field: "id")
                }
                if operation != .create, current == nil {
                    throw LarderError(
                        .notFound, "\(collection)/\(id.wireString) is not in the replica", field: "id")
                }
                let queued = try db.query(
                    "SELECT count(*) FROM outbox WHERE collection = ?1 AND id = ?2 AND op != 'photo'",
                    [.text(collection), .text(id.wireString)]) { $0[0].int ?? 0 }.first ?? 0
                let synced = try ReplicaStore.synced(db, collection, id)
                let base: ReplicaDatabase.Value = queued > 0 || operation == .create ? .null : synced.map { .int($0.envelope.rev) } ?? .null
                try db.run(
                    "INSERT INTO outbox (collection, id, op, body, base_rev, chained, request_key, made) "
                        + "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    [
                        .text(collection), .text(id.wireString), .text(operation.rawValue),
                        body.map { .blob($0.bytes) } ?? .null, base, .int(queued > 0 ? 1 : 0),
                        .text(keys.next().wireString), .int(Timestamp.milliseconds(Date())),
                    ])
                try alsoIn?(db)
                try rebuild(db, collection, id)
                return try ReplicaStore.local(db, collection, id)
            }
        }
    }

    // MARK: The outbox

    /// The first queued write, the one the drain sends next.
    func firstWrite() throws(LarderError) -> OutboxWrite? {
        try locked { db throws(LarderError) in
            try db.query(
                "SELECT position, collection, id, op, body, base_rev, request_key FROM outbox ORDER BY position LIMIT 1"
            ) { row throws(LarderError) -> OutboxWrite in
                OutboxWrite(
                    position: row[0].int ?? 0, collection: row[1].text ?? "",
                    id: UUID(uuidString: row[2].text ?? "") ?? UUID(),
                    operation: try ReplicaStore.operation(row[3]),
                    body: try row[4].blob.map { bytes throws(LarderError) in try JSONParser.parseObject(bytes) },
                    baseRev: row[5].int, requestKey: UUID(uuidString: row[6].text ?? "") ?? UUID())
            }.first
        }
    }

    /// A sent write the server applied: out of the outbox, its answer (nil for a delete) into the server's versions,
    /// the record's next queued write now made over the answer's revision; one transaction.
    func acknowledge(_ write: OutboxWrite, answer: Record?) throws(LarderError) {
        try locked { db throws(LarderError) in
            try db.transaction(durable: false) { () throws(LarderError) in
                try db.run("DELETE FROM outbox WHERE position = ?1", [.int(write.position)])
                if let answer {
                    try ReplicaStore.storeSynced(db, write.collection, answer)
                    try db.run(
                        "UPDATE outbox SET base_rev = ?3, chained = 0 WHERE position = (SELECT min(position) FROM outbox "
                            + "WHERE collection = ?1 AND id = ?2 AND op != 'photo')",
                        [.text(write.collection), .text(write.id.wireString), .int(answer.rev)])
                } else {
                    try db.run(
                        "DELETE FROM synced WHERE collection = ?1 AND id = ?2",
                        [.text(write.collection), .text(write.id.wireString)])
                }
                try rebuild(db, write.collection, write.id)
            }
        }
    }

    /// A queued write made again: over `baseRev`, with `operation` and `body`, and a new request key (the server
    /// keeps the answer of the old one); `server`, the server's version it is now made over.
    func rewrite(
        _ write: OutboxWrite, _ operation: OutboxWrite.Operation, _ body: JSONObject?, baseRev: Int64?, server: Record?
    ) throws(LarderError) {
        try locked { db throws(LarderError) in
            try db.transaction(durable: false) { () throws(LarderError) in
                if let server { try ReplicaStore.storeSynced(db, write.collection, server) }
                try db.run(
                    "UPDATE outbox SET op = ?2, body = ?3, base_rev = ?4, chained = 0, request_key = ?5 "
                        + "WHERE position = ?1",
                    [
                        .int(write.position), .text(operation.rawValue), body.map { .blob($0.bytes) } ?? .null,
                        baseRev.map { .int($0) } ?? .null, .text(keys.next().wireString),
                    ])
                try rebuild(db, write.collection, write.id)
            }
        }
    }

    /// The server's version of a record, as a discard of its writes leaves it.
    enum ServerVersion {
        /// The version the replica holds.
        case keep
        /// This version.
        case record(Record)
        /// None: the server does not have the record.
        case none
    }

    /// Every queued write of one record out of the outbox (its photos stay queued), and the server's version in
    /// place of the local one; one transaction.
    func discardWrites(_ collection: String, _ id: UUID, server: ServerVersion) throws(LarderError) {
        try locked { db throws(LarderError) in
            try db.transaction(durable: false) { () throws(LarderError) in
                try db.run(
                    "DELETE FROM outbox WHERE collection = ?1 AND id = ?2 AND op != 'photo'",
                    [.text(collection), .text(id.wireString)])
                switch server {
                case .keep: break
                case .record(let record): try ReplicaStore.storeSynced(db, collection, record, newerOnly: false)
                case .none:
                    try db.run(
                        "DELETE FROM synced WHERE collection = ?1 AND id = ?2", [.text(collection), .text(id.wireString)])
                }
                try rebuild(db, collection, id)
            }
        }
    }

    /// The later queued writes of the record `write` is for, folded into it: what the merge closure decides replaces
    /// them all.
    func foldLaterWrites(_ write: OutboxWrite) throws(LarderError) {
        try locked { db throws(LarderError) in
            try db.run(
                "DELETE FROM outbox WHERE collection = ?1 AND id = ?2 AND position > ?3 AND op != 'photo'",
                [.text(write.collection), .text(write.id.wireString), .int(write.position)])
        }
    }

    /// The operation an outbox row names; `INTERNAL` for one this version does not write.
    private static func operation(_ value: ReplicaDatabase.Value) throws(LarderError) -> OutboxWrite.Operation {
        guard let operation = value.text.flatMap(OutboxWrite.Operation.init(rawValue:)) else {
            throw LarderError(
                .internal, "the replica's outbox holds a write this version does not know (\(value)); open the file "
                    + "with the version that wrote it")
        }
        return operation
    }

    // MARK: The feed

    /// Where a collection's feed stands: the last change applied (nil before the first load ended) and the load's
    /// generation.
    func feed(_ collection: String) throws(LarderError) -> (lastSeq: Int64?, generation: Int64) {
        try locked { db throws(LarderError) in
            try db.query(
                "SELECT last_seq, loaded, generation FROM feeds WHERE collection = ?1", [.text(collection)]
            ) { row in (row[1].int == 1 ? row[0].int : nil, row[2].int ?? 0) }.first ?? (nil, 0)
        }
    }

    /// Starts a load of `collection` by pages: a new generation, which every server version stored from now on
    /// carries; the answer.
    func beginLoad(_ collection: String) throws(LarderError) -> Int64 {
        try locked { db throws(LarderError) in
            try db.transaction { () throws(LarderError) -> Int64 in
                try db.run(
                    "INSERT INTO feeds (collection, last_seq, loaded, generation) VALUES (?1, NULL, 0, 1) "
                        + "ON CONFLICT (collection) DO UPDATE SET generation = generation + 1",
                    [.text(collection)])
                return try db.query("SELECT generation FROM feeds WHERE collection = ?1", [.text(collection)]) {
                    $0[0].int ?? 0
                }.first ?? 0
            }
        }
    }

    /// A page of a load: the records as the server holds them.
    func applyPage(_ collection: String, _ records: [Record]) throws(LarderError) {
        try locked { db throws(LarderError) in
            try db.transaction(durable: false) { () throws(LarderError) in
                for record in records {
                    try ReplicaStore.storeSynced(db, collection, record)
                    try rebuild(db, collection, record.id)
                }
            }
        }
    }

    /// The end of a load: the server versions no page showed (deleted since) go, and the feed goes on after `seq`,
    /// the change the load's pages reach; one transaction.
    func finishLoad(_ collection: String, generation: Int64, seq: Int64) throws(LarderError) {
        try locked { db throws(LarderError) in
            try db.transaction(durable: false) { () throws(LarderError) in
                let gone = try db.query(
                    "SELECT id FROM synced WHERE collection = ?1 AND generation < ?2",
                    [.text(collection), .int(generation)]) { $0[0].text ?? "" }
                try db.run(
                    "DELETE FROM synced WHERE collection = ?1 AND generation < ?2", [.text(collection), .int(generation)])
                for id in gone { if let uuid = UUID(uuidString: id) { try rebuild(db, collection, uuid) } }
                try db.run(
                    "UPDATE feeds SET last_seq = ?2, loaded = 1 WHERE collection = ?1", [.text(collection), .int(seq)])
            }
        }
    }

    /// A change from the feed, applied with its sequence number saved in the same transaction: `record` the
    /// document after the write, or with `deletedRev` a delete of the document at that revision. A change the
    /// replica already holds (an equal or later revision) changes nothing but the saved position.
    func applyChange(_ collection: String, seq: Int64, record: Record?, deleted: (UUID, Int64)?, dropped: Bool)
        throws(LarderError)
    {
        try locked { db throws(LarderError) in
            try db.transaction(durable: false) { () throws(LarderError) in
                if let record {
                    try ReplicaStore.storeSynced(db, collection, record)
                    try rebuild(db, collection, record.id)
                } else if let (id, rev) = deleted {
                    try db.run(
                        "DELETE FROM synced WHERE collection = ?1 AND id = ?2 AND rev <= ?3",
                        [.text(collection), .text(id.wireString), .int(rev)])
                    try rebuild(db, collection, id)
                } else if dropped {
                    let ids = try db.query("SELECT id FROM synced WHERE collection = ?1", [.text(collection)]) {
                        $0[0].text ?? ""
                    }
                    try db.run("DELETE FROM synced WHERE collection = ?1", [.text(collection)])
                    for id in ids { if let uuid = UUID(uuidString: id) { try rebuild(db, collection, uuid) } }
                }
                try db.run("UPDATE feeds SET last_seq = ?2 WHERE collection = ?1", [.text(collection), .int(seq)])
            }
        }
    }

    // MARK: The server's versions and the view

    private static func synced(_ db: ReplicaDatabase, _ collection: String, _ id: UUID) throws(LarderError)
        -> RecordQuery.Item?
    {
        try db.query(
            "SELECT id, rev, created, updated, data, 0 FROM synced WHERE collection = ?1 AND id = ?2",
            [.text(collection), .text(id.wireString)], localRecord
        ).first?.item
    }

    /// Stores the server's version `record`, over an older revision only unless `newerOnly` is false (a load's page
    /// holds what the server holds now).
    private static func storeSynced(_ db: ReplicaDatabase, _ collection: String, _ record: Record, newerOnly: Bool = true)
        throws(LarderError)
    {
        let condition = newerOnly ? " WHERE excluded.rev > synced.rev" : ""
        try db.run(
            "INSERT INTO synced (collection, id, rev, created, updated, data, generation) VALUES (?1, ?2, ?3, ?4, ?5, "
                + "?6, coalesce((SELECT generation FROM feeds WHERE collection = ?1), 0)) ON CONFLICT (collection, id) "
                + "DO UPDATE SET rev = excluded.rev, created = excluded.created, updated = excluded.updated, "
                + "data = excluded.data, generation = excluded.generation" + condition,
            [
                .text(collection), .text(record.id.wireString), .int(record.rev), .int(record.createdAtMs),
                .int(record.updatedAtMs), .blob(record.data.bytes),
            ])
        if newerOnly {
            // An equal revision seen again (by a load) still counts as seen by it.
            try db.run(
                "UPDATE synced SET generation = coalesce((SELECT generation FROM feeds WHERE collection = ?1), 0) "
                    + "WHERE collection = ?1 AND id = ?2", [.text(collection), .text(record.id.wireString)])
        }
    }

    /// The view of one record made again: the server's version with the record's queued writes applied over it in
    /// order; no row when there is no version left (never created, or deleted).
    func rebuild(_ db: ReplicaDatabase, _ collection: String, _ id: UUID) throws(LarderError) {
        var current = try ReplicaStore.synced(db, collection, id)
        let writes = try db.query(
            "SELECT op, body, made FROM outbox WHERE collection = ?1 AND id = ?2 ORDER BY position",
            [.text(collection), .text(id.wireString)]
        ) { row throws(LarderError) in
            (
                try ReplicaStore.operation(row[0]),
                try row[1].blob.map { bytes throws(LarderError) in try JSONParser.parseObject(bytes) }, row[2].int ?? 0
            )
        }
        for (operation, body, made) in writes {
            switch operation {
            case .create, .replace:
                let envelope =
                    current?.envelope ?? RecordEnvelope(id: id, rev: 0, createdAt: made, updatedAt: made)
                current = RecordQuery.Item(envelope: envelope, data: body ?? [:])
            case .patch:
                if var patched = current {
                    patched.data = MergePatch.apply(body ?? [:], to: patched.data)
                    current = patched
                }
            case .delete:
                current = nil
            case .photo:
                break
            }
            if var written = current {
                written.envelope.updatedAt = max(written.envelope.updatedAt, made)
                current = written
            }
        }
        guard let current else {
            try db.run("DELETE FROM local WHERE collection = ?1 AND id = ?2", [.text(collection), .text(id.wireString)])
            touched[collection, default: [:]][id] = .some(nil)
            return
        }
        touched[collection, default: [:]][id] = LocalRecord(item: current, pending: !writes.isEmpty)
        try db.run(
            "INSERT OR REPLACE INTO local (collection, id, rev, created, updated, data, pending) "
                + "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            [
                .text(collection), .text(id.wireString), .int(current.envelope.rev), .int(current.envelope.createdAt),
                .int(current.envelope.updatedAt), .blob(current.data.bytes), .int(writes.isEmpty ? 0 : 1),
            ])
    }
}

/// The replica files this process holds open, by path, so that `LarderReplica.remove(path:)` never removes a file
/// under a connection: closing that connection later would remove, by name, the WAL of the next file made there.
enum OpenReplicaFiles {
    private static let open = Locked<[String: Int]>([:])

    /// The form of `path` that names one file however it was written.
    static func key(_ path: String) -> String { URL(fileURLWithPath: path).standardizedFileURL.path }

    static func opened(_ path: String) { open.withLock { $0[key(path), default: 0] += 1 } }

    static func closed(_ path: String) {
        open.withLock { open in
            let key = key(path)
            if let count = open[key], count > 1 { open[key] = count - 1 } else { open[key] = nil }
        }
    }

    static func isOpen(_ path: String) -> Bool { open.withLock { $0[key(path)] != nil } }
}
