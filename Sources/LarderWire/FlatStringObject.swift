/// A fast path for the smallest and most frequent requests (GET, BLOB_HEAD): an object whose members are all plain
/// strings, read without building a `JSONObject` (a dictionary, a set of seen names and a `String` per key cost a
/// fifth of a GET's server time; BENCHMARKS.md).
///
/// It answers only when the outcome is certain: exactly the expected members, each once, each a string without
/// escapes or control characters, valid UTF-8, nothing after the object but whitespace. Anything else, valid or not,
/// is nil, and the caller parses with `JSONParser` and `FieldReader`, so every error and every unusual but valid
/// form (escapes, `null` members, reordered whitespace) keeps exactly the general path's answer.
enum FlatStringObject {
    /// The values of `first` and `second` (nil: a one-member object), or nil (see above). Two names at most, so no
    /// array is allocated.
    static func strings(_ bytes: [UInt8], _ first: StaticString, _ second: StaticString? = nil) -> (String, String?)? {
        bytes.withUnsafeBufferPointer { buffer -> (String, String?)? in
            var scanner = Scanner(buffer: buffer)
            var values: (String?, String?) = (nil, nil)
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
                if Scanner.equal(key, first), values.0 == nil, let text = String(validating: value, as: UTF8.self) {
                    values.0 = text
                } else if let second, Scanner.equal(key, second), values.1 == nil,
                    let text = String(validating: value, as: UTF8.self)
                {
                    values.1 = text
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

        /// A string's bytes between its quotes, when it has no escape and no control character.
        mutating func plainString() -> UnsafeBufferPointer<UInt8>? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            while index < buffer.count {
                let byte = buffer[index]
                if byte == UInt8(ascii: "\"") {
                    defer { index += 1 }
                    return UnsafeBufferPointer(rebasing: buffer[start..<index])
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
                index += 1
            }
            return nil
        }

        static func equal(_ bytes: UnsafeBufferPointer<UInt8>, _ name: StaticString) -> Bool {
            bytes.count == name.utf8CodeUnitCount
                && name.withUTF8Buffer { $0.elementsEqual(bytes) }
        }
    }
}

extension GetRequest {
    /// `{"collection": "…", "id": "…"}` in its plain form, or nil: then use `init(json:)`, which gives the same
    /// request or the error.
    public static func fast(_ json: [UInt8]) -> GetRequest? {
        guard let (collection, idText) = FlatStringObject.strings(json, "collection", "id"),
            collection.utf8.count <= 256, let idText, let id = FieldReader.strictUUID(idText)
        else { return nil }
        return GetRequest(collection: collection, id: id)
    }
}

extension BlobIDRequest {
    /// `{"id": "…"}` in its plain form, or nil: then use `init(json:)`.
    public static func fast(_ json: [UInt8]) -> BlobIDRequest? {
        guard let (idText, _) = FlatStringObject.strings(json, "id"), let id = FieldReader.strictUUID(idText) else {
            return nil
        }
        return BlobIDRequest(id: id)
    }
}
