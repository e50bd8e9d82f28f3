import Foundation

/// Reads typed members out of a request object, naming the offending field (as a dot path) in every error, and
/// rejecting members it was never asked about so that a typo (`limt`) is an error rather than a silent default.
package struct FieldReader {
    package let object: JSONObject
    /// The path of `object` itself, e.g. `filter.and.0`; nil at the top level.
    package let path: String?
    private var seen: Set<String> = []

    package init(_ object: JSONObject, path: String? = nil) {
        self.object = object
        self.path = path
    }

    /// The dot path of member `name`.
    package func fieldPath(_ name: String) -> String { path.map { "\($0).\(name)" } ?? name }

    private mutating func value(_ name: String) -> JSON? {
        seen.insert(name)
        guard let value = object[name], !value.isNull else { return nil }
        return value
    }

    private func wrongType(_ name: String, _ expected: String, _ got: JSON) -> LarderError {
        .invalid(fieldPath(name), "\(fieldPath(name)) must be \(expected), not \(got.typeNameWithArticle)")
    }

    private func missing(_ name: String) -> LarderError {
        .invalid(fieldPath(name), "\(fieldPath(name)) is required")
    }

    package mutating func optionalJSON(_ name: String) -> JSON? { value(name) }

    package mutating func optionalString(_ name: String, maxLength: Int = 1 << 20) throws(LarderError) -> String? {
        guard let v = value(name) else { return nil }
        guard case .string(let s) = v else { throw wrongType(name, "a string", v) }
        guard s.utf8.count <= maxLength else {
            throw .invalid(fieldPath(name), "\(fieldPath(name)) is longer than \(maxLength) bytes")
        }
        return s
    }

    package mutating func string(_ name: String, maxLength: Int = 1 << 20) throws(LarderError) -> String {
        guard let s = try optionalString(name, maxLength: maxLength) else { throw missing(name) }
        return s
    }

    /// A limit of HELLO's `limits` (0 or more) into `value`, when present. A value past `Int`'s range (a quota over
    /// 2 GiB read by a 32-bit client, such as watchOS) becomes the largest `Int`.
    package mutating func limit(_ name: String, into value: inout Int) throws(LarderError) {
        if let v = try optionalInt(name, range: 0...Int64.max) { value = Int(clamping: v) }
    }

    package mutating func optionalInt(_ name: String, range: ClosedRange<Int64>) throws(LarderError) -> Int64? {
        guard let v = value(name) else { return nil }
        guard let i = v.intValue else { throw wrongType(name, "an integer", v) }
        guard range.contains(i) else {
            throw .invalid(fieldPath(name), "\(fieldPath(name)) must be between \(range.lowerBound) and \(range.upperBound)")
        }
        return i
    }

    package mutating func int(_ name: String, range: ClosedRange<Int64>) throws(LarderError) -> Int64 {
        guard let i = try optionalInt(name, range: range) else { throw missing(name) }
        return i
    }

    package mutating func optionalBool(_ name: String) throws(LarderError) -> Bool? {
        guard let v = value(name) else { return nil }
        guard case .bool(let b) = v else { throw wrongType(name, "true or false", v) }
        return b
    }

    package mutating func optionalObject(_ name: String) throws(LarderError) -> JSONObject? {
        guard let v = value(name) else { return nil }
        guard case .object(let o) = v else { throw wrongType(name, "an object", v) }
        return o
    }

    package mutating func object(_ name: String) throws(LarderError) -> JSONObject {
        guard let o = try optionalObject(name) else { throw missing(name) }
        return o
    }

    package mutating func optionalArray(_ name: String, maxCount: Int) throws(LarderError) -> [JSON]? {
        guard let v = value(name) else { return nil }
        guard case .array(let a) = v else { throw wrongType(name, "an array", v) }
        guard a.count <= maxCount else {
            throw .invalid(fieldPath(name), "\(fieldPath(name)) has more than \(maxCount) elements")
        }
        return a
    }

    package mutating func optionalUUID(_ name: String) throws(LarderError) -> UUID? {
        guard let s = try optionalString(name, maxLength: 64) else { return nil }
        return try FieldReader.uuid(s, field: fieldPath(name))
    }

    package mutating func uuid(_ name: String) throws(LarderError) -> UUID {
        guard let id = try optionalUUID(name) else { throw missing(name) }
        return id
    }

    /// Parses a UUID in its 36-character textual form.
    package static func uuid(_ text: String, field: String) throws(LarderError) -> UUID {
        guard let id = strictUUID(text) else {
            throw .invalid(field, "\(field) must be a UUID like 3f2504e0-4f89-11d3-9a0c-0305e82c3301")
        }
        return id
    }

    /// Exactly 36 bytes: hex digits (either case) with hyphens at 8, 13, 18 and 23, nothing else. Not
    /// `UUID(uuidString:)`: on Linux it reads "0x", "+" and spaces inside a group, so several texts named one id.
    static func strictUUID(_ text: String) -> UUID? {
        var text = text
        return text.withUTF8 { strictUUID(utf8: $0) }
    }

    /// `strictUUID` over raw UTF-8 bytes (a database column, a frame), without making a String first.
    static func strictUUID(utf8: UnsafeBufferPointer<UInt8>) -> UUID? {
        guard utf8.count == 36, let p = utf8.baseAddress else { return nil }
        guard p[8] == 0x2D, p[13] == 0x2D, p[18] == 0x2D, p[23] == 0x2D else { return nil }
        return hexDigitValues.withUnsafeBufferPointer { table -> UUID? in
            // Each byte from two digits; a non-digit's value (0xFF) leaves high bits in `invalid`.
            var invalid: UInt8 = 0
            @inline(__always) func byte(_ i: Int) -> UInt8 {
                let high = table[Int(p[i])]
                let low = table[Int(p[i + 1])]
                invalid |= high | low
                return high << 4 | low
            }
            let uuid: uuid_t = (
                byte(0), byte(2), byte(4), byte(6), byte(9), byte(11), byte(14), byte(16),
                byte(19), byte(21), byte(24), byte(26), byte(28), byte(30), byte(32), byte(34)
            )
            return invalid & 0xF0 == 0 ? UUID(uuid: uuid) : nil
        }
    }

    /// The value of each hex digit byte (either case); 0xFF for every other byte.
    private static let hexDigitValues: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, digit) in "0123456789abcdef".utf8.enumerated() { table[Int(digit)] = UInt8(value) }
        for (value, digit) in "ABCDEF".utf8.enumerated() { table[Int(digit)] = UInt8(value + 10) }
        return table
    }()

    package mutating func uuidArray(_ name: String, maxCount: Int) throws(LarderError) -> [UUID] {
        guard let items = try optionalArray(name, maxCount: maxCount) else { throw missing(name) }
        var ids: [UUID] = []
        ids.reserveCapacity(items.count)
        for (n, item) in items.enumerated() {
            guard case .string(let s) = item else { throw wrongType("\(name).\(n)", "a UUID string", item) }
            ids.append(try FieldReader.uuid(s, field: fieldPath("\(name).\(n)")))
        }
        return ids
    }

    /// Throws for the first member that no accessor asked for.
    package func finish() throws(LarderError) {
        for key in object.keys where !seen.contains(key) {
            throw .invalid(fieldPath(key), "unknown field \(fieldPath(key)); check its spelling against Protocol.md")
        }
    }
}

