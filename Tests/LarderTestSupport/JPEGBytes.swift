/// JPEG byte surgery the thumbnail tests share.

/// `jpeg` with its frame header declaring `width` × `height` (the scan left as it is).
public func withFrameSize(_ jpeg: [UInt8], width: Int, height: Int) -> [UInt8] {
    var bytes = jpeg
    var i = 2
    while i + 4 <= bytes.count {
        let marker = bytes[i + 1]
        let length = Int(bytes[i + 2]) << 8 | Int(bytes[i + 3])
        if (0xC0...0xC2).contains(marker) {
            bytes[i + 5] = UInt8(height >> 8)
            bytes[i + 6] = UInt8(height & 0xFF)
            bytes[i + 7] = UInt8(width >> 8)
            bytes[i + 8] = UInt8(width & 0xFF)
            return bytes
        }
        i += 2 + length
    }
    return bytes
}

/// The SOFn marker's second byte (0xC0 for baseline, 0xC2 for progressive), or nil.
public func frameMarker(_ jpeg: [UInt8]) -> UInt8? {
    var i = 2
    while i + 4 <= jpeg.count, jpeg[i] == 0xFF {
        let marker = jpeg[i + 1]
        if (0xC0...0xCF).contains(marker), ![0xC4, 0xC8, 0xCC].contains(marker) { return marker }
        if marker == 0xDA { return nil }
        i += 2 + (Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3]))
    }
    return nil
}
