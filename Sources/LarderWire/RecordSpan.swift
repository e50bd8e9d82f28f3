import Foundation

/// A record in a server's answer, read without building a tree: its fields, and where its `data` object lies in the
/// answer's bytes (the stored bytes the server spliced in), so that a typed client hands exactly those bytes to its
/// `JSONDecoder` instead of parsing them into a `JSONObject` and writing them out again.
package struct RecordSpan: Sendable, Equatable {
    package var id: UUID
    package var rev: Int64
    /// Milliseconds since 1970, UTC.
    package var createdAt: Int64
    package var updatedAt: Int64
    /// Where the `data` object lies in the answer, braces included.
    package var data: Range<Int>
}

/// Record and page answers in the form the server writes them (`Record(json:)` and `PageResponse(json:)` read every
/// form). Each reader answers only for that form: members with plain (unescaped) strings, each once, no others; for
/// anything else it answers nil and the caller uses the general path, whose answer or error stands. The `data`
/// objects are delimited, not validated: the decoder that reads them validates them, and a caller whose decoding
/// fails goes the general way for the error.
package enum AnswerReader {
    /// `{"id":"…","rev":N,"createdAt":"…","updatedAt":"…","data":{…}}`: a GET, CREATE, REPLACE or PATCH answer (a
    /// write's ends with `"seq":N`, which is read past).
    package static func record(_ bytes: [UInt8]) -> RecordSpan? {
        bytes.withUnsafeBufferPointer { buffer -> RecordSpan? in
            var reader = ByteScanner(buffer: buffer)
            guard let record = reader.record() else { return nil }
            reader.skipWhitespace()
            return reader.atEnd ? record : nil
        }
    }

    /// `{"records":[record, …],"nextCursor":"…"|null}`: a LIST or SEARCH answer.
    package static func page(_ bytes: [UInt8]) -> (records: [RecordSpan], nextCursor: String?)? {
        bytes.withUnsafeBufferPointer { buffer -> ([RecordSpan], String?)? in
            var reader = ByteScanner(buffer: buffer)
            var records: [RecordSpan]?
            var cursor: String??
            guard reader.take(UInt8(ascii: "{")) else { return nil }
            repeat {
                guard let name = reader.plainString(), reader.take(UInt8(ascii: ":")) else { return nil }
                if reader.equal(name, "records") && records == nil {
                    guard reader.take(UInt8(ascii: "[")) else { return nil }
                    var list: [RecordSpan] = []
                    if !reader.take(UInt8(ascii: "]")) {
                        repeat {
                            guard let record = reader.record() else { return nil }
                            list.append(record)
                        } while reader.take(UInt8(ascii: ","))
                        guard reader.take(UInt8(ascii: "]")) else { return nil }
                    }
                    records = list
                } else if reader.equal(name, "nextCursor") && cursor == nil {
                    if reader.takeLiteral("null") {
                        cursor = .some(nil)
                    } else {
                        guard let value = reader.plainString(), value.count <= SearchQuery.maxCursorBytes,
                            let text = String(validating: reader.bytes(value), as: UTF8.self)
                        else { return nil }
                        cursor = .some(text)
                    }
                } else {
                    return nil
                }
            } while reader.take(UInt8(ascii: ","))
            guard reader.take(UInt8(ascii: "}")), let records else { return nil }
            reader.skipWhitespace()
            return reader.atEnd ? (records, cursor ?? nil) : nil
        }
    }

}

/// The answer readers' pieces (`AnswerReader`).
extension ByteScanner {
    mutating func timestamp() -> Int64? {
        guard let range = plainString(), range.count <= 64, let text = String(validating: bytes(range), as: UTF8.self)
        else { return nil }
        return Timestamp.parse(text)
    }

    /// Where the object at `index` lies, braces included (`skipValue`). What lies between is left to the decoder.
    mutating func objectSpan() -> Range<Int>? {
        skipWhitespace()
        guard peek == UInt8(ascii: "{") else { return nil }
        let start = index
        guard skipValue() else { return nil }
        return start..<index
    }

    mutating func record() -> RecordSpan? {
        var id: UUID?
        var rev: Int64?
        var createdAt: Int64?
        var updatedAt: Int64?
        var data: Range<Int>?
        var seq = false
        guard take(UInt8(ascii: "{")) else { return nil }
        repeat {
            guard let name = plainString(), take(UInt8(ascii: ":")) else { return nil }
            if equal(name, "id") && id == nil {
                guard let value = plainString(), let uuid = FieldReader.strictUUID(utf8: bytes(value)) else { return nil }
                id = uuid
            } else if equal(name, "rev") && rev == nil {
                guard let value = smallInteger(minimum: 0) else { return nil }
                rev = value
            } else if equal(name, "createdAt") && createdAt == nil {
                guard let value = timestamp() else { return nil }
                createdAt = value
            } else if equal(name, "updatedAt") && updatedAt == nil {
                guard let value = timestamp() else { return nil }
                updatedAt = value
            } else if equal(name, "data") && data == nil {
                guard let value = objectSpan() else { return nil }
                data = value
            } else if equal(name, "seq") && !seq {
                // A write's answer ends with the change log's number (Protocol.md section 5.1): not the record's.
                guard smallInteger(minimum: 0) != nil else { return nil }
                seq = true
            } else {
                return nil
            }
        } while take(UInt8(ascii: ","))
        guard take(UInt8(ascii: "}")), let id, let rev, let createdAt, let updatedAt, let data else { return nil }
        return RecordSpan(id: id, rev: rev, createdAt: createdAt, updatedAt: updatedAt, data: data)
    }
}
