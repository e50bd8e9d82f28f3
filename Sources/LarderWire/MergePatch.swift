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

    /// `patch` merged into a document kept as compact JSON, without building the document's tree: the members the
    /// patch does not name are copied as they are; a member it names is left out for `null`, merged member by member
    /// when both are objects, and otherwise replaced in its place by the patch's value as `JSON.write` writes it; the
    /// patch's new members follow in its order, where `JSONObject` appends them. `CompactJSON` then reads the merged
    /// bytes, so the answer is exactly the tree's: `apply(patch, to: JSONParser.parseObject(stored))`, its
    /// `JSONObject.bytes` and its string values.
    ///
    /// Nil when that is not certain, and the caller takes the tree path: a kept member that `CompactJSON` leaves to
    /// the general path, a value the patch drops that `CompactJSON.skipValue` would not read, a member name the parser
    /// would refuse, two members of one object that a patch's name matches (duplicates, which the parser refuses), an
    /// object of the document or the patch with more than `CompactJSON.maxMembers` members.
    package static func apply(_ patch: JSONObject, toStored stored: [UInt8]) -> CompactDocument? {
        var merged: [UInt8] = []
        merged.reserveCapacity(stored.count + 64)
        let spliced = stored.withUnsafeBufferPointer { buffer -> Bool in
            var input = ByteScanner(buffer: buffer)
            guard StoredMerge.object(patch, &input, depth: 1, into: &merged) else { return false }
            input.skipWhitespace()
            return input.atEnd
        }
        return spliced ? CompactJSON.object(merged) : nil
    }
}

/// The splice `MergePatch.apply(_:toStored:)` makes, one object at a time.
private enum StoredMerge {
    /// A member of the patch, and whether the stored object has it.
    struct Member {
        let key: String
        let value: JSON
        let ascii: Bool
        var found = false

        init(key: String, value: JSON) {
            self.key = key
            self.value = value
            ascii = key.utf8.allSatisfy { $0 < 0x80 }
        }
    }

    /// A stored member name.
    struct Name {
        /// Its written form, quotes included.
        let quoted: Range<Int>
        /// Whether the bytes between the quotes hold no escape and no control character: then they are the name's
        /// UTF-8, when valid.
        let plain: Bool
        let ascii: Bool

        var inner: Range<Int> { (quoted.lowerBound + 1)..<(quoted.upperBound - 1) }
    }

    enum Match {
        case none
        case member(Int)
        /// The name is not one the parser reads.
        case unreadable
    }

    /// Writes the object at `input` with `patch` merged into it to `out`, and leaves `input` after the object.
    /// `depth` is the object's nesting level as `JSONParser` counts it (1 for the document).
    static func object(_ patch: JSONObject, _ input: inout ByteScanner, depth: Int, into out: inout [UInt8]) -> Bool {
        guard depth <= JSONParser.defaultMaxDepth, patch.count <= CompactJSON.maxMembers,
            input.take(UInt8(ascii: "{"))
        else { return false }
        var members: [Member] = []
        members.reserveCapacity(patch.count)
        for (key, value) in patch { members.append(Member(key: key, value: value)) }
        out.append(UInt8(ascii: "{"))
        let start = out.count
        if !input.take(UInt8(ascii: "}")) {
            var count = 0
            repeat {
                count += 1
                guard count <= CompactJSON.maxMembers, let name = readName(&input), input.take(UInt8(ascii: ":")) else {
                    return false
                }
                input.skipWhitespace()
                switch find(name, in: members, input) {
                case .unreadable:
                    return false
                case .none:
                    guard input.skipValue() else { return false }
                    if out.count > start { out.append(UInt8(ascii: ",")) }
                    out.append(contentsOf: input.bytes(name.quoted.lowerBound..<input.index))
                case .member(let n):
                    guard !members[n].found else { return false }
                    members[n].found = true
                    let value = members[n].value
                    if case .object(let inner) = value, input.peek == UInt8(ascii: "{") {
                        if out.count > start { out.append(UInt8(ascii: ",")) }
                        out.append(contentsOf: input.bytes(name.quoted))
                        out.append(UInt8(ascii: ":"))
                        guard object(inner, &input, depth: depth + 1, into: &out) else { return false }
                    } else {
                        // The stored value is dropped unread into the result, but the tree path parses it.
                        guard CompactJSON.skipValue(input.buffer, at: &input.index, depth: depth) else { return false }
                        if case .null = value { continue }
                        if out.count > start { out.append(UInt8(ascii: ",")) }
                        out.append(contentsOf: input.bytes(name.quoted))
                        out.append(UInt8(ascii: ":"))
                        write(value, into: &out)
                    }
                }
            } while input.take(UInt8(ascii: ","))
            guard input.take(UInt8(ascii: "}")) else { return false }
        }
        for member in members where !member.found {
            if case .null = member.value { continue }
            if out.count > start { out.append(UInt8(ascii: ",")) }
            JSONWriter.writeString(member.key, into: &out)
            out.append(UInt8(ascii: ":"))
            write(member.value, into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return true
    }

    /// A patch's value where the document has no object to merge it into: the value itself, or for an object, the
    /// object merged into an empty one (its nulls dropped at every level).
    static func write(_ value: JSON, into out: inout [UInt8]) {
        if case .object(let inner) = value {
            MergePatch.apply(inner, to: JSONObject()).write(into: &out)
        } else {
            value.write(into: &out)
        }
    }

    /// Reads the member name at `input` (after any whitespace) up to its closing quote.
    static func readName(_ input: inout ByteScanner) -> Name? {
        input.skipWhitespace()
        let start = input.index
        guard input.peek == UInt8(ascii: "\""), input.skipValue() else { return nil }
        var bits: UInt8 = 0
        var plain = true
        for byte in input.bytes((start + 1)..<(input.index - 1)) {
            bits |= byte
            if byte < 0x20 || byte == UInt8(ascii: "\\") { plain = false }
        }
        return Name(quoted: start..<input.index, plain: plain, ascii: bits < 0x80)
    }

    /// The member of `members` that `name` names, as `JSONObject` compares keys: as `String`s, under which some
    /// non-ASCII names equal ASCII ones (U+212A KELVIN SIGN is "K"), so bytes are compared only when both are ASCII.
    static func find(_ name: Name, in members: [Member], _ input: ByteScanner) -> Match {
        var decoded: String?
        for (n, member) in members.enumerated() {
            if name.plain && name.ascii && member.ascii {
                if same(input.bytes(name.inner), member.key) { return .member(n) }
                continue
            }
            if decoded == nil {
                guard let string = self.decoded(name, input) else { return .unreadable }
                decoded = string
            }
            if decoded == member.key { return .member(n) }
        }
        return .none
    }

    /// Whether `bytes` are the UTF-8 of `key`.
    static func same(_ bytes: UnsafeBufferPointer<UInt8>, _ key: String) -> Bool {
        guard bytes.count == key.utf8.count else { return false }
        var key = key
        return key.withUTF8 { utf8 in bytes.isEmpty || memcmp(bytes.baseAddress!, utf8.baseAddress!, bytes.count) == 0 }
    }

    /// A stored name as the parser reads it, or nil when the parser would refuse it.
    static func decoded(_ name: Name, _ input: ByteScanner) -> String? {
        if name.plain { return String(validating: input.bytes(name.inner), as: UTF8.self) }
        guard case .string(let string)? = try? JSONParser.parse(input.bytes(name.quoted)) else { return nil }
        return string
    }
}
