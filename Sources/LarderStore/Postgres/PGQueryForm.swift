import Foundation
import LarderWire

/// The jsonb copy a document is queried through, when its compact text cannot serve as one directly: jsonb refuses
/// `\u0000`, and reads a double written with a positive exponent (`1e+20`) as an integer. SQLite reads a string up to
/// its first NUL (`json_extract`), so strings are cut there; a member name holding one (never addressable: paths have
/// no control characters) has it replaced by U+0001; such doubles get their exact integer digits and `.0`.
enum PGQueryForm {
    /// nil when `data` is its own query form (by far the usual case: a quick scan finds neither pattern).
    static func make(_ data: [UInt8]) -> [UInt8]? {
        guard needsRewrite(data) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(data.count)
        var i = 0
        // Whether the next string is a member name: after `{` or `,` inside an object.
        var stack: [UInt8] = []
        var expectKey = false
        while i < data.count {
            let byte = data[i]
            switch byte {
            case UInt8(ascii: "{"):
                stack.append(byte)
                expectKey = true
                out.append(byte)
                i += 1
            case UInt8(ascii: "["):
                stack.append(byte)
                expectKey = false
                out.append(byte)
                i += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                stack.removeLast()
                out.append(byte)
                i += 1
            case UInt8(ascii: ","):
                expectKey = stack.last == UInt8(ascii: "{")
                out.append(byte)
                i += 1
            case UInt8(ascii: ":"):
                expectKey = false
                out.append(byte)
                i += 1
            case UInt8(ascii: "\""):
                i = copyString(data, from: i, into: &out, isKey: expectKey)
                expectKey = false
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                var end = i
                while end < data.count, !isDelimiter(data[end]) { end += 1 }
                let token = Array(data[i..<end])
                if token.contains(UInt8(ascii: "e")) || token.contains(UInt8(ascii: "E")),
                    let value = Double(String(decoding: token, as: UTF8.self))
                {
                    out.append(contentsOf: PGNumber.text(value).utf8)
                } else {
                    out.append(contentsOf: token)
                }
                i = end
            default:
                out.append(byte)
                i += 1
            }
        }
        return out
    }

    private static func isDelimiter(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]")
    }

    /// Whether `data` holds `\u0000` or an exponent with a plus sign (compact text writes no other exponent form
    /// that jsonb misreads).
    static func needsRewrite(_ data: [UInt8]) -> Bool {
        data.withUnsafeBufferPointer { bytes in
            var i = 0
            while i + 1 < bytes.count {
                if bytes[i] == UInt8(ascii: "e") && bytes[i + 1] == UInt8(ascii: "+") { return true }
                if bytes[i] == UInt8(ascii: "\\") {
                    if i + 5 < bytes.count && bytes[i + 1] == UInt8(ascii: "u") && bytes[i + 2] == UInt8(ascii: "0")
                        && bytes[i + 3] == UInt8(ascii: "0") && bytes[i + 4] == UInt8(ascii: "0")
                        && bytes[i + 5] == UInt8(ascii: "0")
                    {
                        return true
                    }
                    i += 2
                    continue
                }
                i += 1
            }
            return false
        }
    }

    /// Copies the string starting at `start` (its opening quote); returns the index after its closing quote.
    private static func copyString(_ data: [UInt8], from start: Int, into out: inout [UInt8], isKey: Bool) -> Int {
        out.append(UInt8(ascii: "\""))
        var i = start + 1
        var cut = false
        while i < data.count {
            let byte = data[i]
            if byte == UInt8(ascii: "\"") {
                out.append(byte)
                return i + 1
            }
            if byte == UInt8(ascii: "\\") {
                let isNul =
                    i + 5 < data.count && data[i + 1] == UInt8(ascii: "u") && data[i + 2] == UInt8(ascii: "0")
                    && data[i + 3] == UInt8(ascii: "0") && data[i + 4] == UInt8(ascii: "0")
                    && data[i + 5] == UInt8(ascii: "0")
                let length = data[i + 1] == UInt8(ascii: "u") ? 6 : 2
                if isNul {
                    if isKey {
                        if !cut { out.append(contentsOf: Array(#"\u0001"#.utf8)) }
                    } else {
                        cut = true
                    }
                } else if !cut {
                    out.append(contentsOf: data[i..<min(data.count, i + length)])
                }
                i += length
                continue
            }
            if !cut { out.append(byte) }
            i += 1
        }
        return i
    }
}
