import Foundation
import LarderWire

/// The refusals and names both stores' writes answer the same (SQLite's `SQLiteWriteContext`, PostgreSQL's
/// `PGWriteContext`), so that a client cannot tell the stores apart by them.
enum WriteRules {
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
        try SQLiteStore.validateCollection(collection)
        guard field.envelope == nil else {
            throw LarderError(
                .invalidArgument, "indexes are declared on data fields; envelope fields need none", field: "field")
        }
        return "ix_\(collection)_" + String(SHA256.hex(Array(field.description.utf8)).prefix(16))
    }
}

extension PreparedWriteContext {
    /// Runs one write job's body as both stores' writers do. A closed store answers why; a body that throws has its
    /// writes undone (`undo`: to the job's savepoint on SQLite, by the batch's rollback on PostgreSQL) and its log
    /// entries taken back, for they never happened. The returned delivery is called with the COMMIT's outcome.
    func runJob<T>(
        _ body: (any WriteContext) throws(LarderError) -> T, begin: () throws(LarderError) -> Void,
        end: () throws(LarderError) -> Void = {}, undo: () -> Void,
        completion: @escaping @Sendable (Result<T, LarderError>) -> Void
    ) -> (LarderError?) -> Void {
        let result: Result<T, LarderError>
        if let closedError {
            result = .failure(closedError)
        } else {
            let logged = changes.count
            do throws(LarderError) {
                try begin()
                let value = try body(self)
                try end()
                result = .success(value)
            } catch {
                undo()
                changes.removeSubrange(logged...)
                result = .failure(error)
            }
        }
        return { commitError in completion(commitError.map { .failure($0) } ?? result) }
    }
}
