import CICU
import CSQLite
import Foundation
import LarderWire

/// A value bound to or read from a statement.
package enum SQLValue: Sendable, Equatable {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])
}

/// One SQLite connection. Not thread-safe: exactly one queue (the writer) or one borrower (a reader) uses it at a time,
/// which is why it is opened with SQLITE_OPEN_NOMUTEX.
package final class SQLiteConnection {
    let handle: OpaquePointer
    private var cache: [String: SQLiteStatement] = [:]
    /// The writer's per-write statements, prepared once and found by number (no hashing of their text per call).
    private var fixed: [SQLiteStatement?] = Array(repeating: nil, count: FixedSQL.allCases.count)

    /// Process-wide settings, applied once before the first connection opens.
    private static let configured: Void = {
        // No global allocation counters (one mutex per allocation): every connection is used by one thread at a time.
        _ = larder_sqlite_disable_memstatus()
    }()

    package init(path: String, readOnly: Bool) throws(LarderError) {
        SQLiteConnection.configured
        // SQLite would create the file 0644 (less the umask), and its -wal and -shm files after it.
        if !readOnly { try PrivateFiles.createFile(path) }
        var db: OpaquePointer?
        let access = readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        let flags = access | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let db { sqlite3_close_v2(db) }
            throw LarderError(.internal, "cannot open the database at \(path): \(message) (code \(rc))")
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 10_000)
        registerFunctions()
        registerCollations()
    }

    deinit {
        cache.removeAll()
        fixed.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Adds `larder_fold(text)`: the same Unicode lowercasing the store applies to text queries, so `contains` and
    /// named-field text search fold exactly like the search column; and `larder_search(data)`: a stored record's
    /// search text (`PreparedDocument.searchText`), for the records whose row holds none.
    private func registerFunctions() {
        sqlite3_create_function_v2(
            handle, "larder_fold", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, argc, argv in
                guard argc == 1, let value = argv?[0], sqlite3_value_type(value) == SQLITE_TEXT,
                    let text = sqlite3_value_text(value)
                else {
                    sqlite3_result_null(context)
                    return
                }
                let count = Int(sqlite3_value_bytes(value))
                let string = String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
                var folded = TextFold.fold(string)
                folded.withUTF8 { utf8 in
                    sqlite3_result_text(
                        context, UnsafeRawPointer(utf8.baseAddress!).assumingMemoryBound(to: CChar.self),
                        Int32(utf8.count), larder_sqlite_transient())
                }
            }, nil, nil, nil)
        sqlite3_create_function_v2(
            handle, "larder_search", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, argc, argv in
                guard argc == 1, let value = argv?[0], sqlite3_value_type(value) == SQLITE_TEXT,
                    let text = sqlite3_value_text(value),
                    let search = PreparedDocument.searchText(
                        stored: Array(UnsafeBufferPointer(start: text, count: Int(sqlite3_value_bytes(value)))))
                else {
                    sqlite3_result_null(context)
                    return
                }
                search.withUnsafeBufferPointer { utf8 in
                    sqlite3_result_text(
                        context, UnsafeRawPointer(utf8.baseAddress ?? UnsafePointer(bitPattern: 1)!)
                            .assumingMemoryBound(to: CChar.self), Int32(utf8.count), larder_sqlite_transient())
                }
            }, nil, nil, nil)
    }

    /// Makes the collation a statement names (`Collation.sqliteClause`) when it first meets it: ICU's collator of the
    /// canonical tag after `Collation.sqlitePrefix`, then bytes (`larder_icu_compare`). Every connection does, so an
    /// index built under a collation is kept by the writer and read by the readers alike.
    private func registerCollations() {
        sqlite3_collation_needed(handle, nil) { _, db, _, name in
            guard let db, let name else { return }
            let text = String(cString: name)
            guard text.hasPrefix(Collation.sqlitePrefix),
                let collator = larder_icu_open(String(text.dropFirst(Collation.sqlitePrefix.count)))
            else { return }
            sqlite3_create_collation_v2(
                db, name, SQLITE_UTF8, collator,
                { collator, aLength, a, bLength, b in larder_icu_compare(collator, a, aLength, b, bLength) },
                { collator in larder_icu_close(collator) })
        }
    }

    var errorMessage: String { String(cString: sqlite3_errmsg(handle)) }

    func error(_ rc: Int32, _ what: String) -> LarderError {
        let status: Status = (rc & 0xFF) == SQLITE_BUSY || (rc & 0xFF) == SQLITE_LOCKED ? .unavailable : .internal
        return LarderError(status, "the database failed to \(what): \(errorMessage) (code \(rc))")
    }

    /// Runs one or more statements without results (DDL, PRAGMA, BEGIN/COMMIT).
    func execute(_ sql: String) throws(LarderError) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? errorMessage
            sqlite3_free(message)
            throw LarderError(.internal, "the database failed to run '\(sql.prefix(60))': \(text) (code \(rc))")
        }
    }

    /// A cached prepared statement, reset and with fresh bindings.
    package func statement(_ sql: String) throws(LarderError) -> SQLiteStatement {
        if let cached = cache[sql] {
            cached.reset()
            return cached
        }
        var raw: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard rc == SQLITE_OK, let raw else { throw error(rc, "prepare a statement") }
        let statement = SQLiteStatement(raw, connection: self)
        if cache.count > 256 { cache.removeAll() }
        cache[sql] = statement
        return statement
    }

    /// One of the writer's fixed statements, prepared on first use and kept; reset and with fresh bindings.
    func statement(_ key: FixedSQL) throws(LarderError) -> SQLiteStatement {
        if let statement = fixed[key.rawValue] {
            statement.reset()
            return statement
        }
        var raw: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, key.sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard rc == SQLITE_OK, let raw else { throw error(rc, "prepare a statement") }
        let statement = SQLiteStatement(raw, connection: self)
        fixed[key.rawValue] = statement
        return statement
    }

    /// Runs one fixed statement without results (BEGIN, COMMIT, SAVEPOINT...) from its prepared form: what `execute`
    /// does without parsing the SQL again each time.
    func run(_ key: FixedSQL) throws(LarderError) {
        let statement = try self.statement(key)
        defer { statement.reset() }
        while try statement.step() {}
    }

    /// Prepares, binds and steps to completion; returns the number of changed rows.
    @discardableResult
    func run(_ sql: String, _ values: [SQLValue] = []) throws(LarderError) -> Int {
        let statement = try self.statement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        while try statement.step() {}
        return Int(sqlite3_changes(handle))
    }

    /// The whole of a BLOB column of one row, read with incremental blob I/O straight into the array: a value that
    /// spans overflow pages is not first assembled in a buffer of SQLite's own, as `sqlite3_column_blob` does.
    func readBlob(table: String, column: String, rowid: Int64) throws(LarderError) -> [UInt8] {
        try readBlob(table: table, column: column, rowid: rowid, range: nil)
    }

    /// `range` of a BLOB column of one row (all of it when nil), read the same way; SQLite walks the value's
    /// overflow pages only up to the range's end.
    func readBlob(table: String, column: String, rowid: Int64, range: Range<Int>?) throws(LarderError) -> [UInt8] {
        var blob: OpaquePointer?
        let rc = sqlite3_blob_open(handle, "main", table, column, rowid, 0, &blob)
        guard rc == SQLITE_OK, let blob else {
            if let blob { sqlite3_blob_close(blob) }
            throw error(rc, "open a blob")
        }
        defer { sqlite3_blob_close(blob) }
        let whole = Int(sqlite3_blob_bytes(blob))
        let range = range ?? 0..<whole
        guard range.lowerBound >= 0, range.upperBound <= whole else {
            throw LarderError(.internal, "a read of bytes \(range) of a \(whole)-byte value in \(table).\(column)")
        }
        let size = range.count
        var readCode = SQLITE_OK
        let bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            readCode =
                size == 0
                ? SQLITE_OK : sqlite3_blob_read(blob, buffer.baseAddress, Int32(size), Int32(range.lowerBound))
            initialized = readCode == SQLITE_OK ? size : 0
        }
        guard readCode == SQLITE_OK else { throw error(readCode, "read a blob") }
        return bytes
    }

    /// Runs a query and maps each row.
    func query<T>(_ sql: String, _ values: [SQLValue] = [], _ row: (SQLiteStatement) throws(LarderError) -> T)
        throws(LarderError) -> [T]
    {
        let statement = try self.statement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        var rows: [T] = []
        while try statement.step() { rows.append(try row(statement)) }
        return rows
    }

    /// Steps through the rows of `sql`, calling `row` for each until it returns false.
    func forEachRow(_ sql: String, _ values: [SQLValue] = [], _ row: (SQLiteStatement) throws(LarderError) -> Bool)
        throws(LarderError)
    {
        let statement = try self.statement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        while try statement.step() {
            guard try row(statement) else { return }
        }
    }

    /// The first column of the first row as an integer.
    func scalar(_ sql: String, _ values: [SQLValue] = []) throws(LarderError) -> Int64? {
        try query(sql, values) { $0.int(0) }.first
    }

    func clearCache() {
        cache.removeAll()
        fixed = Array(repeating: nil, count: FixedSQL.allCases.count)
    }
}

/// SQL text helpers.
enum SQL {
    /// `text` as an SQL string literal.
    static func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
}
