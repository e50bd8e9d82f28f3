import Foundation
import LarderSchema
import LarderSync
import LarderWire
import Synchronization

/// One collection's schema as writes are checked against it: its version (every SCHEMA_SET of the collection, a
/// removal included, takes the next number), the compiled schema (nil once removed) and what a mismatch does.
public struct SchemaEntry: Sendable {
    public var version: Int64
    public var schema: CollectionSchema?
    public var action: SchemaValidationAction

    public init(version: Int64, schema: CollectionSchema?, action: SchemaValidationAction) {
        self.version = version
        self.schema = schema
        self.action = action
    }
}

/// A collection's schema as SCHEMA_GET answers it, read from the store.
public struct StoredSchema: Sendable, Equatable {
    public var version: Int64
    /// The schema object as it was set, annotations included; nil when the collection has none.
    public var schema: JSONObject?
    public var action: SchemaValidationAction
}

/// The compiled schemas of the collections that have one (each compiled once, when set or when the store opened),
/// and the count of writes accepted in `warn` mode. On SQLite the writer is the only one to change schemas, so this
/// is the truth; on PostgreSQL another server may change one, and every batch checks the versions it used before it
/// commits (`PGWriter`), loading them again when one moved.
final class SchemaCatalog: @unchecked Sendable {
    private let lock = Lock()
    private var entries: [String: SchemaEntry] = [:]
    /// Writes accepted in `warn` mode that did not match, by collection.
    private var warnings: [String: Int] = [:]
    /// Called after the commit of each such write.
    private var warningListener: (@Sendable (String, UUID, SchemaViolation) -> Void)?

    /// The schema entry of `collection`; nil when none was ever set.
    func entry(_ collection: String) -> SchemaEntry? { lock.withLock { entries[collection] } }

    /// Records a committed SCHEMA_SET.
    func set(_ collection: String, _ entry: SchemaEntry) { lock.withLock { entries[collection] = entry } }

    /// Replaces every entry with what the database holds.
    func replaceAll(_ fresh: [String: SchemaEntry]) { lock.withLock { entries = fresh } }

    /// Counts (and tells the listener of) a write accepted in `warn` mode whose record did not match.
    func warned(_ collection: String, _ id: UUID, _ violation: SchemaViolation) {
        let listener = lock.withLock {
            warnings[collection, default: 0] += 1
            return warningListener
        }
        listener?(collection, id, violation)
    }

    /// The writes accepted in `warn` mode that did not match, by collection, since the store opened.
    var warningCounts: [String: Int] { lock.withLock { warnings } }

    func setWarningListener(_ listener: @escaping @Sendable (String, UUID, SchemaViolation) -> Void) {
        lock.withLock { warningListener = listener }
    }

    /// The entries of rows read from a `larder_schemas` table: (collection, version, schema JSON text or nil,
    /// action). A stored schema is one this store compiled when it was set, so it is compiled again with the bounds
    /// of `limits` lifted (`SchemaLimits.lifted`) and its matching step bound kept; one that no longer compiles (set
    /// by a newer server) checks nothing here rather than stopping the store.
    static func entries(_ rows: [(String, Int64, [UInt8]?, String)], limits: SchemaLimits) -> [String: SchemaEntry] {
        var entries: [String: SchemaEntry] = [:]
        for (collection, version, text, action) in rows {
            let schema = text.flatMap { try? JSONParser.parse($0) }.flatMap { try? CollectionSchema(json: $0, limits: limits.lifted) }
            entries[collection] = SchemaEntry(
                version: version, schema: schema, action: SchemaValidationAction(rawValue: action) ?? .error)
        }
        return entries
    }

    /// The SQL both stores read the table with.
    static let selectAll = "SELECT collection, version, schema, action FROM larder_schemas"
}

extension StoreCore {
    /// `DocumentStore.checkSchemaAhead` for both stores.
    func checkSchemaAhead(_ collection: String, _ document: inout PreparedDocument) {
        guard let entry = schemas.entry(collection), let schema = entry.schema else { return }
        document.checked = (entry.version, schema.validate(document.data))
    }
}

/// The refusals and checks of schemas both stores' writes share.
enum SchemaRules {
    /// INVALID_ARGUMENT for a record of `collection` that does not match its schema: the first violation in the
    /// message, all of them (at most 20) in `violations`. `field` is the request member the record came from.
    static func refusal(_ collection: String, _ violations: [SchemaViolation], field: String) -> LarderError {
        let more = violations.count > 1 ? " (and \(violations.count - 1) more in violations)" : ""
        return LarderError(
            .invalidArgument,
            "the record does not match the schema of '\(collection)': \(violations[0])\(more); "
                + "change the record, or the schema with SCHEMA_SET",
            field: field, details: ["violations": .array(violations.map(\.json))])
    }
}

extension PreparedWriteContext {
    /// Checks `document` against `collection`'s schema (reusing the outcome of `checkSchemaAhead` when it was of this
    /// version). Throws the refusal in `error` mode; answers the first violation
    /// in `warn` mode (for `warned` once the write is done); nil when the record matches or there is no schema.
    func checkSchema(_ collection: String, _ document: PreparedDocument, field: String) throws(LarderError)
        -> SchemaViolation?
    {
        guard let entry = schemaEntry(collection), let schema = entry.schema else { return nil }
        let violations =
            document.checked.flatMap { $0.version == entry.version ? $0.violations : nil }
            ?? schema.validate(document.data)
        guard let first = violations.first else { return nil }
        if entry.action == .warn { return first }
        throw SchemaRules.refusal(collection, violations, field: field)
    }

    /// Counts a write accepted in `warn` mode that did not match, once its transaction committed.
    func warned(_ collection: String, _ id: UUID, _ violation: SchemaViolation?) {
        guard let violation else { return }
        let schemas = core.schemas
        afterCommit.append { schemas.warned(collection, id, violation) }
    }

    /// The schema JSON text and action stored for a SCHEMA_SET.
    static func schemaText(_ schema: CollectionSchema?) -> [UInt8]? { schema.map { $0.json.bytes } }
}
