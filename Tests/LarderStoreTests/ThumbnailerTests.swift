import Foundation
import LarderIO
import LarderTestSupport
import LarderTestThreads
import LarderThumbnails
import LarderWire
import Testing

/// The thumbnail function alone: bytes and a size in, a baseline JPEG out (the server's tests cover the cache).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ThumbnailerTests {
    static let photos = [("rocket.jpg", 640, 427), ("grace_hopper.jpg", 512, 600)]

    /// Every size a server offers by default, of both photos: the longer side is the size (or the photo's own when
    /// smaller: never enlarged), the ratio kept within a pixel, a baseline JPEG that TurboJPEG decodes at that size,
    /// and close to a plain area-averaged resize of the full-size decode (PSNR over 25 dB).
    @Test(arguments: photos, Thumbnailer.defaultSizes)
    func realPhotosAtEverySize(_ photo: (name: String, width: Int, height: Int), size: Int) throws {
        let jpeg = try fixture(photo.name)
        let thumbnail = try Thumbnailer.make(jpeg, size: size)
        let longer = max(photo.width, photo.height)
        let expectedLonger = min(size, longer)
        #expect(max(thumbnail.width, thumbnail.height) == expectedLonger)
        // The shorter side is the photo's, scaled like the longer one, within one pixel.
        let exactShorter = Double(min(photo.width, photo.height)) * Double(expectedLonger) / Double(longer)
        #expect(abs(Double(min(thumbnail.width, thumbnail.height)) - exactShorter) <= 1)
        #expect((thumbnail.width >= thumbnail.height) == (photo.width >= photo.height))
        #expect(frameMarker(thumbnail.jpeg) == 0xC0, "a baseline (SOF0) JPEG")
        let decoded = try Thumbnailer.decode(thumbnail.jpeg)
        #expect(decoded.width == thumbnail.width && decoded.height == thumbnail.height)
        let reference = referenceResize(try Thumbnailer.decode(jpeg), width: decoded.width, height: decoded.height)
        let quality = psnr(decoded, reference)
        #expect(quality > 25, "PSNR \(quality) dB against a full-size area-averaged resize")
    }

    /// Scaled decoding picks the smallest of 1/8, 1/4, 1/2, 1/1 that still reaches the size, and gives the same size
    /// of thumbnail as a full decode, of nearly the same pixels.
    @Test func scaledDecodingMatchesFullDecoding() throws {
        let jpeg = try fixture("rocket.jpg")
        for size in [64, 128, 256] {
            let scaled = try Thumbnailer.make(jpeg, size: size)
            let full = try Thumbnailer.make(jpeg, size: size, fullDecode: true)
            #expect(scaled.width == full.width && scaled.height == full.height)
            let quality = psnr(try Thumbnailer.decode(scaled.jpeg), try Thumbnailer.decode(full.jpeg))
            #expect(quality > 30, "size \(size): PSNR \(quality) dB between scaled and full decoding")
        }
    }

    /// A photo smaller than the size is re-encoded at its own size, not enlarged.
    @Test func smallPhotoIsNotEnlarged() throws {
        let small = try Thumbnailer.encode(corners(width: 40, height: 20))
        let thumbnail = try Thumbnailer.make(small, size: 1024)
        #expect(thumbnail.width == 40 && thumbnail.height == 20)
        #expect(frameMarker(thumbnail.jpeg) == 0xC0)
        let equal = try Thumbnailer.make(small, size: 40)
        #expect(equal.width == 40 && equal.height == 20)
    }

    /// Where the red (top-left) and green (top-right) corners of the stored image are shown, for each orientation.
    static let shownCorners: [Int: (red: Corner, green: Corner)] = [
        1: (.topLeft, .topRight), 2: (.topRight, .topLeft), 3: (.bottomRight, .bottomLeft),
        4: (.bottomLeft, .bottomRight), 5: (.topLeft, .bottomLeft), 6: (.topRight, .bottomRight),
        7: (.bottomRight, .topRight), 8: (.bottomLeft, .topLeft),
    ]

    /// EXIF orientations 1 to 8, in both byte orders: 5 to 8 swap width and height, and the coloured corners land
    /// where a photo viewer shows them.
    @Test(arguments: 1...8, [true, false])
    func exifOrientation(_ orientation: Int, littleEndian: Bool) throws {
        let jpeg = withExif(try Thumbnailer.encode(corners(width: 160, height: 80)), orientation, littleEndian)
        #expect(ExifOrientation.of(jpeg: jpeg).rawValue == orientation)
        let thumbnail = try Thumbnailer.make(jpeg, size: 64)
        if orientation >= 5 {
            #expect(thumbnail.width == 32 && thumbnail.height == 64)
        } else {
            #expect(thumbnail.width == 64 && thumbnail.height == 32)
        }
        let shown = try Thumbnailer.decode(thumbnail.jpeg)
        let expected = try #require(Self.shownCorners[orientation])
        #expect(color(shown, at: expected.red) == .red, "orientation \(orientation): red corner")
        #expect(color(shown, at: expected.green) == .green, "orientation \(orientation): green corner")
        let others = Corner.allCases.filter { $0 != expected.red && $0 != expected.green }
        #expect(others.allSatisfy { color(shown, at: $0) == .blue }, "orientation \(orientation): the other corners")
    }

    /// Malformed Exif never crashes and never reads out of bounds: the photo counts as upright.
    @Test func hostileExifIsUpright() throws {
        let base = try Thumbnailer.encode(corners(width: 16, height: 8))
        let good = withExif(base, 6, false)
        // Every truncation of the APP1 segment's payload (its length adjusted so the segment walk stays valid).
        let payloadStart = 2 + 4
        let payloadLength = (Int(good[4]) << 8 | Int(good[5])) - 2
        for cut in 0..<payloadLength {
            var bytes = Array(good[0..<payloadStart]) + Array(good[payloadStart..<(payloadStart + cut)])
            bytes[4] = UInt8((cut + 2) >> 8)
            bytes[5] = UInt8((cut + 2) & 0xFF)
            bytes += base[2...]
            // The orientation's value ends 38 bytes in ("Exif\0\0", the TIFF header, the count, one entry, 10 bytes of
            // the next); anything cut before is upright.
            let orientation = ExifOrientation.of(jpeg: bytes)
            #expect(orientation.rawValue == (cut < 38 ? 1 : 6), "cut at \(cut)")
        }
        // Random bytes in place of the TIFF structure, and offsets pointing anywhere: always one of the 8 orientations.
        var generator = SplitMix64(seed: 15)
        for round in 0..<2000 {
            var bytes = good
            for _ in 0..<4 {
                let at = payloadStart + 6 + Int(generator.below(UInt64(payloadLength - 6)))
                bytes[at] = UInt8(truncatingIfNeeded: generator.next())
            }
            let orientation = ExifOrientation.of(jpeg: bytes).rawValue
            #expect((1...8).contains(orientation), "round \(round): orientation \(orientation)")
        }
        // Random bytes where the orientation does not depend on them (offsets in the TIFF structure of `withExif`,
        // big-endian): the other entry's type, count and value (12..<22), the orientation's padding after its value
        // (32..<34) and the next IFD's offset (34..<38). The orientation read is still the one written.
        let tiffStart = payloadStart + 6
        let untouched = Array(12..<22) + Array(32..<38)
        for round in 0..<2000 {
            var bytes = good
            for _ in 0..<4 {
                let at = tiffStart + untouched[Int(generator.below(UInt64(untouched.count)))]
                bytes[at] = UInt8(truncatingIfNeeded: generator.next())
            }
            let orientation = ExifOrientation.of(jpeg: bytes).rawValue
            #expect(orientation == 6, "round \(round): \(bytes[tiffStart..<(tiffStart + 38)])")
        }
        // An orientation out of 1...8, and a segment length past the end.
        #expect(ExifOrientation.of(jpeg: withExif(base, 9, true)) == .upright)
        #expect(ExifOrientation.of(jpeg: [0xFF, 0xD8, 0xFF, 0xE1, 0xFF, 0xFF, 0x45]) == .upright)
        #expect(ExifOrientation.of(jpeg: []) == .upright)
    }

    /// A header declaring 60,000 × 60,000 (and 65,500 × 65,500, JPEG's largest) is refused from the header alone,
    /// with the limit; so is one a pixel over a lowered limit, and one at the limit is made.
    @Test func headerBombIsRefused() throws {
        let rocket = try fixture("rocket.jpg")
        for side in [60_000, 65_500] {
            let bomb = withFrameSize(rocket, width: side, height: side)
            #expect(try Thumbnailer.header(bomb) == (side, side))
            let error = #expect(throws: LarderError.self) { try Thumbnailer.make(bomb, size: 256) }
            #expect(error?.status == .payloadTooLarge)
            #expect(error?.field == "thumbnail")
            #expect(error?.details["limit"] == .int(100_000_000))
            #expect(error?.details["width"] == .int(Int64(side)))
        }
        let limit = 640 * 427
        #expect(try Thumbnailer.make(rocket, size: 64, maxSourcePixels: limit).width == 64)
        let over = #expect(throws: LarderError.self) {
            try Thumbnailer.make(rocket, size: 64, maxSourcePixels: limit - 1)
        }
        #expect(over?.status == .payloadTooLarge)
    }

    /// A progressive photo is decoded whole (all its coefficients at once), so it is refused from its header past a
    /// quarter of the pixel limit, where the same photo encoded baseline is still made.
    @Test func progressivePhotosHaveAQuarterOfThePixelLimit() throws {
        let photo = try Thumbnailer.decode(try fixture("rocket.jpg"))
        let baseline = try Thumbnailer.encode(photo)
        let progressive = try Thumbnailer.encode(photo, progressive: true)
        #expect(!Thumbnailer.isProgressive(baseline) && Thumbnailer.isProgressive(progressive))
        #expect(!Thumbnailer.isProgressive(Array("not a jpeg".utf8)))
        let pixels = photo.width * photo.height
        // Under a limit of twice its pixels: baseline made, progressive refused (a quarter of the limit is half of it).
        let limit = pixels * 2
        #expect(try Thumbnailer.make(baseline, size: 64, maxSourcePixels: limit).width == 64)
        let refused = #expect(throws: LarderError.self) {
            try Thumbnailer.make(progressive, size: 64, maxSourcePixels: limit)
        }
        #expect(refused?.status == .payloadTooLarge)
        #expect(refused?.field == "thumbnail")
        #expect(refused?.details["progressive"] == .bool(true))
        #expect(refused?.details["limit"] == .int(Int64(limit / Thumbnailer.progressiveDivisor)))
        // Under four times its pixels it is made, and decodes.
        let made = try Thumbnailer.make(progressive, size: 64, maxSourcePixels: pixels * 4)
        #expect(made.width == 64 && !Thumbnailer.isProgressive(made.jpeg))
    }

    /// A cut scan, a scan of garbage and bytes that are no JPEG at all: UNSUPPORTED_MEDIA_TYPE naming `thumbnail`.
    @Test func undecodablePhotosAreRefused() throws {
        let rocket = try fixture("rocket.jpg")
        let truncated = Array(rocket[0..<(rocket.count / 2)]) + [0xFF, 0xD9]
        let scanStart = try #require(scanDataStart(rocket))
        var garbage = Array(rocket[0..<scanStart])
        var generator = SplitMix64(seed: 7)
        for _ in 0..<4000 {
            let byte = UInt8(truncatingIfNeeded: generator.next())
            garbage.append(byte == 0xFF ? 0xFE : byte)
        }
        garbage += [0xFF, 0xD9]
        for (what, bytes) in [("truncated", truncated), ("garbage scan", garbage), ("not a JPEG", Array("PNG".utf8))] {
            let error = #expect(throws: LarderError.self, "\(what)") { try Thumbnailer.make(bytes, size: 128) }
            #expect(error?.status == .unsupportedMediaType, "\(what)")
            #expect(error?.field == "thumbnail", "\(what)")
        }
    }
}

