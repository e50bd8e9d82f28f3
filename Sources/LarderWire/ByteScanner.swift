#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The reading primitives the tree-free readers share (`CompactJSON`, `DocumentWrite.fast`, `AnswerReader`,
/// `FlatStringObject`): a position in a buffer of JSON, moved past whitespace and the bytes each one takes.
struct ByteScanner {
    let buffer: UnsafeBufferPointer<UInt8>
    var index: Int

    init(buffer: UnsafeBufferPointer<UInt8>, index: Int = 0) {
        self.buffer = buffer
        self.index = index
    }

    var atEnd: Bool { index == buffer.count }
    var peek: UInt8? { index < buffer.count ? buffer[index] : nil }

    static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }

    mutating func skipWhitespace() {
        while index < buffer.count, ByteScanner.isWhitespace(buffer[index]) { index += 1 }
    }

    /// Takes `byte` after any whitespace, or nothing.
    mutating func take(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard index < buffer.count, buffer[index] == byte else { return false }
        index += 1
        return true
    }

    /// Takes `text` after any whitespace, or nothing.
    mutating func takeLiteral(_ text: StaticString) -> Bool {
        skipWhitespace()
        let count = text.utf8CodeUnitCount
        guard index + count <= buffer.count, ByteScanner.same(text, buffer.baseAddress! + index) else { return false }
        index += count
        return true
    }

    /// Where a string's bytes lie between its quotes, when it holds no escape and no control character (its UTF-8
    /// is the caller's to check).
    mutating func plainString() -> Range<Int>? {
        guard take(UInt8(ascii: "\"")), let base = buffer.baseAddress else { return nil }
        let start = index
        // The closing quote by `memchr`, then one pass without early exits over the bytes before it (which the
        // compiler vectorizes): a byte-by-byte loop with three tests per byte was a twelfth of a GET's instructions.
        guard let quote = memchr(base + start, Int32(UInt8(ascii: "\"")), buffer.count - start) else {
            index = buffer.count
            return nil
        }
        let end = UnsafeRawPointer(base).distance(to: UnsafeRawPointer(quote))
        var unusual: UInt8 = 0
        for position in start..<end {
            let byte = base[position]
            unusual |= (byte == UInt8(ascii: "\\") ? 1 : 0) | (byte < 0x20 ? 1 : 0)
        }
        guard unusual == 0 else {
            index = (start..<end).first { base[$0] == UInt8(ascii: "\\") || base[$0] < 0x20 } ?? end
            return nil
        }
        index = end + 1
        return start..<end
    }

    func bytes(_ range: Range<Int>) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: buffer[range]) }

    func equal(_ range: Range<Int>, _ name: StaticString) -> Bool {
        range.count == name.utf8CodeUnitCount && ByteScanner.same(name, buffer.baseAddress! + range.lowerBound)
    }

    /// Whether the `text.utf8CodeUnitCount` bytes at `bytes` are `text`'s: one `memcmp`, where `elementsEqual` over
    /// the two buffers stepped a generic iterator per byte (a tenth of a GET's parse).
    @inline(__always)
    private static func same(_ text: StaticString, _ bytes: UnsafePointer<UInt8>) -> Bool {
        memcmp(text.utf8Start, bytes, text.utf8CodeUnitCount) == 0
    }

    /// An integer of 1 to 18 digits (so it fits an `Int64`), without sign, leading zero, fraction or exponent, at
    /// least `minimum`; or nil (a longer one is counted, never added up).
    mutating func smallInteger(minimum: Int64) -> Int64? {
        skipWhitespace()
        let start = index
        var value: Int64 = 0
        while index < buffer.count, buffer[index] >= UInt8(ascii: "0"), buffer[index] <= UInt8(ascii: "9") {
            if index - start < 18 { value = value * 10 + Int64(buffer[index] - UInt8(ascii: "0")) }
            index += 1
        }
        let digits = index - start
        guard digits > 0, digits <= 18, digits == 1 || buffer[start] != UInt8(ascii: "0"), value >= minimum,
            index == buffer.count || (buffer[index] != UInt8(ascii: ".") && buffer[index] | 0x20 != UInt8(ascii: "e"))
        else { return nil }
        return value
    }
}
