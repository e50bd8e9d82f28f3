#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderWire

/// How much the server says on stderr.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case error = 0
    case warn = 1
    case info = 2
    case debug = 3

// Name to case and back, as Role's (Roles.swift).
    public init?(name: String) {
        switch name.lowercased() {
        case "error": self = .error
        case "warn", "warning": self = .warn
        case "info": self = .info
        case "debug": self = .debug
        default: return nil
        }
    }

    public var name: String {
        switch self {
        case .error: "error"
        case .warn: "warn"
        case .info: "info"
        case .debug: "debug"
        }
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// How log lines look: `text` for people, `json` (one object per line) for log collectors.
public enum LogFormat: String, Sendable, CaseIterable {
    case text
    case json
}

/// Line-oriented logging to stderr. Callers never pass a token or a document body; messages are built lazily so
/// debug lines cost nothing when debug is off.
struct Logger: Sendable {
    var level: LogLevel
    var format: LogFormat = .text
    /// Requests that take at least this long are logged at warn (`--slow-ms`).
    var slowMicros: UInt64 = 1_000_000

    /// What a line is about: the connection (its id and peer address) and details (`opcode`, `status`, ...).
    struct Context {
        var connection: Int?
        var peer: String?
        var fields: [(String, JSON)] = []
    }

    func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        log(level, message(), Context())
    }

    /// One line: in text, `TIME LEVEL [conn N peer P] message key=value...`; in JSON, an object with `time`,
    /// `level`, `message`, then `conn`, `peer` and the fields.
    func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ context: @autoclosure () -> Context) {
        guard level <= self.level else { return }
        let line = LogLine.format(format, level: level, message(), context())
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(2, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { return }
            }
        }
    }

    func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    func warn(_ message: @autoclosure () -> String) { log(.warn, message()) }
    func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
}

/// The shape of a log line, shared by the logger and by what `larder-server` prints itself (the line saying it is
/// ready, a failure to start), so that with `--log-format json` every line either prints is a JSON object.
public enum LogLine {
    /// One line ending in a newline: in text, `TIME LEVEL message key=value...`; in JSON, an object with `time`,
    /// `level`, `message`, then the fields.
    public static func format(
        _ format: LogFormat, level: LogLevel, _ message: String, fields: [(String, JSON)] = []
    ) -> String {
        LogLine.format(format, level: level, message, Logger.Context(fields: fields))
    }

    static func format(_ format: LogFormat, level: LogLevel, _ message: String, _ context: Logger.Context) -> String {
        let time = Timestamp.string(Timestamp.nowMs())
        switch format {
        case .text:
            var line = "\(time) \(level.name.uppercased()) "
            if let connection = context.connection { line += "conn \(connection) " }
            if let peer = context.peer { line += "(\(peer)) " }
            line += message
            for (name, value) in context.fields { line += " \(name)=\(value.text)" }
            return line + "\n"
        case .json:
            var object: JSONObject = ["time": .string(time), "level": .string(level.name), "message": .string(message)]
            if let connection = context.connection { object["conn"] = .int(Int64(connection)) }
            if let peer = context.peer { object["peer"] = .string(peer) }
            for (name, value) in context.fields { object[name] = value }
            return String(decoding: object.bytes, as: UTF8.self) + "\n"
        }
    }

    /// The log format `arguments` and `environment` ask for, read without parsing the rest: how to word an error
    /// in the options themselves.
    public static func requestedFormat(_ arguments: [String], environment: [String: String]) -> LogFormat {
        var format = LogFormat(rawValue: environment["LARDER_SERVER_LOG_FORMAT"]?.lowercased() ?? "") ?? .text
        for (n, argument) in arguments.enumerated() {
            var value: String?
            if argument == "--log-format", n + 1 < arguments.count { value = arguments[n + 1] }
            if argument.hasPrefix("--log-format=") { value = String(argument.dropFirst("--log-format=".count)) }
            if let value, let chosen = LogFormat(rawValue: value.lowercased()) { format = chosen }
        }
        return format
    }
}

extension JSON {
    /// A field's value in a text log line: strings bare, everything else as JSON.
    fileprivate var text: String {
        if case .string(let string) = self { return string }
        return String(decoding: bytes, as: UTF8.self)
    }
}