// MARK: - Helpers

enum Corner: CaseIterable { case topLeft, topRight, bottomRight, bottomLeft }
enum Colour { case red, green, blue, other }

/// A `width` × `height` image, blue, with a red top-left and a green top-right quarter-size block.
func corners(width: Int, height: Int) -> RGBImage {
    var pixels = [UInt8](repeating: 0, count: width * height * 3)
    for y in 0..<height {
        for x in 0..<width {
            let at = (y * width + x) * 3
            let top = y < height / 4
            if top && x < width / 4 {
                pixels[at] = 255
            } else if top && x >= width - width / 4 {
                pixels[at + 1] = 255
            } else {
                pixels[at + 2] = 255
            }
        }
    }
    return RGBImage(width: width, height: height, pixels: pixels)
}

/// The colour near a corner (two pixels in, so JPEG's ringing at the edge does not count).
func color(_ image: RGBImage, at corner: Corner) -> Colour {
    let x = corner == .topLeft || corner == .bottomLeft ? 2 : image.width - 3
    let y = corner == .topLeft || corner == .topRight ? 2 : image.height - 3
    let (r, g, b) = image[x, y]
    if r > 180 && g < 90 && b < 90 { return .red }
    if g > 180 && r < 90 && b < 90 { return .green }
    if b > 180 && r < 90 && g < 90 { return .blue }
    return .other
}

