import Foundation
import LarderWire

// Request keys on PostgreSQL (`RequestKey`), shared by every server on the database. The key's row goes in first, in
// the write's transaction, under the primary key: a transaction of another server claiming the same key waits on that
// row until this one ends, then finds it (committed: it answers the stored answer) or takes it (rolled back).
extension PGWriteContext {
    func claimRequestKey(_ key: RequestKey) throws(LarderError) -> [UInt8]? {
        let now = nowMillis()
        let oldest = core.oldestLiveRequestKey(now: now)
        // An expired key's row, not yet pruned, is taken over as a new key.
        let claimed = try one(
            PGStatement(
                """
                INSERT INTO request_keys(key, request, digest, answer, created_at) VALUES ($1, $2, $3, NULL, $4)
                ON CONFLICT (key) DO UPDATE SET request = $2, digest = $3, answer = NULL, created_at = $4
                    WHERE request_keys.created_at < $5
                RETURNING 1
                """, [.uuid(key.key), .text(key.request), .text(key.digest), .int(now), .int(oldest)],
                name: "request_key_claim"), writes: false)
        if claimed.rows == 1 {
            // The row is this job's write: should the job fail, the transaction rolls back and the key goes too.
            jobWrote = true
            return nil
        }
        // A new statement sees what committed while the claim waited.
        let stored = try one(
            PGStatement(
                "SELECT request, digest, answer FROM request_keys WHERE key = $1", [.uuid(key.key)],
                name: "request_key_stored"), writes: false)
        guard stored.rows == 1, !stored.isNull(0, 2) else {
            throw LarderError(
                .unavailable, "a write with requestKey \(key.key.wireString) is under way elsewhere; retry it")
        }
        return try key.answer((stored.text(0, 0), stored.text(0, 1), stored.bytes(0, 2)))
    }

    func storeRequestKey(_ key: RequestKey, answer: [UInt8]) throws(LarderError) {
        try one(
            PGStatement(
                "UPDATE request_keys SET answer = $2 WHERE key = $1", [.uuid(key.key), .bytes(answer)],
                name: "request_key_store"), writes: true)
    }
}

extension PostgresStore {
    public func requestKeyAnswer(_ key: RequestKey) throws(LarderError) -> [UInt8]? {
        let oldest = core.oldestLiveRequestKey()
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT request, digest, answer FROM request_keys WHERE key = $1 AND created_at >= $2 "
                        + "AND answer IS NOT NULL", [.uuid(key.key), .int(oldest)], name: "request_key_answer")
            ])[0]
        }
        guard result.rows == 1 else { return nil }
        return try key.answer((result.text(0, 0), result.text(0, 1), result.bytes(0, 2)))
    }
}
