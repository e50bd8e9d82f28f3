import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// A backend whose state shared by its writer and readers is a `StoreCore`: the `DocumentStore` members that state
/// answers alone, the same on SQLite and on PostgreSQL.
protocol CoreBackedStore: DocumentStore {
    var core: StoreCore { get }
}

extension CoreBackedStore {
    public var accessGeneration: UInt64 { core.access.load(ordering: .acquiring) }

    public var schemaWarnings: [String: Int] { core.schemas.warningCounts }

    public func setSchemaWarningListener(_ listener: @escaping @Sendable (String, UUID, SchemaViolation) -> Void) {
        core.schemas.setWarningListener(listener)
    }

    public func checkSchemaAhead(_ collection: String, _ document: inout PreparedDocument) {
        core.checkSchemaAhead(collection, &document)
    }
}

/// State shared by the writer, the readers and the write contexts: configuration, the schema features found at open,
/// and which field paths have expression indexes.
final class StoreCore: @unchecked Sendable {
    let configuration: StoreConfiguration
    let databasePath: String
    /// Whether this SQLite has FTS5 with the trigram tokenizer (3.34+ built with FTS5).
    let hasTrigram: Bool
    /// The last committed change and the listeners told of new ones.
    let feed: ChangeFeedState
    /// Transactions the writer committed: a read snapshot taken when this had some value sees every write
    /// acknowledged before then (`PointReads` keeps a snapshot while it is unchanged).
    let commits = Atomic<UInt64>(0)
    /// The SQLite store's upload and blob files (`BlobFiles`); nil on PostgreSQL, which keeps its chunks in rows.
    let blobFiles: BlobFiles?
    /// The collections' compiled schemas.
    let schemas = SchemaCatalog()
    /// Moves after the COMMIT of every write through this process that narrows who may do what (`accessGeneration`).
    let access = Atomic<UInt64>(0)

    /// Called after such a COMMIT, before its write is answered.
    func accessChanged() { access.add(1, ordering: .releasing) }

    /// The oldest time (milliseconds since 1970) a request key may have been stored at `now` and still answer
    /// (`StoreConfiguration.requestKeyRetentionMs`).
    func oldestLiveRequestKey(now: Int64 = nowMillis()) -> Int64 { now - configuration.requestKeyRetentionMs }
    private let lock = Lock()
    private var indexed: Set<String> = []

    init(
        configuration: StoreConfiguration, databasePath: String, hasTrigram: Bool, lastChangeSeq: Int64,
        blobFiles: BlobFiles? = nil
    ) {
        self.configuration = configuration
        self.blobFiles = blobFiles
        self.databasePath = databasePath
        self.hasTrigram = hasTrigram
        self.feed = ChangeFeedState(lastSeq: lastChangeSeq)
    }

    private static func key(_ collection: String, _ path: FieldPath) -> String { collection + "\u{0}" + path.description }

    func isIndexed(_ collection: String, _ path: FieldPath) -> Bool {
        guard configuration.useFieldIndexes else { return false }
        let key = StoreCore.key(collection, path)
        return lock.withLock { indexed.contains(key) }
    }

    func setIndexed(_ collection: String, _ path: FieldPath) {
        let key = StoreCore.key(collection, path)
        _ = lock.withLock { indexed.insert(key) }
    }

    func loadIndexes(_ pairs: [(String, String)]) {
        lock.withLock {
            // A collated index (`Collation.indexPath`) makes its field's path indexed too: searches then write the
            // path as the literal its expression holds.
            for (collection, path) in pairs { indexed.insert(collection + "\u{0}" + Collation.indexedField(path).path) }
        }
    }

    func dropIndexes(of collection: String) {
        lock.withLock { indexed = indexed.filter { !$0.hasPrefix(collection + "\u{0}") } }
    }
}