/// `jpeg` with an APP1 Exif segment declaring `orientation` right after SOI.
func withExif(_ jpeg: [UInt8], _ orientation: Int, _ littleEndian: Bool) -> [UInt8] {
    func u16(_ v: Int) -> [UInt8] { littleEndian ? [UInt8(v & 0xFF), UInt8(v >> 8)] : [UInt8(v >> 8), UInt8(v & 0xFF)] }
    func u32(_ v: Int) -> [UInt8] { littleEndian ? u16(v & 0xFFFF) + u16(v >> 16) : u16(v >> 16) + u16(v & 0xFFFF) }
    var tiff: [UInt8] = littleEndian ? [0x49, 0x49] : [0x4D, 0x4D]
    tiff += u16(42) + u32(8)
    // IFD0: two entries (one that is not the orientation first), then the next IFD's offset (none).
    tiff += u16(2)
    tiff += u16(0x010F) + u16(2) + u32(4) + [0x41, 0x42, 0x43, 0x00]  // Make: "ABC"
    tiff += u16(0x0112) + u16(3) + u32(1) + u16(orientation) + [0, 0]
    tiff += u32(0)
    let payload = Array("Exif".utf8) + [0, 0] + tiff
    let length = payload.count + 2
    return [0xFF, 0xD8, 0xFF, 0xE1, UInt8(length >> 8), UInt8(length & 0xFF)] + payload + jpeg[2...]
}

