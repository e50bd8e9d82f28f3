import Foundation

// Named constants in the shape of Opcode (Opcode.swift).
/// A stable numeric status code: the one error vocabulary of the wire, the store, the client and the CLI.
///
/// Values never change meaning once published; new codes are only ever appended (see Protocol.md, "Status codes").
public struct Status: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The code's number on the wire.
    public let rawValue: UInt16
    /// The status numbered `rawValue`, known to this version or not.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The request succeeded.
    public static let ok = Status(rawValue: 0)
    /// A field of the request is missing, has the wrong type or an invalid value.
    public static let invalidArgument = Status(rawValue: 1)
    /// The document, blob or collection does not exist.
    public static let notFound = Status(rawValue: 2)
    /// The expected revision differs from the current one, or the id already exists.
    public static let conflict = Status(rawValue: 3)
    /// A frame, JSON part, document or blob is larger than the announced limit.
    public static let payloadTooLarge = Status(rawValue: 4)
    /// A blob is not a well-formed JPEG.
    public static let unsupportedMediaType = Status(rawValue: 5)
    /// The server requires a token and none (or a wrong one) was presented.
    public static let unauthenticated = Status(rawValue: 6)
    /// None of the offered protocol versions is supported.
    public static let unsupportedVersion = Status(rawValue: 7)
    /// A connection, in-flight or rate limit was reached; retry later or with less concurrency.
    public static let resourceExhausted = Status(rawValue: 8)
    /// The server is shutting down or the connection is gone; retry elsewhere or later.
    public static let unavailable = Status(rawValue: 9)
    /// The opcode is not one this server knows.
    public static let unknownOpcode = Status(rawValue: 10)
    /// The byte stream broke the framing rules; the connection is closed after this error.
    public static let protocolError = Status(rawValue: 11)
    /// A bug or an unexpected failure on the server; the request may be retried.
    public static let `internal` = Status(rawValue: 12)
    /// The request did not finish within its deadline (client-side timeouts, idle and frame deadlines).
    public static let deadlineExceeded = Status(rawValue: 13)
    /// The token is valid but its role or its collections do not cover the request; the connection stays open.
    public static let permissionDenied = Status(rawValue: 14)
    /// A stored record does not decode as the app's model type. Made by the client, never sent by a server: codes
    /// from 1000 up are the client's own.
    public static let decodingFailed = Status(rawValue: 1000)

    /// Every status this version knows, in code order.
    public static let all: [Status] = [
        .ok, .invalidArgument, .notFound, .conflict, .payloadTooLarge, .unsupportedMediaType, .unauthenticated,
        .unsupportedVersion, .resourceExhausted, .unavailable, .unknownOpcode, .protocolError, .internal,
        .deadlineExceeded, .permissionDenied,
    ]

    /// The upper-snake-case name used on the wire and by the CLI, e.g. `NOT_FOUND`.
    public var name: String {
        switch rawValue {
        case 0: "OK"
        case 1: "INVALID_ARGUMENT"
        case 2: "NOT_FOUND"
        case 3: "CONFLICT"
        case 4: "PAYLOAD_TOO_LARGE"
        case 5: "UNSUPPORTED_MEDIA_TYPE"
        case 6: "UNAUTHENTICATED"
        case 7: "UNSUPPORTED_VERSION"
        case 8: "RESOURCE_EXHAUSTED"
        case 9: "UNAVAILABLE"
        case 10: "UNKNOWN_OPCODE"
        case 11: "PROTOCOL_ERROR"
        case 12: "INTERNAL"
        case 13: "DEADLINE_EXCEEDED"
        case 14: "PERMISSION_DENIED"
        case 1000: "DECODING_FAILED"
        default: "STATUS_\(rawValue)"
        }
    }

    /// Looks a status up by its wire name (or the client's own `DECODING_FAILED`).
    public init?(name: String) {
        guard let found = (Status.all + [.decodingFailed]).first(where: { $0.name == name }) else { return nil }
        self = found
    }

    /// The status's name, e.g. `NOT_FOUND`.
    public var description: String { name }
}
