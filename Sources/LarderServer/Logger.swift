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

/// Line-oriented logging to stderr. Callers never pass a token or a document body; messages are built lazily so
/// debug lines cost nothing when debug is off.
struct Logger: Sendable {
    var level: LogLevel

    func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard level <= self.level else { return }
        let line = "\(Timestamp.string(Timestamp.nowMs())) \(level.name.uppercased()) \(message())\n"
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
