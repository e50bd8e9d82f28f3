import CLibPQ
import Foundation
import LarderWire

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
