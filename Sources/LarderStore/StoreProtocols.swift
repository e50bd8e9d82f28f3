import Foundation
import LarderSchema
import LarderWire

// The store's public surface. The server codes against `DocumentStore` and `BlobStore` only; `SQLiteStore`
// (SQLite/) and `PostgresStore` (Postgres/) implement them, and what one of them lacks (snapshots for BACKUP, blob
// files) is declared by the protocol rather than found by casting to a store type.
//
// Threading: every method is thread-safe and callable from any thread. Reads run on a small pool of connections;
// writes go to one writer connection owned by a serial queue that batches concurrent writes into one transaction
// (group commit), and a write's completion is called only after its COMMIT succeeded.

/// One stored document with its envelope.
public struct StoredRecord: Sendable, Equatable {
    public var id: UUID
    /// Starts at 1 and grows by 1 with every write.
    public var rev: Int64
    /// Milliseconds since the Unix epoch.
    public var createdAt: Int64
    /// Milliseconds since the Unix epoch.
    public var updatedAt: Int64
    /// The exact stored compact JSON bytes of the `data` object; reads splice them without re-encoding.
    public var data: [UInt8]

    public init(id: UUID, rev: Int64, createdAt: Int64, updatedAt: Int64, data: [UInt8]) {
        self.id = id
        self.rev = rev
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.data = data
    }

    /// Appends `{"id":"<uuid>","rev":N,"createdAt":"<ISO 8601>","updatedAt":"...","data":<data>}` to `out`,
    /// splicing `data` verbatim.
    public func write(into out: inout [UInt8]) {
        data.withUnsafeBytes {
            RecordWriter.write(id: id, rev: rev, createdAt: createdAt, updatedAt: updatedAt, data: $0, into: &out)
        }
    }

    /// The whole record as JSON bytes (see `write(into:)`).
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        write(into: &out)
        return out
    }

    /// The decoded `data` object (for tests and tools; the hot path never decodes).
    public func decodedData() throws(LarderError) -> JSONObject { try JSONParser.parseObject(data) }
}

/// One page of records; `nextCursor` is nil on the last page.
public struct Page: Sendable, Equatable {
    public var records: [StoredRecord]
    public var nextCursor: String?
    public init(records: [StoredRecord], nextCursor: String?) {
        self.records = records
        self.nextCursor = nextCursor
    }
}

// The store's side of GroupResponse.Section (LarderWire), in the store's
// record type: the store does not speak the wire's.
/// One section of a GROUP answer: the key, how many records have it, and the first records (creation order).
public struct Group: Sendable, Equatable {
    /// The field's value; `null` for records where the field is missing or null.
    public var key: JSON
    public var count: Int
    public var records: [StoredRecord]
    public init(key: JSON, count: Int, records: [StoredRecord]) {
        self.key = key
        self.count = count
        self.records = records
    }
}

/// A collection and its document count.
public struct CollectionInfo: Sendable, Equatable {
    public var name: String
    public var count: Int
    public init(name: String, count: Int) {
        self.name = name
        self.count = count
    }
}

/// Totals for STATS.
public struct StoreStats: Sendable, Equatable {
    public var documents: Int
    public var blobs: Int
    /// The size of the database files (main file plus WAL).
    public var databaseBytes: Int64
    /// Changes the change log holds now.
    public var changes: Int
    /// The sequence number of the last committed change.
    public var lastChangeSeq: Int64
    /// The single writer's work since the store opened.
    public var writer = WriterStats()
}

/// What a store's single writer has done since the store opened: group commits, the writes in them, and the CPU time
/// its thread spent running them (statements, COMMIT, the checkpoints it runs itself, and handing out the outcomes).
/// `cpuMicros / writes` is the writer's CPU per write, the figure `scripts/bench-vs-redis` sets beside plain SQLite's.
public struct WriterStats: Sendable, Equatable {
    public var batches = 0
    public var writes = 0
    public var cpuMicros: Int64 = 0

    public init(batches: Int = 0, writes: Int = 0, cpuMicros: Int64 = 0) {
        self.batches = batches
        self.writes = writes
        self.cpuMicros = cpuMicros
    }
}

/// A document's data made ready for the writer: its compact JSON bytes (what the row stores and reads splice) and its
/// folded search text. Making one costs the encoding and the folding; doing that before `submitWrite`, on the
/// caller's thread, keeps that work off the single writer thread. The size limit is checked when it is written.
public struct PreparedDocument: Sendable, Equatable {
    /// The compact JSON of the object, exactly as `JSONObject.bytes` writes it.
    public let data: [UInt8]
    /// `TextFold.searchText` of the object, as UTF-8.
    let search: [UInt8]
    /// The object's `$owner` as the store's owner column holds it (`columnOwner`): the user whose record it is under
    /// an `owner` rule, kept in a column of its own so that a user's queries and point reads compare it without
    /// reading the JSON.
    let owner: String?

