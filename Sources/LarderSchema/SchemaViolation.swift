import LarderWire

/// Why a schema was refused when it was set: where in the schema (a JSON Pointer into the schema document), the
/// keyword at fault and what is wrong with it.
public struct SchemaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The JSON Pointer (RFC 6901) of the offending member of the schema: `/properties/zip/pattern`; "" for the whole
    /// schema.
    public var pointer: String
    /// The keyword at fault (an unsupported one is named here), or nil when the fault is a subschema's own type.
    public var keyword: String?
    /// What is wrong and what is supported instead.
    public var message: String

    /// An error with these fields.
    public init(pointer: String, keyword: String?, message: String) {
        self.pointer = pointer
        self.keyword = keyword
        self.message = message
    }

    /// `schema /properties/zip/pattern: …`, for logs and messages.
    public var description: String { "schema \(pointer.isEmpty ? "(root)" : pointer): \(message)" }
}

/// RFC 6901's escaping of one reference token: `~` as `~0`, `/` as `~1`.
func pointerToken(_ name: String) -> String {
    guard name.utf8.contains(where: { $0 == UInt8(ascii: "~") || $0 == UInt8(ascii: "/") }) else { return name }
    var token = ""
    for scalar in name.unicodeScalars {
        switch scalar {
        case "~": token += "~0"
        case "/": token += "~1"
        default: token.unicodeScalars.append(scalar)
        }
    }
    return token
}

/// How violations and errors quote values: short, JSON-spelled.
enum Rendering {
    /// A string as JSON, cut to `SchemaViolation.foundCharacters` characters with its length said when cut.
    static func string(_ text: String) -> String {
        let limit = SchemaViolation.foundCharacters
        var out: [UInt8] = []
        guard text.utf8.count > limit else {
            JSONWriter.writeString(text, into: &out)
            return String(decoding: out, as: UTF8.self)
        }
        let count = text.unicodeScalars.count
        guard count > limit else {
            JSONWriter.writeString(text, into: &out)
            return String(decoding: out, as: UTF8.self)
        }
        var cut = String.UnicodeScalarView()
        cut.append(contentsOf: text.unicodeScalars.prefix(limit))
        JSONWriter.writeString(String(cut) + "…", into: &out)
        return String(decoding: out, as: UTF8.self) + " (\(count) characters)"
    }

    /// A JSON value written compactly, cut to `limit` bytes (at a character boundary) with `…` when longer.
    static func value(_ value: JSON, limit: Int = 100) -> String {
        let bytes = value.bytes
        guard bytes.count > limit else { return String(decoding: bytes, as: UTF8.self) }
        var end = limit
        while end > 0 && bytes[end] & 0xC0 == 0x80 { end -= 1 }
        return String(decoding: bytes[..<end], as: UTF8.self) + "…"
    }

    /// `1 item`, `3 items`.
    static func count(_ n: Int, _ noun: String) -> String { n == 1 ? "1 \(noun)" : "\(n) \(noun)s" }
}
