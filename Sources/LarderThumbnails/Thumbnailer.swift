import CTurboJPEG
import LarderWire

// The thumbnailer's side of LarderStore's `StoredThumbnail`
// (what the store keeps); its memberwise init has the shape of every small value type's (`Group`,
// `GroupResponse.Section`), which share nothing else.
/// A thumbnail: baseline JPEG bytes and the size they show at (EXIF orientation applied).
public struct Thumbnail: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var jpeg: [UInt8]

    public init(width: Int, height: Int, jpeg: [UInt8]) {
        self.width = width
        self.height = height
        self.jpeg = jpeg
    }
}

/// Makes thumbnails of JPEG photos with libjpeg-turbo: a pure function of the bytes, the requested size and the pixel
/// limit, safe to call from any thread (each call has its own libjpeg and TurboJPEG objects).
///
/// The steps: the markers alone are read (`FrameLayout`) and a photo declaring more than `maxSourcePixels`, or one
/// decoded whole past its own limits (`checkMultiScan`), is refused before anything is allocated for its pixels; the
/// scan is decoded through libjpeg, under a memory cap of what the markers said it needs, at the smallest of 1/8, 1/4,
/// 1/2 and 1/1 whose longer side still reaches the requested size (libjpeg scales in the DCT, so 1/8 costs a fraction
/// of a full decode); the result is area-averaged down to exactly the requested longer side, keeping the aspect
/// ratio; the EXIF orientation is applied; and the image is encoded by TurboJPEG as a baseline (sequential, not
/// progressive) JPEG, 4:2:0, quality `quality`.
///
/// A photo whose longer side is at most the requested size is never enlarged: its thumbnail has the photo's own size
/// (re-encoded, orientation applied), so a client asking for 1024 of an 800-pixel photo gets 800.
public enum Thumbnailer {
    /// The default largest photo a thumbnail is made of: 100 megapixels (a 12,000 × 8,333 photo).
    public static let defaultMaxSourcePixels = 100_000_000
    /// The default sizes a server makes.
    public static let defaultSizes = [64, 128, 256, 512, 1024]
    /// The JPEG quality thumbnails are encoded at.
    public static let quality: Int32 = 85

    /// Width and height a photo declares in its frame header, read by TurboJPEG without decoding.
    public static func header(_ jpeg: [UInt8]) throws(LarderError) -> (width: Int, height: Int) {
        let decoder = try Handle(decompress: true)
        return try decoder.header(jpeg).size
    }

    /// The thumbnail of `jpeg` whose longer side is `size` (or the photo's own, when smaller); see the type's notes.
    ///
    /// Errors: PAYLOAD_TOO_LARGE (details `limit`, `width`, `height`) for a photo declaring more than
    /// `maxSourcePixels`, or decoded whole past its limits (`checkMultiScan`); UNSUPPORTED_MEDIA_TYPE for bytes that
    /// do not decode (a damaged or truncated scan, an unsupported colour space): both name the field `thumbnail`.
    /// `fullDecode` turns scaled decoding off (for the benchmark that shows what it saves).
    public static func make(
        _ jpeg: [UInt8], size: Int, maxSourcePixels: Int = defaultMaxSourcePixels, fullDecode: Bool = false
    ) throws(LarderError) -> Thumbnail {
        precondition(size > 0, "a thumbnail size is positive")
        guard let layout = FrameLayout(jpeg) else { throw undecodable("no frame header before the first scan") }
        let (width, height) = (layout.width, layout.height)
        try checkPixels(width: width, height: height, limit: maxSourcePixels)
        try checkMultiScan(layout, maxSourcePixels: maxSourcePixels)
        let longer = max(width, height)
        let target = min(size, longer)
        // The smallest scale whose longer side still reaches the target: the box filter then has all the detail.
        var denom: Int32 = 1
        if !fullDecode {
            for candidate in [Int32(8), 4, 2] where scaled(longer, candidate) >= target {
                denom = candidate
                break
            }
        }
        let decodedWidth = scaled(width, denom)
        let decodedHeight = scaled(height, denom)
        var decoded = [UInt8](repeating: 0, count: decodedWidth * decodedHeight * 3)
        try decode(
            jpeg, into: &decoded, width: decodedWidth, height: decodedHeight, denom: denom,
            maxMemory: layout.decodeMemoryCap)
        let image = RGBImage(width: decodedWidth, height: decodedHeight, pixels: decoded)
        // The longer side becomes exactly `target`; the other keeps the photo's ratio (rounded, at least 1 pixel). From
        // the photo's own sides, not the decoded ones, which libjpeg rounds up: the same thumbnail at every scale.
        // The decoded sides are never below these (the scale was chosen so), so the resize only shrinks.
        let newWidth: Int
        let newHeight: Int
        if width >= height {
            newWidth = target
            newHeight = min(decodedHeight, max(1, Int((Double(height) * Double(target) / Double(width)).rounded())))
        } else {
            newHeight = target
            newWidth = min(decodedWidth, max(1, Int((Double(width) * Double(target) / Double(height)).rounded())))
        }
        let shown = image.resized(width: newWidth, height: newHeight).oriented(ExifOrientation.of(jpeg: jpeg))
        let encoder = try Handle(decompress: false)
        return Thumbnail(width: shown.width, height: shown.height, jpeg: try encoder.encode(shown))
    }

