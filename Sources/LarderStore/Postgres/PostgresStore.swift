import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// The PostgreSQL implementation of `DocumentStore` and `BlobStore`: the same answers as `SQLiteStore`, operation by
/// operation (the conformance and differential tests hold both to that), on a database that many servers can share.
///
/// Tables (`PGSchema`): `documents` keeps each document's compact text in `data` (what reads return, byte for byte),
/// a jsonb copy in `q` for filters and sorts (`PGField`, `PGBuilder`), and the folded text of its strings in `search`
/// (pg_trgm GIN index); `blobs` keeps the JPEG bytes (bytea, stored uncompressed) with their metadata; `changes` is
/// the change log, numbered from the one row of `larder_seq` (see `PGWriter`). Collection names and field paths reach
/// SQL text only validated and quoted; every client value is a parameter.
///
/// Threading: every method is synchronous and callable from any thread. Writes go to one writer connection with group
/// commit (`PGWriter`); reads borrow a connection from a small pool. Each call waits on the network, so the server
/// runs none of them on an event loop (`pointReadsAreLocal` is false). When PostgreSQL is unreachable, calls answer
/// UNAVAILABLE naming the database; connections are made again on later calls, so the store recovers by itself.
public final class PostgresStore: GroupCommitStore, CoreBackedStore, @unchecked Sendable {
    let core: StoreCore
    let connector: PGConnector
    let writer: PGWriter
    let readers: PGPool
    /// GETs waiting at the same moment go out in one round trip (`PGPointReadBatcher`).
    let pointReadBatcher: PGPointReadBatcher
    let textIndexer: PGTextIndexer
    let follower: PGChangeFollower
    /// The ICU collations searches have made in the database.
    let collations = PGCollations()
    public let settings: PGSettings
    /// The writer's `synchronous_commit` (`--synchronous full` makes it `on`), for the start-up line.
    public let synchronousCommit: String

    /// The writer's `synchronous_commit`, for the start-up line.
    public var commitDescription: String? { "synchronous_commit \(synchronousCommit)" }

    /// Connects, migrates the schema (under an advisory lock) and loads what the writer needs. Throws UNAVAILABLE
    /// when the database cannot be reached (wrong password, unreachable host), INTERNAL when it cannot be used (a
    /// newer schema, no pg_trgm and no right to create it).
    public init(
        settings: PGSettings, configuration: StoreConfiguration = StoreConfiguration(), timeoutMs: Int = 20_000
    ) throws(LarderError) {
        self.settings = settings
        // `full` asks every commit to wait for its WAL flush whatever the database or role says; `normal` keeps the
        // database's own setting (PostgreSQL's default, `on`, already waits).
        let session = configuration.synchronous == .full ? [PGStatement("SET synchronous_commit TO on")] : []
        let connector = PGConnector(settings: settings, timeoutMs: timeoutMs, session: session)
        self.connector = connector
        let connection = try connector.open()
        try PGSchema.migrate(connection)
        synchronousCommit = try connection.run([PGStatement("SHOW synchronous_commit")])[0].text(0, 0)
        let last = try connection.run([PGStatement("SELECT last FROM larder_seq WHERE id = 1")])[0]
        let core = StoreCore(
            configuration: configuration, databasePath: "", hasTrigram: true, lastChangeSeq: last.int(0, 0))
        self.core = core
        do {
            try PGWriter.loadSchemas(core, connection)
        } catch {
            throw LarderError(.unavailable, "\(connection.label): the collections' schemas could not be read: \(error)")
        }
        textIndexer = try PGTextIndexer(connector: connector, connection: connection)
        follower = try PGChangeFollower(core: core, connector: connector)
        writer = PGWriter(
            core: core, connector: connector, connection: connection, textIndexer: textIndexer, follower: follower)
        readers = PGPool(connector: connector, size: max(2, configuration.readerCount))
        pointReadBatcher = PGPointReadBatcher(readers: readers, threads: 2)
    }

    /// `init(settings:)` from a URI or conninfo string.
    public convenience init(
        url: String, configuration: StoreConfiguration = StoreConfiguration(), timeoutMs: Int = 20_000
    ) throws(LarderError) {
        try self.init(settings: try PGSettings(url: url), configuration: configuration, timeoutMs: timeoutMs)
    }

    deinit { close() }

    public var configuration: StoreConfiguration { core.configuration }

    /// Point reads wait on the network: the server answers them off its event loops.
    public var pointReadsAreLocal: Bool { false }

