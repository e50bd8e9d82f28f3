import Foundation
import LarderWire
import Synchronization

// Accounts Larder keeps and their sessions, in the `accounts` and `sessions` tables.
extension SQLiteStore {
    private static let accountColumns = "id, email, password_hash, disabled, created_at"

    fileprivate static func account(_ row: SQLiteStatement) -> StoredAccount {
        StoredAccount(
            id: row.text(0), email: row.text(1), passwordHash: row.text(2), disabled: row.int(3) != 0,
            createdAt: row.int(4))
    }

    public func account(_ emailOrId: String) throws(LarderError) -> StoredAccount? {
        let column = StoredAccount.isId(emailOrId) ? "id" : "email"
        return try readers.read { db throws(LarderError) in
            try db.query(
                "SELECT \(Self.accountColumns) FROM accounts WHERE \(column) = ?1", [.text(emailOrId)], Self.account)
        }.first
    }

    public func accounts(after: String?, limit: Int) throws(LarderError) -> [StoredAccount] {
        try readers.read { db throws(LarderError) in
            try db.query(
                "SELECT \(Self.accountColumns) FROM accounts WHERE id > ?1 ORDER BY id LIMIT ?2",
                [.text(after ?? ""), .int(Int64(limit))], Self.account)
        }
    }

    public func sessionAccount(key: [UInt8], now: Int64) throws(LarderError) -> SessionInForce? {
        try readers.read { db throws(LarderError) in
            try db.query(
                "SELECT a.id, s.expires_at FROM sessions s JOIN accounts a ON a.id = s.account "
                    + "WHERE s.key = ?1 AND s.expires_at > ?2 AND a.disabled = 0", [.blob(key), .int(now)]
            ) { SessionInForce(user: $0.text(0), expiresAt: $0.int(1)) }
        }.first
    }
}

extension SQLiteWriteContext {
    func createAccount(_ account: StoredAccount) throws(LarderError) {
        let inserted = try db.run(
            "INSERT INTO accounts(id, email, password_hash, disabled, created_at) VALUES (?1, ?2, ?3, ?4, ?5) "
                + "ON CONFLICT DO NOTHING",
            [.text(account.id), .text(account.email), .text(account.passwordHash), .int(account.disabled ? 1 : 0),
             .int(account.createdAt)])
        guard inserted == 1 else { throw StoredAccount.emailTaken }
    }

    func setPasswordHash(account id: String, _ hash: String) throws(LarderError) {
        guard try db.run("UPDATE accounts SET password_hash = ?2 WHERE id = ?1", [.text(id), .text(hash)]) == 1 else {
            throw StoredAccount.notFound(id)
        }
    }

    func setAccountDisabled(_ id: String, _ disabled: Bool) throws(LarderError) -> StoredAccount {
        guard try db.run("UPDATE accounts SET disabled = ?2 WHERE id = ?1", [.text(id), .int(disabled ? 1 : 0)]) == 1,
            let account = try db.query(
                "SELECT id, email, password_hash, disabled, created_at FROM accounts WHERE id = ?1", [.text(id)],
                SQLiteStore.account
            ).first
        else { throw StoredAccount.notFound(id) }
        if disabled { _ = try deleteSessions(account: id, keeping: nil) }
        let core = self.core
        afterCommit.append { core.accessChanged() }
        return account
    }

    func deleteAccount(_ id: String) throws(LarderError) -> Int {
        guard try db.run("DELETE FROM accounts WHERE id = ?1", [.text(id)]) == 1 else {
            throw StoredAccount.notFound(id)
        }
        return try deleteSessions(account: id, keeping: nil)
    }

    func createSession(key: [UInt8], account id: String, expiresAt: Int64, now: Int64) throws(LarderError) {
        _ = try db.run("DELETE FROM sessions WHERE account = ?1 AND expires_at <= ?2", [.text(id), .int(now)])
        _ = try db.run(
            "INSERT INTO sessions(key, account, expires_at) VALUES (?1, ?2, ?3)",
            [.blob(key), .text(id), .int(expiresAt)])
    }

    func lockSessionInForce(key: [UInt8], account id: String, now: Int64) throws(LarderError) -> Bool {
        // Updates that change nothing, as on PostgreSQL; here the writer's transaction is the only one, so they only
        // check that both rows are there.
        guard try db.run("UPDATE accounts SET disabled = disabled WHERE id = ?1 AND disabled = 0", [.text(id)]) == 1
        else { return false }
        return try db.run(
            "UPDATE sessions SET expires_at = expires_at WHERE key = ?1 AND account = ?2 AND expires_at > ?3",
            [.blob(key), .text(id), .int(now)]) == 1
    }

    func deleteSession(key: [UInt8]) throws(LarderError) -> Bool {
        let core = self.core
        afterCommit.append { core.accessChanged() }
        return try db.run("DELETE FROM sessions WHERE key = ?1", [.blob(key)]) == 1
    }

    /// Also run by an account's deletion.
    func deleteSessions(account id: String, keeping: [UInt8]?) throws(LarderError) -> Int {
        let core = self.core
        afterCommit.append { core.accessChanged() }
        return try db.run("DELETE FROM sessions WHERE account = ?1 AND key <> ?2", [.text(id), .blob(keeping ?? [])])
    }
}
