import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A JSON object read from a request straight into the form the store keeps, without building a `JSONObject`: its
/// compact bytes, exactly as `JSONParser` followed by `JSONObject.bytes` would write them, and its string values (for
/// the substring-search text), exactly as `TextFold` would collect them from the tree.
///
/// For a 250-byte record the tree costs a dictionary and an array per object and a `String` per key and value, then
/// a second walk to write it back out; on the CREATE path that was the largest share of the server's allocations
/// (BENCHMARKS.md). The transcoder reads the bytes once and appends to two buffers.
package struct CompactDocument: Sendable, Equatable {
    /// The compact JSON of the object.
    package var bytes: [UInt8]
    /// Every string value anywhere in the object (not member names), decoded, in document order, joined by U+001F.
    package var strings: [UInt8]
    /// Whether `strings` is all ASCII.
    package var stringsAreASCII: Bool
}

/// Reads one JSON object into a `CompactDocument` (see there).
///
/// It answers only when the outcome is certain to equal the general path's; for anything else, valid or not, it
/// answers nil and the caller parses with `JSONParser`, so every error (and its byte offset) is the general path's.
/// The nil cases: a syntax error, invalid UTF-8, nesting past the limit, duplicate member names, an object with more
/// than `maxMembers` members (names are compared pairwise), a name over `maxComparedNameBytes` compared with a
/// non-ASCII one, an integer of 19 or more digits (it may not fit an `Int64`), a number longer than 400 bytes or out
/// of a double's range.
package enum CompactJSON {
    /// Members per object compared pairwise for duplicates; larger objects take the general path.
    package static let maxMembers = 64
    /// The longest member name (written form) compared as a `String` with a non-ASCII one; a longer one takes the
    /// general path.
    package static let maxComparedNameBytes = 256

    /// Reads the object that starts at `index` (after any whitespace) and leaves `index` after it. `depth` is the
    /// object's nesting level in the whole message as `JSONParser` counts it (1 for a top-level object), `maxDepth`
    /// the parser's limit.
    package static func object(
        _ buffer: UnsafeBufferPointer<UInt8>, at index: inout Int, depth: Int,
        maxDepth: Int = JSONParser.defaultMaxDepth
    ) -> CompactDocument? {
        var transcoder = Transcoder(input: ByteScanner(buffer: buffer, index: index), maxDepth: maxDepth)
        transcoder.out.reserveCapacity(buffer.count - index)
        transcoder.input.skipWhitespace()
        guard transcoder.input.peek == UInt8(ascii: "{"), transcoder.object(depth: depth) else { return nil }
        index = transcoder.input.index
        return CompactDocument(
            bytes: transcoder.out, strings: transcoder.strings, stringsAreASCII: transcoder.stringBits < 0x80)
    }

    /// `object` over a whole buffer (whitespace around it allowed): what `JSONParser.parseObject` would read.
    package static func object(_ bytes: [UInt8], maxDepth: Int = JSONParser.defaultMaxDepth) -> CompactDocument? {
        bytes.withUnsafeBufferPointer { buffer -> CompactDocument? in
            var index = 0
            guard let document = object(buffer, at: &index, depth: 1, maxDepth: maxDepth) else { return nil }
            var rest = ByteScanner(buffer: buffer, index: index)
            rest.skipWhitespace()
            return rest.atEnd ? document : nil
        }
    }

    /// The reader behind `object`, which `MergePatch.apply(_:toStored:)` also drives: it appends what it reads to
    /// `out` in the compact form and each string value, decoded, to `strings`.
    struct Transcoder {
        var input: ByteScanner
        let maxDepth: Int
        var out: [UInt8] = []
        var strings: [UInt8] = []
        var stringCount = 0
        /// The OR of every byte appended to `strings`.
        var stringBits: UInt8 = 0
        /// Where each member name of the objects being read lies in `out` (between its quotes), innermost last.
        var names: [(range: Range<Int>, ascii: Bool)] = []

        init(input: ByteScanner, maxDepth: Int) {
            self.input = input
            self.maxDepth = maxDepth
        }

        mutating func value(depth: Int) -> Bool {
            input.skipWhitespace()
            guard let byte = input.peek else { return false }
            switch byte {
            case UInt8(ascii: "{"): return object(depth: depth + 1)
            case UInt8(ascii: "["): return array(depth: depth + 1)
            case UInt8(ascii: "\""): return string(isName: false) != nil
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            default: return false
            }
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let start = input.index
            guard input.takeLiteral(text) else { return false }
            out.append(contentsOf: input.bytes(start..<input.index))
            return true
        }

// Object and array follow the JSON grammar's two containers, as
// JSONParser.parseObject and parseArray do.
        mutating func object(depth: Int) -> Bool {
            guard depth <= maxDepth else { return false }
            input.index += 1
            out.append(UInt8(ascii: "{"))
            let firstName = names.count
            defer { names.removeSubrange(firstName...) }
            if input.take(UInt8(ascii: "}")) {
                out.append(UInt8(ascii: "}"))
                return true
            }
            while true {
                input.skipWhitespace()
                guard input.peek == UInt8(ascii: "\""), names.count - firstName < CompactJSON.maxMembers,
                    let name = string(isName: true), isNew(name, since: firstName)
                else { return false }
                names.append(name)
                guard input.take(UInt8(ascii: ":")) else { return false }
                out.append(UInt8(ascii: ":"))
                guard value(depth: depth) else { return false }
                if input.take(UInt8(ascii: ",")) {
                    out.append(UInt8(ascii: ","))
                } else if input.take(UInt8(ascii: "}")) {
                    out.append(UInt8(ascii: "}"))
                    return true
                } else {
                    return false
                }
            }
        }

        /// Whether `name` differs from the names read so far in this object, as `String` compares them: canonical
        /// equivalence, which for ASCII is byte equality (the written forms map decoded names one to one), but
        /// which makes some non-ASCII names equal to ASCII ones (U+212A KELVIN SIGN is "K").
        func isNew(_ name: (range: Range<Int>, ascii: Bool), since first: Int) -> Bool {
            let bytes = out[name.range]
            var decoded: String?
            for other in names[first...] {
                if other.ascii && name.ascii {
                    if other.range.count == name.range.count && out[other.range].elementsEqual(bytes) { return false }
                } else {
                    // Compared as `String`s, pair by pair: long names go to the general path (its dictionary
                    // hashes each name once).
                    if max(name.range.count, other.range.count) > CompactJSON.maxComparedNameBytes { return false }
                    if decoded == nil { decoded = self.decoded(name.range) }
                    if self.decoded(other.range) == decoded { return false }
                }
            }
            return true
        }

        /// A written name (between its quotes in `out`) as a `String`.
        func decoded(_ range: Range<Int>) -> String {
            let bytes = out[range]
            guard bytes.contains(UInt8(ascii: "\\")),
                case .string(let string)? = try? JSONParser.parse(out[(range.lowerBound - 1)...range.upperBound])
            else { return String(decoding: bytes, as: UTF8.self) }
            return string
        }

        mutating func array(depth: Int) -> Bool {
            guard depth <= maxDepth else { return false }
            input.index += 1
            out.append(UInt8(ascii: "["))
            if input.take(UInt8(ascii: "]")) {
                out.append(UInt8(ascii: "]"))
                return true
            }
            while true {
                guard value(depth: depth) else { return false }
                if input.take(UInt8(ascii: ",")) {
                    out.append(UInt8(ascii: ","))
                } else if input.take(UInt8(ascii: "]")) {
                    out.append(UInt8(ascii: "]"))
                    return true
                } else {
                    return false
                }
            }
        }

        /// Copies a string, re-escaped as `JSONWriter.writeString` writes it; a value's decoded bytes also go to
        /// `strings`. Answers where the written string lies in `out` (between the quotes) and whether it is ASCII.
        mutating func string(isName: Bool) -> (range: Range<Int>, ascii: Bool)? {
            input.index += 1
            out.append(UInt8(ascii: "\""))
            let start = out.count
            if !isName {
                if stringCount > 0 { strings.append(0x1F) }
                stringCount += 1
            }
            var bits: UInt8 = 0
            var run = input.index  // the start of the bytes not yet copied
            let buffer = input.buffer
            while input.index < buffer.count {
                // Printable ASCII other than a quote or a backslash, most of a document's text, is skipped eight
                // bytes at a time, then byte by byte, over a local index (through `input` each byte cost a load and
                // a store of the scanner's index).
                var index = input.index
                if let base = buffer.baseAddress {
                    let raw = UnsafeRawPointer(base)
                    while index + 8 <= buffer.count,
                        !CompactJSON.hasSpecialByte(raw.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                    {
                        index += 8
                    }
                }
                while index < buffer.count {
                    let byte = buffer[index]
                    guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") else {
                        break
                    }
                    index += 1
                }
                input.index = index
                guard index < buffer.count else { break }
                let byte = buffer[index]
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                    let plain = UnsafeBufferPointer(rebasing: input.buffer[run..<input.index])
                    out.append(contentsOf: plain)
                    if !isName { strings.append(contentsOf: plain) }
                    if byte == UInt8(ascii: "\"") {
                        input.index += 1
                        let range = start..<out.count
                        out.append(UInt8(ascii: "\""))
                        if !isName { stringBits |= bits }
                        return (range, bits < 0x80)
                    }
                    guard let scalar = escape() else { return nil }
                    if scalar >= 0x80 { bits |= 0x80 }
                    append(scalar, isName: isName)
                    run = input.index
                } else if byte < 0x80 {
                    return nil  // a control character, which JSON allows only escaped
                } else {
                    guard let next = CompactJSON.validSequence(input.buffer, at: input.index) else { return nil }
                    bits |= 0x80
                    input.index = next
                }
            }
            return nil
        }

        /// Reads the escape at `input.index` (a backslash) and answers its scalar, or nil when it is invalid or a lone
        /// surrogate.
        mutating func escape() -> UInt32? {
            guard input.index + 1 < input.buffer.count else { return nil }
            let letter = input.buffer[input.index + 1]
            input.index += 2
            switch letter {
            case UInt8(ascii: "\""): return 0x22
            case UInt8(ascii: "\\"): return 0x5C
            case UInt8(ascii: "/"): return 0x2F
            case UInt8(ascii: "b"): return 0x08
            case UInt8(ascii: "f"): return 0x0C
            case UInt8(ascii: "n"): return 0x0A
            case UInt8(ascii: "r"): return 0x0D
            case UInt8(ascii: "t"): return 0x09
            case UInt8(ascii: "u"):
                guard let high = hex4() else { return nil }
                if high >= 0xDC00 && high < 0xE000 { return nil }
                guard high >= 0xD800 && high < 0xDC00 else { return high }
                guard input.index + 1 < input.buffer.count, input.buffer[input.index] == UInt8(ascii: "\\"),
                    input.buffer[input.index + 1] == UInt8(ascii: "u")
                else { return nil }
                input.index += 2
                guard let low = hex4(), low >= 0xDC00 && low < 0xE000 else { return nil }
                return 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
            default: return nil
            }
        }

        mutating func hex4() -> UInt32? {
            guard let value = JSONParser.hex4(input.buffer, at: input.index) else { return nil }
            input.index += 4
            return value
        }

        /// Appends an escaped scalar: written form to `out` (as `JSONWriter.writeString` writes it), decoded to
        /// `strings` for a value.
        mutating func append(_ scalar: UInt32, isName: Bool) {
            var utf8: (UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0)
            let count: Int
            switch scalar {
            case 0..<0x80:
                utf8.0 = UInt8(scalar)
                count = 1
            case 0x80..<0x800:
                utf8 = (0xC0 | UInt8(scalar >> 6), 0x80 | UInt8(scalar & 0x3F), 0, 0)
                count = 2
            case 0x800..<0x10000:
                utf8 = (0xE0 | UInt8(scalar >> 12), 0x80 | UInt8(scalar >> 6 & 0x3F), 0x80 | UInt8(scalar & 0x3F), 0)
                count = 3
            default:
                utf8 = (
                    0xF0 | UInt8(scalar >> 18), 0x80 | UInt8(scalar >> 12 & 0x3F), 0x80 | UInt8(scalar >> 6 & 0x3F),
                    0x80 | UInt8(scalar & 0x3F)
                )
                count = 4
            }
            withUnsafeBytes(of: utf8) { bytes in
                let decoded = UnsafeRawBufferPointer(rebasing: bytes[0..<count])
                if !isName { strings.append(contentsOf: decoded) }
                if count == 1 && (scalar < 0x20 || scalar == 0x22 || scalar == 0x5C) {
                    JSONWriter.writeEscape(UInt8(scalar), into: &out)
                } else {
                    out.append(contentsOf: decoded)
                }
            }
        }

        /// Copies a number as `JSONParser` reads it and `JSON.write` writes it back: integers that surely fit an
        /// `Int64` as they are (`-0` as `0`), other numbers through `strtod` and `Double.description`.
        mutating func number() -> Bool {
            let start = input.index
            guard case .number(let end, let isInteger) = JSONParser.scanNumber(input.buffer, from: start) else {
                return false
            }
            input.index = end
            let text = UnsafeBufferPointer(rebasing: input.buffer[start..<input.index])
            if isInteger {
                let digits = input.buffer[start] == UInt8(ascii: "-") ? text.count - 1 : text.count
                guard digits <= 18 else { return false }
                if text.count == 2 && text[0] == UInt8(ascii: "-") && text[1] == UInt8(ascii: "0") {
                    out.append(UInt8(ascii: "0"))  // -0
                } else {
                    out.append(contentsOf: text)
                }
                return true
            }
            guard text.count <= 400 else { return false }
            let value = withUnsafeTemporaryAllocation(of: CChar.self, capacity: text.count + 1) { c -> Double in
                for i in 0..<text.count { c[i] = CChar(bitPattern: text[i]) }
                c[text.count] = 0
                return strtod(c.baseAddress!, nil)
            }
            guard value.isFinite else { return false }
            JSONWriter.writeDouble(value, into: &out)
            return true
        }
    }

    /// The index after the well-formed UTF-8 sequence of two to four bytes that starts at `index` (Unicode's table
    /// 3-7: no overlong forms, no surrogates, nothing past U+10FFFF), or nil.
    /// Whether any of the eight bytes of `word` ends a run of plain string bytes: a control character, a quote, a
    /// backslash or a byte of a multi-byte sequence. Exact for the word as a whole (the borrows of the subtractions
    /// can only mark bytes above one that is marked already), which is all the caller asks.
    @inline(__always)
    static func hasSpecialByte(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        func hasZeroByte(_ x: UInt64) -> UInt64 { (x &- ones) & ~x & highs }
        let below0x20 = (word &- 0x20 &* ones) & ~word & highs
        let quote = hasZeroByte(word ^ (0x22 &* ones))
        let backslash = hasZeroByte(word ^ (0x5C &* ones))
        return (word & highs) | below0x20 | quote | backslash != 0
    }

    static func validSequence(_ buffer: UnsafeBufferPointer<UInt8>, at index: Int) -> Int? {
        let lead = buffer[index]
        let length: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0:
            length = 3
            low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED:
            length = 3
            high = 0x9F
        case 0xF0:
            length = 4
            low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4:
            length = 4
            high = 0x8F
        default: return nil
        }
        guard index + length <= buffer.count else { return nil }
        let second = buffer[index + 1]
        guard second >= low && second <= high else { return nil }
        for i in 2..<length where buffer[index + i] & 0xC0 != 0x80 { return nil }
        return index + length
    }
}
