/// The EXIF orientation of a JPEG (TIFF tag 0x0112): how the stored pixels must be turned to be shown upright.
///
/// 1 is upright; 2 mirrored left to right; 3 turned 180°; 4 mirrored top to bottom; 5 transposed (mirrored along the
/// top-left to bottom-right diagonal); 6 to be turned 90° clockwise; 7 transversed (the other diagonal); 8 to be
/// turned 90° counter-clockwise. 5 to 8 swap width and height.
public struct ExifOrientation: RawRepresentable, Sendable, Equatable {
    public let rawValue: Int

    public init?(rawValue: Int) {
        guard (1...8).contains(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    public static let upright = ExifOrientation(rawValue: 1)!

    /// Whether showing the image upright swaps its width and height.
    public var swapsSides: Bool { rawValue >= 5 }

    /// The orientation a JPEG declares in its APP1 Exif segment; upright when it declares none, or when anything on
    /// the way is malformed (a hostile or damaged segment never stops a thumbnail, and never reads out of bounds).
    public static func of(jpeg bytes: [UInt8]) -> ExifOrientation {
        bytes.withUnsafeBufferPointer { of(jpeg: UnsafeRawBufferPointer($0)) }
    }

    /// `of(jpeg:)` over raw bytes.
    public static func of(jpeg bytes: UnsafeRawBufferPointer) -> ExifOrientation {
        guard bytes.count >= 4, bytes[0] == 0xFF, bytes[1] == 0xD8 else { return .upright }
        var i = 2
        // Walk the segments before the first scan; Exif is APP1 and comes early, but the walk costs nothing.
        while i + 4 <= bytes.count {
            guard bytes[i] == 0xFF else { return .upright }
            let marker = bytes[i + 1]
            if marker == 0xFF {  // a fill byte
                i += 1
                continue
            }
            if marker == 0xD8 || marker == 0x01 || (0xD0...0xD7).contains(marker) {
                i += 2
                continue
            }
            if marker == 0xDA || marker == 0xD9 { return .upright }
            let length = Int(bytes[i + 2]) << 8 | Int(bytes[i + 3])
            guard length >= 2, i + 2 + length <= bytes.count else { return .upright }
            if marker == 0xE1,
                let orientation = fromApp1(UnsafeRawBufferPointer(rebasing: bytes[(i + 4)..<(i + 2 + length)]))
            {
                return orientation
            }
            i += 2 + length
        }
        return .upright
    }

    /// The orientation in one APP1 payload (after its length), when it is Exif and holds a valid one.
    static func fromApp1(_ payload: UnsafeRawBufferPointer) -> ExifOrientation? {
        // "Exif\0\0", then a TIFF header: byte order (II or MM), 42, the offset of IFD0 from the header's start.
        let exif: [UInt8] = [0x45, 0x78, 0x69, 0x66, 0x00, 0x00]
        guard payload.count >= 6 + 8, zip(payload.prefix(6), exif).allSatisfy({ $0 == $1 }) else { return nil }
        let tiff = UnsafeRawBufferPointer(rebasing: payload[6...])
        let little: Bool
        switch (tiff[0], tiff[1]) {
        case (0x49, 0x49): little = true
        case (0x4D, 0x4D): little = false
        default: return nil
        }
        func u16(_ at: Int) -> Int? {
            guard at >= 0, at + 2 <= tiff.count else { return nil }
            let a = Int(tiff[at]), b = Int(tiff[at + 1])
            return little ? a | b << 8 : a << 8 | b
        }
        func u32(_ at: Int) -> Int? {
            guard let first = u16(at), let second = u16(at + 2) else { return nil }
            return little ? first | second << 16 : first << 16 | second
        }
        guard u16(2) == 42, let ifd = u32(4), let count = u16(ifd) else { return nil }
        // Each entry: tag, type, count (4 bytes), value or offset (4 bytes); 12 bytes in all.
        for entry in 0..<count {
            let at = ifd + 2 + entry * 12
            guard let tag = u16(at) else { return nil }
            guard tag == 0x0112 else { continue }
            // SHORT (3), one value, stored in the first two bytes of the value field.
            guard u16(at + 2) == 3, u32(at + 4) == 1, let value = u16(at + 8) else { return nil }
            return ExifOrientation(rawValue: value)
        }
        return nil
    }
}
