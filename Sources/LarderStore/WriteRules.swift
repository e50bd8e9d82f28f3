import Foundation
import LarderWire

/// The refusals and names both stores' writes answer the same (SQLite's `SQLiteWriteContext`, PostgreSQL's
/// `PGWriteContext`), so that a client cannot tell the stores apart by them.
package enum WriteRules {
    /// CONFLICT for a create whose id the collection already holds.
    static func idTaken(_ id: UUID, in collection: String) -> LarderError {
        LarderError(
            .conflict, "a document with id \(id.wireString) already exists in '\(collection)'; "
                + "use REPLACE or PATCH to change it", field: "id")
    }

    /// CONFLICT for a write that expected revision `expected` of a document now at `current`.
    static func revisionConflict(current: Int64, expected: Int64) -> LarderError {
        LarderError(
            .conflict, "the document is at revision \(current), not \(expected); read it again and retry",
            field: "rev", details: ["currentRev": .int(current)])
    }

    /// CONFLICT for a blob whose id is taken.
    static func blobIdTaken(_ id: UUID) -> LarderError {
        LarderError(.conflict, "a blob with id \(id.wireString) already exists", field: "id")
    }

    /// The name INDEX answers for `field` of `collection`, once both are checked: a valid collection name, a data
    /// field (envelope fields need no index).
    static func indexName(_ collection: String, _ field: FieldPath) throws(LarderError) -> String {
        try CollectionName.validate(collection)
        guard field.envelope == nil else {
            throw LarderError(
                .invalidArgument, "indexes are declared on data fields; envelope fields need none", field: "field")
        }
        return "ix_\(collection)_" + String(SHA256.hex(Array(field.description.utf8)).prefix(16))
    }
}
