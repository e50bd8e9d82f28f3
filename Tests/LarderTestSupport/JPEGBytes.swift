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

/// A JPEG made by hand, every 8 × 8 block flat grey, so that a photo of any size takes two bits a block (a
/// 10,000 × 10,000 photo in about 1 MB): one quantisation table, one-code Huffman tables (DC difference 0, end of
/// block). `sampling` gives each component's factors (the first is luma); with `scanPerComponent` each component has a
/// scan of its own (sequential but non-interleaved, which libjpeg decodes whole), otherwise one scan covers them all.
/// `progressive` writes an SOF2 frame header instead of SOF0; `scans: false` ends the file after the frame header;
/// `cutLastScan` drops the second half of the last scan's data.
public func flatJPEG(
    width: Int, height: Int, sampling: [(h: Int, v: Int)] = [(1, 1), (1, 1), (1, 1)],
    scanPerComponent: Bool = false, progressive: Bool = false, scans: Bool = true, cutLastScan: Bool = false
) -> [UInt8] {
    func segment(_ marker: UInt8, _ body: [UInt8]) -> [UInt8] {
        [0xFF, marker, UInt8((body.count + 2) >> 8), UInt8((body.count + 2) & 0xFF)] + body
    }
    func divideRoundingUp(_ a: Int, _ b: Int) -> Int { (a + b - 1) / b }
    var bytes: [UInt8] = [0xFF, 0xD8]
    bytes += segment(0xDB, [0x00] + [UInt8](repeating: 1, count: 64))
    var frame: [UInt8] = [8, UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8), UInt8(width & 0xFF)]
    frame.append(UInt8(sampling.count))
    for (index, factors) in sampling.enumerated() {
        frame += [UInt8(index + 1), UInt8(factors.h << 4 | factors.v), 0]
    }
    bytes += segment(progressive ? 0xC2 : 0xC0, frame)
    guard scans else { return bytes + [0xFF, 0xD9] }
    let oneCode = [UInt8(1)] + [UInt8](repeating: 0, count: 15) + [0x00]
    bytes += segment(0xC4, [0x00] + oneCode)  // DC table 0: category 0 is the code "0"
    bytes += segment(0xC4, [0x10] + oneCode)  // AC table 0: end of block is the code "0"
    let maxH = sampling.map(\.h).max() ?? 1
    let maxV = sampling.map(\.v).max() ?? 1
    // Each scan: its components and how many blocks it codes (two zero bits each).
    var scanList: [(components: [Int], blocks: Int)] = []
    if scanPerComponent {
        for (index, factors) in sampling.enumerated() {
            let across = divideRoundingUp(divideRoundingUp(width * factors.h, maxH), 8)
            let down = divideRoundingUp(divideRoundingUp(height * factors.v, maxV), 8)
            scanList.append(([index], across * down))
        }
    } else {
        let units = divideRoundingUp(width, maxH * 8) * divideRoundingUp(height, maxV * 8)
        scanList.append((Array(sampling.indices), units * sampling.reduce(0) { $0 + $1.h * $1.v }))
    }
    for (number, scan) in scanList.enumerated() {
        var header: [UInt8] = [UInt8(scan.components.count)]
        for component in scan.components { header += [UInt8(component + 1), 0x00] }
        bytes += segment(0xDA, header + [0, 63, 0])
        let bits = scan.blocks * 2
        var data = [UInt8](repeating: 0, count: divideRoundingUp(bits, 8))
        if bits % 8 != 0 { data[data.count - 1] = 0xFF >> UInt8(bits % 8) }  // pad with ones
        if cutLastScan && number == scanList.count - 1 { data.removeLast(data.count / 2) }
        bytes += data
    }
    return bytes + [0xFF, 0xD9]
}
