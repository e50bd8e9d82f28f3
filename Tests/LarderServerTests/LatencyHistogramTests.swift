import Foundation
import LarderIO
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct LatencyHistogramTests {
    /// The server's latencies: LarderIO's `Histogram` at 3 bits of precision.
    @Test func bucketsCoverEveryValueInOrder() {
        let bits = Histogram.latencyMicros().precisionBits
        let bucketCount = Histogram.latencyMicros().bucketCount
        var previous = -1
        for value: UInt64 in [0, 1, 7, 8, 9, 15, 16, 18, 100, 1000, 65_535, 1 << 39, Histogram.highestTrackable] {
            let index = Histogram.index(of: value, bits: bits)
            #expect(index > previous && index < bucketCount)
            #expect(Histogram.lowestEquivalent(index, bits: bits) <= value)
            #expect(Histogram.highestEquivalent(index, bits: bits) >= value)
            if index + 1 < bucketCount { #expect(Histogram.lowestEquivalent(index + 1, bits: bits) > value) }
            previous = index
        }
        #expect(bucketCount < 400)
    }

    @Test func percentilesWithinOneBucket() {
        var h = Histogram.latencyMicros()
        for v in 1...1000 { h.record(UInt64(v)) }
        for (p, exact) in [(50.0, 500.0), (90.0, 900.0), (99.0, 990.0)] {
            let reported = Double(h.value(atPercentile: p))
            #expect(reported >= exact && reported <= exact * 1.125, "p\(p) = \(reported)")
        }
        #expect(h.value(atPercentile: 100) == 1000 && h.max == 1000 && h.count == 1000)
        #expect(Histogram.latencyMicros().value(atPercentile: 50) == 0)
        // Values past the tracked range are counted in the top bucket, and the maximum stays exact.
        h.record(.max)
        #expect(h.value(atPercentile: 100) == .max && h.max == .max)
    }

    @Test func statsJSONShape() {
        let stats = ServerStats(now: 0)
        stats.connectionOpened()
        stats.connectionRefused()
        stats.request(.get, .ok, latencyMicros: 120)
        stats.request(.get, .notFound, latencyMicros: 80)
        stats.traffic(wireIn: 100, wireOut: 50, uncompressedIn: 100, uncompressedOut: 200, peakUnsent: 10)
        let json = JSON.object(stats.json(now: 2_000_000_000, server: "s"))
        #expect(json["uptimeMs"] == 2000)
        #expect(json["connections"]?["open"] == 1 && json["connections"]?["refused"] == 1)
        #expect(json["requests"]?["total"] == 2 && json["requests"]?["errors"] == 1)
        #expect(json["requests"]?["byStatus"]?["NOT_FOUND"] == 1)
        #expect(json["requests"]?["byOpcode"]?["GET"]?["latencyMicros"]?["max"] == 120)
        #expect(json["bytes"]?["compressionRatio"] == 4.0)
    }
}