    /// Decodes a whole JPEG to RGB at full size (for tests and the benchmark); no pixel limit, and libjpeg holds at
    /// most `maxMemory` bytes of coefficients (0: no cap; over it, PAYLOAD_TOO_LARGE with `memoryLimit`).
    public static func decode(_ jpeg: [UInt8], maxMemory: Int = 0) throws(LarderError) -> RGBImage {
        let (width, height) = try header(jpeg)
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        try decode(jpeg, into: &pixels, width: width, height: height, denom: 1, maxMemory: maxMemory)
        return RGBImage(width: width, height: height, pixels: pixels)
    }

    /// Encodes an RGB image as a baseline JPEG, or a progressive one, 4:2:0 at `quality` (for tests and tools).
    public static func encode(
        _ image: RGBImage, progressive: Bool = false, quality: Int32 = Thumbnailer.quality
    ) throws(LarderError) -> [UInt8] {
        try Handle(decompress: false).encode(image, progressive: progressive, quality: quality)
    }

    /// A photo decoded whole is made into a thumbnail only up to this fraction of the pixel limit. libjpeg decodes a
    /// single-scan (baseline, interleaved) photo a few rows at a time, but must hold every DCT coefficient of a
    /// multi-scan one (progressive, or sequential with a first scan that does not cover every component) until its
    /// last scan, scaled decoding or not: 2 bytes per sample, 3 bytes a pixel at 4:2:0.
    public static let progressiveDivisor = 4

    /// The most bytes of coefficients a photo decoded whole may need: 3 bytes a pixel of a quarter of the pixel limit
    /// (75,000,000 at the default), which is a 25-megapixel photo at 4:2:0 or a 12.5-megapixel one at 4:4:4.
    public static func coefficientLimit(maxSourcePixels: Int) -> Int { maxSourcePixels / progressiveDivisor * 3 }

    /// PAYLOAD_TOO_LARGE from the header for a photo decoded whole past a quarter of the pixel limit or past
    /// `coefficientLimit`: details `limit` (the quarter), `width`, `height`, `multiScan`, `memory` and `memoryLimit`
    /// (its coefficients' bytes and the limit), and `progressive` when it is.
    static func checkMultiScan(_ layout: FrameLayout, maxSourcePixels: Int) throws(LarderError) {
        guard layout.isMultiScan else { return }
        let limit = maxSourcePixels / progressiveDivisor
        let memoryLimit = coefficientLimit(maxSourcePixels: maxSourcePixels)
        let pixels = layout.width.multipliedReportingOverflow(by: layout.height).partialValue
        guard pixels > limit || layout.sampleCoefficientBytes > memoryLimit else { return }
        var details: JSONObject = [
            "limit": .int(Int64(limit)), "width": .int(Int64(layout.width)), "height": .int(Int64(layout.height)),
            "multiScan": .bool(true), "memory": .int(Int64(layout.coefficientBytes)),
            "memoryLimit": .int(Int64(memoryLimit)),
        ]
        if layout.progressive { details["progressive"] = .bool(true) }
        let kind = layout.progressive ? "progressive" : "sequential in several scans"
        throw LarderError(
            .payloadTooLarge,
            "the photo is \(kind) and \(layout.width) × \(layout.height) pixels, so it is decoded whole: its "
                + "coefficients would take \(layout.coefficientBytes) bytes; thumbnails are made of such photos up to "
                + "\(limit) pixels (a quarter of maxThumbnailSourcePixels) and \(memoryLimit) bytes; "
                + "fetch the photo itself",
            field: "thumbnail", details: details)
    }

    /// PAYLOAD_TOO_LARGE (details `limit`, `width`, `height`, and `progressive` when that is why; field `thumbnail`)
    /// for a photo of more than `limit` pixels.
    public static func checkPixels(width: Int, height: Int, limit: Int, progressive: Bool = false) throws(LarderError) {
        guard width.multipliedReportingOverflow(by: height).partialValue > limit else { return }
        var details: JSONObject = [
            "limit": .int(Int64(limit)), "width": .int(Int64(width)), "height": .int(Int64(height)),
        ]
        if progressive { details["progressive"] = .bool(true) }
        throw LarderError(
            .payloadTooLarge,
            progressive
                ? "the photo is progressive and \(width) × \(height) pixels; a progressive photo is decoded whole, so "
                    + "thumbnails are made of ones up to \(limit) pixels (a quarter of maxThumbnailSourcePixels); "
                    + "fetch the photo itself"
                : "the photo is \(width) × \(height) pixels, over the \(limit) a thumbnail is made of; "
                    + "fetch the photo itself",
            field: "thumbnail", details: details)
    }

