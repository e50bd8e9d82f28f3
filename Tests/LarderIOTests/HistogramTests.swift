import Foundation
import LarderIO
import LarderTestThreads
import Testing

/// The histogram against distributions whose percentiles are known exactly: every reported percentile must be the
/// true one or above it by less than the stated precision (1/1024 of the value, three significant digits).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct HistogramTests {
    /// The exact percentile by the histogram's definition: the smallest value with at least p% of values at or below.
    static func exact(_ sorted: [UInt64], _ p: Double) -> UInt64 {
        let rank = max(1, Int((p / 100 * Double(sorted.count)).rounded(.up)))
        return sorted[rank - 1]
    }

    static func checkWithinPrecision(_ values: [UInt64], sourceLocation: SourceLocation = #_sourceLocation) {
        var h = Histogram()
        for v in values { h.record(v) }
        let sorted = values.sorted()
        for p in [0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100] {
            let truth = exact(sorted, p)
            let reported = h.value(atPercentile: p)
            #expect(reported >= truth, "p\(p): \(reported) below the true \(truth)", sourceLocation: sourceLocation)
            #expect(
                Double(reported - truth) <= Double(truth) / 1024, "p\(p): \(reported) vs true \(truth)",
                sourceLocation: sourceLocation)
        }
        #expect(h.count == UInt64(values.count), sourceLocation: sourceLocation)
        #expect(h.min == sorted.first!, sourceLocation: sourceLocation)
        #expect(h.max == sorted.last!, sourceLocation: sourceLocation)
        let mean = values.reduce(0.0) { $0 + Double($1) } / Double(values.count)
        #expect(abs(h.mean - mean) <= mean * 1e-9, sourceLocation: sourceLocation)
    }

    @Test func uniformOneToAMillion() {
        var values = Array(UInt64(1)...1_000_000)
        var rng = SplitMix64(seed: 3)
        values.shuffle(using: &rng)
        var h = Histogram()
        for v in values { h.record(v) }
        // The true percentile of 1...N is p% of N; three significant digits hold.
        for p in [50.0, 90, 99, 99.9] {
            let truth = p / 100 * 1_000_000
            let reported = Double(h.value(atPercentile: p))
            #expect(reported >= truth && reported - truth <= truth / 1000, "p\(p): \(reported)")
        }
        #expect(h.value(atPercentile: 100) == 1_000_000)
        #expect(h.mean == 500_000.5)
        HistogramTests.checkWithinPrecision(values)
    }

    @Test func exponentialLatencies() {
        // Mean 1 ms in nanoseconds: the shape of request latencies, with a long tail.
        var rng = SplitMix64(seed: 11)
        let values = (0..<200_000).map { _ in UInt64(-log(1 - rng.unit()) * 1_000_000) + 1 }
        HistogramTests.checkWithinPrecision(values)
        var h = Histogram()
        for v in values { h.record(v) }
        // And the analytical quantile -ln(1-p) * mean, within sampling noise.
        let p99 = Double(h.value(atPercentile: 99))
        #expect(abs(p99 - 4.605e6) / 4.605e6 < 0.05)
    }

    @Test func bimodalAndWideRange() {
        // Cache hits near 50 µs, misses near 20 ms, and a few seconds-long stalls: spans 6 decades.
        var rng = SplitMix64(seed: 5)
        var values: [UInt64] = []
        for _ in 0..<90_000 { values.append(45_000 + rng.below(10_000)) }
        for _ in 0..<9_900 { values.append(18_000_000 + rng.below(4_000_000)) }
        for _ in 0..<100 { values.append(1_000_000_000 + rng.below(3_000_000_000)) }
        HistogramTests.checkWithinPrecision(values)
    }

    @Test func smallValuesAreExact() {
        var h = Histogram()
        for v in UInt64(0)..<2048 { h.record(v) }
        #expect(h.value(atPercentile: 50) == 1023)
        #expect(h.value(atPercentile: 100) == 2047)
        for v in UInt64(0)..<2048 {
            #expect(Histogram.lowestEquivalent(Histogram.index(of: v)) == v)
            #expect(Histogram.highestEquivalent(Histogram.index(of: v)) == v)
        }
    }

    @Test func bucketsAreContiguousAndWithinPrecision() {
        var previousHigh: UInt64?
        for bucket in 0..<Histogram.bucketCount {
            let low = Histogram.lowestEquivalent(bucket)
            let high = Histogram.highestEquivalent(bucket)
            if let previousHigh { #expect(low == previousHigh + 1, "gap before bucket \(bucket)") }
            #expect(Histogram.index(of: low) == bucket && Histogram.index(of: high) == bucket)
            #expect(Double(high - low) <= Double(low) / 1024)
            previousHigh = high
        }
        #expect(previousHigh == Histogram.highestTrackable)
    }

    @Test func mergeEqualsRecordingEverything() {
        var rng = SplitMix64(seed: 8)
        var a = Histogram()
        var b = Histogram()
        var all = Histogram()
        for i in 0..<50_000 {
            let v = rng.below(100_000_000)
            if i % 3 == 0 { a.record(v) } else { b.record(v) }
            all.record(v)
        }
        var merged = a
        merged.merge(b)
        #expect(merged.count == all.count && merged.min == all.min && merged.max == all.max)
        #expect(merged.values(atPercentiles: [1, 50, 99, 99.9]) == all.values(atPercentiles: [1, 50, 99, 99.9]))
        #expect(abs(merged.mean - all.mean) < 1e-6 * all.mean)
    }

    @Test func emptyResetAndOutOfRange() {
        var h = Histogram()
        #expect(h.value(atPercentile: 99) == 0 && h.min == 0 && h.max == 0 && h.mean == 0)
        for _ in 0..<99 { h.record(1000) }
        h.record(UInt64(1) << 50)  // beyond the tracked range: counted at the top, the maximum stays exact
        #expect(h.max == UInt64(1) << 50 && h.value(atPercentile: 100) == UInt64(1) << 50)
        #expect(h.value(atPercentile: 99) == 1000)
        #expect(h.value(atPercentile: 99.5) == UInt64(1) << 50)  // its bucket's top is clamped to the exact maximum
        h.reset()
        #expect(h.count == 0 && h.value(atPercentile: 50) == 0)
        h.record(42)
        #expect(h.values(atPercentiles: [0, 50, 100]) == [42, 42, 42])
    }
}
