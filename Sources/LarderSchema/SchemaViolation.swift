import LarderWire

/// One way a record fails its collection's schema: where the value is, the keyword it failed, what that keyword
/// expected and, for a scalar, what was there. Nothing else of the record is carried: a string is cut to its first
/// `SchemaViolation.foundCharacters` characters, and an object or array is named by its type only.
public struct SchemaViolation: Sendable, Hashable, CustomStringConvertible {
    /// The JSON Pointer (RFC 6901) of the value in the record: `/address/zip`, `/tags/0`, "" for the record itself.
    /// For `required`, the pointer the missing member would have (`/title`); for `additionalProperties`, the extra
    /// member's.
    public var pointer: String
    /// The schema keyword that failed: `type`, `required`, `pattern`, ...; `false` where the schema is `false`.
    public var keyword: String
    /// What the keyword expected, for a person: `string or null`, `at least 1 character`, `>= 0`.
    public var expected: String
    /// What was found: the scalar as JSON (a string cut short, with its length), or `an object` / `an array` /
    /// `N items`; nil where nothing was there (`required`).
    public var found: String?

    /// The most characters of a string value a violation quotes in `found`.
    public static let foundCharacters = 40

    /// A violation with these fields.
    public init(pointer: String, keyword: String, expected: String, found: String? = nil) {
        self.pointer = pointer
        self.keyword = keyword
        self.expected = expected
        self.found = found
    }

    /// `/address/zip: pattern: expected matching /^[0-9]{5}$/, found "1234"`, for logs and messages.
    public var description: String {
        let place = pointer.isEmpty ? "(the record)" : pointer
        return "\(place): \(keyword): expected \(expected)" + (found.map { ", found \($0)" } ?? "")
    }

    /// The violation as a member of a refusal's `violations` array:
    /// `{"pointer": …, "keyword": …, "expected": …, "found": …}` (`found` only when there is one).
    public var json: JSON {
        var object: JSONObject = [
            "pointer": .string(pointer), "keyword": .string(keyword), "expected": .string(expected),
        ]
        if let found { object["found"] = .string(found) }
        return .object(object)
    }
}

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
