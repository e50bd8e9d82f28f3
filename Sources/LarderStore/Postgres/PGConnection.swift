import CLibPQ
import Foundation
import LarderWire

/// A value bound to a PostgreSQL statement. Every value travels in binary form with its type, so nothing a client
/// sent is ever parsed as SQL text, and text needs no terminating NUL (no copy to make one).
enum PGValue {
    case null
    case int(Int64)
    case text(String)
    /// Text given as its UTF-8 bytes (a document's compact JSON, spliced as it is).
    case textBytes([UInt8])
    case bytes([UInt8])
    case uuid(UUID)
    case bool(Bool)
    /// A one-dimensional array in PostgreSQL's binary array format (`PGArray`).
    case array(PGArray)

    var oid: UInt32 {
        switch self {
        case .null: 0
        case .int: 20
        case .text, .textBytes: 25
        case .bytes: 17
        case .uuid: 2950
        case .bool: 16
        case .array(let array): array.arrayOID
        }
    }

    /// Appends the binary form; false for NULL (nothing appended).
    func append(to out: inout [UInt8]) -> Bool {
        switch self {
        case .null: return false
        case .int(let value): PGArray.appendInt64(value, to: &out)
        case .text(var text): text.withUTF8 { out.append(contentsOf: $0) }
        case .textBytes(let bytes), .bytes(let bytes): out.append(contentsOf: bytes)
        case .uuid(let id): withUnsafeBytes(of: id.uuid) { out.append(contentsOf: $0) }
        case .bool(let flag): out.append(flag ? 1 : 0)
        case .array(let array): out.append(contentsOf: array.bytes)
        }
        return true
    }
}

/// A one-dimensional array of text, int8 or uuid in PostgreSQL's binary format (`array_recv`): dimensions, then each
/// element as a 4-byte length (-1 for NULL) and its bytes.
struct PGArray {
    enum Element: UInt32 {
        case text = 25
        case int8 = 20
        case uuid = 2950

        var arrayOID: UInt32 {
            switch self {
            case .text: 1009
            case .int8: 1016
            case .uuid: 2951
            }
        }
    }

    let element: Element
    private(set) var bytes: [UInt8] = []
    private var count: Int32 = 0
    private var hasNull = false
    private var body: [UInt8] = []

    var arrayOID: UInt32 { element.arrayOID }

    init(_ element: Element) {
        self.element = element
        finish()
    }

    init(texts: [String]) {
        self.init(.text)
        for text in texts { append(.text(text)) }
    }

    init(ints: [Int64]) {
        self.init(.int8)
        for value in ints { append(.int(value)) }
    }

    init(uuids: [UUID]) {
        self.init(.uuid)
        for id in uuids { append(.uuid(id)) }
    }

    /// Appends an element (of this array's type, or `.null`).
    mutating func append(_ value: PGValue) {
        let lengthAt = body.count
        body.append(contentsOf: [0, 0, 0, 0])
        if value.append(to: &body) {
            let length = UInt32(body.count - lengthAt - 4)
            for i in 0..<4 { body[lengthAt + i] = UInt8(truncatingIfNeeded: length >> (24 - 8 * UInt32(i))) }
        } else {
            for i in 0..<4 { body[lengthAt + i] = 0xFF }
            hasNull = true
        }
        count += 1
        finish()
    }

    private mutating func finish() {
        var header: [UInt8] = []
        PGArray.appendInt32(count == 0 ? 0 : 1, to: &header)
        PGArray.appendInt32(hasNull ? 1 : 0, to: &header)
        PGArray.appendInt32(Int32(bitPattern: element.rawValue), to: &header)
        if count > 0 {
            PGArray.appendInt32(count, to: &header)
            PGArray.appendInt32(1, to: &header)
        }
        bytes = header + body
    }

    static func appendInt32(_ value: Int32, to out: inout [UInt8]) {
        let bits = UInt32(bitPattern: value)
        for shift in stride(from: 24, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: bits >> UInt32(shift)))
        }
    }

    static func appendInt64(_ value: Int64, to out: inout [UInt8]) {
        let bits = UInt64(bitPattern: value)
        for shift in stride(from: 56, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift)))
        }
    }
}

/// One statement of a pipeline: its SQL, its values, and a name when it is prepared once per connection and reused.
struct PGStatement {
    var sql: String
    var values: [PGValue]
    /// Prepared under this name on first use (fixed statements); nil runs it unnamed (searches, whose text varies).
    var name: String?

