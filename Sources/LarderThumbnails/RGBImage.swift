/// An 8-bit RGB image, rows top to bottom, 3 bytes a pixel, no padding.
public struct RGBImage: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var pixels: [UInt8]

    public init(width: Int, height: Int, pixels: [UInt8]) {
        precondition(
            width > 0 && height > 0 && pixels.count == width * height * 3, "pixels must hold width × height × 3")
        self.width = width
        self.height = height
        self.pixels = pixels
    }

    /// The pixel at column `x`, row `y`.
    public subscript(x: Int, y: Int) -> (r: UInt8, g: UInt8, b: UInt8) {
        let at = (y * width + x) * 3
        return (pixels[at], pixels[at + 1], pixels[at + 2])
    }

    /// The image shrunk to `width` × `height` by area averaging (a box filter): each output pixel is the mean of the
    /// source area it covers, partly covered source pixels weighted by their share, so no source pixel is skipped
    /// (nearest-neighbour would alias stripes and noise) and none counts twice. Neither side may grow.
    public func resized(width newWidth: Int, height newHeight: Int) -> RGBImage {
        precondition(newWidth > 0 && newHeight > 0 && newWidth <= width && newHeight <= height, "only shrinking")
        if newWidth == width && newHeight == height { return self }
        let across = BoxWeights(from: width, to: newWidth)
        let down = BoxWeights(from: height, to: newHeight)
        // Rows first (width shrinks), into floats; then columns, rounding once at the end.
        var rows = [Float](repeating: 0, count: newWidth * height * 3)
        pixels.withUnsafeBufferPointer { source in
            rows.withUnsafeMutableBufferPointer { target in
                across.withPointers { first, start, weights in
                    for y in 0..<height {
                        let sourceRow = source.baseAddress! + y * width * 3
                        var out = target.baseAddress! + y * newWidth * 3
                        for x in 0..<newWidth {
                            var r: Float = 0, g: Float = 0, b: Float = 0
                            var at = sourceRow + first[x] * 3
                            for n in start[x]..<start[x + 1] {
                                let w = weights[n]
                                r += Float(at[0]) * w
                                g += Float(at[1]) * w
                                b += Float(at[2]) * w
                                at += 3
                            }
                            out[0] = r
                            out[1] = g
                            out[2] = b
                            out += 3
                        }
                    }
                }
            }
        }
        var out = [UInt8](repeating: 0, count: newWidth * newHeight * 3)
        let stride = newWidth * 3
        var sums = [Float](repeating: 0, count: stride)
        rows.withUnsafeBufferPointer { source in
            out.withUnsafeMutableBufferPointer { target in
                sums.withUnsafeMutableBufferPointer { sums in
                    down.withPointers { first, start, weights in
                        for y in 0..<newHeight {
                            sums.update(repeating: 0)
                            var row = source.baseAddress! + first[y] * stride
                            for n in start[y]..<start[y + 1] {
                                let w = weights[n]
                                for i in 0..<stride { sums[i] += row[i] * w }
                                row += stride
                            }
                            let line = target.baseAddress! + y * stride
                            for i in 0..<stride { line[i] = UInt8(min(255, max(0, sums[i] + 0.5))) }
                        }
                    }
                }
            }
        }
        return RGBImage(width: newWidth, height: newHeight, pixels: out)
    }

    /// The image as it is shown under `orientation` (its width and height swapped for 5 to 8).
    public func oriented(_ orientation: ExifOrientation) -> RGBImage {
        let w = width, h = height
        let swaps = orientation.swapsSides
        let outWidth = swaps ? h : w
        let outHeight = swaps ? w : h
        // For each shown pixel (x, y), the stored pixel it comes from.
        let source: (Int, Int) -> (Int, Int)
        switch orientation.rawValue {
        case 2: source = { x, y in (w - 1 - x, y) }
        case 3: source = { x, y in (w - 1 - x, h - 1 - y) }
        case 4: source = { x, y in (x, h - 1 - y) }
        case 5: source = { x, y in (y, x) }
        case 6: source = { x, y in (y, h - 1 - x) }
        case 7: source = { x, y in (w - 1 - y, h - 1 - x) }
        case 8: source = { x, y in (w - 1 - y, x) }
        default: return self
        }
        var out = [UInt8](repeating: 0, count: pixels.count)
        pixels.withUnsafeBufferPointer { from in
            out.withUnsafeMutableBufferPointer { to in
                for y in 0..<outHeight {
                    for x in 0..<outWidth {
                        let (sx, sy) = source(x, y)
                        let a = (sy * w + sx) * 3
                        let b = (y * outWidth + x) * 3
                        to[b] = from[a]
                        to[b + 1] = from[a + 1]
                        to[b + 2] = from[a + 2]
                    }
                }
            }
        }
        return RGBImage(width: outWidth, height: outHeight, pixels: out)
    }
}

/// For each output position along one axis, the source positions it covers and their weights (summing to 1).
struct BoxWeights {
    private var first: [Int] = []
    private var start: [Int] = []
    private var weights: [Float] = []

    init(from source: Int, to target: Int) {
        let scale = Double(source) / Double(target)
        for o in 0..<target {
            let low = Double(o) * scale
            let high = min(Double(source), Double(o + 1) * scale)
            first.append(Int(low))
            start.append(weights.count)
            var i = Int(low)
            while Double(i) < high {
                let covered = min(high, Double(i + 1)) - max(low, Double(i))
                if covered > 0 { weights.append(Float(covered / scale)) } else { weights.append(0) }
                i += 1
            }
        }
        start.append(weights.count)
    }

    /// The first source position of each output position, where each one's weights start in `weights` (one more
    /// entry at the end), and the weights.
    func withPointers<R>(
        _ body: (UnsafePointer<Int>, UnsafePointer<Int>, UnsafePointer<Float>) -> R
    ) -> R {
        first.withUnsafeBufferPointer { first in
            start.withUnsafeBufferPointer { start in
                weights.withUnsafeBufferPointer { weights in
                    body(first.baseAddress!, start.baseAddress!, weights.baseAddress!)
                }
            }
        }
    }
}