    /// The longest `$owner` the owner column holds, in UTF-8 bytes: an index entry must stay well under what
    /// PostgreSQL's B-tree takes (about 2.7 kB). A user id is an issuer and a subject of at most 255 characters.
    package static let maxColumnOwnerBytes = 1_024

    /// `owner` as the column holds it: a string of at most `maxColumnOwnerBytes` without NUL (which neither SQLite's
    /// `json_extract` nor PostgreSQL's text keeps whole), else nil. A `$owner` the column cannot hold is compared in
    /// the record's JSON, by the filters' rules; no user id is such a string.
    package static func columnOwner(_ owner: String?) -> String? {
        guard let owner, owner.utf8.count <= maxColumnOwnerBytes, !owner.utf8.contains(0) else { return nil }
        return owner
    }

    /// The record checked against its collection's schema before it reached the writer (`checkSchemaAhead`): the
    /// writer uses the outcome when the schema's version is still this one.
    var checked: (version: Int64, violations: [SchemaViolation])?

    public static func == (lhs: PreparedDocument, rhs: PreparedDocument) -> Bool {
        lhs.data == rhs.data && lhs.search == rhs.search && lhs.owner == rhs.owner
    }

    public init(_ object: JSONObject) {
        data = object.bytes
        search = TextFold.searchBytes(object)
        owner = PreparedDocument.columnOwner(object[ownerMember]?.stringValue)
    }

    /// The same, from a document read without a tree (`CompactJSON`).
    package init(_ document: CompactDocument) {
        data = document.bytes
        search = TextFold.fold(joined: document.strings, ascii: document.stringsAreASCII)
        owner = PreparedDocument.owner(of: document.bytes)
    }

    /// The search text of a stored record (compact JSON), as `search` is made when it is written; nil when `stored`
    /// is not a JSON object.
    package static func searchText(stored: [UInt8]) -> [UInt8]? {
        if let document = CompactJSON.object(stored) {
            return TextFold.fold(joined: document.strings, ascii: document.stringsAreASCII)
        }
        return (try? JSONParser.parseObject(stored)).map { TextFold.searchBytes($0) }
    }

    /// `owner` of compact JSON. Most documents hold no `$` at all, which one `memchr` tells without walking their
    /// members.
    private static func owner(of bytes: [UInt8]) -> String? {
        let dollar = bytes.withUnsafeBytes { raw in
            raw.baseAddress.flatMap { memchr($0, Int32(UInt8(ascii: "$")), raw.count) }
        }
        guard dollar != nil else {
            return nil
        }
        switch TopLevelMember.find("$owner", in: bytes) {
        case .string(let found)?: return columnOwner(found)
        case .absent?, .notAString?: return nil
        case nil: return columnOwner((try? JSONParser.parseObject(bytes))?[ownerMember]?.stringValue)
        }
    }

    /// The document `stored` (compact JSON, as the store keeps it) with the RFC 7396 merge patch `patch` applied:
    /// the same as `PreparedDocument(MergePatch.apply(patch, to: JSONParser.parseObject(stored)))`, which it falls
    /// back to only when `MergePatch.apply(_:toStored:)` cannot merge the bytes without the document's tree.
    package init(merging patch: JSONObject, into stored: [UInt8]) throws(LarderError) {
        if let merged = MergePatch.apply(patch, toStored: stored) {
            self.init(merged)
        } else {
            self.init(MergePatch.apply(patch, to: try JSONParser.parseObject(stored)))
        }
    }

    /// PAYLOAD_TOO_LARGE (details `limit`, as Protocol.md §5.5 lists) when the stored form passes `limit`; `field` is
    /// the request member the document came from (`data`, or `patch` for a patch's result).
    func checkSize(limit: Int, field: String) throws(LarderError) {
        guard data.count <= limit else {
            throw LarderError(
                .payloadTooLarge, "the document would be \(data.count) bytes stored; the limit is \(limit)",
                field: field, details: ["limit": .int(Int64(limit))])
        }
    }
}

extension WriteContext {
    /// Runs `create`: a store that keeps every key in its key table (`storeRequestKey`) needs nothing more.
    public func keyed(_ key: RequestKey, _ create: () throws(LarderError) -> StoredRecord) throws(LarderError)
        -> StoredRecord
    {
        try create()
    }