    init(_ sql: String, _ values: [PGValue] = [], name: String? = nil) {
        self.sql = sql
        self.values = values
        self.name = name
    }
}

/// The rows of one statement, read in binary form. Frees libpq's result when dropped.
final class PGResult {
    let raw: OpaquePointer

    init(_ raw: OpaquePointer) { self.raw = raw }

    deinit { PQclear(raw) }

    var rows: Int { Int(PQntuples(raw)) }

    /// Rows an INSERT, UPDATE or DELETE touched.
    var affected: Int { Int(String(cString: PQcmdTuples(raw))) ?? 0 }

    func isNull(_ row: Int, _ column: Int) -> Bool { PQgetisnull(raw, Int32(row), Int32(column)) == 1 }

    func withBytes<T>(_ row: Int, _ column: Int, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        let length = Int(PQgetlength(raw, Int32(row), Int32(column)))
        guard let value = PQgetvalue(raw, Int32(row), Int32(column)), length > 0 else {
            return body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
        return body(UnsafeRawBufferPointer(start: UnsafeRawPointer(value), count: length))
    }

    func bytes(_ row: Int, _ column: Int) -> [UInt8] { withBytes(row, column) { Array($0) } }

    func text(_ row: Int, _ column: Int) -> String {
        withBytes(row, column) { String(decoding: $0, as: UTF8.self) }
    }

    /// An integer column (int2, int4 or int8, by its length).
    func int(_ row: Int, _ column: Int) -> Int64 {
        withBytes(row, column) { bytes in
            var value: UInt64 = 0
            for byte in bytes { value = value << 8 | UInt64(byte) }
            switch bytes.count {
            case 2: return Int64(Int16(truncatingIfNeeded: value))
            case 4: return Int64(Int32(truncatingIfNeeded: value))
            default: return Int64(bitPattern: value)
            }
        }
    }

    func bool(_ row: Int, _ column: Int) -> Bool { withBytes(row, column) { $0.first == 1 } }

    func uuid(_ row: Int, _ column: Int) -> UUID {
        withBytes(row, column) { bytes in
            var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &raw) { target in
                target.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.prefix(16)))
            }
            return UUID(uuid: raw)
        }
    }
}

/// What a PostgreSQL server said about a failed statement.
struct PGFailure: Error {
    var sqlState: String
    var message: String
    /// Which statement of the pipeline failed (counting every statement sent, prepares included: see `pipeline`).
    var statementIndex: Int?

    /// Whether the statement failed because the server or the connection went away (or could not take it now): the
    /// request may succeed once PostgreSQL is back.
    var isUnavailable: Bool {
        sqlState.hasPrefix("08") || sqlState.hasPrefix("57P") || sqlState == "53300" || sqlState.hasPrefix("53")
            || sqlState == "40001" || sqlState == "40P01" || sqlState.isEmpty
    }
}

/// One libpq connection in pipeline mode, non-blocking, with every wait bounded by a deadline. Not thread-safe: one
/// owner at a time (the writer's queue, or a borrower from the reader pool).
///
/// Every call sends its statements in one pipeline with one Sync and reads their results: a transaction of several
/// statements costs one round trip, and a fixed statement is prepared in the same round trip as its first use.
final class PGConnection {
    private var handle: OpaquePointer?
    /// Names the database in messages: host, port, database and user, never the password.
    let label: String
    /// How long one call may wait for the server before the connection is given up as broken.
    let timeoutMs: Int
    private var prepared: Set<String> = []

