/// A fast path for the smallest and most frequent requests (GET, BLOB_HEAD): an object whose members are all plain
/// strings, read without building a `JSONObject` (a dictionary, a set of seen names and a `String` per key cost a
/// fifth of a GET's server time; BENCHMARKS.md).
///
/// It answers only when the outcome is certain: exactly the expected members, each once, each a string without
/// escapes or control characters, valid UTF-8, nothing after the object but whitespace. Anything else, valid or not,
/// is nil, and the caller parses with `JSONParser` and `FieldReader`, so every error and every unusual but valid
/// form (escapes, `null` members, reordered whitespace) keeps exactly the general path's answer.
enum FlatStringObject {
    /// The values of `names`, in that order, or nil (see above).
    static func strings(_ bytes: [UInt8], _ names: [StaticString]) -> [String]? {
        bytes.withUnsafeBufferPointer { buffer -> [String]? in
            var scanner = Scanner(buffer: buffer)
            var values = [String?](repeating: nil, count: names.count)
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
                guard let value = scanner.plainString(),
                    let slot = names.firstIndex(where: { Scanner.equal(key, $0) }), values[slot] == nil,
                    let text = String(validating: value, as: UTF8.self)
                else { return nil }
                values[slot] = text
                scanner.skipWhitespace()
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
                break
            }
            scanner.skipWhitespace()
            guard scanner.atEnd else { return nil }
            var result: [String] = []
            result.reserveCapacity(values.count)
            for value in values {
                guard let value else { return nil }
                result.append(value)
            }
            return result
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
        guard let values = FlatStringObject.strings(json, ["collection", "id"]), values[0].utf8.count <= 256,
            let id = FieldReader.strictUUID(values[1])
        else { return nil }
        return GetRequest(collection: values[0], id: id)
    }
}

extension BlobIDRequest {
    /// `{"id": "…"}` in its plain form, or nil: then use `init(json:)`.
    public static func fast(_ json: [UInt8]) -> BlobIDRequest? {
        guard let values = FlatStringObject.strings(json, ["id"]), let id = FieldReader.strictUUID(values[0]) else {
            return nil
        }
        return BlobIDRequest(id: id)
    }
}