    /// Declares an expression index on a field path, its strings in byte order; `created` is false when it existed.
    public func createIndex(_ collection: String, field: FieldPath) throws(LarderError) -> (name: String, created: Bool) {
        try createIndex(collection, field: field, collation: nil, strength: nil)
    }
}

/// The write operations, available inside one group-commit transaction (see `DocumentStore.submitWrite`).
///
/// Each body of `submitWrite` runs inside its own SAVEPOINT: when it throws, only its own changes are rolled back. A
/// body of `submitSingleWrite` makes one document write, which changes nothing when it refuses.
public protocol WriteContext {
    /// Creates a document; CONFLICT when `id` exists, PAYLOAD_TOO_LARGE over the document limit.
    func create(_ collection: String, id: UUID?, data: JSONObject) throws(LarderError) -> StoredRecord
    /// `create` with the data prepared beforehand (off the writer thread).
    func create(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord
    /// Replaces `data`; CONFLICT (details `currentRev`) when `expectedRev` differs.
    func replace(_ collection: String, id: UUID, data: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    /// `replace` with the data prepared beforehand (off the writer thread).
    func replace(_ collection: String, id: UUID, document: PreparedDocument, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    /// Applies an RFC 7396 merge patch; CONFLICT (details `currentRev`) when `expectedRev` differs.
    func patch(_ collection: String, id: UUID, patch: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    /// Deletes a document and the blobs attached to it. Answers the deleted revision.
    func delete(_ collection: String, id: UUID, expectedRev: Int64?) throws(LarderError) -> (rev: Int64, blobsDeleted: Int)
    /// Drops a collection, its documents, indexes and attached blobs; NOT_FOUND when absent.
    func dropCollection(_ name: String) throws(LarderError) -> (documents: Int, blobs: Int)
    /// Sets `collection`'s schema (nil removes it) and what a record that does not match it does; answers the
    /// schema's new version. Writes later in the same transaction, and every write after its COMMIT, are checked
    /// against it.
    func setSchema(_ collection: String, schema: CollectionSchema?, action: SchemaValidationAction)
        throws(LarderError) -> Int64
    /// Declares an expression index on a field path, its strings ordered under the ICU collation `collation` at
    /// `strength` when given (INVALID_ARGUMENT naming `collation` for a locale ICU cannot collate by), so sorts
    /// under that collation use it; `created` is false when it existed.
    func createIndex(_ collection: String, field: FieldPath, collation: String?, strength: Int?) throws(LarderError)
        -> (name: String, created: Bool)
    /// Sets `collection`'s rules for users (RULES_SET).
    func setCollectionRules(_ collection: String, _ rules: CollectionRules) throws(LarderError)
    /// Validates the JPEG (UNSUPPORTED_MEDIA_TYPE), the size (PAYLOAD_TOO_LARGE), the expected SHA-256
    /// (INVALID_ARGUMENT when different), the attachment (NOT_FOUND when the document is missing), the id (CONFLICT).
    func blobPut(id: UUID?, bytes: [UInt8], expectedSHA256: String?, attachTo: BlobAttachment?) throws(LarderError)
        -> BlobInfo
    /// Deletes a blob (and its cached thumbnails); NOT_FOUND when absent.
    func blobDelete(_ id: UUID) throws(LarderError)
    /// Caches `thumbnail` (of blob `id` at `maxSide`) while the blob still holds the bytes whose SHA-256 is
    /// `sha256`; false when it no longer does, or the thumbnail was cached already. See `ThumbnailStore`.
    func thumbnailPut(_ id: UUID, sha256: String, maxSide: Int, thumbnail: StoredThumbnail) throws(LarderError) -> Bool
    /// The answer stored under `key` by a write that committed with it and has not expired
    /// (`StoreConfiguration.requestKeyRetentionMs`): then nothing is written. INVALID_ARGUMENT (field `requestKey`)
    /// when the key went with another request. Nil when the key is new: this transaction then holds it (on PostgreSQL
    /// a concurrent transaction claiming the same key waits for this one), and the write stores its answer with
    /// `storeRequestKey`; if the write throws instead, the key goes with it.
    func claimRequestKey(_ key: RequestKey) throws(LarderError) -> [UInt8]?
    /// Stores `answer` under a key `claimRequestKey` found new, in this transaction.
    func storeRequestKey(_ key: RequestKey, answer: [UInt8]) throws(LarderError)
    /// Runs `create`, the CREATE of a key `claimRequestKey` found new in this transaction, answered with the record
    /// it returns (`RequestKey.create`), before its `storeRequestKey`: only in that order. A store may keep the key
    /// in the record's own row instead (`RequestKey.rowMark`), and make the answer again from that row for a retry.
    func keyed(_ key: RequestKey, _ create: () throws(LarderError) -> StoredRecord) throws(LarderError) -> StoredRecord

    // Accounts Larder keeps (`StoredAccount`) and their sessions.

    /// Adds `account`; CONFLICT when its email is taken.
    func createAccount(_ account: StoredAccount) throws(LarderError)
    /// Replaces the password hash of account `id`; NOT_FOUND when it does not exist.
    func setPasswordHash(account id: String, _ hash: String) throws(LarderError)
    /// Disables or enables account `id`, deleting its sessions when disabling; NOT_FOUND when it does not exist.
    func setAccountDisabled(_ id: String, _ disabled: Bool) throws(LarderError) -> StoredAccount
    /// Deletes account `id` and its sessions, answering how many sessions went; NOT_FOUND when it does not exist.
    func deleteAccount(_ id: String) throws(LarderError) -> Int
    /// Adds a session of account `id`, known by `key` (the SHA-256 of its token), until `expiresAt` (milliseconds
    /// since 1970); the account's sessions that expired before `now` go.
    func createSession(key: [UInt8], account id: String, expiresAt: Int64, now: Int64) throws(LarderError)
    /// Deletes the session `key`; false when there was none.
    func deleteSession(key: [UInt8]) throws(LarderError) -> Bool
    /// Whether session `key` of account `id` is in force at `now` (the account enabled, the session not expired),
    /// holding the account's row and the session's until the transaction ends: a change that revokes the account's
    /// sessions (a password change, disabling, deletion) or this one (a sign-out) is ordered before or after this
    /// transaction, never inside it, so a session made here is either refused or revoked with the others.
    func lockSessionInForce(key: [UInt8], account id: String, now: Int64) throws(LarderError) -> Bool
    /// Deletes every session of account `id` but `keeping`, answering how many went.
    func deleteSessions(account id: String, keeping: [UInt8]?) throws(LarderError) -> Int
}

/// How far a server is behind a change log that other servers write too.
public struct FollowerLag: Sendable, Equatable {
    /// The newest change this server has applied (published to its subscribers and read cache).
    public var appliedSeq: Int64
    /// The newest change it knows was committed (its own writes, other servers' notifications).
    public var knownSeq: Int64
    /// Milliseconds since it first knew of a change it has not applied yet; 0 when it has applied all it knows of.
    public var ms: Int64

    /// A lag with these members.
    public init(appliedSeq: Int64, knownSeq: Int64, ms: Int64) {
        self.appliedSeq = appliedSeq
        self.knownSeq = knownSeq
        self.ms = ms
    }

    /// Changes known and not yet applied.
    public var changes: Int64 { max(0, knownSeq - appliedSeq) }
}

/// Documents: create, read, search and write JSON records in named collections.
///
/// Collection names match `^[A-Za-z][A-Za-z0-9_-]{0,63}$` (a letter, then up to 63 letters, digits, `_` or `-`);
/// anything else is INVALID_ARGUMENT with field `collection`. A collection exists from its first write until dropped.
public protocol DocumentStore: Sendable {
    /// NOT_FOUND when absent.
    func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord
    /// A burst of point reads (documents and blob metadata) for one thread; see `PointReads`.
    func pointReads() -> any PointReads
    /// Whether a point read is answered from this process's memory and files in microseconds, so that the server may
    /// answer GET and BLOB_HEAD on its event loops; false when each one waits on the network (PostgreSQL).
    var pointReadsAreLocal: Bool { get }
    /// Whether other processes may write the same data (PostgreSQL shared by several servers): this process then
    /// learns of their changes from the shared change log, some time after they commit (`followerLag`), so a copy it
    /// keeps is current only as far as it has applied that log.
    var isShared: Bool { get }
    /// Reads document `id` without holding the calling thread: `completion`, on any thread, gets the record (nil when
    /// absent) with a sequence number at or after the change that wrote it (`SequencedRead`). Errors that name the
    /// request (a bad collection name) are its own; a failed round trip fails every read it carried.
    func submitGet(
        _ collection: String, id: UUID, completion: @escaping @Sendable (Result<SequencedRead, LarderError>) -> Void)
    /// `submitGet` on the calling thread.
    func getSequenced(_ collection: String, id: UUID) throws(LarderError) -> SequencedRead
    /// The newest change this process's writes committed (they are answered after it): the sequence number a write's
    /// answer carries (Protocol.md section 5.1).
    var writtenSeq: Int64 { get }
    /// How far this server is behind the change log that other servers write too; nil for a store no other process
    /// writes.
    var followerLag: FollowerLag? { get }
    /// Found records in the order of `ids` (duplicates answered once), and the ids that do not exist.
    func getMany(_ collection: String, ids: [UUID]) throws(LarderError) -> (records: [StoredRecord], missing: [UUID])
    /// Records in creation order; `cursor` comes from a previous page's `nextCursor`.
    func list(_ collection: String, limit: Int, cursor: String?) throws(LarderError) -> Page
    /// Filter, text search, sort and keyset paging (see `SearchQuery`).
    func search(_ collection: String, _ query: SearchQuery) throws(LarderError) -> Page
    /// How many records match.
    func count(_ collection: String, filter: Filter?, text: TextQuery?) throws(LarderError) -> Int
    /// Sections by the value of `field` (ascending key order), each with its count and first `perGroup` records.
    func group(_ collection: String, field: FieldPath, filter: Filter?, text: TextQuery?, perGroup: Int)
        throws(LarderError) -> [Group]
    /// Every collection with its document count, by name.
    func collections() throws(LarderError) -> [CollectionInfo]
    /// `collection`'s schema as the store holds it now (read from the database, so a PostgreSQL store shared with
    /// other servers answers what any of them set); nil when none was ever set.
    func schema(_ collection: String) throws(LarderError) -> StoredSchema?
    /// The writes accepted in `warn` mode whose record did not match its collection's schema, by collection, since
    /// the store opened.
    var schemaWarnings: [String: Int] { get }
    /// Calls `listener` after the COMMIT of each write accepted in `warn` mode whose record did not match, with its
    /// collection, its id and its first violation (the server logs it).
    func setSchemaWarningListener(_ listener: @escaping @Sendable (String, UUID, SchemaViolation) -> Void)
    /// Checks `document` against `collection`'s schema as this server knows it, on the caller's thread (a work-pool
    /// thread, so that a slow `pattern` holds up neither the writer nor an event loop); the writer then only confirms
    /// the schema's version. Nothing to do for a collection without a schema.
    func checkSchemaAhead(_ collection: String, _ document: inout PreparedDocument)
    /// `collection`'s rules for users, as last committed; nil when it has none.
    func collectionRules(_ collection: String) throws(LarderError) -> CollectionRules?
    /// The account Larder keeps with `email` (lowercased) or, for a `larder|` id, that id; nil when none.
    func account(_ emailOrId: String) throws(LarderError) -> StoredAccount?
    /// Up to `limit` accounts by id, after the id `after`.
    func accounts(after: String?, limit: Int) throws(LarderError) -> [StoredAccount]
    /// The account whose session `key` (the SHA-256 of its token) is in force at `now` (milliseconds since 1970): the
    /// session exists, has not expired, and its account is not disabled; with the session's expiry. Nil otherwise.
    func sessionAccount(key: [UInt8], now: Int64) throws(LarderError) -> SessionInForce?
    /// The failed sign-ins of `key` (an email, an address) that every process sharing the database counted in the
    /// window that started at `start` and is still open at `now`; nil when none, and always on a store only this
    /// process uses (the server counts those itself).
    func sharedSignInFailures(_ key: String, now: Int64, window: Int64) throws(LarderError)
        -> (start: Int64, failures: Int)?
    /// Counts a failed sign-in of `key` where every process sharing the database sees it: in the open window, or in a
    /// new one from `now`. Nothing on a store only this process uses.
    func countSharedSignInFailure(_ key: String, now: Int64, window: Int64) throws(LarderError)
    /// Moves after the COMMIT of every write made through this process that takes access away or changes it: a
    /// session deleted (signed out, revoked), an account disabled or deleted, a collection's rules set. It moves before
    /// that write is answered, so a copy of a session or of rules read from the store when it had another value may be
    /// stale, and one read at this value is current as far as this process's writes go. Writes of other processes
    /// sharing the database (`isShared`) do not move it.
    var accessGeneration: UInt64 { get }
    func stats() throws(LarderError) -> StoreStats
    /// Moves the WAL into the main file (TRUNCATE); call on shutdown.
    func checkpoint() throws(LarderError)
    /// Closes every connection after pending writes finished. Later calls answer UNAVAILABLE.
    func close()

    /// Runs `body` inside the next group-commit transaction and calls `completion` (on the writer queue, so keep it
    /// short) after the COMMIT succeeded, or with the error. Lets the server avoid blocking a thread per write.
    func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void)

    /// `submitWrite` for a body that calls exactly one of the context's document writes (`create`, `replace`,
    /// `patch`, `delete`) and nothing else that writes. Each of these checks whatever it may refuse (revision, id taken,
    /// not found, size) before it changes a row, so a refusal leaves nothing to undo and a store may run the body
    /// without a savepoint of its own (SQLite's savepoint copies every page the write touches into a sub-journal).
    func submitSingleWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void)

    // What a store may lack, declared here rather than found by casting to a store type.

    /// The consistent one-file copies BACKUP streams; nil on a store that makes none (PostgreSQL, which pg_dump backs
    /// up).
    var snapshots: (any SnapshotStore)? { get }
    /// What the store's start-up found wrong and could not mend (blobs whose file is missing from the data
    /// directory), for the server to log; empty on a store that keeps no blob files.
    var startupWarnings: [String] { get }
    /// How the store commits, for the server's start-up line (PostgreSQL's `synchronous_commit`); nil when there is
    /// nothing to say beyond where the data is.
    var commitDescription: String? { get }

    // The change log (WATCH).

    /// The sequence number of the last committed change (0 before the first). It moves before the change listeners
    /// are called, so a reader of it who then listens misses nothing.
    var lastChangeSeq: Int64 { get }
    /// Calls `listener` on the writer queue after every COMMIT that logged changes, with those changes, in commit
    /// order, before the writes' completions. It must be quick and never block: every write waits for it.
    func addChangeListener(_ listener: @escaping @Sendable ([ChangeEntry]) -> Void)
    /// Up to `limit` changes after `seq` (of `collection`, or of all when nil), oldest first, stopping early once their
    /// documents pass `maxBytes`; with where the log stood in the same snapshot.
    func changes(after seq: Int64, collection: String?, limit: Int, maxBytes: Int) throws(LarderError) -> ChangePage
}

/// A session in force (`DocumentStore.sessionAccount`): its user and when it expires.
public struct SessionInForce: Sendable, Equatable {
    /// The account's id (`larder|<uuid>`).
    public var user: String
    /// When the session expires, in milliseconds since 1970.
    public var expiresAt: Int64

    /// A session in force; the store makes these.
    public init(user: String, expiresAt: Int64) {
        self.user = user
        self.expiresAt = expiresAt
    }
}

extension DocumentStore {
    public func submitGet(
        _ collection: String, id: UUID, completion: @escaping @Sendable (Result<SequencedRead, LarderError>) -> Void
    ) {
        completion(Result { () throws(LarderError) in try getSequenced(collection, id: id) })
    }

    public func getSequenced(_ collection: String, id: UUID) throws(LarderError) -> SequencedRead {
        let seq = lastChangeSeq
        do throws(LarderError) {
            return SequencedRead(record: try get(collection, id: id), seq: seq)
        } catch where error.status == .notFound {
            return SequencedRead(record: nil, seq: seq)
        }
    }

    public var writtenSeq: Int64 { lastChangeSeq }
    public var followerLag: FollowerLag? { nil }
    public var pointReadsAreLocal: Bool { true }
    public var isShared: Bool { false }
    public func sharedSignInFailures(_ key: String, now: Int64, window: Int64) throws(LarderError)
        -> (start: Int64, failures: Int)?
    {
        nil
    }
    public func countSharedSignInFailure(_ key: String, now: Int64, window: Int64) throws(LarderError) {}
    public var snapshots: (any SnapshotStore)? { nil }
    public var startupWarnings: [String] { [] }
    public var commitDescription: String? { nil }

    public func submitSingleWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) {
        submitWrite(body, completion: completion)
    }

    /// `submitWrite` as an async call: returns after COMMIT.
    public func write<T: Sendable>(_ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T)
        async throws(LarderError) -> T
    {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, LarderError>, Never>) in
            submitWrite(body) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }
}

