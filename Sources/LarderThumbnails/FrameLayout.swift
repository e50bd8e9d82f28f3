/// What a photo's markers up to its first scan say about how libjpeg will decode it: its size, whether it is decoded
/// whole (all its coefficients held until the last scan), and how much memory that takes. Read from the bytes alone,
/// before anything is allocated for the image.
public struct FrameLayout: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// A progressive frame (SOF2, SOF6, SOF10, SOF14).
    public var progressive: Bool
    /// Each component's horizontal and vertical sampling factors (1 to 4), in frame order.
    public var horizontalSampling: [Int]
    public var verticalSampling: [Int]
    /// How many components the first scan covers; nil when no scan header follows the frame header.
    public var firstScanComponents: Int?

    /// Whether libjpeg must hold every coefficient until the last scan: a progressive frame, or a sequential one whose
    /// first scan does not cover every component (libjpeg's `jpeg_has_multiple_scans`).
    public var isMultiScan: Bool {
        progressive || (firstScanComponents.map { $0 < horizontalSampling.count } ?? false)
    }

    /// The bytes libjpeg allocates for the coefficients of a photo decoded whole: each component's 8 × 8 blocks
    /// (rounded up to its sampling factors), 64 two-byte coefficients each.
    public var coefficientBytes: Int {
        let maxH = horizontalSampling.max() ?? 1
        let maxV = verticalSampling.max() ?? 1
        var blocks = 0
        for (h, v) in zip(horizontalSampling, verticalSampling) {
            let across = roundUp(divideRoundingUp(width * h, maxH * 8), h)
            let down = roundUp(divideRoundingUp(height * v, maxV * 8), v)
            blocks += across * down
        }
        return blocks * 128
    }

    /// The same without the blocks' rounding: 2 bytes per sample of each component (3 bytes a pixel at 4:2:0, 6 at
    /// 4:4:4). The limit is checked on this, so that whether a photo is admitted does not depend on its size
    /// modulo 16.
    public var sampleCoefficientBytes: Int {
        let maxH = horizontalSampling.max() ?? 1
        let maxV = verticalSampling.max() ?? 1
        var samples = 0.0
        for (h, v) in zip(horizontalSampling, verticalSampling) {
            samples += Double(width) * Double(h) / Double(maxH) * Double(height) * Double(v) / Double(maxV)
        }
        return Int((samples * 2).rounded(.up))
    }

    /// The cap libjpeg's memory manager gets for this photo's decode: its coefficients when it is decoded whole, and
    /// in every case 4 MiB for libjpeg's own tables and rows. A photo whose markers said otherwise than libjpeg finds
    /// cannot make a decode hold more.
    public var decodeMemoryCap: Int { (isMultiScan ? coefficientBytes : 0) + 4 << 20 }

    /// Reads the markers of `jpeg` up to the first scan header; nil when there is no well-formed frame header.
    public init?(_ jpeg: [UInt8]) {
        guard jpeg.count >= 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8 else { return nil }
        var frame: (width: Int, height: Int, progressive: Bool, h: [Int], v: [Int])?
        var scanComponents: Int?
        var i = 2
        markers: while i + 4 <= jpeg.count {
            guard jpeg[i] == 0xFF else { break }
            let marker = jpeg[i + 1]
            if marker == 0xFF { i += 1; continue }  // fill byte
            if marker == 0x01 || (0xD0...0xD7).contains(marker) { i += 2; continue }  // no length
            if marker == 0xD9 { break }
            let length = Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3])
            guard length >= 2, i + 2 + length <= jpeg.count else { break }
            let body = i + 4
            switch marker {
            case 0xC0...0xCF where marker != 0xC4 && marker != 0xC8 && marker != 0xCC:
                // libjpeg refuses a second frame header; the first one is the photo's.
                guard frame == nil, length >= 8 else { break markers }
                let components = Int(jpeg[body + 5])
                guard components > 0, length == 8 + 3 * components else { break markers }
                var h: [Int] = []
                var v: [Int] = []
                for c in 0..<components {
                    let factors = jpeg[body + 6 + 3 * c + 1]
                    h.append(Int(factors >> 4))
                    v.append(Int(factors & 0x0F))
                }
                guard h.allSatisfy({ (1...4).contains($0) }), v.allSatisfy({ (1...4).contains($0) }) else {
                    break markers
                }
                frame = (
                    Int(jpeg[body + 3]) << 8 | Int(jpeg[body + 4]), Int(jpeg[body + 1]) << 8 | Int(jpeg[body + 2]),
                    [0xC2, 0xC6, 0xCA, 0xCE].contains(marker), h, v
                )
            case 0xDA:
                if frame != nil, length >= 3 { scanComponents = Int(jpeg[body]) }
                break markers
            default: break
            }
            i += 2 + length
        }
        guard let frame, frame.width > 0, frame.height > 0 else { return nil }
        width = frame.width
        height = frame.height
        progressive = frame.progressive
        horizontalSampling = frame.h
        verticalSampling = frame.v
        firstScanComponents = scanComponents
    }
}

private func divideRoundingUp(_ a: Int, _ b: Int) -> Int { (a + b - 1) / b }
private func roundUp(_ a: Int, _ multiple: Int) -> Int { divideRoundingUp(a, multiple) * multiple }