extension UUID {
    /// Parses the strict 36-character form (hex digits of either case, hyphens at 8, 13, 18 and 23), without
    /// Foundation's `sscanf`-based parser, which is slow on the read path and lenient about what it accepts.
    package init?(wireString text: String) {
        guard let id = FieldReader.strictUUID(text) else { return nil }
        self = id
    }

    /// Parses the strict 36-character form from raw UTF-8 bytes.
    package init?(wireUTF8 bytes: UnsafeBufferPointer<UInt8>) {
        guard let id = FieldReader.strictUUID(utf8: bytes) else { return nil }
        self = id
    }

    /// The lowercase textual form used on the wire.
    package var wireString: String {
        var out: [UInt8] = []
        out.reserveCapacity(36)
        writeWire(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the lowercase textual form (no quotes) to `out`.
    package func writeWire(into out: inout [UInt8]) {
        withWireUTF8 { out.append(contentsOf: $0) }
    }

    /// Calls `body` with the lowercase textual form, formatted on the stack (36 bytes, valid only inside `body`).
    package func withWireUTF8<R, E: Error>(_ body: (UnsafeBufferPointer<UInt8>) throws(E) -> R) throws(E) -> R {
        var text: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)  // 40 bytes of stack
        return try withUnsafeMutableBytes(of: &text) { buffer throws(E) -> R in
            withUnsafeBytes(of: uuid) { raw in
                var at = 0
                for i in 0..<16 {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        buffer[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    let high = raw[i] >> 4
                    let low = raw[i] & 0xF
                    buffer[at] = high < 10 ? UInt8(ascii: "0") + high : UInt8(ascii: "a") - 10 + high
                    buffer[at + 1] = low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") - 10 + low
                    at += 2
                }
            }
            return try body(UnsafeBufferPointer(start: buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), count: 36))
        }
    }
}