    /// Connects with `settings` (from `PGSettings`); throws UNAVAILABLE with libpq's reason.
    init(settings: PGSettings, timeoutMs: Int) throws(LarderError) {
        self.label = settings.label
        self.timeoutMs = timeoutMs
        let connection = settings.connect(timeoutMs: timeoutMs)
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let reason = connection.map { PGConnection.clean(String(cString: PQerrorMessage($0))) } ?? "out of memory"
            if let connection { PQfinish(connection) }
            throw LarderError(.unavailable, "cannot connect to \(settings.label): \(reason)")
        }
        handle = connection
        // libpq prints the server's notices (`CREATE ... IF NOT EXISTS` skipping, `DROP ... CASCADE`) on stderr by
        // default: the server's log is its own, so they are dropped.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        let encoding = PQparameterStatus(connection, "server_encoding").map { String(cString: $0) } ?? ""
        guard encoding == "UTF8" else {
            PQfinish(connection)
            handle = nil
            throw LarderError(
                .internal, "\(settings.label) uses the encoding \(encoding); Larder needs a UTF8 database "
                    + "(CREATE DATABASE ... ENCODING 'UTF8')")
        }
        guard PQsetnonblocking(connection, 1) == 0, PQenterPipelineMode(connection) == 1 else {
            let reason = PGConnection.clean(String(cString: PQerrorMessage(connection)))
            PQfinish(connection)
            handle = nil
            throw LarderError(.unavailable, "cannot set up the connection to \(settings.label): \(reason)")
        }
    }

    deinit { if let handle { PQfinish(handle) } }

    /// False once the connection failed; a broken connection is dropped and a new one made.
    var isUsable: Bool { handle.map { PQstatus($0) == CONNECTION_OK } ?? false }

    /// Whether a transaction is open (or failed and awaits ROLLBACK).
    var inTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    /// Closes the connection (the server ends its transaction, if any).
    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    static func clean(_ message: String) -> String {
        message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }.joined(separator: "; ")
    }

    /// Runs `statements` in one pipeline (one round trip) and answers their results in order. The first statement
    /// that fails ends the pipeline: PGFailure carries its SQLSTATE (the ones after it never ran). A connection that
    /// breaks or stays silent past the deadline is closed and UNAVAILABLE thrown.
    func run(_ statements: [PGStatement]) throws(LarderError) -> [PGResult] {
        do {
            return try pipeline(statements)
        } catch let failure as PGFailure {
            throw error(failure)
        } catch let error as LarderError {
            throw error
        } catch {
            throw LarderError(.internal, "\(label): \(error)")
        }
    }

    /// `run` with the server's failure kept as a `PGFailure` (callers that handle one SQLSTATE themselves).
    func pipeline(_ statements: [PGStatement]) throws -> [PGResult] {
        guard let handle, PQstatus(handle) == CONNECTION_OK else { throw broken("the connection is closed") }
        var commands: [String?] = []  // the prepared name a command creates, or nil
        var preparing: Set<String> = []  // prepared in this pipeline (once, however often it runs in it)
        for statement in statements {
            if let name = statement.name, !prepared.contains(name), preparing.insert(name).inserted {
                let types = statement.values.map { Oid($0.oid) }
                let sent = types.withUnsafeBufferPointer { types in
                    PQsendPrepare(handle, name, statement.sql, Int32(types.count), types.baseAddress)
                }
                guard sent == 1 else { throw broken(String(cString: PQerrorMessage(handle))) }
                commands.append(name)
            }
            guard send(statement, on: handle) else { throw broken(String(cString: PQerrorMessage(handle))) }
            commands.append(nil)
        }
        guard PQpipelineSync(handle) == 1 else { throw broken(String(cString: PQerrorMessage(handle))) }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutMs) * 1_000_000
        try flush(handle, deadline: deadline)
        var results: [PGResult] = []
        var failure: PGFailure?
        var index = 0
        while true {
            try waitForResult(handle, deadline: deadline)
            // Each command's results end with a NULL; the Sync's result ends the pipeline.
            guard let raw = PQgetResult(handle) else {
                guard PQstatus(handle) == CONNECTION_OK else { throw broken(String(cString: PQerrorMessage(handle))) }
                continue
            }
            let result = PGResult(raw)
            let status = PQresultStatus(raw)
            if status == PGRES_PIPELINE_SYNC { break }
            defer { index += 1 }
            switch status {
            case PGRES_COMMAND_OK, PGRES_TUPLES_OK:
                if index < commands.count, let name = commands[index] {
                    prepared.insert(name)
                } else {
                    results.append(result)
                }
            case PGRES_PIPELINE_ABORTED:
                break
            default:
                if failure == nil {
                    // The statement at fault: this command, or the one its failed prepare was for.
                    let statement = commands[..<min(index + 1, commands.count)].filter { $0 == nil }.count
                        - (index < commands.count && commands[index] == nil ? 1 : 0)
                    failure = PGFailure(
                        sqlState: PQresultErrorField(raw, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? "",
                        message: PQresultErrorField(raw, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
                            ?? PGConnection.clean(String(cString: PQresultErrorMessage(raw))),
                        statementIndex: statement)
                }
            }
            if PQstatus(handle) != CONNECTION_OK {
                throw broken(failure?.message ?? "the server closed the connection")
            }
        }
        if let failure {
            if failure.isUnavailable && PQstatus(handle) != CONNECTION_OK { close() }
            throw failure
        }
        return results
    }

    private func send(_ statement: PGStatement, on handle: OpaquePointer) -> Bool {
        var buffer: [UInt8] = []
        var offsets: [Int] = []
        var lengths: [Int32] = []
        for value in statement.values {
            let start = buffer.count
            if value.append(to: &buffer) {
                offsets.append(start)
                lengths.append(Int32(buffer.count - start))
            } else {
                offsets.append(-1)
                lengths.append(0)
            }
        }
        if buffer.isEmpty { buffer.append(0) }  // a valid base address for empty values
        let count = Int32(statement.values.count)
        let formats = [Int32](repeating: 1, count: statement.values.count)
        let types = statement.values.map { Oid($0.oid) }
        return buffer.withUnsafeBufferPointer { bytes in
            let base = UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self)
            let pointers: [UnsafePointer<CChar>?] = offsets.map { $0 < 0 ? nil : base + $0 }
            if let name = statement.name {
                return PQsendQueryPrepared(handle, name, count, pointers, lengths, formats, 1) == 1
            }
            return PQsendQueryParams(handle, statement.sql, count, types, pointers, lengths, formats, 1) == 1
        }
    }

    /// Sends what libpq buffered, reading meanwhile so that a server answering a long pipeline never blocks on us.
    private func flush(_ handle: OpaquePointer, deadline: UInt64) throws(LarderError) {
        while true {
            let state = PQflush(handle)
            if state == 0 { return }
            guard state == 1 else { throw broken(String(cString: PQerrorMessage(handle))) }
            let events = try poll(handle, events: Int16(POLLIN | POLLOUT), deadline: deadline)
            if events & Int16(POLLIN) != 0 && PQconsumeInput(handle) == 0 {
                throw broken(String(cString: PQerrorMessage(handle)))
            }
        }
    }

    private func waitForResult(_ handle: OpaquePointer, deadline: UInt64) throws(LarderError) {
        while PQisBusy(handle) == 1 {
            _ = try poll(handle, events: Int16(POLLIN), deadline: deadline)
            guard PQconsumeInput(handle) == 1 else { throw broken(String(cString: PQerrorMessage(handle))) }
        }
    }

    private func poll(_ handle: OpaquePointer, events: Int16, deadline: UInt64) throws(LarderError) -> Int16 {
        var descriptor = pollfd(fd: PQsocket(handle), events: events, revents: 0)
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else {
                throw broken("no answer within \(timeoutMs) ms (--postgres-timeout-ms)")
            }
            let waitMs = Int32(min(UInt64(Int32.max), (deadline - now) / 1_000_000 + 1))
            let ready = Glibc.poll(&descriptor, 1, waitMs)
            if ready > 0 { return descriptor.revents }
            if ready < 0 && errno != EINTR { throw broken("poll failed: errno \(errno)") }
        }
    }

    /// The connection's socket, to wait on for notifications (-1 when closed).
    var socket: Int32 { handle.map { PQsocket($0) } ?? -1 }

    /// Reads what the server sent and answers the payloads of the notifications received (after LISTEN), oldest
    /// first; call when `socket` is readable, or any time to collect what arrived during other calls. Throws
    /// UNAVAILABLE when the connection broke.
    func notifications() throws(LarderError) -> [String] {
        guard let handle, PQstatus(handle) == CONNECTION_OK else { throw broken("the connection is closed") }
        guard PQconsumeInput(handle) == 1 else { throw broken(String(cString: PQerrorMessage(handle))) }
        var payloads: [String] = []
        while let notification = PQnotifies(handle) {
            payloads.append(String(cString: notification.pointee.extra))
            PQfreemem(notification)
        }
        return payloads
    }

    /// Closes the connection and describes why.
    private func broken(_ reason: String) -> LarderError {
        close()
        return LarderError(.unavailable, "\(label) is unavailable: \(PGConnection.clean(reason)); retry shortly")
    }

    /// A server's failure as the error the client sees.
    func error(_ failure: PGFailure) -> LarderError {
        if failure.isUnavailable {
            return LarderError(.unavailable, "\(label) is unavailable: \(failure.message); retry shortly")
        }
        return LarderError(.internal, "\(label) failed: \(failure.message) (SQLSTATE \(failure.sqlState))")
    }

    /// Runs SQL text of any number of statements with the simple protocol, outside pipeline mode (migrations).
    func execute(_ sql: String) throws(LarderError) {
        guard let handle else { throw broken("the connection is closed") }
        PQexitPipelineMode(handle)
        defer { PQenterPipelineMode(handle) }
        PQsetnonblocking(handle, 0)
        defer { PQsetnonblocking(handle, 1) }
        var last: OpaquePointer?
        guard PQsendQuery(handle, sql) == 1 else { throw broken(String(cString: PQerrorMessage(handle))) }
        var failure: PGFailure?
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutMs) * 1_000_000
        while true {
            try waitForResult(handle, deadline: deadline)
            guard let raw = PQgetResult(handle) else { break }
            let status = PQresultStatus(raw)
            if status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && failure == nil {
                failure = PGFailure(
                    sqlState: PQresultErrorField(raw, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? "",
                    message: PGConnection.clean(String(cString: PQresultErrorMessage(raw))))
            }
            if let last { PQclear(last) }
            last = raw
        }
        if let last { PQclear(last) }
        if let failure { throw error(failure) }
    }
}

