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
            var scanner = ByteScanner(buffer: buffer)
            var values: (Range<Int>?, Range<Int>?) = (nil, nil)
            guard scanner.take(UInt8(ascii: "{")), !scanner.take(UInt8(ascii: "}")) else { return nil }
            repeat {
                guard let key = scanner.plainString(), scanner.take(UInt8(ascii: ":")), let value = scanner.plainString()
                else { return nil }
                if scanner.equal(key, first), values.0 == nil {
                    values.0 = value
                } else if let second, scanner.equal(key, second), values.1 == nil {
                    values.1 = value
                } else {
                    return nil
                }
            } while scanner.take(UInt8(ascii: ","))
            guard scanner.take(UInt8(ascii: "}")) else { return nil }
            scanner.skipWhitespace()
            guard scanner.atEnd, let firstValue = values.0, second == nil || values.1 != nil else { return nil }
            return (firstValue, values.1)
        }
    }

    /// The member's bytes as a string, or nil when they are not valid UTF-8 (the general parser's error).
    static func string(_ bytes: [UInt8], _ range: Range<Int>) -> String? {
        bytes.withUnsafeBufferPointer { buffer in
            let value = UnsafeBufferPointer(rebasing: buffer[range])
            // ASCII (every collection name the store accepts) is valid as it is, and `String(decoding:)` of it is a
            // copy; `String(validating:)` is generic over its input and looked its metadata up on every call.
            if value.allSatisfy({ $0 < 0x80 }) { return String(decoding: value, as: UTF8.self) }
            return String(validating: value, as: UTF8.self)
        }
    }

    /// The member's bytes as an id in its strict form (hex digits and hyphens only, so valid UTF-8), or nil.
    static func uuid(_ bytes: [UInt8], _ range: Range<Int>) -> UUID? {
        bytes.withUnsafeBufferPointer { FieldReader.strictUUID(utf8: UnsafeBufferPointer(rebasing: $0[range])) }
    }
}

extension GetRequest {
    /// `{"collection": "…", "id": "…"}` in its plain form, or nil: then use `init(json:)`, which gives the same
    /// request or the error.
    package static func fast(_ json: [UInt8]) -> GetRequest? {
        // `afterSeq` as a client writes it, last: the rest read as a plain object.
        if let (start, value) = SeqMember.trailing(json, name: SeqMember.afterSeq) {
            guard var request = fast(Array(json[..<start]) + [UInt8(ascii: "}")]) else { return nil }
            request.afterSeq = value
            return request
        }
        guard let (collectionRange, idRange) = FlatStringObject.members(json, "collection", "id"), let idRange,
            collectionRange.count <= 256, let id = FlatStringObject.uuid(json, idRange),
            let collection = FlatStringObject.string(json, collectionRange)
        else { return nil }
        return GetRequest(collection: collection, id: id)
    }
}

extension BlobIDRequest {
    /// `{"id": "…"}` in its plain form, or nil: then use `init(json:)`.
    package static func fast(_ json: [UInt8]) -> BlobIDRequest? {
        guard let (idRange, _) = FlatStringObject.members(json, "id"), let id = FlatStringObject.uuid(json, idRange) else {
            return nil
        }
        return BlobIDRequest(id: id)
    }
}
