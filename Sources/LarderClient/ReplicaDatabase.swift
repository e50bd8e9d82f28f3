import CSQLite
import Foundation
import LarderWire

/// The replica's SQLite file: one connection, used under the replica's lock only. Statements are prepared per call
/// (the replica's statements are few and its rows small); every write runs in a transaction (`transaction`).
final class ReplicaDatabase {
    /// A value bound to or read from a statement.
    enum Value: Equatable {
        case null
        case int(Int64)
        case text(String)
        case blob([UInt8])

        var int: Int64? { if case .int(let i) = self { i } else { nil } }
        var text: String? { if case .text(let s) = self { s } else { nil } }
        var blob: [UInt8]? { if case .blob(let b) = self { b } else { nil } }
    }

    private var db: OpaquePointer?
    let path: String

    /// Opens (or creates) the file at `path`, in WAL mode with every commit synced, and makes the replica's tables unless they are there.
    ///
    /// - Throws: `INVALID_ARGUMENT` naming the path when SQLite cannot open or set it up.
    init(path: String) throws(LarderError) {
        self.path = path
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &db, flags, nil) == SQLITE_OK else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(db)
            db = nil
            throw LarderError(
                .invalidArgument, "cannot open the replica file \(path): \(message); name a writable file path",
                field: "path")
        }
        sqlite3_busy_timeout(db, 5_000)
        try execute("PRAGMA journal_mode = WAL")
        // FULL: a write the app was told is kept survives a power loss too, with its place in the outbox.
        try execute("PRAGMA synchronous = FULL")
        try execute(
            """
            CREATE TABLE IF NOT EXISTS synced (collection TEXT NOT NULL, id TEXT NOT NULL, rev INTEGER NOT NULL,
                created INTEGER NOT NULL, updated INTEGER NOT NULL, data BLOB NOT NULL, generation INTEGER NOT NULL,
                PRIMARY KEY (collection, id)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS local (collection TEXT NOT NULL, id TEXT NOT NULL, rev INTEGER NOT NULL,
                created INTEGER NOT NULL, updated INTEGER NOT NULL, data BLOB NOT NULL, pending INTEGER NOT NULL,
                PRIMARY KEY (collection, id)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS outbox (position INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT NOT NULL,
                id TEXT NOT NULL, op TEXT NOT NULL, body BLOB, base_rev INTEGER, chained INTEGER NOT NULL,
                request_key TEXT NOT NULL, made INTEGER NOT NULL);
            CREATE INDEX IF NOT EXISTS outbox_record ON outbox (collection, id, position);
            CREATE TABLE IF NOT EXISTS feeds (collection TEXT PRIMARY KEY, last_seq INTEGER, loaded INTEGER NOT NULL,
                generation INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS photos (blob TEXT PRIMARY KEY, collection TEXT, id TEXT, kind TEXT NOT NULL,
                bytes INTEGER NOT NULL, pending INTEGER NOT NULL, used INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS owner (one INTEGER PRIMARY KEY CHECK (one = 1), user TEXT);
            """)
    }

    deinit { close() }

    /// Closes the connection (once): SQLite checkpoints the WAL into the file and removes the WAL and shared-memory
    /// files, by name.
    func close() {
        guard let db else { return }
        sqlite3_close(db)
        self.db = nil
    }

    /// Runs `sql` (one or more statements, no parameters).
    func execute(_ sql: String) throws(LarderError) {
        var error: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(db, sql, nil, nil, &error) == SQLITE_OK else {
            let message = error.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(error)
            throw fault(message)
        }
    }

    /// Runs one statement with `values` bound to ?1, ?2...; each row's columns go to `row`.
    @discardableResult
    func query<T>(_ sql: String, _ values: [Value] = [], _ row: ([Value]) throws(LarderError) -> T)
        throws(LarderError) -> [T]
    {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else { throw fault(lastError) }
        defer { sqlite3_finalize(statement) }
        for (index, value) in values.enumerated() {
            let i = Int32(index + 1)
            let code: Int32
            switch value {
            case .null: code = sqlite3_bind_null(statement, i)
            case .int(let v): code = sqlite3_bind_int64(statement, i, v)
            case .text(let s): code = sqlite3_bind_text(statement, i, s, -1, larder_sqlite_transient())
            case .blob(let b):
                code = b.withUnsafeBytes {
                    sqlite3_bind_blob(statement, i, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count),
                        larder_sqlite_transient())
                }
            }
            guard code == SQLITE_OK else { throw fault(lastError) }
        }
        var rows: [T] = []
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { break }
            guard code == SQLITE_ROW else { throw fault(lastError) }
            var columns: [Value] = []
            for c in 0..<sqlite3_column_count(statement) {
                switch sqlite3_column_type(statement, c) {
                case SQLITE_INTEGER: columns.append(.int(sqlite3_column_int64(statement, c)))
                case SQLITE_TEXT: columns.append(.text(sqlite3_column_text(statement, c).map { String(cString: $0) } ?? ""))
                case SQLITE_BLOB:
                    let count = Int(sqlite3_column_bytes(statement, c))
                    let bytes = sqlite3_column_blob(statement, c)
                    columns.append(.blob(bytes.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) } ?? []))
                default: columns.append(.null)
                }
            }
            rows.append(try row(columns))
        }
        return rows
    }

    /// Runs one statement that answers no rows.
    func run(_ sql: String, _ values: [Value] = []) throws(LarderError) {
        try query(sql, values) { _ in () }
    }

    /// Runs `body` in one transaction: committed when it returns, rolled back when it throws. `durable: false` for
    /// what the server can give again (its answers and changes, kept with the outbox's keys and the feed's position
    /// in the same transaction): that commit is not synced on its own, so a power loss may take it back, to be
    /// fetched again; the app's own writes are always synced.
    func transaction<T>(durable: Bool = true, _ body: () throws(LarderError) -> T) throws(LarderError) -> T {
        if !durable { try execute("PRAGMA synchronous = NORMAL") }
        defer { if !durable { try? execute("PRAGMA synchronous = FULL") } }
        try execute("BEGIN IMMEDIATE")
        do throws(LarderError) {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    private var lastError: String { String(cString: sqlite3_errmsg(db)) }

    private func fault(_ message: String) -> LarderError {
        LarderError(.internal, "the replica file \(path) failed: \(message)")
    }
}