/// How to reach the database: the user's URI or conninfo string, with Larder's defaults around it.
public struct PGSettings: Sendable {
    /// The URI (`postgresql://...`) or conninfo (`host=... dbname=...`) as the user gave it.
    public let url: String
    /// Host, port, database and user, for messages (never the password).
    public let label: String

    /// Checks that libpq can read `url`; INVALID_ARGUMENT (with libpq's reason) otherwise.
    public init(url: String) throws(LarderError) {
        self.url = url
        var message: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(url, &message) else {
            let reason = message.map { PGConnection.clean(String(cString: $0)) } ?? "it cannot be parsed"
            PQfreemem(message)
            throw LarderError(.invalidArgument, "the PostgreSQL URL is not valid: \(reason)")
        }
        defer { PQconninfoFree(options) }
        var values: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val, value.pointee != 0 {
                values[String(cString: keyword)] = String(cString: value)
            }
            option += 1
        }
        let environment = ProcessInfo.processInfo.environment
        let host = values["host"] ?? values["hostaddr"] ?? environment["PGHOST"] ?? "/var/run/postgresql"
        let port = values["port"] ?? environment["PGPORT"] ?? "5432"
        let user = values["user"] ?? environment["PGUSER"] ?? "(the login user)"
        let database = values["dbname"] ?? environment["PGDATABASE"] ?? values["user"] ?? user
        label = "PostgreSQL at \(host):\(port) database '\(database)' user '\(user)'"
    }

    /// What the start-up line shows: the URL with any password replaced by `***`.
    public var redacted: String {
        var text = url
        // URI form: scheme://user:password@host...
        if let scheme = text.range(of: "://"), let at = text[scheme.upperBound...].firstIndex(of: "@") {
            let userInfo = text[scheme.upperBound..<at]
            if let colon = userInfo.firstIndex(of: ":") {
                text.replaceSubrange(text.index(after: colon)..<at, with: "***")
            }
        }
        // password=... as a query parameter or a conninfo keyword.
        let pattern = #"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)"#
        if let regex = try? NSRegularExpression(pattern: pattern, options: [.caseInsensitive]) {
            text = regex.stringByReplacingMatches(
                in: text, range: NSRange(text.startIndex..., in: text), withTemplate: "$1***")
        }
        return text
    }

    /// A new connection: Larder's defaults first (the user's string may override them), then the settings Larder
    /// relies on (UTF-8 to and from the client). libpq counts `connect_timeout` in whole seconds, at least 2.
    func connect(timeoutMs: Int) -> OpaquePointer? {
        let keywords = ["connect_timeout", "application_name", "dbname", "client_encoding"]
        let values = ["\(max(2, (timeoutMs + 999) / 1000))", "larder-server", url, "UTF8"]
        return withCStrings(keywords) { keywordPointers in
            withCStrings(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
    }
}

/// Calls `body` with a NULL-terminated array of C strings.
private func withCStrings<T>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> T) -> T {
    let copies = strings.map { strdup($0) }
    defer { for copy in copies { free(copy) } }
    return body(copies.map { UnsafePointer($0) } + [nil])
}
