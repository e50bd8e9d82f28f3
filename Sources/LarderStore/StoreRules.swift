import Foundation
import LarderWire

/// The checks and refusals both stores' reads and writes answer alike (SQLite's and PostgreSQL's), so that a client
/// cannot tell the stores apart by them. The write-only ones are `WriteRules`.
package enum StoreRules {
    /// The most sections GROUP answers.
    static let maxGroups = 1000

    /// INVALID_ARGUMENT unless a page's `limit` is from 1 to `SearchQuery.maxLimit`.
    static func checkLimit(_ limit: Int) throws(LarderError) {
        guard limit >= 1 && limit <= SearchQuery.maxLimit else {
            throw LarderError(.invalidArgument, "limit must be from 1 to \(SearchQuery.maxLimit)", field: "limit")
        }
    }

    /// NOT_FOUND for document `id` of `collection`.
    package static func notFound(_ collection: String, _ id: UUID) -> LarderError {
        LarderError(.notFound, "no document \(id.wireString) in collection '\(collection)'", field: "id")
    }

    /// A collection's rules as stored (their JSON text).
    static func rules(from text: String) throws(LarderError) -> CollectionRules {
        do throws(LarderError) {
            return try CollectionRules(json: try JSONParser.parseObject(Array(text.utf8)))
        } catch {
            throw LarderError(.internal, "the stored rules are damaged: \(error.message); set them again with RULES_SET")
        }
    }

    /// NOT_FOUND for blob `id`.
    package static func blobNotFound(_ id: UUID) -> LarderError {
        LarderError(.notFound, "no blob \(id.wireString)", field: "id")
    }

    /// INVALID_ARGUMENT for a page cursor that does not decode, or belongs to another request or query.
    static let damagedCursor = LarderError(
        .invalidArgument, "the cursor is damaged; pass nextCursor back unchanged, or start again without it",
        field: "cursor")
}
