import Foundation
import LarderWire

// Accounts Larder keeps and their sessions, in the `accounts` and `sessions` tables that every server on the database
// reads: a session made through one server works on all, and a disabled account stops on all.
extension PostgresStore {
    fileprivate static let accountColumns = "id, email, password_hash, disabled, created_at"

    fileprivate static func accounts(_ result: PGResult) -> [StoredAccount] {
        (0..<result.rows).map {
            StoredAccount(
                id: result.text($0, 0), email: result.text($0, 1), passwordHash: result.text($0, 2),
                disabled: result.bool($0, 3), createdAt: result.int($0, 4))
        }
    }

    public func account(_ emailOrId: String) throws(LarderError) -> StoredAccount? {
        let isId = StoredAccount.isId(emailOrId)
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT \(Self.accountColumns) FROM accounts WHERE \(isId ? "id" : "email") = $1",
                    [.text(emailOrId)], name: isId ? "account_by_id" : "account_by_email")
            ])[0]
        }
        return Self.accounts(result).first
    }

    public func accounts(after: String?, limit: Int) throws(LarderError) -> [StoredAccount] {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT \(Self.accountColumns) FROM accounts WHERE id > $1 ORDER BY id LIMIT $2",
                    [.text(after ?? ""), .int(Int64(limit))], name: "accounts_page")
            ])[0]
        }
        return Self.accounts(result)
    }

    public func sessionAccount(key: [UInt8], now: Int64) throws(LarderError) -> SessionInForce? {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT a.id, s.expires_at FROM sessions s JOIN accounts a ON a.id = s.account "
                        + "WHERE s.key = $1 AND s.expires_at > $2 AND NOT a.disabled", [.bytes(key), .int(now)],
                    name: "session_account_expiry")
            ])[0]
        }
        return result.rows > 0 ? SessionInForce(user: result.text(0, 0), expiresAt: result.int(0, 1)) : nil
    }

    public func sharedSignInFailures(_ key: String, now: Int64, window: Int64) throws(LarderError)
        -> (start: Int64, failures: Int)?
    {
        let result = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "SELECT window_start, failures FROM sign_in_failures WHERE key = $1 AND window_start > $2",
                    [.text(key), .int(now - window)], name: "sign_in_failures")
            ])[0]
        }
        return result.rows > 0 ? (result.int(0, 0), Int(result.int(0, 1))) : nil
    }

    public func countSharedSignInFailure(_ key: String, now: Int64, window: Int64) throws(LarderError) {
        // One statement, so that failures counted at once by several servers all count; windows that ended are
        // dropped as they go by.
        _ = try readers.read { db throws(LarderError) in
            try db.run([
                PGStatement(
                    "INSERT INTO sign_in_failures AS f(key, window_start, failures) VALUES ($1, $2, 1) "
                        + "ON CONFLICT (key) DO UPDATE SET "
                        + "window_start = CASE WHEN f.window_start <= $3 THEN $2 ELSE f.window_start END, "
                        + "failures = CASE WHEN f.window_start <= $3 THEN 1 ELSE f.failures + 1 END",
                    [.text(key), .int(now), .int(now - window)], name: "sign_in_failure_count"),
                PGStatement(
                    "DELETE FROM sign_in_failures WHERE window_start <= $1", [.int(now - window)],
                    name: "sign_in_failures_ended"),
            ])
        }
    }
}

extension PGWriteContext {
    func createAccount(_ account: StoredAccount) throws(LarderError) {
        let taken = try run(
            [PGStatement("SELECT 1 FROM accounts WHERE email = $1", [.text(account.email)], name: "account_taken")],
            writes: false)[0]
        guard taken.rows == 0 else { throw StoredAccount.emailTaken }
        let inserted = try run(
            [
                PGStatement(
                    "INSERT INTO accounts(id, email, password_hash, disabled, created_at) VALUES ($1, $2, $3, $4, $5) "
                        + "ON CONFLICT DO NOTHING",
                    [.text(account.id), .text(account.email), .text(account.passwordHash), .bool(account.disabled),
                     .int(account.createdAt)], name: "account_create")
            ], writes: true)[0]
        guard inserted.affected == 1 else { throw StoredAccount.emailTaken }
    }