/// JPEG blobs, optionally attached to a document, with their cached thumbnails (`ThumbnailStore`).
extension BlobStore {
    /// `uploadBegin` for one owner with no name: the store's own callers and tests, where a single client uploads.
    package func uploadBegin(_ request: BlobUploadRequest) throws(LarderError) -> BlobUploadInfo {
        try uploadBegin(request, owner: "")
    }

    /// `uploadFinish` without a request key.
    package func uploadFinish(_ upload: UUID, sha256: String?) throws(LarderError) -> BlobInfo {
        try uploadFinish(upload, sha256: sha256, requestKey: nil)
    }
}

package protocol BlobStore: ThumbnailStore, Sendable {
    func blobGet(_ id: UUID) throws(LarderError) -> (meta: BlobInfo, bytes: [UInt8])
    func blobHead(_ id: UUID) throws(LarderError) -> BlobInfo
    /// Blobs in creation order, optionally only those attached to one document.
    func blobList(limit: Int, cursor: String?, attachedTo: BlobAttachment?) throws(LarderError)
        -> (blobs: [BlobInfo], nextCursor: String?)

    /// `length` bytes of the blob from `offset`, fewer when the blob ends first; INVALID_ARGUMENT (field `offset`,
    /// details `size`) when `offset` is at or past its end. Reads only the chunks the range touches, whatever the
    /// blob's size.
    func blobRead(_ id: UUID, offset: Int64, length: Int) throws(LarderError) -> (meta: BlobInfo, bytes: [UInt8])
    /// `blobRead` for an answer: a range kept in a file comes back as that file, open, to be sent from the page cache
    /// without being read into memory (`BlobBody.file`); otherwise the bytes.
    func blobReadForSending(_ id: UUID, offset: Int64, length: Int) throws(LarderError)
        -> (meta: BlobInfo, body: BlobBody)
    /// Starts a resumable upload (`Uploads.swift`): checks the size, the id (CONFLICT), the attachment's document
    /// (NOT_FOUND) and the quotas (RESOURCE_EXHAUSTED) at once, so a client learns before sending any byte. `owner`
    /// names who holds the upload (a token's digest, or a connection) for its share of the quota, counted from the
    /// store, so servers sharing a database count alike.
    func uploadBegin(_ request: BlobUploadRequest, owner: String) throws(LarderError) -> BlobUploadInfo
    /// Commits a chunk at the upload's committed offset (CONFLICT with details `offset` otherwise), after checking
    /// its CRC-32 (INVALID_ARGUMENT, field `crc32`).
    func uploadChunk(_ upload: UUID, offset: Int64, bytes: [UInt8], crc32: UInt32) throws(LarderError)
        -> BlobUploadInfo
    func uploadStatus(_ upload: UUID) throws(LarderError) -> BlobUploadInfo
    /// Checks the whole SHA-256 and the JPEG structure of a complete upload and makes it a blob.
    /// With `requestKey`, the blob's answer is stored under the key in the transaction that makes the blob, or, when
    /// a FINISH with that key committed meanwhile, its stored answer is what this one answers.
    func uploadFinish(_ upload: UUID, sha256: String?, requestKey: RequestKey?) throws(LarderError) -> BlobInfo
    /// The answer a write stored under `key` when it committed and the key has not expired; nil when none did (this
    /// claims nothing). INVALID_ARGUMENT (field `requestKey`) when the key went with another request.
    func requestKeyAnswer(_ key: RequestKey) throws(LarderError) -> [UInt8]?
    func uploadAbort(_ upload: UUID) throws(LarderError)
    /// Drops the uploads whose time ran out, with their bytes; answers how many.
    func expireUploads() throws(LarderError) -> Int
}

