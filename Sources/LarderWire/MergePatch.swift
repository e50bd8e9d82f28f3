#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// RFC 7396 JSON merge patch: null removes a member, objects merge recursively, anything else replaces.
public enum MergePatch {
    /// `target` with `patch` merged into it.
    public static func apply(_ patch: JSONObject, to target: JSONObject) -> JSONObject {
        var result = target
        for (key, value) in patch {
            switch value {
            case .null:
                result[key] = nil
            case .object(let inner):
                let base = result[key]?.objectValue ?? [:]
                result[key] = .object(apply(inner, to: base))
            default:
                result[key] = value
            }
        }
        return result
    }

    /// `patch` merged into a document kept as compact JSON, without building the document's tree. The document is
    /// read once, as `CompactJSON` reads one: the members the patch does not name are copied in the compact form; a
    /// member it names is read (the tree path parses it) and then left out for `null`, merged member by member when
    /// both are objects, or otherwise replaced in its place by the patch's value as `JSON.write` writes it; the patch's
    /// new members follow in its order, where `JSONObject` appends them. The answer is exactly the tree's:
    /// `apply(patch, to: JSONParser.parseObject(stored))`, its `JSONObject.bytes` and its string values.
    ///
    /// Nil when that is not certain, and the caller takes the tree path: bytes that `CompactJSON.object` leaves to the
    /// general path, two members of one object that a name of the patch matches (duplicates, which the parser
    /// refuses), a patch object with more than `CompactJSON.maxMembers` members.
    package static func apply(_ patch: JSONObject, toStored stored: [UInt8]) -> CompactDocument? {
        stored.withUnsafeBufferPointer { buffer -> CompactDocument? in
            var transcoder = CompactJSON.Transcoder(
                input: ByteScanner(buffer: buffer), maxDepth: JSONParser.defaultMaxDepth)
            transcoder.out.reserveCapacity(buffer.count + 64)
            transcoder.input.skipWhitespace()
            guard transcoder.input.peek == UInt8(ascii: "{"), transcoder.merged(patch, depth: 1) else { return nil }
            transcoder.input.skipWhitespace()
            guard transcoder.input.atEnd else { return nil }
            return CompactDocument(
                bytes: transcoder.out, strings: transcoder.strings, stringsAreASCII: transcoder.stringBits < 0x80)
        }
    }
}

extension CompactJSON.Transcoder {
    /// A member of a patch, and whether the document's object has it.
    struct PatchMember {
        let key: String
        let value: JSON
        /// Whether the key is ASCII that is written without escapes: then it equals a name exactly when the name's
        /// written form has the same bytes.
        let plain: Bool
        var found = false

        init(key: String, value: JSON) {
            self.key = key
            self.value = value
            plain = key.utf8.allSatisfy {
                $0 >= 0x20 && $0 < 0x80 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\")
            }
        }
    }