    func setPasswordHash(account id: String, _ hash: String) throws(LarderError) {
        let updated = try run(
            [
                PGStatement(
                    "UPDATE accounts SET password_hash = $2 WHERE id = $1", [.text(id), .text(hash)],
                    name: "account_password")
            ], writes: true)[0]
        guard updated.affected == 1 else { throw StoredAccount.notFound(id) }
    }

    func setAccountDisabled(_ id: String, _ disabled: Bool) throws(LarderError) -> StoredAccount {
        let result = try run(
            [
                PGStatement(
                    "UPDATE accounts SET disabled = $2 WHERE id = $1 RETURNING \(PostgresStore.accountColumns)",
                    [.text(id), .bool(disabled)], name: "account_disable")
            ], writes: true)[0]
        guard let account = PostgresStore.accounts(result).first else { throw StoredAccount.notFound(id) }
        if disabled { _ = try deleteSessions(account: id, keeping: nil) }
        let core = self.core
        afterCommit.append { core.accessChanged() }
        return account
    }

    func deleteAccount(_ id: String) throws(LarderError) -> Int {
        let deleted = try run(
            [PGStatement("DELETE FROM accounts WHERE id = $1", [.text(id)], name: "account_delete")], writes: true)[0]
        guard deleted.affected == 1 else { throw StoredAccount.notFound(id) }
        return try deleteSessions(account: id, keeping: nil)
    }

    func createSession(key: [UInt8], account id: String, expiresAt: Int64, now: Int64) throws(LarderError) {
        _ = try run(
            [
                PGStatement(
                    "DELETE FROM sessions WHERE account = $1 AND expires_at <= $2", [.text(id), .int(now)],
                    name: "sessions_expire"),
                PGStatement(
                    "INSERT INTO sessions(key, account, expires_at) VALUES ($1, $2, $3)",
                    [.bytes(key), .text(id), .int(expiresAt)], name: "session_create"),
            ], writes: true)
    }

    func lockSessionInForce(key: [UInt8], account id: String, now: Int64) throws(LarderError) -> Bool {
        // Row locks, taken account first as every change of an account's sessions does (it updates the account's row
        // first): a password change committed before this sees its statements wait, then find the session gone; one
        // after it waits for this transaction and then deletes the session made here with the others.
        let results = try run(
            [
                PGStatement(
                    "UPDATE accounts SET disabled = disabled WHERE id = $1 AND NOT disabled", [.text(id)],
                    name: "account_lock"),
                PGStatement(
                    "UPDATE sessions SET expires_at = expires_at WHERE key = $1 AND account = $2 AND expires_at > $3",
                    [.bytes(key), .text(id), .int(now)], name: "session_lock"),
            ], writes: true)
        return results[0].affected == 1 && results[1].affected == 1
    }

    func deleteSession(key: [UInt8]) throws(LarderError) -> Bool {
        let core = self.core
        afterCommit.append { core.accessChanged() }
        return try run([PGStatement("DELETE FROM sessions WHERE key = $1", [.bytes(key)], name: "session_delete")], writes: true)[0]
            .affected == 1
    }

    /// Also run by an account's deletion.
    func deleteSessions(account id: String, keeping: [UInt8]?) throws(LarderError) -> Int {
        let core = self.core
        afterCommit.append { core.accessChanged() }
        return try run(
            [
                PGStatement(
                    "DELETE FROM sessions WHERE account = $1 AND key <> $2", [.text(id), .bytes(keeping ?? [])],
                    name: "sessions_delete")
            ], writes: true)[0].affected
    }
}
