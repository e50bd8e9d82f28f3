import Foundation
import LarderSync
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

    /// A collection's rules as stored (their JSON text). Every request of a user reads them; the texts a process has
    /// seen are kept parsed (a few, bounded by `maxParsedRules`), since parsing one cost a quarter of a user's GET.
    static func rules(from text: String) throws(LarderError) -> CollectionRules {
        if let rules = parsedRules.withLock({ $0[text] }) { return rules }
        let rules: CollectionRules
        do throws(LarderError) {
            rules = try CollectionRules(json: try JSONParser.parseObject(Array(text.utf8)))
        } catch {
            throw LarderError(.internal, "the stored rules are damaged: \(error.message); set them again with RULES_SET")
        }
        parsedRules.withLock { parsed in
            if parsed.count >= maxParsedRules { parsed.removeAll(keepingCapacity: true) }
            parsed[text] = rules
        }
        return rules
    }

    /// Stored rules texts and what they say: a text always says the same, so an entry is never stale.
    private static let parsedRules = Locked<[String: CollectionRules]>([:])
    private static let maxParsedRules = 1024

    /// NOT_FOUND for blob `id`.
    package static func blobNotFound(_ id: UUID) -> LarderError {
        LarderError(.notFound, "no blob \(id.wireString)", field: "id")
    }

    /// INVALID_ARGUMENT for a page cursor that does not decode, or belongs to another request or query.
    static let damagedCursor = LarderError(
        .invalidArgument, "the cursor is damaged; pass nextCursor back unchanged, or start again without it",
        field: "cursor")
}