    /// Reads the object at `input` (its `{`) as `object(depth:)` does, with `patch` merged into it (see
    /// `MergePatch.apply(_:toStored:)`).
    mutating func merged(_ patch: JSONObject, depth: Int) -> Bool {
        guard depth <= maxDepth, patch.count <= CompactJSON.maxMembers else { return false }
        var members: [PatchMember] = []
        members.reserveCapacity(patch.count)
        for (key, value) in patch { members.append(PatchMember(key: key, value: value)) }
        input.index += 1
        out.append(UInt8(ascii: "{"))
        let start = out.count
        let firstName = names.count
        defer { names.removeSubrange(firstName...) }
        if !input.take(UInt8(ascii: "}")) {
            var read = 0
            while true {
                read += 1
                input.skipWhitespace()
                // The name is written as it is read, before the patch says whether the member stays: a member left
                // out is cut back to here, its comma included.
                let memberStart = out.count
                if out.count > start { out.append(UInt8(ascii: ",")) }
                guard input.peek == UInt8(ascii: "\""), read <= CompactJSON.maxMembers,
                    let name = string(isName: true), isNew(name, since: firstName)
                else { return false }
                names.append(name)
                guard input.take(UInt8(ascii: ":")) else { return false }
                out.append(UInt8(ascii: ":"))
                if let n = find(name, in: members) {
                    guard !members[n].found else { return false }
                    members[n].found = true
                    input.skipWhitespace()
                    if case .object(let inner) = members[n].value, input.peek == UInt8(ascii: "{") {
                        guard merged(inner, depth: depth + 1) else { return false }
                    } else {
                        // Read as the tree path parses it, then taken back.
                        let valueStart = out.count
                        let mark = (strings: strings.count, count: stringCount, bits: stringBits)
                        guard value(depth: depth) else { return false }
                        out.removeSubrange(valueStart...)
                        strings.removeSubrange(mark.strings...)
                        (stringCount, stringBits) = (mark.count, mark.bits)
                        if case .null = members[n].value {
                            // Its name leaves the duplicate check too: another member of that name would match the
                            // same patch member, which is refused above.
                            out.removeSubrange(memberStart...)
                            names.removeLast()
                        } else {
                            append(members[n].value)
                        }
                    }
                } else {
                    guard value(depth: depth) else { return false }
                }
                if !input.take(UInt8(ascii: ",")) {
                    guard input.take(UInt8(ascii: "}")) else { return false }
                    break
                }
            }
        }
        for member in members where !member.found {
            if case .null = member.value { continue }
            if out.count > start { out.append(UInt8(ascii: ",")) }
            JSONWriter.writeString(member.key, into: &out)
            out.append(UInt8(ascii: ":"))
            append(member.value)
        }
        out.append(UInt8(ascii: "}"))
        return true
    }

    /// Appends a patch's value where the document has no object to merge it into: the value itself, or for an
    /// object, the object merged into an empty one (its nulls dropped at every level); its bytes as `JSON.write`
    /// writes them, its string values to `strings` as `TextFold.searchBytes` collects them from a tree.
    mutating func append(_ value: JSON) {
        let value = value.objectValue.map { JSON.object(MergePatch.apply($0, to: JSONObject())) } ?? value
        value.write(into: &out)
        collectStrings(value)
    }

    mutating func collectStrings(_ value: JSON) {
        switch value {
        case .string(let string):
            if stringCount > 0 { strings.append(0x1F) }
            stringCount += 1
            var string = string
            string.withUTF8 { utf8 in
                for byte in utf8 { stringBits |= byte }
                strings.append(contentsOf: utf8)
            }
        case .array(let items): for item in items { collectStrings(item) }
        case .object(let object): for (_, item) in object { collectStrings(item) }
        default: break
        }
    }

    /// The member of `members` that the name just read (at `name.range` in `out`, written as `string` writes it)
    /// names, as `JSONObject` compares keys: as `String`s, under which some non-ASCII names equal ASCII ones (U+212A
    /// KELVIN SIGN is "K"), so bytes are compared only when both are ASCII.
    func find(_ name: (range: Range<Int>, ascii: Bool), in members: [PatchMember]) -> Int? {
        var decoded: String?
        for (n, member) in members.enumerated() {
            if name.ascii && member.plain {
                if same(name.range, member.key) { return n }
                continue
            }
            if decoded == nil { decoded = self.decoded(name.range) }
            if decoded == member.key { return n }
        }
        return nil
    }

    /// Whether the bytes at `range` in `out` are the UTF-8 of `key`.
    func same(_ range: Range<Int>, _ key: String) -> Bool {
        guard range.count == key.utf8.count else { return false }
        if range.isEmpty { return true }
        var key = key
        return key.withUTF8 { utf8 in
            out.withUnsafeBufferPointer { memcmp($0.baseAddress! + range.lowerBound, utf8.baseAddress!, range.count) == 0 }
        }
    }
}