/// Pieces of the record encoding, kept as byte constants.
enum RecordWriter {
    // Static strings, not arrays: appending them costs no reference counting and no lazy-global check.
    static let idPrefix: StaticString = #"{"id":""#
    static let revPrefix: StaticString = #"","rev":"#
    static let createdPrefix: StaticString = #","createdAt":""#
    static let updatedPrefix: StaticString = #"","updatedAt":""#
    static let dataPrefix: StaticString = #"","data":"#

    @inline(__always)
    static func append(_ text: StaticString, to out: inout [UInt8]) {
        text.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    static func writeUUID(_ id: UUID, into out: inout [UInt8]) { id.writeWire(into: &out) }

    /// A record's JSON (`StoredRecord.write(into:)`) from its parts, `data` spliced verbatim from wherever it lies
    /// (a database column on the point-read path, without an array of its own).
    static func write(
        id: UUID, rev: Int64, createdAt: Int64, updatedAt: Int64, data: UnsafeRawBufferPointer, into out: inout [UInt8]
    ) {
        out.reserveCapacity(out.count + data.count + 128)
        append(idPrefix, to: &out)
        writeUUID(id, into: &out)
        append(revPrefix, to: &out)
        JSONWriter.writeInt(rev, into: &out)
        append(createdPrefix, to: &out)
        Timestamp.write(createdAt, into: &out)
        append(updatedPrefix, to: &out)
        Timestamp.write(updatedAt, into: &out)
        append(dataPrefix, to: &out)
        out.append(contentsOf: data)
        out.append(UInt8(ascii: "}"))
    }
}

/// Where the store keeps its files and its limits.
public struct StoreConfiguration: Sendable {
    /// SQLite's `synchronous` setting. NORMAL (in WAL mode) survives a process crash; FULL also a power loss.
    public enum Synchronous: String, Sendable {
        case normal = "NORMAL"
        case full = "FULL"
    }