    /// Whether the first frame header of `jpeg` is progressive (SOF2, SOF6, SOF10, SOF14), read from the markers
    /// alone; false for anything that is not a well-formed run of segments up to a frame header.
    public static func isProgressive(_ jpeg: [UInt8]) -> Bool { FrameLayout(jpeg)?.progressive ?? false }

    /// Decodes `jpeg` into `pixels` (RGB) at 1/`denom` of its size, which must give `width` × `height`, with libjpeg
    /// holding at most `maxMemory` bytes of coefficients (0: no cap). Any warning (a damaged or cut scan, which
    /// libjpeg would fill with grey) fails the decode, and so do more than 500 scans; a CMYK or YCCK photo is
    /// refused before anything is allocated for it.
    static func decode(
        _ jpeg: [UInt8], into pixels: inout [UInt8], width: Int, height: Int, denom: Int32, maxMemory: Int
    ) throws(LarderError) {
        var message = [CChar](repeating: 0, count: Int(JMSG_LENGTH_MAX))
        let rc = jpeg.withUnsafeBufferPointer { source in
            pixels.withUnsafeMutableBufferPointer { target in
                message.withUnsafeMutableBufferPointer { text in
                    larder_jpeg_decode(
                        source.baseAddress, UInt(jpeg.count), UInt32(denom), maxMemory, target.baseAddress,
                        UInt32(width), UInt32(height), text.baseAddress)
                }
            }
        }
        let why = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        switch Int(rc) {
        case LARDER_JPEG_OK: return
        case LARDER_JPEG_OVER_MEMORY:
            throw LarderError(
                .payloadTooLarge,
                "the photo would take more than \(maxMemory) bytes to decode, more than its frame header declares; "
                    + "fetch the photo itself",
                field: "thumbnail", details: ["memoryLimit": .int(Int64(maxMemory))])
        default: throw undecodable(why)
        }
    }

    /// `dimension` scaled by 1/`denom`, rounded up as TurboJPEG does (`TJSCALED`).
    static func scaled(_ dimension: Int, _ denom: Int32) -> Int { (dimension + Int(denom) - 1) / Int(denom) }

    static func undecodable(_ why: String) -> LarderError {
        LarderError(
            .unsupportedMediaType, "no thumbnail: the photo does not decode (\(why)); the stored bytes are unchanged "
                + "and BLOB_GET without thumbnail still answers them", field: "thumbnail")
    }

    /// One TurboJPEG handle, destroyed with the value.
    final class Handle {
        let handle: tjhandle

        init(decompress: Bool) throws(LarderError) {
            guard let handle = decompress ? tjInitDecompress() : tjInitCompress() else {
                throw LarderError(.internal, "TurboJPEG could not start: \(String(cString: tjGetErrorStr2(nil)))")
            }
            self.handle = handle
        }

        deinit { tjDestroy(handle) }

        private var errorText: String { String(cString: tjGetErrorStr2(handle)) }

        /// Reads the headers up to the first scan: no pixel memory is allocated.
        func header(_ jpeg: [UInt8]) throws(LarderError) -> (size: (Int, Int), subsampling: Int32) {
            var width: Int32 = 0, height: Int32 = 0, subsampling: Int32 = 0, colorspace: Int32 = 0
            let rc = jpeg.withUnsafeBufferPointer {
                tjDecompressHeader3(
                    handle, $0.baseAddress, UInt(jpeg.count), &width, &height, &subsampling, &colorspace)
            }
            guard rc == 0, width > 0, height > 0 else { throw Thumbnailer.undecodable(errorText) }
            return ((Int(width), Int(height)), subsampling)
        }

        /// A baseline JPEG of `image`, 4:2:0 at `quality`.
        func encode(
            _ image: RGBImage, progressive: Bool = false, quality: Int32 = Thumbnailer.quality
        ) throws(LarderError) -> [UInt8] {
            var buffer: UnsafeMutablePointer<UInt8>?
            var length: UInt = 0
            let rc = image.pixels.withUnsafeBufferPointer {
                tjCompress2(
                    handle, $0.baseAddress, Int32(image.width), Int32(image.width * 3), Int32(image.height),
                    Int32(TJPF_RGB.rawValue), &buffer, &length, Int32(TJSAMP_420.rawValue), quality,
                    progressive ? TJFLAG_PROGRESSIVE : 0)
            }
            defer { tjFree(buffer) }
            guard rc == 0, let buffer else {
                throw LarderError(.internal, "TurboJPEG could not encode the thumbnail: \(errorText)")
            }
            return Array(UnsafeBufferPointer(start: buffer, count: Int(length)))
        }
    }
}