/// Where the first scan's entropy-coded data starts (after the SOS segment).
func scanDataStart(_ jpeg: [UInt8]) -> Int? {
    var i = 2
    while i + 4 <= jpeg.count, jpeg[i] == 0xFF {
        let length = Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3])
        if jpeg[i + 1] == 0xDA { return i + 2 + length }
        i += 2 + length
    }
    return nil
}

/// A plain area-averaged resize, pixel by pixel in two dimensions: the reference thumbnails are compared with.
func referenceResize(_ image: RGBImage, width: Int, height: Int) -> RGBImage {
    let sx = Double(image.width) / Double(width)
    let sy = Double(image.height) / Double(height)
    var pixels = [UInt8](repeating: 0, count: width * height * 3)
    for y in 0..<height {
        for x in 0..<width {
            var sums = [0.0, 0.0, 0.0]
            var area = 0.0
            let x0 = Double(x) * sx, x1 = Double(x + 1) * sx, y0 = Double(y) * sy, y1 = Double(y + 1) * sy
            for j in Int(y0)..<min(image.height, Int(y1.rounded(.up))) {
                let h = min(y1, Double(j + 1)) - max(y0, Double(j))
                for i in Int(x0)..<min(image.width, Int(x1.rounded(.up))) {
                    let w = (min(x1, Double(i + 1)) - max(x0, Double(i))) * h
                    let p = image[i, j]
                    sums[0] += Double(p.r) * w
                    sums[1] += Double(p.g) * w
                    sums[2] += Double(p.b) * w
                    area += w
                }
            }
            for c in 0..<3 { pixels[(y * width + x) * 3 + c] = UInt8(min(255, (sums[c] / area).rounded())) }
        }
    }
    return RGBImage(width: width, height: height, pixels: pixels)
}

/// Peak signal-to-noise ratio of two images of one size, in dB.
func psnr(_ a: RGBImage, _ b: RGBImage) -> Double {
    precondition(a.width == b.width && a.height == b.height)
    var sum = 0.0
    for n in 0..<a.pixels.count {
        let d = Double(a.pixels[n]) - Double(b.pixels[n])
        sum += d * d
    }
    let mse = sum / Double(a.pixels.count)
    return mse == 0 ? .infinity : 10 * log10(255 * 255 / mse)
}