    public var dataDirectory: String
    public var synchronous: Synchronous
    public var maxDocumentBytes: Int
    public var maxBlobBytes: Int
    public var readerCount: Int
    /// Whether substring search of 3+ characters uses the trigram full-text index (results are identical either
    /// way; off is for tests and benchmarks). A store with it off neither reads nor maintains the index file, so it
    /// can be opened beside one that does.
    public var useTextIndex: Bool
    /// Whether filters and sorts on indexed fields are written so SQLite can use the expression index (results are
    /// identical either way; off is for tests and benchmarks).
    public var useFieldIndexes: Bool
    /// The most record bytes one answer (a LIST or SEARCH page, GET_MANY, GROUP) may carry, so that every answer fits
    /// the protocol's JSON limit: a page stops early (with a cursor), GROUP lists fewer records, GET_MANY is refused.
    public var maxPageBytes: Int
    /// The change log keeps the newest this many changes (WATCH `since` can replay them)...
    public var changeRetentionEvents: Int
    /// ...none older than this many milliseconds. The writer prunes as it commits.
    public var changeRetentionMs: Int64
    /// A write's request key is kept this many milliseconds after its commit (`RequestKey`); an older one is a new
    /// key. The writer prunes them with the change log (on SQLite a CREATE's key, kept in its record's row, is
    /// forgotten as the row's age passes this).
    public var requestKeyRetentionMs: Int64 = 86_400_000
    /// The trigram index is brought up to date once this many documents were written since it last was (and when
    /// the store closes); until then text search also checks those documents one by one. Larger: cheaper writes,
    /// text searches that check more documents. 1 brings it up to date at every commit. Results are identical either
    /// way.
    public var fullTextBacklog: Int
    /// Writes wait for the trigram index's thread while its backlog holds more than this many documents (each one a
    /// text search checks one by one): under writes faster than the index can follow, the writer slows to its pace
    /// instead of text search slowing without bound.
    public var fullTextBacklogLimit: Int
    /// How long a write waits for the trigram index's thread past `fullTextBacklogLimit` before it goes on without a
    /// pass (a pass that is late never holds writes up for longer).
    public var fullTextWriterWaitLimit: Duration = .seconds(1)
    /// Called on a search-path reader (the pool behind search, list, count, group and the other reads on the work
    /// pool) each time one is borrowed, before it reads. For tests (package access, not API): holding it here keeps
    /// that reader busy, which is how a test shows that the event loops' point reads never wait for one.
    package var readerHook: (@Sendable () -> Void)?
    /// The bounds of collection schemas (`Limits.schema`): the step bound of `pattern` matches applies to the schemas
    /// the store reads back from its database.
    public var schemaLimits = SchemaLimits.default
    /// The most bytes one chunk of a resumable upload carries (`Limits.blobChunkBytes`).
    public var blobChunkBytes: Int = 1 << 20
    /// An upload is dropped, with its bytes, this many milliseconds after its last chunk.
    public var uploadExpiryMs: Int64 = 86_400_000
    /// The declared sizes of all unfinished uploads together may not pass this.
    public var maxUploadBytes: Int64 = 1 << 30
    /// Unfinished uploads one owner (`uploadBegin`'s: a token, or a connection) may hold at once...
    public var maxUploadsPerOwner: Int64 = 64
    /// ...and the most their declared sizes may add up to.
    public var maxUploadBytesPerOwner: Int64 = 1 << 28
    /// Milliseconds since the epoch, for upload expiry; tests inject a clock they move by hand.
    public var clock: @Sendable () -> Int64 = { nowMillis() }

