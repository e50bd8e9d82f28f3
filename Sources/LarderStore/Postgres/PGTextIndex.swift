import Dispatch
import Foundation
import LarderSync
import LarderWire

/// The pg_trgm indexes behind substring search, one per collection: a partial GIN index on `documents.search` made
/// the first time a substring search of three characters or more asks for its collection, in the background, with
/// `CREATE INDEX CONCURRENTLY` (writes and searches go on meanwhile; searches stay exact either way, since `strpos`
/// decides and the index only narrows). So, as on SQLite, a collection nobody searches that way costs its writes
/// nothing: a trigram GIN index roughly doubles PostgreSQL's CPU per write (BENCHMARKS.md). Collections covered are
/// listed in `text_collections`; a collection dropped loses its index with it (`PGWriteContext.dropCollection`).
final class PGTextIndexer: @unchecked Sendable {
    private let connector: PGConnector
    private let queue = DispatchQueue(label: "larder.store.pg-text-index", qos: .utility)
    private let lock = Lock()
    private var covered: Set<String> = []  // under `lock`
    private var requested: Set<String> = []  // under `lock`
    /// When each covered collection was last found covered in the database (uptime ns): another server sharing the
    /// database may have dropped the collection, and its index with it, since.
    private var verifiedAt: [String: UInt64] = [:]  // under `lock`
    /// How long a collection counts as covered before the next search checks again.
    static let reverifyNs: UInt64 = 60_000_000_000
    private var closed = false  // under `lock`
    private var connection: PGConnection?  // only on `queue`
    /// The schema of pg_trgm, as a quoted identifier.
    let trgmSchema: String

    init(connector: PGConnector, connection: PGConnection) throws(LarderError) {
        self.connector = connector
        let rows = try connection.run([
            PGStatement("SELECT name FROM text_collections"),
            PGStatement(
                "SELECT c.relname FROM pg_class c WHERE c.relkind = 'i' AND c.relname LIKE 'tx\\_%' "
                    + "AND c.relnamespace = current_schema()::regnamespace"),
            PGStatement(
                "SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                    + "WHERE e.extname = 'pg_trgm'"),
        ])
        covered = Set((0..<rows[0].rows).map { rows[0].text($0, 0) })
        guard rows[2].rows == 1 else { throw LarderError(.internal, "\(connection.label): pg_trgm is missing") }
        trgmSchema = rows[2].text(0, 0)
        // Indexes of collections dropped while their index could not be (a build under way, a crash).
        let wanted = Set(covered.map(PGTextIndexer.indexName))
        let stale = (0..<rows[1].rows).map { rows[1].text($0, 0) }.filter { !wanted.contains($0) }
        if !stale.isEmpty { queue.async { [self] in dropIndexes(stale) } }
    }

    /// The index's name: a hash of the collection (a name of at most 63 bytes with no collection text in it).
    static func indexName(_ collection: String) -> String {
        "tx_" + String(SHA256.hex(Array(collection.utf8)).prefix(32))
    }

    /// Called by every substring search of three characters or more: asks for the collection's index once (and
    /// checks again once a minute that it still exists: another server may have dropped the collection).
    func ensure(_ collection: String) {
        let now = DispatchTime.now().uptimeNanoseconds
        let start: Bool = lock.withLock {
            guard !closed, !requested.contains(collection) else { return false }
            if covered.contains(collection), now &- (verifiedAt[collection] ?? 0) < PGTextIndexer.reverifyNs {
                return false
            }
            requested.insert(collection)
            return true
        }
        guard start else { return }
        queue.async { [self] in
            let made = build(collection)
            lock.withLock {
                requested.remove(collection)
                if made {
                    covered.insert(collection)
                    verifiedAt[collection] = DispatchTime.now().uptimeNanoseconds
                } else {
                    covered.remove(collection)
                }
            }
        }
    }

    /// A collection was dropped (its `text_collections` row with it): its index goes, after any build under way (a
    /// concurrent DROP fails), and a later search asks again.
    func drop(_ collection: String) {
        _ = lock.withLock { covered.remove(collection) }
        queue.async { [self] in dropIndexes([PGTextIndexer.indexName(collection)]) }
    }

    /// Drops indexes (on `queue`); one that cannot be dropped now is left to the next start (`init` drops trigram
    /// indexes of collections no longer covered).
    private func dropIndexes(_ names: [String]) {
        guard let connection = usableConnection() else { return }
        for name in names {
            try? connection.execute("DROP INDEX CONCURRENTLY IF EXISTS \(PGSQL.identifier(name))")
        }
    }

    private func usableConnection() -> PGConnection? {
        if connection?.isUsable != true {
            guard case .success(let fresh) = connector.connect() else { return nil }
            connection = fresh
        }
        return connection
    }

    func isCovered(_ collection: String) -> Bool { lock.withLock { covered.contains(collection) } }

    /// Builds the index (on `queue`) unless the collection is covered already: an invalid one left by an interrupted
    /// build is dropped first. Servers sharing the database take turns on an advisory lock, so none drops another's
    /// build under way (an index is invalid while it is built). False when the database refused; the next search asks
    /// again.
    private func build(_ collection: String) -> Bool {
        guard let connection = usableConnection(), !lock.withLock({ closed }) else { return false }
        let name = PGTextIndexer.indexName(collection)
        let lockKey = PGValue.text("larder-trgm " + name)
        do throws(LarderError) {
            _ = try connection.run([PGStatement("SELECT pg_advisory_lock(hashtext($1))", [lockKey])])
        } catch {
            return false
        }
        defer { _ = try? connection.run([PGStatement("SELECT pg_advisory_unlock(hashtext($1))", [lockKey])]) }
        do throws(LarderError) {
            let covered = try connection.run([
                PGStatement(
                    "SELECT 1 FROM text_collections t JOIN pg_class c ON c.relname = $2 "
                        + "AND c.relnamespace = current_schema()::regnamespace JOIN pg_index i ON i.indexrelid = c.oid "
                        + "WHERE t.name = $1 AND i.indisvalid", [.text(collection), .text(name)])
            ])[0]
            if covered.rows > 0 { return true }
            let invalid = try connection.run([
                PGStatement(
                    "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                        + "WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace "
                        + "AND NOT i.indisvalid",
                    [.text(name)])
            ])[0]
            if invalid.rows > 0 {
                try connection.execute("DROP INDEX CONCURRENTLY IF EXISTS \(PGSQL.identifier(name))")
            }
            try connection.execute(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS \(PGSQL.identifier(name)) ON documents USING gin "
                    + "(search \(trgmSchema).gin_trgm_ops) WHERE \(PGBuilder(collection: collection).collectionTest)")
            _ = try connection.run([
                PGStatement(
                    "INSERT INTO text_collections(name) VALUES ($1) ON CONFLICT (name) DO NOTHING", [.text(collection)])
            ])
            return true
        } catch {
            return false
        }
    }

    /// Waits for a build under way (tests) and stops asking for new ones.
    func close() {
        lock.withLock { closed = true }
        queue.sync {
            connection?.close()
            connection = nil
        }
    }

    /// Waits until the builds asked for so far are done (tests).
    func settle() { queue.sync {} }
}
