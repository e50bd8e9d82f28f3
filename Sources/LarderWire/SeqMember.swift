/// A sequence number as the last member of a JSON object: `"seq"` in the answers that carry one (a write's, a GET's
/// with `afterSeq`), `"afterSeq"` in a GET. Written and found at the object's end, so that neither side parses the
/// record before it (Protocol.md section 5.1).
package enum SeqMember {
    package static let seq: StaticString = "seq"
    package static let afterSeq: StaticString = "afterSeq"

    /// `json` (an object) with `"name":value` added as its last member.
    package static func appending(_ value: Int64, name: StaticString = seq, to json: [UInt8]) -> [UInt8] {
        guard json.last == UInt8(ascii: "}") else { return json }
        var out = json
        out.removeLast()
        if out.count > 1 { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        out.append(contentsOf: "\":".utf8)
        JSONWriter.writeInt(value, into: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// When `json` ends with `,"name":DIGITS}` (whitespace after it allowed): where that comma is, and the number.
    /// Nil for anything else, and for a number past `Int64.max`.
    package static func trailing(_ json: [UInt8], name: StaticString = seq) -> (start: Int, value: Int64)? {
        var end = json.count
        while end > 0, json[end - 1] == 0x20 || json[end - 1] == 0x0A || json[end - 1] == 0x0D || json[end - 1] == 0x09 {
            end -= 1
        }
        guard end > 0, json[end - 1] == UInt8(ascii: "}") else { return nil }
        var digitsStart = end - 1
        while digitsStart > 0, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(json[digitsStart - 1]) { digitsStart -= 1 }
        let digits = end - 1 - digitsStart
        guard digits > 0, digits <= 18, digits == 1 || json[digitsStart] != UInt8(ascii: "0") else { return nil }
        let key = Array(",\"".utf8) + Array(UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            + Array("\":".utf8)
        let start = digitsStart - key.count
        guard start >= 0, json[start..<digitsStart].elementsEqual(key) else { return nil }
        var value: Int64 = 0
        for byte in json[digitsStart..<(end - 1)] { value = value * 10 + Int64(byte - UInt8(ascii: "0")) }
        return (start, value)
    }
}
