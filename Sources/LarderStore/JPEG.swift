import LarderWire

/// What the JPEG validator found.
public struct JPEGInfo: Sendable, Equatable {
    public var width: Int
    public var height: Int
}

/// Validates JPEG structure by walking its markers: SOI, segments up to a SOFn frame header (width and height), and
/// EOI as the last two bytes. Entropy-coded data is not decoded.
public enum JPEG {
    public static func inspect(_ bytes: [UInt8]) throws(LarderError) -> JPEGInfo {
        try bytes.withUnsafeBufferPointer { buffer throws(LarderError) in
            try inspect(count: buffer.count) { buffer[$0] }
        }
    }

    /// `inspect` over `count` bytes read through `byte` (an index), for a blob that is not in memory (an upload's
    /// chunks). It reads the last two bytes, then walks forward from the start to the frame header, jumping over segments:
    /// a few hundred bytes of any blob, whatever its size.
    public static func inspect(count n: Int, byte: (Int) throws(LarderError) -> UInt8) throws(LarderError)
        -> JPEGInfo
    {
        func reject(_ why: String) -> LarderError {
            LarderError(.unsupportedMediaType, "the blob is not a well-formed JPEG: \(why); only image/jpeg is stored")
        }
        guard n >= 4, try byte(0) == 0xFF, try byte(1) == 0xD8 else {
            throw reject("it does not start with SOI (FF D8)")
        }
        guard try byte(n - 2) == 0xFF, try byte(n - 1) == 0xD9 else {
            throw reject("it does not end with EOI (FF D9); it may be truncated")
        }
        var i = 2
        while i < n - 2 {
            guard try byte(i) == 0xFF else { throw reject("expected a marker at byte \(i)") }
            var marker = try byte(i + 1)
            i += 1
            while marker == 0xFF && i + 1 < n {  // fill bytes
                i += 1
                marker = try byte(i)
            }
            i += 1
            if marker == 0x01 || (0xD0...0xD7).contains(marker) { continue }
            if marker == 0xD8 || marker == 0xD9 || marker == 0x00 { throw reject("unexpected marker before the frame header") }
            guard i + 2 <= n else { throw reject("a segment header is cut off") }
            let length = Int(try byte(i)) << 8 | Int(try byte(i + 1))
            guard length >= 2, i + length <= n else { throw reject("a segment is longer than the data") }
            let isSOF = (0xC0...0xCF).contains(marker) && marker != 0xC4 && marker != 0xC8 && marker != 0xCC
            if isSOF {
                guard length >= 8 else { throw reject("the frame header is too short") }
                // A header whose length disagrees with its component count is not one (hostile table, RELIABILITY.md).
                let components = Int(try byte(i + 7))
                guard components > 0, length == 8 + 3 * components else {
                    throw reject("the frame header's length \(length) does not fit its \(components) components")
                }
                let height = Int(try byte(i + 3)) << 8 | Int(try byte(i + 4))
                let width = Int(try byte(i + 5)) << 8 | Int(try byte(i + 6))
                guard width > 0, height > 0 else { throw reject("the frame header gives a zero width or height") }
                return JPEGInfo(width: width, height: height)
            }
            if marker == 0xDA { throw reject("scan data starts before any frame header") }
            i += length
        }
        throw reject("no frame header (SOFn) found")
    }
}
