import Foundation
import LarderWire

// A collection's rules for users (RULES_SET, RULES_GET), in the `collection_rules` table, which every server on the
// database reads: each user's request reads them afresh, so a change made through one server holds on all at once.
extension PostgresStore {
    public func collectionRules(_ collection: String) throws(LarderError) -> CollectionRules? {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT rules FROM collection_rules WHERE collection = $1", [.text(collection)], name: "rules_get")
            ])[0]
        }
        guard result.rows > 0 else { return nil }
        return try StoreRules.rules(from: result.text(0, 0))
    }
}

extension PGWriteContext {
    func setCollectionRules(_ collection: String, _ rules: CollectionRules) throws(LarderError) {
        try CollectionName.validate(collection)
        _ = try run(
            [
                PGStatement(
                    "INSERT INTO collection_rules(collection, rules) VALUES ($1, $2) "
                        + "ON CONFLICT (collection) DO UPDATE SET rules = excluded.rules",
                    [.text(collection), .text(String(decoding: JSON.object(rules.json).bytes, as: UTF8.self))],
                    name: "rules_set")
            ], writes: true)
        let core = self.core
        afterCommit.append { core.accessChanged() }
    }
}
