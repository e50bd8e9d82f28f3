import Foundation

/// The one error type of Larder: a status, a message a person can act on, and the offending field when there is one.
///
/// `message` never contains a token or a whole document; `details` carries machine-readable extras such as the
/// current revision on a `CONFLICT` or the supported versions on `UNSUPPORTED_VERSION`.
public struct LarderError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The stable status code.
    public var status: Status
    /// What was wrong and what to do about it.
    public var message: String
    /// The request field at fault (a dot path such as `filter.and.0.field`), if any.
    public var field: String?
    /// Extra machine-readable members of the error object (e.g. `currentRev`).
    public var details: JSONObject

    /// An error with this status and message, naming the request field at fault when there is one.
    ///
    /// ```swift
    /// throw LarderError(.invalidArgument, "price must be a number", field: "price")
    /// ```
    public init(_ status: Status, _ message: String, field: String? = nil, details: JSONObject = [:]) {
        self.status = status
        self.message = message
        self.field = field
        self.details = details
    }

    /// The status name, the message and the field at fault, for logs: `NOT_FOUND: no document ... (field: id)`.
    public var description: String {
        var text = "\(status.name): \(message)"
        if let field { text += " (field: \(field))" }
        return text
    }

    /// The error object sent in an error response's JSON part.
    package var json: JSON {
        var object = details
        object["code"] = .int(Int64(status.rawValue))
        object["name"] = .string(status.name)
        object["message"] = .string(message)
        if let field { object["field"] = .string(field) }
        return .object(object)
    }

    /// Reads an error object from a response; a malformed one still yields a usable error.
    package init(status: Status, json: JSON) {
        var details = json.objectValue ?? [:]
        let message = details["message"]?.stringValue ?? "the server answered \(status.name) without a message"
        let field = details["field"]?.stringValue
        for key in ["code", "name", "message", "field"] { details[key] = nil }
        self.init(status, message, field: field, details: details)
    }

    static func invalid(_ field: String, _ message: String) -> LarderError {
        LarderError(.invalidArgument, message, field: field)
    }
}

extension LarderError: LocalizedError {
    /// The message, for `localizedDescription` and alerts: what was wrong and what to do about it. (`description`
    /// adds the status name and the field at fault, for logs.)
    ///
    /// ```swift
    /// do { try await todos.get(id) } catch { alert.text = error.localizedDescription }
    /// ```
    public var errorDescription: String? { message }

    /// The status, by name (e.g. `CONFLICT`).
    public var failureReason: String? { status.name }
}
