import Foundation
import LarderWire

// A collection's rules for users (RULES_GET; RULES_SET is `SQLiteWriteContext.setCollectionRules`), in the
// `collection_rules` table.
extension SQLiteStore {
    public func collectionRules(_ collection: String) throws(LarderError) -> CollectionRules? {
        let text = try readers.read { db throws(LarderError) -> String? in
            let rows = try db.query(
                "SELECT rules FROM collection_rules WHERE collection = ?1", [SQLValue.text(collection)]
            ) { (row: SQLiteStatement) -> String in row.text(0) }
            return rows.first
        }
        return try text.map { (t) throws(LarderError) in try StoreRules.rules(from: t) }
    }
}
