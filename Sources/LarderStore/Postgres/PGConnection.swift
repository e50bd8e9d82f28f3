import CLibPQ
import Foundation
import LarderWire

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

/// Runs SQL text on a connection of its own (tests and tools: a schema per test, say).
package enum PGAdmin {
    package static func execute(url: String, _ sql: String) throws(LarderError) {
        let connection = try PGConnection(settings: try PGSettings(url: url), timeoutMs: 60_000)
        defer { connection.close() }
        try connection.execute(sql)
    }
}
