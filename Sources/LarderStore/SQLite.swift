import CSQLite
import Foundation
import LarderWire

/// A value bound to or read from a statement.
enum SQLValue: Sendable, Equatable {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])
}

/// One SQLite connection. Not thread-safe: exactly one queue (the writer) or one borrower (a reader) uses it at a time,
/// which is why it is opened with SQLITE_OPEN_NOMUTEX.
final class Connection {
    let handle: OpaquePointer
    private var cache: [String: Statement] = [:]
    /// The writer's per-write statements, prepared once and found by number (no hashing of their text per call).
    private var fixed: [Statement?] = Array(repeating: nil, count: FixedSQL.allCases.count)

    /// Process-wide settings, applied once before the first connection opens.
    private static let configured: Void = {
        // No global allocation counters (one mutex per allocation): every connection is used by one thread at a time.
        _ = larder_sqlite_disable_memstatus()
    }()

    init(path: String, readOnly: Bool) throws(LarderError) {
        Connection.configured
        var db: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_NOMUTEX
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
    }

    deinit {
        cache.removeAll()
        fixed.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Adds `larder_fold(text)`: the same Unicode lowercasing the store applies to text queries, so `contains` and
    /// named-field text search fold exactly like the precomputed search column.
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
    func statement(_ sql: String) throws(LarderError) -> Statement {
        if let cached = cache[sql] {
            cached.reset()
            return cached
        }
        var raw: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard rc == SQLITE_OK, let raw else { throw error(rc, "prepare a statement") }
        let statement = Statement(raw, connection: self)
        if cache.count > 256 { cache.removeAll() }
        cache[sql] = statement
        return statement
    }

    /// One of the writer's fixed statements, prepared on first use and kept; reset and with fresh bindings.
    func statement(_ key: FixedSQL) throws(LarderError) -> Statement {
        if let statement = fixed[key.rawValue] {
            statement.reset()
            return statement
        }
        var raw: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, key.sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard rc == SQLITE_OK, let raw else { throw error(rc, "prepare a statement") }
        let statement = Statement(raw, connection: self)
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
    func query<T>(_ sql: String, _ values: [SQLValue] = [], _ row: (Statement) throws(LarderError) -> T)
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
    func forEachRow(_ sql: String, _ values: [SQLValue] = [], _ row: (Statement) throws(LarderError) -> Bool)
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

/// The statements the writer runs for every write or every batch. Each is a single statement (a prepared statement
/// holds one), kept prepared on the writer connection.
enum FixedSQL: Int, CaseIterable {
    case begin, commit, rollback
    case savepoint, release, rollbackToSavepoint
    case ensureCollection, insertDocument, selectCurrent, updateDocument, insertChange, moveCreateToLog, raiseChangeSeq
    /// The writer's side of the trigram index (`TextIndexer.applyToBacklog`).
    case settleBacklogDelete, settleBacklogKeep
    /// Readers' point reads (`PointReads`).
    case beginRead, endRead, selectRecord, selectBlobMeta, selectBlobMetaAndSeq

    var sql: String {
        switch self {
        case .begin: "BEGIN IMMEDIATE"
        case .commit: "COMMIT"
        case .rollback: "ROLLBACK"
        case .savepoint: "SAVEPOINT w"
        case .release: "RELEASE w"
        case .rollbackToSavepoint: "ROLLBACK TO w"
        case .ensureCollection: "INSERT OR IGNORE INTO collections(name, createdAt) VALUES (?1, ?2)"
        case .insertDocument:
            "INSERT INTO documents(collection, id, rev, createdAt, updatedAt, data, search, createSeq) "
                + "VALUES (?1, ?2, 1, ?3, ?3, ?4, ?5, ?6)"
        case .selectCurrent:
            "SELECT seq, rev, createdAt, updatedAt, data, createSeq FROM documents WHERE collection = ?1 AND id = ?2"
        case .updateDocument:
            "UPDATE documents SET rev = rev + 1, updatedAt = ?1, data = ?2, search = ?3, createSeq = NULL WHERE seq = ?4"
        case .moveCreateToLog:
            // The create event leaves the row (which is about to change) for the log, unless pruning passed it.
            "INSERT INTO changes(seq, collection, kind, time, id, rev, createdAt, updatedAt, data) "
                + "SELECT createSeq, collection, 'create', createdAt, id, 1, createdAt, createdAt, data FROM documents "
                + "WHERE seq = ?1 AND createSeq > (SELECT value FROM larder_meta WHERE key = 'changesPrunedThrough')"
        case .raiseChangeSeq: "UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'changes'"
        case .insertChange:
            "INSERT INTO changes(seq, collection, kind, time, id, rev, createdAt, updatedAt, data, blob, previous) "
                + "VALUES (?11, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        case .settleBacklogDelete:
            "DELETE FROM fts_backlog WHERE seq = ?1 AND (SELECT search FROM documents WHERE seq = ?1 "
                + "AND collection IN (SELECT name FROM text_collections)) IS ?2"
        case .settleBacklogKeep: "UPDATE fts_backlog SET old = ?2 WHERE seq = ?1"
        case .beginRead: "BEGIN"
        case .endRead: "COMMIT"
        case .selectRecord: "SELECT \(SQLiteStore.recordColumns) FROM documents WHERE collection = ?1 AND id = ?2"
        case .selectBlobMeta: "SELECT \(SQLiteStore.blobColumns) FROM blobs WHERE id = ?1"
        case .selectBlobMetaAndSeq: "SELECT \(SQLiteStore.blobColumns), seq, chunks FROM blobs WHERE id = ?1"
        }
    }
}

/// A prepared statement, finalized in `deinit`.
final class Statement {
    let handle: OpaquePointer
    unowned let connection: Connection

    init(_ handle: OpaquePointer, connection: Connection) {
        self.handle = handle
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    func bind(_ values: [SQLValue]) throws(LarderError) {
        for (n, value) in values.enumerated() { try bind(at: Int32(n + 1), value) }
    }

    func bind(at index: Int32, _ value: SQLValue) throws(LarderError) {
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, index)
        case .int(let v): rc = sqlite3_bind_int64(handle, index, v)
        case .double(let v): rc = sqlite3_bind_double(handle, index, v)
        case .text(let s): rc = sqlite3_bind_text(handle, index, s, -1, larder_sqlite_transient())
        case .blob(let bytes):
            rc = bytes.withUnsafeBytes { raw in
                sqlite3_bind_blob64(
                    handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, sqlite3_uint64(raw.count),
                    larder_sqlite_transient())
            }
        }
        guard rc == SQLITE_OK else { throw connection.error(rc, "bind a value") }
    }

    /// Binds JSON text given as bytes.
    func bindText(_ bytes: [UInt8], at index: Int32) throws(LarderError) {
        let rc = bytes.withUnsafeBytes { bindTextCode($0, at: index) }
        guard rc == SQLITE_OK else { throw connection.error(rc, "bind a value") }
    }

    /// Binds UTF-8 text (SQLite copies it).
    func bindText(_ raw: UnsafeRawBufferPointer, at index: Int32) throws(LarderError) {
        let rc = bindTextCode(raw, at: index)
        guard rc == SQLITE_OK else { throw connection.error(rc, "bind a value") }
    }

    private func bindTextCode(_ raw: UnsafeRawBufferPointer, at index: Int32) -> Int32 {
        let empty: StaticString = ""
        let pointer = raw.baseAddress.map { $0.assumingMemoryBound(to: CChar.self) }
            ?? UnsafeRawPointer(empty.utf8Start).assumingMemoryBound(to: CChar.self)
        return sqlite3_bind_text64(
            handle, index, pointer, sqlite3_uint64(raw.count), larder_sqlite_transient(), UInt8(SQLITE_UTF8))
    }

    /// Binds a UUID as its 36-character lowercase text (the form the id columns hold), without making a String.
    func bindUUID(_ id: UUID, at index: Int32) throws(LarderError) {
        try id.withWireUTF8 { (text) throws(LarderError) in try bindText(UnsafeRawBufferPointer(text), at: index) }
    }

    /// Steps once: true when a row is ready, false when done.
    func step() throws(LarderError) -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let error = connection.error(rc, "run a statement")
        sqlite3_reset(handle)
        if (rc & 0xFF) == SQLITE_CONSTRAINT {
            throw LarderError(.conflict, "a uniqueness rule was violated: \(connection.errorMessage)")
        }
        throw error
    }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    func int(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func double(_ column: Int32) -> Double { sqlite3_column_double(handle, column) }

    func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    /// The column's bytes (text or blob) without conversion.
    /// Calls `body` with a column's bytes where SQLite holds them (valid only inside `body`).
    func withBytes<R>(_ column: Int32, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let pointer: UnsafeRawPointer? =
            sqlite3_column_type(handle, column) == SQLITE_TEXT
            ? sqlite3_column_text(handle, column).map { UnsafeRawPointer($0) } : sqlite3_column_blob(handle, column)
        return body(UnsafeRawBufferPointer(start: pointer, count: pointer == nil ? 0 : Int(sqlite3_column_bytes(handle, column))))
    }

    func bytes(_ column: Int32) -> [UInt8] {
        let type = sqlite3_column_type(handle, column)
        if type == SQLITE_TEXT {
            guard let pointer = sqlite3_column_text(handle, column) else { return [] }
            return Array(UnsafeBufferPointer(start: pointer, count: Int(sqlite3_column_bytes(handle, column))))
        }
        guard let pointer = sqlite3_column_blob(handle, column) else { return [] }
        let count = Int(sqlite3_column_bytes(handle, column))
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    func value(_ column: Int32) -> SQLValue {
        switch sqlite3_column_type(handle, column) {
        case SQLITE_INTEGER: .int(int(column))
        case SQLITE_FLOAT: .double(double(column))
        case SQLITE_TEXT: .text(text(column))
        case SQLITE_BLOB: .blob(bytes(column))
        default: .null
        }
    }

    func uuid(_ column: Int32) -> UUID {
        guard let pointer = sqlite3_column_text(handle, column) else { return UUID(uuid: UUID_NULL) }
        let count = Int(sqlite3_column_bytes(handle, column))
        return UUID(wireUTF8: UnsafeBufferPointer(start: pointer, count: count)) ?? UUID(uuid: UUID_NULL)
    }
}

private let UUID_NULL: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

/// The one text folding used for search: Unicode lowercase (Latin letters case-insensitive; CJK unchanged).
enum TextFold {
    static func fold(_ string: String) -> String { string.lowercased() }

    /// Every string value anywhere in `object` (not keys), folded and joined by U+001F so that a query (which may not
    /// contain control characters) never matches across two fields.
    static func searchText(_ object: JSONObject) -> String {
        String(decoding: searchBytes(object), as: UTF8.self)
    }

    /// `searchText` as UTF-8 bytes, what the writer binds. The strings are joined as bytes; when they are all ASCII
    /// the fold is A-Z to a-z in place (exactly what `lowercased()` does to ASCII), otherwise the joined text goes
    /// through `fold` as a whole, as it always did.
    static func searchBytes(_ object: JSONObject) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        var first = true
        var nonASCII: UInt8 = 0
        func append(_ string: String) {
            if first { first = false } else { out.append(0x1F) }
            var string = string
            string.withUTF8 { utf8 in
                for byte in utf8 { nonASCII |= byte }
                out.append(contentsOf: utf8)
            }
        }
        func walk(_ value: JSON) {
            switch value {
            case .string(let s): append(s)
            case .array(let items): for item in items { walk(item) }
            case .object(let o): for (_, v) in o { walk(v) }
            default: break
            }
        }
        for (_, value) in object { walk(value) }
        return fold(joined: out, ascii: nonASCII < 0x80)
    }

    /// The fold of strings already joined by U+001F (`searchBytes`, `CompactDocument.strings`).
    static func fold(joined: [UInt8], ascii: Bool) -> [UInt8] {
        guard ascii else {
            var folded = fold(String(decoding: joined, as: UTF8.self))
            return folded.withUTF8 { Array($0) }
        }
        var out = joined
        out.withUnsafeMutableBufferPointer { bytes in
            for i in bytes.indices where bytes[i] &- 65 < 26 { bytes[i] |= 0x20 }
        }
        return out
    }
}