    /// Many servers may share the database (OPERATING.md, "Scaling out").
    public var isShared: Bool { true }

    // MARK: Writes

    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) {
        let job = PGWriter.Job { context in
            context.runJob(body, begin: context.beginJob, undo: context.jobFailed, completion: completion)
        }
        if !writer.enqueue(job) { completion(.failure(LarderError(.unavailable, "the store is closed"))) }
    }

    package var isOnWriterQueue: Bool { writer.isOnQueue }

    /// Nothing to do: PostgreSQL checkpoints itself. Answers whether the writer's connection works.
    public func checkpoint() throws(LarderError) {}

    public func close() {
        textIndexer.close()
        writer.close()
        follower.close()
        pointReadBatcher.close()
        readers.close()
        // Nothing commits through this store any more; a listener holding it would keep it alive.
        core.feed.removeAllListeners()
    }

    // MARK: The change log

    public var lastChangeSeq: Int64 { core.feed.lastSeq }

    /// The newest change this server's writer committed: ahead of `lastChangeSeq` only while changes other servers
    /// committed before it are still being read from the log.
    public var writtenSeq: Int64 { writer.writtenSeq }

    public var followerLag: FollowerLag? { follower.lag() }

    /// Testing only: the follower calls `hold` before each read of the log, so that a test can stop it there.
    package func holdFollower(_ hold: @escaping @Sendable () -> Void) { follower.setHold(hold) }

    public func addChangeListener(_ listener: @escaping @Sendable ([ChangeEntry]) -> Void) { core.feed.add(listener) }

    public func changes(after seq: Int64, collection: String?, limit: Int, maxBytes: Int) throws(LarderError)
        -> ChangePage
    {
        if let collection { try CollectionName.validate(collection) }
        return try readers.read { db throws(LarderError) in
            try PostgresStore.changesPage(db, after: seq, collection: collection, limit: limit, maxBytes: maxBytes)
        }
    }

    /// One statement, one snapshot: the page and where the log stood (`larder_seq`).
    static func changesPage(_ db: PGConnection, after seq: Int64, collection: String?, limit: Int, maxBytes: Int)
        throws(LarderError) -> ChangePage
    {
        let limit = max(1, limit)
        let filter = collection == nil ? "" : " AND collection = $3"
        var values: [PGValue] = [.int(seq), .int(Int64(limit) + 1)]
        if let collection { values.append(.text(collection)) }
        let result = try db.run([
            PGStatement(
                """
                SELECT s.last, s.pruned_through, c.seq, c.collection, c.kind, c.time, c.id, c.rev, c.created_at,
                    c.updated_at, c.data, c.blob, c.previous
                FROM larder_seq s LEFT JOIN LATERAL (SELECT * FROM changes WHERE seq > $1\(filter)
                    ORDER BY seq LIMIT $2) c ON true
                WHERE s.id = 1 ORDER BY c.seq
                """, values, name: collection == nil ? "changes_all" : "changes_one")
        ])[0]
        guard result.rows > 0 else { return ChangePage(entries: [], more: false, lastSeq: 0, prunedThrough: 0) }
        var entries: [ChangeEntry] = []
        var bytes = 0
        var more = false
        for row in 0..<result.rows where !result.isNull(row, 2) {
            if entries.count >= limit || (!entries.isEmpty && bytes >= maxBytes) {
                more = true
                break
            }
            var record: StoredRecord?
            if !result.isNull(row, 6) {
                record = StoredRecord(
                    id: result.uuid(row, 6), rev: result.int(row, 7), createdAt: result.int(row, 8),
                    updatedAt: result.int(row, 9), data: result.bytes(row, 10))
            }
            var blob: BlobInfo?
            if !result.isNull(row, 11) { blob = try? BlobInfo(json: JSONParser.parseObject(result.bytes(row, 11))) }
            let entry = ChangeEntry(
                seq: result.int(row, 2), kind: ChangeKind(rawValue: result.text(row, 4)),
                collection: result.text(row, 3), time: result.int(row, 5), record: record, blob: blob,
                previous: result.isNull(row, 12) ? nil : result.bytes(row, 12))
            bytes += (entry.record?.data.count ?? 0) + (entry.previous?.count ?? 0) + 256
            entries.append(entry)
        }
        return ChangePage(entries: entries, more: more, lastSeq: result.int(0, 0), prunedThrough: result.int(0, 1))
    }
}
