import Foundation
import LarderThumbnails
import LarderWire

/// `larder-bench thumbnail`: the time to make one thumbnail in-process, with TurboJPEG's scaled decoding and with a
/// full-size decode, alternating in the same run so that the machine's load falls on both alike.
enum ThumbnailBench {
    static let usage = "Usage: larder-bench thumbnail [--size N] [--rounds N] [--synthetic WxH] [FILE...]"
    static let help = """
        \(usage)

        Makes a thumbnail of each JPEG FILE (and of a synthetic photo, WxH pixels, when --synthetic is given or no
        FILE is), --rounds times with scaled decoding and as many with a full-size decode, alternating, and prints
        the median and p99 CPU milliseconds (this thread's) of each and their ratio.

          --size N          the thumbnail's longer side (default 256)
          --rounds N        thumbnails of each kind per photo (default 50)
          --synthetic WxH   also a synthetic photo of this size (default 4000x3000 when no FILE is given)

        """

    static func run(_ arguments: [String]) throws(LarderError) {
        var size = 256
        var rounds = 50
        var files: [String] = []
        var synthetic: (Int, Int)?
        var index = 0
        func value() -> String {
            index += 1
            guard index < arguments.count else { usageFailure("\(arguments[index - 1]) needs a value", usage: usage) }
            return arguments[index]
        }
        while index < arguments.count {
            switch arguments[index] {
            case "-h", "--help":
                print(help, terminator: "")
                return
            case "--size":
                guard let n = Int(value()), n > 0 else {
                    usageFailure("--size needs a positive integer", usage: usage)
                }
                size = n
            case "--rounds":
                guard let n = Int(value()), n > 0 else {
                    usageFailure("--rounds needs a positive integer", usage: usage)
                }
                rounds = n
            case "--synthetic":
                let parts = value().split(separator: "x").compactMap { Int($0) }
                guard parts.count == 2, parts.allSatisfy({ (1...20_000).contains($0) }) else {
                    usageFailure("--synthetic needs WIDTHxHEIGHT, e.g. 4000x3000", usage: usage)
                }
                synthetic = (parts[0], parts[1])
            case let option where option.hasPrefix("-"):
                usageFailure("unknown option '\(option)'", usage: usage)
            case let file:
                files.append(file)
            }
            index += 1
        }
        var photos: [(String, [UInt8])] = []
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else {
                usageFailure("cannot read \(file)", usage: usage)
            }
            photos.append((file, Array(data)))
        }
        if synthetic == nil && files.isEmpty { synthetic = (4000, 3000) }
        if let (width, height) = synthetic {
            let photo = try Thumbnailer.encode(syntheticPhoto(width: width, height: height))
            photos.append(("synthetic \(width)x\(height)", photo))
        }
        print("thumbnail benchmark: longer side \(size), \(rounds) rounds of each kind, alternating; CPU time")
        for (name, jpeg) in photos {
            let (width, height) = try Thumbnailer.header(jpeg)
            var scaled: [Double] = []
            var full: [Double] = []
            for _ in 0..<rounds {
                scaled.append(try time { () throws(LarderError) in _ = try Thumbnailer.make(jpeg, size: size) })
                full.append(
                    try time { () throws(LarderError) in _ = try Thumbnailer.make(jpeg, size: size, fullDecode: true) })
            }
            let s = Summary(scaled), f = Summary(full)
            print(
                String(
                    format: "%@ (%dx%d, %d KB): scaled p50 %.2f ms p99 %.2f ms; full decode p50 %.2f ms p99 %.2f ms; "
                        + "full/scaled %.1fx", name, width, height, jpeg.count / 1024, s.p50, s.p99, f.p50, f.p99,
                    f.p50 / s.p50))
        }
    }

    /// CPU milliseconds `body` took on this thread: on a shared, loaded machine the wall clock also counts the time
    /// other processes had the core, which says nothing about thumbnails.
    static func time(_ body: () throws(LarderError) -> Void) throws(LarderError) -> Double {
        let start = threadCPUNanoseconds()
        try body()
        return Double(threadCPUNanoseconds() - start) / 1e6
    }

    static func threadCPUNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    struct Summary {
        var p50: Double
        var p99: Double
        init(_ samples: [Double]) {
            let sorted = samples.sorted()
            p50 = sorted[sorted.count / 2]
            p99 = sorted[min(sorted.count - 1, Int((Double(sorted.count) * 0.99).rounded(.up)) - 1)]
        }
    }

    /// Gradients with fine detail (so that the encoder has real work, as with a photo), deterministic.
    static func syntheticPhoto(width: Int, height: Int) -> RGBImage {
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let at = (y * width + x) * 3
                pixels[at] = UInt8(truncatingIfNeeded: x * 255 / width)
                pixels[at + 1] = UInt8(truncatingIfNeeded: y * 255 / height)
                pixels[at + 2] = UInt8(truncatingIfNeeded: (x ^ y) & 0xFF)
            }
        }
        return RGBImage(width: width, height: height, pixels: pixels)
    }
}
