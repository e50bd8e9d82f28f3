/// A JSON value. Objects keep their members' order, so what a client stored is what it reads back.
public enum JSON: Sendable, Hashable {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// An integer that fits in 64 bits; written without a fraction or exponent.
    case int(Int64)
    /// Any other finite number.
    case double(Double)
    /// A string.
    case string(String)
    /// An array of values.
    case array([JSON])
    /// An object: members in the order they were written.
    case object(JSONObject)

    /// The members when the value is an object; nil otherwise.
    public var objectValue: JSONObject? { if case .object(let o) = self { o } else { nil } }
    /// The elements when the value is an array; nil otherwise.
    public var arrayValue: [JSON]? { if case .array(let a) = self { a } else { nil } }
    /// The string when the value is one; nil otherwise.
    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    /// The boolean when the value is one; nil otherwise.
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
    /// True when the value is `null`.
    public var isNull: Bool { if case .null = self { true } else { false } }

    /// The value as an integer when it is one (a double with no fraction counts).
    public var intValue: Int64? {
        switch self {
        case .int(let i): i
        case .double(let d) where d.rounded() == d && abs(d) < 9.2e18: Int64(d)
        default: nil
        }
    }

    /// The value as a double when it is a number.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): Double(i)
        case .double(let d): d
        default: nil
        }
    }

    /// Member access on objects; `nil` for other values.
    public subscript(key: String) -> JSON? { objectValue?[key] }

    /// The name of this value's type as the error messages say it.
    package var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int, .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    /// The type's name with its article, for "must be an object, not an array".
    package var typeNameWithArticle: String {
        switch self {
        case .null: "null"
        case .array, .object: "an \(typeName)"
        default: "a \(typeName)"
        }
    }
}

/// A JSON object: members in insertion order with hashed lookup, so large objects stay linear to build.
public struct JSONObject: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    /// The members' keys, in order.
    public private(set) var keys: [String] = []
    private var values: [String: JSON] = [:]

    /// An empty object.
    public init() {}

    /// An object with these members, in this order: `let patch: JSONObject = ["price": 42, "note": nil]`.
    public init(dictionaryLiteral elements: (String, JSON)...) {
        for (key, value) in elements { self[key] = value }
    }

    /// The number of members.
    public var count: Int { keys.count }
    /// True when the object has no members.
    public var isEmpty: Bool { keys.isEmpty }

    /// Reads a member; assigning `nil` removes it, assigning to a new key appends it.
    public subscript(key: String) -> JSON? {
        get { values[key] }
        set {
            if let newValue {
                if values.updateValue(newValue, forKey: key) == nil { keys.append(key) }
            } else if values.removeValue(forKey: key) != nil {
                keys.removeAll { $0 == key }
            }
        }
    }

    /// Adds a member that the caller knows is new; returns false (and changes nothing) when the key exists.
    @discardableResult
    mutating func insertNew(_ key: String, _ value: JSON) -> Bool {
        guard values.updateValue(value, forKey: key) == nil else { return false }
        keys.append(key)
        return true
    }

    /// The members in order, as `(key, value)` pairs: `for (key, value) in object { ... }`.
    public func makeIterator() -> some IteratorProtocol<(key: String, value: JSON)> {
        var index = 0
        return AnyIterator { [keys, values] in
            guard index < keys.count else { return nil }
            defer { index += 1 }
            return (keys[index], values[keys[index]]!)
        }
    }

    /// True when both objects have the same members with equal values, whatever their order.
    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool { lhs.values == rhs.values }
    /// Hashes the members and their values (not their order), as `==` compares them.
    public func hash(into hasher: inout Hasher) { hasher.combine(values) }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    /// A string value: `let name: JSON = "Ball"`.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An integer value: `let price: JSON = 42`.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// A boolean value: `let sold: JSON = true`.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// A number with a fraction: `let weight: JSON = 0.5`.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// An array value: `let tags: JSON = ["red", 3]`.
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    /// `null`: `let missing: JSON = nil`.
    public init(nilLiteral: ()) { self = .null }
    /// An object value, members in this order: `let address: JSON = ["city": "Oslo", "zip": "0150"]`.
    public init(dictionaryLiteral elements: (String, JSON)...) {
        var object = JSONObject()
        for (key, value) in elements { object[key] = value }
        self = .object(object)
    }
}

// MARK: - Writing

extension JSON {
    /// The compact UTF-8 encoding of this value.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(into: &out)
        return out
    }

    /// Appends the compact UTF-8 encoding of this value to `out`.
    package func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: JSONWriter.null)
        case .bool(let b): out.append(contentsOf: b ? JSONWriter.true : JSONWriter.false)
        case .int(let i): JSONWriter.writeInt(i, into: &out)
        case .double(let d): JSONWriter.writeDouble(d, into: &out)
        case .string(let s): JSONWriter.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (n, item) in items.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let object): object.write(into: &out)
        }
    }
}

extension JSONObject {
    /// Appends the compact UTF-8 encoding of this object to `out`.
    package func write(into out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        for (n, key) in keys.enumerated() {
            if n > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.writeString(key, into: &out)
            out.append(UInt8(ascii: ":"))
            values[key]!.write(into: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// The compact UTF-8 encoding of this object.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        write(into: &out)
        return out
    }
}

/// Low-level pieces for writing JSON by hand, e.g. splicing stored document bytes into a response without decoding.
package enum JSONWriter {
    static let null = Array("null".utf8)
    static let `true` = Array("true".utf8)
    static let `false` = Array("false".utf8)
    private static let hex = Array("0123456789abcdef".utf8)

    /// Appends `string` as a quoted, escaped JSON string.
    package static func writeString(_ string: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { utf8 in
            var start = 0
            for i in 0..<utf8.count {
                let byte = utf8[i]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<i]))
                start = i + 1
                writeEscape(byte, into: &out)
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<utf8.count]))
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends the escape `writeString` writes for `byte`, one of the bytes it escapes: `"`, `\`, or a control
    /// character.
    static func writeEscape(_ byte: UInt8, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        default:
            out.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0xF)])
        }
    }

    /// Appends a decimal integer.
    package static func writeInt(_ value: Int64, into out: inout [UInt8]) {
        if value >= 0 && value < 10 {
            out.append(UInt8(ascii: "0") + UInt8(value))
            return
        }
        out.append(contentsOf: String(value).utf8)
    }

    /// Appends a number in its shortest round-trip form; non-finite values (which JSON cannot hold) become null.
    package static func writeDouble(_ value: Double, into out: inout [UInt8]) {
        guard value.isFinite else { return out.append(contentsOf: null) }
        out.append(contentsOf: value.description.utf8)
    }
}