/// Photos that libjpeg decodes whole: progressive ones and sequential ones in several scans.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct MultiScanThumbnailTests {
    /// A sequential photo whose first scan covers one component of three is decoded whole, like a progressive one:
    /// past a quarter of the pixel limit it is refused from the header (before its scans are read: a cut last scan
    /// changes nothing), and within it it is made.
    @Test func sequentialPhotosInSeveralScansHaveAQuarterOfThePixelLimit() throws {
        let interleaved = flatJPEG(width: 400, height: 300, sampling: [(2, 2), (1, 1), (1, 1)])
        let separate = flatJPEG(width: 400, height: 300, sampling: [(2, 2), (1, 1), (1, 1)], scanPerComponent: true)
        #expect(FrameLayout(interleaved)?.isMultiScan == false)
        #expect(FrameLayout(separate)?.isMultiScan == true)
        #expect(FrameLayout(separate)?.progressive == false)
        let limit = 400 * 300 * 2
        #expect(try Thumbnailer.make(interleaved, size: 64, maxSourcePixels: limit).width == 64)
        let cut = flatJPEG(
            width: 400, height: 300, sampling: [(2, 2), (1, 1), (1, 1)], scanPerComponent: true, cutLastScan: true)
        for photo in [separate, cut] {
            let refused = #expect(throws: LarderError.self) {
                try Thumbnailer.make(photo, size: 64, maxSourcePixels: limit)
            }
            #expect(refused?.status == .payloadTooLarge)
            #expect(refused?.field == "thumbnail")
            #expect(refused?.details["multiScan"] == .bool(true))
            #expect(refused?.details["progressive"] == nil)
            #expect(refused?.details["limit"] == .int(Int64(limit / 4)))
        }
        let made = try Thumbnailer.make(separate, size: 64, maxSourcePixels: 400 * 300 * 4)
        #expect(made.width == 64 && made.height == 48)
        // The same photo with its last scan cut decodes to a warning: refused as undecodable.
        let undecodable = #expect(throws: LarderError.self) {
            try Thumbnailer.make(cut, size: 64, maxSourcePixels: 400 * 300 * 4)
        }
        #expect(undecodable?.status == .unsupportedMediaType)
    }

    /// The coefficients, not only the pixels, are bounded: at 4:4:4 a photo decoded whole holds 6 bytes a pixel, so
    /// one of a quarter of the pixel limit is refused (its coefficients would take twice a 4:2:0 photo's), and one of
    /// an eighth is made.
    @Test func photosDecodedWholeAreBoundedByTheirCoefficients() throws {
        let photo = flatJPEG(width: 400, height: 300, scanPerComponent: true)
        let layout = try #require(FrameLayout(photo))
        #expect(layout.coefficientBytes == 50 * 38 * 3 * 128)
        #expect(layout.sampleCoefficientBytes == 400 * 300 * 6)
        let quarter = #expect(throws: LarderError.self) {
            try Thumbnailer.make(photo, size: 64, maxSourcePixels: 400 * 300 * 4)
        }
        #expect(quarter?.status == .payloadTooLarge)
        #expect(quarter?.details["memory"] == .int(Int64(layout.coefficientBytes)))
        #expect(quarter?.details["memoryLimit"] == .int(Int64(400 * 300 * 3)))
        #expect(try Thumbnailer.make(photo, size: 64, maxSourcePixels: 400 * 300 * 8).width == 64)
    }

    /// A progressive frame header over a quarter of the limit is refused from the header alone, even with no scan
    /// after it (PAYLOAD_TOO_LARGE, not UNSUPPORTED_MEDIA_TYPE).
    @Test func aProgressiveHeaderWithoutScansIsRefusedFromTheHeader() throws {
        let header = flatJPEG(width: 6000, height: 5000, progressive: true, scans: false)
        let refused = #expect(throws: LarderError.self) { try Thumbnailer.make(header, size: 64) }
        #expect(refused?.status == .payloadTooLarge)
        #expect(refused?.details["progressive"] == .bool(true))
        #expect(refused?.details["limit"] == .int(25_000_000))
    }

    /// libjpeg's own memory cap holds whatever the markers say: a photo decoded whole under a cap smaller than its
    /// coefficients is refused before its scans are read, while a single-scan photo of the same size decodes under a
    /// cap of one byte (it holds no coefficients).
    @Test func libjpegsMemoryCapHolds() throws {
        let separate = flatJPEG(width: 800, height: 800, scanPerComponent: true)
        let refused = #expect(throws: LarderError.self) { try Thumbnailer.decode(separate, maxMemory: 1 << 20) }
        #expect(refused?.status == .payloadTooLarge)
        #expect(refused?.details["memoryLimit"] == .int(1 << 20))
        #expect(try Thumbnailer.decode(separate, maxMemory: 8 << 20).pixels.allSatisfy { $0 == 128 })
        let interleaved = flatJPEG(width: 800, height: 800)
        #expect(try Thumbnailer.decode(interleaved, maxMemory: 1).width == 800)
    }

    /// A CMYK photo is refused as unsupported before it is decoded.
    @Test func cmykIsUnsupported() throws {
        var cmyk = flatJPEG(width: 64, height: 64, sampling: [(1, 1), (1, 1), (1, 1), (1, 1)])
        // An Adobe segment saying "no transform": libjpeg reads four components as CMYK.
        let adobe: [UInt8] = [0xFF, 0xEE, 0x00, 0x0E] + Array("Adobe".utf8) + [0x00, 0x64, 0, 0, 0, 0, 0]
        cmyk.insert(contentsOf: adobe, at: 2)
        let refused = #expect(throws: LarderError.self) { try Thumbnailer.make(cmyk, size: 64) }
        #expect(refused?.status == .unsupportedMediaType)
        #expect(refused?.message.contains("CMYK") == true)
    }
}
