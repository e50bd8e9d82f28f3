import CSQLite
import Foundation
import LarderWire

/// A prepared statement, finalized in `deinit`.
package final class SQLiteStatement {
    let handle: OpaquePointer
    unowned let connection: SQLiteConnection

    init(_ handle: OpaquePointer, connection: SQLiteConnection) {
        self.handle = handle
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    package func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    package func bind(_ values: [SQLValue]) throws(LarderError) {
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

    /// Binds a blob without copying it, for `body` (which steps the statement) only: `raw` must stay valid until
    /// `body` returns. After `body`, the statement is reset and the parameter bound to NULL, so that nothing points
    /// at `raw` once it is gone.
    func withBlob<R>(_ raw: UnsafeRawBufferPointer, at index: Int32, _ body: () throws(LarderError) -> R)
        throws(LarderError) -> R
    {
        // A nil destructor is SQLITE_STATIC: SQLite reads the bytes where they are, during the step.
        let rc = sqlite3_bind_blob64(
            handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, sqlite3_uint64(raw.count), nil)
        guard rc == SQLITE_OK else { throw connection.error(rc, "bind a value") }
        defer {
            // A stepped statement takes no binding until it is reset; the step's outcome was read already.
            sqlite3_reset(handle)
            sqlite3_bind_null(handle, index)
        }
        return try body()
    }

    /// Binds a UUID as its 36-character lowercase text (the form the id columns hold), without making a String.
    func bindUUID(_ id: UUID, at index: Int32) throws(LarderError) {
        try id.withWireUTF8 { (text) throws(LarderError) in try bindText(UnsafeRawBufferPointer(text), at: index) }
    }

    /// Steps once: true when a row is ready, false when done.
    package func step() throws(LarderError) -> Bool {
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
        let count = pointer == nil ? 0 : Int(sqlite3_column_bytes(handle, column))
        return body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    package func bytes(_ column: Int32) -> [UInt8] {
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