    // A memberwise initializer with
    // defaults, the store's counterpart of the wire's `Limits.init` (LarderWire): each module owns its limits.
    public init(
        dataDirectory: String = "./larder-data", synchronous: Synchronous = .normal,
        maxDocumentBytes: Int = 1 << 20, maxBlobBytes: Int = 256 << 20, readerCount: Int = 4,
        useTextIndex: Bool = true, useFieldIndexes: Bool = true, maxPageBytes: Int = 4 << 20,
        changeRetentionEvents: Int = 100_000, changeRetentionMs: Int64 = 86_400_000, fullTextBacklog: Int = 256,
        fullTextBacklogLimit: Int = 32_768
    ) {
        self.fullTextBacklog = fullTextBacklog
        self.fullTextBacklogLimit = fullTextBacklogLimit
        self.changeRetentionEvents = changeRetentionEvents
        self.changeRetentionMs = changeRetentionMs
        self.maxPageBytes = maxPageBytes
        self.dataDirectory = dataDirectory
        self.synchronous = synchronous
        self.maxDocumentBytes = maxDocumentBytes
        self.maxBlobBytes = maxBlobBytes
        self.readerCount = readerCount
        self.useTextIndex = useTextIndex
        self.useFieldIndexes = useFieldIndexes
    }
}
