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
        let raw = UnsafeRawPointer(p)
        @inline(__always) func digits(_ offset: Int) -> UInt32 {
            UInt32(bigEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        }
        // Eight digits at a time (the groups of four in pairs): 8, 4 + 4, 4 + 4, 8.
        guard let a = HexDigits.value(UInt64(digits(0)) << 32 | UInt64(digits(4))),
            let b = HexDigits.value(UInt64(digits(9)) << 32 | UInt64(digits(14))),
            let c = HexDigits.value(UInt64(digits(19)) << 32 | UInt64(digits(24))),
            let d = HexDigits.value(UInt64(digits(28)) << 32 | UInt64(digits(32)))
        else { return nil }
        var halves = ((UInt64(a) << 32 | UInt64(b)).bigEndian, (UInt64(c) << 32 | UInt64(d)).bigEndian)
        return withUnsafeBytes(of: &halves) { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }

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
        let (high, low) = withUnsafeBytes(of: uuid) { raw in
            (
                UInt64(bigEndian: raw.loadUnaligned(as: UInt64.self)),
                UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            )
        }
        return try withUnsafeMutableBytes(of: &text) { buffer throws(E) -> R in
            let out = buffer.baseAddress!
            @inline(__always) func put(_ digits: UInt64, at offset: Int) {
                out.storeBytes(of: digits.bigEndian, toByteOffset: offset, as: UInt64.self)
            }
            @inline(__always) func shiftFour(from offset: Int) {
                let moved = out.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
                out.storeBytes(of: moved, toByteOffset: offset + 1, as: UInt32.self)
                out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: offset, as: UInt8.self)
            }
            // 8-4-4-4-12: each eight digits stored whole, the second four of a pair moved one on for its hyphen.
            put(HexDigits.text(UInt32(truncatingIfNeeded: high >> 32)), at: 0)
            out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 8, as: UInt8.self)
            put(HexDigits.text(UInt32(truncatingIfNeeded: high)), at: 9)
            shiftFour(from: 13)
            out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 18, as: UInt8.self)
            put(HexDigits.text(UInt32(truncatingIfNeeded: low >> 32)), at: 19)
            shiftFour(from: 23)
            put(HexDigits.text(UInt32(truncatingIfNeeded: low)), at: 28)
            return try body(UnsafeBufferPointer(start: out.assumingMemoryBound(to: UInt8.self), count: 36))
        }
    }
}

/// Hex digits eight at a time, in the bytes of a UInt64 (the first digit in the most significant byte): one pass of
/// shifts and masks where a loop took a table lookup or two tests per digit.
package enum HexDigits {
    private static let ones: UInt64 = 0x0101_0101_0101_0101

    /// Writes `value` as 16 lowercase hex digits at `out`, the most significant first.
    package static func write(_ value: UInt64, into out: UnsafeMutableRawPointer) {
        out.storeBytes(of: text(UInt32(truncatingIfNeeded: value >> 32)).bigEndian, as: UInt64.self)
        out.storeBytes(of: text(UInt32(truncatingIfNeeded: value)).bigEndian, toByteOffset: 8, as: UInt64.self)
    }

    /// The eight lowercase digits of `value`, the most significant first.
    @inline(__always) static func text(_ value: UInt32) -> UInt64 {
        // Each nibble to a byte of its own, in order.
        var x = UInt64(value)
        x = (x | x << 16) & 0x0000_FFFF_0000_FFFF
        x = (x | x << 8) & 0x00FF_00FF_00FF_00FF
        x = (x | x << 4) & 0x0F0F_0F0F_0F0F_0F0F
        // A nibble of 10 or more (bit 4 set once 6 is added) is a letter: '0' + 39 + n - 10 is 'a' + n - 10.
        let letters = ((x &+ 6 &* ones) >> 4) & ones
        return x &+ 0x3030_3030_3030_3030 &+ letters &* 0x27
    }

    /// The value of eight hex digits (either case), the first the most significant; nil when any byte is not one.
    @inline(__always) static func value(_ text: UInt64) -> UInt32? {
        let top: UInt64 = 0x8080_8080_8080_8080
        guard text & top == 0 else { return nil }
        // Bytes below 0x80 only, so adding to each cannot carry into the next: a byte's bit 7 after adding
        // 0x80 - low says it is at least `low`, after adding 0x7F - high that it is above `high`.
        @inline(__always) func within(_ bytes: UInt64, _ low: UInt64, _ high: UInt64) -> UInt64 {
            let atLeastLow = bytes &+ (0x80 - low) &* ones
            let aboveHigh = bytes &+ (0x7F - high) &* ones
            return atLeastLow & ~aboveHigh & top
        }
        let digits = within(text, 0x30, 0x39)
        // Setting bit 5 turns 'A'...'F' into 'a'...'f' and changes no other byte into one of those.
        let letters = within(text | 0x2020_2020_2020_2020, 0x61, 0x66)
        guard digits | letters == top else { return nil }
        // A digit's value is its low nibble; a letter's is its low nibble plus 9.
        var x = (text & 0x0F0F_0F0F_0F0F_0F0F) &+ (letters >> 7) &* 9
        x = (x >> 4 | x) & 0x00FF_00FF_00FF_00FF
        x = (x >> 8 | x) & 0x0000_FFFF_0000_FFFF
        x = (x >> 16 | x) & 0x0000_0000_FFFF_FFFF
        return UInt32(truncatingIfNeeded: x)
    }
}
