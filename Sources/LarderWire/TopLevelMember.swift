/// One top-level member of a JSON object that the server wrote itself (a stored document), read without building the
/// object: a rule's owner check reads `$owner` from every record it screens, and a document's tree cost as much as
/// the rest of the read.
///
/// It answers only for the plain form the server writes (names without escapes, a string value without escapes);
/// anything else is nil, and the caller parses the bytes, whose answer stands.
package enum TopLevelMember {
    package enum Found: Equatable, Sendable {
        /// The object has no member of that name.
        case absent
        case string(String)
        /// The member holds a number, a literal, an object or an array.
        case notAString
    }

    /// The member `name` of the object in `object`, or nil (see above).
    package static func find(_ name: StaticString, in object: [UInt8]) -> Found? {
        object.withUnsafeBufferPointer { buffer -> Found? in
            var scanner = ByteScanner(buffer: buffer)
            return find(name, &scanner)
        }
    }

    /// The member `name` of the `data` object of a whole record as the server writes it
    /// (`{"id":...,"data":{...}}`, a GET's answer), or nil (see above; also nil when `data` is absent or no object).
    package static func find(_ name: StaticString, inDataOf record: [UInt8]) -> Found? {
        record.withUnsafeBufferPointer { buffer -> Found? in
            var scanner = ByteScanner(buffer: buffer)
            guard seek("data", &scanner) == true, scanner.peek == UInt8(ascii: "{") else { return nil }
            return find(name, &scanner)
        }
    }

    /// Moves `scanner` from an object's `{` to the value of its member `name`: true there, false when the object has
    /// no such member, nil for bytes not in the plain form.
    private static func seek(_ name: StaticString, _ scanner: inout ByteScanner) -> Bool? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        if scanner.take(UInt8(ascii: "}")) { return false }
        repeat {
            guard let key = scanner.plainString(), scanner.take(UInt8(ascii: ":")) else { return nil }
            scanner.skipWhitespace()
            if scanner.equal(key, name) { return true }
            guard scanner.skipValue() else { return nil }
        } while scanner.take(UInt8(ascii: ","))
        return scanner.take(UInt8(ascii: "}")) ? false : nil
    }

    private static func find(_ name: StaticString, _ scanner: inout ByteScanner) -> Found? {
        switch seek(name, &scanner) {
        case true?:
            guard scanner.peek == UInt8(ascii: "\"") else { return .notAString }
            guard let value = scanner.plainString() else { return nil }
            return String(validating: scanner.bytes(value), as: UTF8.self).map(Found.string)
        case false?: return .absent
        case nil: return nil
        }
    }
}

extension ByteScanner {
    /// Moves past the value at `index` (after any whitespace): a string with its escapes, an object or array by its
    /// brackets (strings inside skipped), or a number or literal up to the next `,`, `}`, `]` or whitespace. The
    /// value is delimited, not validated. False at the end of the buffer.
    mutating func skipValue() -> Bool {
        skipWhitespace()
        guard let first = peek else { return false }
        switch first {
        case UInt8(ascii: "\""):
            index += 1
            return skipStringRest()
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            while index < buffer.count {
                let byte = buffer[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    guard skipStringRest() else { return false }
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return true }
                default: break
                }
            }
            return false
        default:
            let start = index
            while index < buffer.count {
                let byte = buffer[index]
                if byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]")
                    || ByteScanner.isWhitespace(byte)
                {
                    break
                }
                index += 1
            }
            return index > start
        }
    }

    /// Past the closing quote of a string whose opening quote was taken.
    private mutating func skipStringRest() -> Bool {
        while index < buffer.count && buffer[index] != UInt8(ascii: "\"") {
            index += buffer[index] == UInt8(ascii: "\\") ? 2 : 1
        }
        guard index < buffer.count else { return false }
        index += 1
        return true
    }
}
