import Foundation

/// The one text folding used for search: Unicode lowercase (Latin letters case-insensitive; CJK unchanged).
package enum TextFold {
    package static func fold(_ string: String) -> String { string.lowercased() }

    /// Every string value anywhere in `object` (not keys), folded and joined by U+001F so that a query (which may not
    /// contain control characters) never matches across two fields.
    package static func searchText(_ object: JSONObject) -> String {
        String(decoding: searchBytes(object), as: UTF8.self)
    }

    /// `searchText` as UTF-8 bytes, what the writer binds. The strings are joined as bytes; when they are all ASCII
    /// the fold is A-Z to a-z in place (exactly what `lowercased()` does to ASCII), otherwise the joined text goes
    /// through `fold` as a whole, as it always did.
    package static func searchBytes(_ object: JSONObject) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        var first = true
        var nonASCII: UInt8 = 0
        func append(_ string: String) {
            if first { first = false } else { out.append(0x1F) }
            var string = string
            string.withUTF8 { utf8 in
                for byte in utf8 { nonASCII |= byte }
                out.append(contentsOf: utf8)
            }
        }
        func walk(_ value: JSON) {
            switch value {
            case .string(let s): append(s)
            case .array(let items): for item in items { walk(item) }
            case .object(let o): for (_, v) in o { walk(v) }
            default: break
            }
        }
        for (_, value) in object { walk(value) }
        return fold(joined: out, ascii: nonASCII < 0x80)
    }

    /// The fold of strings already joined by U+001F (`searchBytes`, `CompactDocument.strings`).
    package static func fold(joined: [UInt8], ascii: Bool) -> [UInt8] {
        guard ascii else {
            var folded = fold(String(decoding: joined, as: UTF8.self))
            return folded.withUTF8 { Array($0) }
        }
        var out = joined
        out.withUnsafeMutableBufferPointer { bytes in
            for i in bytes.indices where bytes[i] &- 65 < 26 { bytes[i] |= 0x20 }
        }
        return out
    }
}
