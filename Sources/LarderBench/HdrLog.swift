import Foundation
import LarderIO
import LarderWire

/// HdrHistogram's interval log (format version 1.3, as HdrHistogram's own `HistogramLogWriter` writes it), so that the
/// standard tools (HistogramLogAnalyzer, HdrHistogram's Python, Java and C libraries, hdr-plot) read larder-bench's
/// full latency spectrum, not just its percentiles.
///
/// `Histogram` has HdrHistogram's layout for lowest value 1, highest 2^40 - 1 and 3 significant digits (2048 exact
/// values, then 1024 buckets per power of two), so its counts are written as they are, in the V2 encoding (ZigZag
/// LEB128, runs of zeros as negative counts), zlib-compressed and in base64. Values are nanoseconds.
public enum HdrLog {
    static let encodingCookie: UInt32 = 0x1c84_9303 | 0x10
    static let compressionCookie: UInt32 = 0x1c84_9304 | 0x10

    /// The log: one interval line per operation tagged with its name (`get`), and in an open loop a second one of the
    /// latencies measured from the actual send (`get-uncorrected`). The interval is the measured run.
    public static func text(_ results: BenchResults) -> String {
        var text = "#[Histogram log format version 1.3]\n"
        text += "#[StartTime: \(String(format: "%.3f", results.startedAt)) (seconds since epoch)]\n"
        text += "#[BaseTime: \(String(format: "%.3f", results.startedAt)) (seconds since epoch)]\n"
        text += "#[larder-bench: values in nanoseconds; Tag=OP from the intended send time, OP-uncorrected from the "
            + "actual send (open loop)]\n"
        text += "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n"
        func line(_ tag: String, _ h: Histogram) {
            // Interval_Max in milliseconds, as HdrHistogram writes nanosecond histograms.
            text += "Tag=\(tag),0.000,\(String(format: "%.3f", results.elapsed)),"
                + "\(String(format: "%.3f", Double(h.max) / 1e6)),\(encode(h))\n"
        }
        for operation in results.operations {
            line(operation.operation.name, operation.stats.latency)
            if operation.stats.uncorrected.count > 0 {
                line(operation.operation.name + "-uncorrected", operation.stats.uncorrected)
            }
        }
        return text
    }

    /// Writes `text(results)` to `path`.
    public static func write(_ results: BenchResults, to path: String) throws(BenchError) {
        guard FileManager.default.createFile(atPath: path, contents: Data(text(results).utf8)) else {
            throw BenchError("--hdr-out: cannot write \(path); check the directory and its permissions")
        }
    }

    /// One histogram in HdrHistogram's compressed V2 form, base64.
    static func encode(_ h: Histogram) -> String {
        var payload: [UInt8] = []
        let counts = h.bucketCounts
        let last = counts.lastIndex { $0 != 0 } ?? -1
        var index = 0
        while index <= last {
            if counts[index] == 0 {
                var zeros = 0
                while index <= last && counts[index] == 0 {
                    zeros += 1
                    index += 1
                }
                zigzag(-Int64(zeros), into: &payload)
            } else {
                zigzag(Int64(clamping: counts[index]), into: &payload)
                index += 1
            }
        }
        var plain: [UInt8] = []
        append(encodingCookie, to: &plain)
        append(UInt32(payload.count), to: &plain)
        append(UInt32(0), to: &plain)  // normalizing index offset
        append(UInt32(3), to: &plain)  // significant digits
        append(UInt64(1), to: &plain)  // lowest trackable value
        append(UInt64(Histogram.highestTrackable), to: &plain)
        append(Double(1).bitPattern, to: &plain)  // integer to double conversion ratio
        plain += payload
        let compressed = Deflater(level: 6).compress(plain)
        var wrapped: [UInt8] = []
        append(compressionCookie, to: &wrapped)
        append(UInt32(compressed.count), to: &wrapped)
        wrapped += compressed
        return Data(wrapped).base64EncodedString()
    }

    static func append<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
    }

    /// ZigZag, then LEB128 (HdrHistogram's form: at most 9 bytes, the ninth carrying 8 bits).
    static func zigzag(_ value: Int64, into out: inout [UInt8]) {
        var v = UInt64(bitPattern: (value << 1) ^ (value >> 63))
        for _ in 0..<8 {
            if v < 0x80 {
                out.append(UInt8(v))
                return
            }
            out.append(UInt8(v & 0x7f) | 0x80)
            v >>= 7
        }
        out.append(UInt8(truncatingIfNeeded: v))
    }
}
