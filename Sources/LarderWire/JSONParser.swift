#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A strict RFC 8259 parser with limits: nesting depth, and only finite numbers.
///
/// It rejects what a lenient parser would guess at: invalid UTF-8, lone surrogates, control characters in strings,
/// duplicate object keys, trailing bytes, numbers that overflow a double.
package struct JSONParser {
    /// The deepest nesting of arrays and objects accepted in a request's JSON part, the outer object being level 1 and
    /// an array counting as an object does (Protocol.md §2). A document is a member of its request, so it nests at
    /// most 63 levels of its own.
    package static let defaultMaxDepth = 64
    /// The deepest nesting an answer or event may have: it carries documents inside their envelopes, at most 5 levels
    /// down (GROUP's `groups`, a section, `records`, a record, `data`), so a document of 63 levels reaches 68.
    package static let maxAnswerDepth = defaultMaxDepth + 4

    /// Parses one JSON value that spans all of `bytes` (whitespace around it allowed).
    package static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = defaultMaxDepth) throws(LarderError) -> JSON {
        let result: Result<JSON, LarderError>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(LarderError) -> JSON in try parse(buffer: buffer, maxDepth: maxDepth) }
        }
        if let result { return try result.get() }
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { buffer throws(LarderError) -> JSON in
            try parse(buffer: buffer, maxDepth: maxDepth)
        }
    }

    /// Parses a JSON object; any other top-level value is INVALID_ARGUMENT.
    package static func parseObject(_ bytes: some Collection<UInt8>, maxDepth: Int = defaultMaxDepth) throws(LarderError) -> JSONObject {
        let value = try parse(bytes, maxDepth: maxDepth)
        guard case .object(let object) = value else {
            throw LarderError(.invalidArgument, "the JSON part must be an object, not \(value.typeNameWithArticle)")
        }
        return object
    }

    static func parse(buffer: UnsafeBufferPointer<UInt8>, maxDepth: Int) throws(LarderError) -> JSON {
        var parser = JSONParser(buffer: buffer, maxDepth: maxDepth)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == buffer.count else { throw parser.error("unexpected bytes after the JSON value") }
        return value
    }

    private let buffer: UnsafeBufferPointer<UInt8>
    private let maxDepth: Int
    private var index = 0

    private init(buffer: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.buffer = buffer
        self.maxDepth = maxDepth
    }

    private func error(_ message: String) -> LarderError {
        LarderError(.invalidArgument, "invalid JSON at byte \(index): \(message)")
    }

    private mutating func skipWhitespace() {
        while index < buffer.count {
            switch buffer[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func expect(_ literal: StaticString, _ value: JSON) throws(LarderError) -> JSON {
        let count = literal.utf8CodeUnitCount
        let start = literal.utf8Start
        for i in 0..<min(count, buffer.count - index) where buffer[index + i] != start[i] {
            throw error("unknown literal")
        }
        guard index + count <= buffer.count else { throw error("unexpected end of input") }
        index += count
        return value
    }

    private mutating func parseValue(depth: Int) throws(LarderError) -> JSON {
        guard index < buffer.count else { throw error("unexpected end of input") }
        switch buffer[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character")
        }
    }

// ParseObject and parseArray follow the JSON grammar's two containers
// (members, elements), as CompactJSON.swift's object and array do.
    private mutating func parseObject(depth: Int) throws(LarderError) -> JSON {
        guard depth <= maxDepth else { throw error("nesting deeper than \(maxDepth) levels") }
        index += 1
        var object = JSONObject()
        skipWhitespace()
        if index < buffer.count && buffer[index] == UInt8(ascii: "}") {
            index += 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard index < buffer.count, buffer[index] == UInt8(ascii: "\"") else { throw error("expected a member name") }
            let key = try parseString()
            skipWhitespace()
            guard index < buffer.count, buffer[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            guard object.insertNew(key, value) else { throw error("duplicate member name") }
            skipWhitespace()
            guard index < buffer.count else { throw error("unexpected end of input") }
            switch buffer[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                return .object(object)
            default: throw error("expected ',' or '}'")
            }
        }
    }

    private mutating func parseArray(depth: Int) throws(LarderError) -> JSON {
        guard depth <= maxDepth else { throw error("nesting deeper than \(maxDepth) levels") }
        index += 1
        var items: [JSON] = []
        skipWhitespace()
        if index < buffer.count && buffer[index] == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < buffer.count else { throw error("unexpected end of input") }
            switch buffer[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                return .array(items)
            default: throw error("expected ',' or ']'")
            }
        }
    }

    private mutating func parseNumber() throws(LarderError) -> JSON {
        let start = index
        let isInteger: Bool
        switch JSONParser.scanNumber(buffer, from: start) {
        case .number(let end, let integer):
            index = end
            isInteger = integer
        case .leadingZero(let at):
            index = at
            throw error("leading zeros are not allowed")
        case .invalid(let at):
            index = at
            throw error("invalid number")
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: buffer[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard index - start <= 400 else { throw error("number too long") }
        let value = text.withCString { strtod($0, nil) }
        guard value.isFinite else { throw error("number out of range") }
        return .double(value)
    }

    /// Where a number that starts at `start` ends (RFC 8259's grammar), and whether it has neither a fraction nor an
    /// exponent; or where it breaks the grammar.
    enum NumberScan {
        case number(end: Int, isInteger: Bool)
        case leadingZero(at: Int)
        case invalid(at: Int)
    }

    static func scanNumber(_ buffer: UnsafeBufferPointer<UInt8>, from start: Int) -> NumberScan {
        func isDigit(_ i: Int) -> Bool {
            i < buffer.count && buffer[i] >= UInt8(ascii: "0") && buffer[i] <= UInt8(ascii: "9")
        }
        var index = start
        var isInteger = true
        if buffer[index] == UInt8(ascii: "-") { index += 1 }
        guard isDigit(index) else { return .invalid(at: index) }
        if buffer[index] == UInt8(ascii: "0") {
            index += 1
            if isDigit(index) { return .leadingZero(at: index) }
        } else {
            while isDigit(index) { index += 1 }
        }
        if index < buffer.count && buffer[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard isDigit(index) else { return .invalid(at: index) }
            while isDigit(index) { index += 1 }
        }
        if index < buffer.count && (buffer[index] == UInt8(ascii: "e") || buffer[index] == UInt8(ascii: "E")) {
            isInteger = false
            index += 1
            if index < buffer.count && (buffer[index] == UInt8(ascii: "+") || buffer[index] == UInt8(ascii: "-")) {
                index += 1
            }
            guard isDigit(index) else { return .invalid(at: index) }
            while isDigit(index) { index += 1 }
        }
        return .number(end: index, isInteger: isInteger)
    }

    /// The value of a hex digit, or nil.
    static func hexDigit(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    /// The value of the four hex digits at `index`, or nil when there are not four.
    static func hex4(_ buffer: UnsafeBufferPointer<UInt8>, at index: Int) -> UInt32? {
        guard index + 4 <= buffer.count else { return nil }
        var value: UInt32 = 0
        for byte in buffer[index..<index + 4] {
            guard let digit = hexDigit(byte) else { return nil }
            value = value << 4 | digit
        }
        return value
    }

    private mutating func parseString() throws(LarderError) -> String {
        index += 1
        let start = index
        // Fast path: no escapes; validate UTF-8 while scanning for the closing quote.
        var bits: UInt8 = 0  // the OR of the bytes scanned: below 0x80 when they are all ASCII
        while index < buffer.count {
            let byte = buffer[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: buffer[start..<index])
                index += 1
                // ASCII is valid UTF-8 as it stands, and `String(decoding:)` (which would repair, not refuse, an
                // invalid sequence) has a specialised path for it; the generic validation cost a PATCH's writer
                // ~13,000 instructions for the stored document's strings.
                if bits < 0x80 { return String(decoding: slice, as: UTF8.self) }
                guard let string = String(validating: slice, as: UTF8.self) else {
                    index = start
                    throw error("string is not valid UTF-8")
                }
                return string
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("control character in string") }
            bits |= byte
            index += 1
        }
        guard index < buffer.count else { throw error("unterminated string") }
        var bytes = Array(UnsafeBufferPointer(rebasing: buffer[start..<index]))
        while index < buffer.count {
            let byte = buffer[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = String(validating: bytes, as: UTF8.self) else {
                    throw error("string is not valid UTF-8")
                }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < buffer.count else { throw error("unterminated string") }
                let escape = buffer[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): bytes.append(0x22)
                case UInt8(ascii: "\\"): bytes.append(0x5C)
                case UInt8(ascii: "/"): bytes.append(0x2F)
                case UInt8(ascii: "b"): bytes.append(0x08)
                case UInt8(ascii: "f"): bytes.append(0x0C)
                case UInt8(ascii: "n"): bytes.append(0x0A)
                case UInt8(ascii: "r"): bytes.append(0x0D)
                case UInt8(ascii: "t"): bytes.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if scalar >= 0xD800 && scalar < 0xDC00 {
                        guard index + 1 < buffer.count, buffer[index] == UInt8(ascii: "\\"),
                            buffer[index + 1] == UInt8(ascii: "u")
                        else { throw error("unpaired surrogate in \\u escape") }
                        index += 2
                        let low = try parseHex4()
                        guard low >= 0xDC00 && low < 0xE000 else { throw error("unpaired surrogate in \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if scalar >= 0xDC00 && scalar < 0xE000 {
                        throw error("unpaired surrogate in \\u escape")
                    }
                    bytes.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
                default: throw error("invalid escape")
                }
            default:
                if byte < 0x20 { throw error("control character in string") }
                bytes.append(byte)
                index += 1
            }
        }
        throw error("unterminated string")
    }

    private mutating func parseHex4() throws(LarderError) -> UInt32 {
        guard index + 4 <= buffer.count else { throw error("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = JSONParser.hexDigit(buffer[index]) else { throw error("invalid \\u escape") }
            value = value << 4 | digit
            index += 1
        }
        return value
    }
}
