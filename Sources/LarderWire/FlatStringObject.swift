import Foundation

/// A fast path for the smallest and most frequent requests (GET, BLOB_HEAD): an object whose members are all plain
/// strings, read without building a `JSONObject` (a dictionary, a set of seen names and a `String` per key cost a
/// fifth of a GET's server time; BENCHMARKS.md).
///
/// It answers only when the outcome is certain: exactly the expected members, each once, each a string without
/// escapes or control characters, valid UTF-8, nothing after the object but whitespace. Anything else, valid or not,
/// is nil, and the caller parses with `JSONParser` and `FieldReader`, so every error and every unusual but valid
/// form (escapes, `null` members, unknown members) keeps exactly the general path's answer.
enum FlatStringObject {
    /// Where the values of `first` and `second` (nil: a one-member object) lie in `bytes`, between their quotes, or
    /// nil (see above). The caller validates the bytes it uses (as UTF-8, or as an id's hex digits), so a value is
    /// never turned into a `String` it does not need. Two names at most, so no array is allocated.
    static func members(_ bytes: [UInt8], _ first: StaticString, _ second: StaticString? = nil)
        -> (Range<Int>, Range<Int>?)?
    {
        bytes.withUnsafeBufferPointer { buffer -> (Range<Int>, Range<Int>?)? in
            var scanner = Scanner(buffer: buffer)
            var values: (Range<Int>?, Range<Int>?) = (nil, nil)
            scanner.skipWhitespace()
            guard scanner.take(UInt8(ascii: "{")) else { return nil }
            scanner.skipWhitespace()
            if scanner.take(UInt8(ascii: "}")) { return nil }
            while true {
                scanner.skipWhitespace()
                guard let key = scanner.plainString() else { return nil }
                scanner.skipWhitespace()
                guard scanner.take(UInt8(ascii: ":")) else { return nil }
                scanner.skipWhitespace()
                guard let value = scanner.plainString() else { return nil }
                let range = value.startIndex..<value.endIndex
                if Scanner.equal(buffer, key, first), values.0 == nil {
                    values.0 = range
                } else if let second, Scanner.equal(buffer, key, second), values.1 == nil {
                    values.1 = range
                } else {
                    return nil
                }
                scanner.skipWhitespace()
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
                break
            }
            scanner.skipWhitespace()
            guard scanner.atEnd, let firstValue = values.0, second == nil || values.1 != nil else { return nil }
            return (firstValue, values.1)
        }
    }

    /// The member's bytes as a string, or nil when they are not valid UTF-8 (the general parser's error).
    static func string(_ bytes: [UInt8], _ range: Range<Int>) -> String? {
        bytes.withUnsafeBufferPointer { String(validating: UnsafeBufferPointer(rebasing: $0[range]), as: UTF8.self) }
    }

    /// The member's bytes as an id in its strict form (hex digits and hyphens only, so valid UTF-8), or nil.
    static func uuid(_ bytes: [UInt8], _ range: Range<Int>) -> UUID? {
        bytes.withUnsafeBufferPointer { FieldReader.strictUUID(utf8: UnsafeBufferPointer(rebasing: $0[range])) }
    }

    private struct Scanner {
        let buffer: UnsafeBufferPointer<UInt8>
        var index = 0

        var atEnd: Bool { index == buffer.count }

        mutating func skipWhitespace() {
            while index < buffer.count {
                switch buffer[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard index < buffer.count, buffer[index] == byte else { return false }
            index += 1
            return true
        }

        /// Where a string's bytes lie between its quotes, when it has no escape and no control character.
        mutating func plainString() -> Range<Int>? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            while index < buffer.count {
                let byte = buffer[index]
                if byte == UInt8(ascii: "\"") {
                    defer { index += 1 }
                    return start..<index
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
                index += 1
            }
            return nil
        }

        static func equal(_ buffer: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ name: StaticString) -> Bool {
            range.count == name.utf8CodeUnitCount
                && name.withUTF8Buffer { $0.elementsEqual(UnsafeBufferPointer(rebasing: buffer[range])) }
        }
    }
}

extension GetRequest {
    /// `{"collection": "…", "id": "…"}` in its plain form, or nil: then use `init(json:)`, which gives the same
    /// request or the error.
    public static func fast(_ json: [UInt8]) -> GetRequest? {
        guard let (collectionRange, idRange) = FlatStringObject.members(json, "collection", "id"), let idRange,
            collectionRange.count <= 256, let id = FlatStringObject.uuid(json, idRange),
            let collection = FlatStringObject.string(json, collectionRange)
        else { return nil }
        return GetRequest(collection: collection, id: id)
    }
}

extension BlobIDRequest {
    /// `{"id": "…"}` in its plain form, or nil: then use `init(json:)`.
    public static func fast(_ json: [UInt8]) -> BlobIDRequest? {
        guard let (idRange, _) = FlatStringObject.members(json, "id"), let id = FlatStringObject.uuid(json, idRange) else {
            return nil
        }
        return BlobIDRequest(id: id)
    }
}
