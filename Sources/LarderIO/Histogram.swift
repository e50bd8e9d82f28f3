/// A log-linear histogram of non-negative integers (latencies), in the manner of HdrHistogram: the one histogram of
/// the tree (larder-bench's nanoseconds, the server's STATS and /metrics microseconds).
///
/// With the default precision (`precisionBits` 10) values below 2048 are counted exactly; above that, each power of
/// two is split into 1024 equal buckets, so a bucket is never wider than 1/1024 of its lowest value: every value is
/// kept to three significant decimal digits (relative error under 0.1%), and the counts array is about 250 KB. With
/// `precisionBits` 3 (the server's: one per opcode, copied for every STATS) it is 8 buckets per power of two (12.5%)
/// in about 2.5 KB. Recording is one shift and one increment; the counts array is allocated on the first record, so
/// empty histograms cost nothing. Histograms of one precision merge by adding counts, which is how per-thread and
/// per-second results combine.
package struct Histogram: Sendable, Equatable {
    /// Buckets per power of two in the logarithmic part; 1/1024 < 0.1% gives three significant digits.
    package static let subBucketHalf = 1024
    package static let halfBits = 10
    /// The largest value tracked exactly (to the stated precision); larger values are counted at this value.
    /// 2^40 ns is about 18 minutes, well past any request deadline.
    package static let highestTrackable: UInt64 = (1 << 40) - 1
    package static let bucketCount = index(of: highestTrackable) + 1

    /// Buckets per power of two are `1 << precisionBits` (half the exact range).
    package let precisionBits: Int
    /// Buckets in all, at this precision.
    package let bucketCount: Int
    private var counts: [UInt64] = []
    /// Number of values recorded.
    package private(set) var count: UInt64 = 0
    /// The smallest value recorded (exact); 0 when empty.
    package var min: UInt64 { count == 0 ? 0 : minimum }
    /// The largest value recorded (exact, before clamping to `highestTrackable`); 0 when empty.
    package private(set) var max: UInt64 = 0
    private var minimum: UInt64 = .max
    /// The sum of the recorded values (exact up to 2^53).
    package private(set) var sum: Double = 0

    package init(precisionBits: Int = Histogram.halfBits) {
        precondition((1...16).contains(precisionBits), "a histogram's precision is 1 to 16 bits")
        self.precisionBits = precisionBits
        bucketCount = Histogram.index(of: Histogram.highestTrackable, bits: precisionBits) + 1
    }

    /// Records one value.
    @inline(__always)
    package mutating func record(_ value: UInt64) {
        if counts.isEmpty { counts = [UInt64](repeating: 0, count: bucketCount) }
        let clamped = Swift.min(value, Histogram.highestTrackable)
        counts[Histogram.index(of: clamped, bits: precisionBits)] &+= 1
        count &+= 1
        sum += Double(value)
        if value > max { max = value }
        if value < minimum { minimum = value }
    }

    /// Every bucket's count, in HdrHistogram's order (`HdrLog`); empty when nothing was recorded.
    package var bucketCounts: [UInt64] { counts }

    /// The arithmetic mean of the recorded values (exact, not bucketed); 0 when empty.
    package var mean: Double { count == 0 ? 0 : sum / Double(count) }

    /// Adds every value recorded in `other` (of the same precision).
    package mutating func merge(_ other: Histogram) {
        guard other.count > 0 else { return }
        precondition(other.precisionBits == precisionBits, "histograms of different precisions do not merge")
        if counts.isEmpty { counts = [UInt64](repeating: 0, count: bucketCount) }
        other.counts.withUnsafeBufferPointer { theirs in
            counts.withUnsafeMutableBufferPointer { mine in
                for i in 0..<theirs.count where theirs[i] != 0 { mine[i] &+= theirs[i] }
            }
        }
        count &+= other.count
        sum += other.sum
        max = Swift.max(max, other.max)
        minimum = Swift.min(minimum, other.minimum)
    }

    /// Forgets every value, keeping the storage.
    package mutating func reset() {
        guard count > 0 else { return }
        counts.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
        count = 0
        sum = 0
        max = 0
        minimum = .max
    }

    /// The value at `percentile` (0...100): the smallest recorded value such that at least that share of all values
    /// is less than or equal to it, reported as the highest value its bucket holds (so within 0.1% above the truth),
    /// and never above the exact maximum. 0 when empty.
    package func value(atPercentile percentile: Double) -> UInt64 {
        values(atPercentiles: [percentile])[0]
    }

    /// `value(atPercentile:)` for several percentiles, in one pass over the buckets.
    package func values(atPercentiles percentiles: [Double]) -> [UInt64] {
        guard count > 0 else { return percentiles.map { _ in 0 } }
        let order = percentiles.indices.sorted { percentiles[$0] < percentiles[$1] }
        var results = [UInt64](repeating: 0, count: percentiles.count)
        var next = 0
        var cumulative: UInt64 = 0
        for (bucket, n) in counts.enumerated() where n != 0 {
            cumulative += n
            while next < order.count {
                let p = Swift.min(Swift.max(percentiles[order[next]], 0), 100)
                let target = Swift.max(1, UInt64((p / 100 * Double(count)).rounded(.up)))
                guard cumulative >= target else { break }
                // The top bucket also holds values beyond the tracked range: its honest upper bound is the maximum.
                let high = bucket == bucketCount - 1 ? max : Histogram.highestEquivalent(bucket, bits: precisionBits)
                results[order[next]] = Swift.max(Swift.min(high, max), min)
                next += 1
            }
            if next == order.count { break }
        }
        while next < order.count {  // only reachable through rounding at 100%
            results[order[next]] = max
            next += 1
        }
        return results
    }

    /// The bucket of `value` at precision `bits`: exact below `2 << bits`, then `1 << bits` buckets per power of two
    /// (by default exact below 2048, then 1024 buckets per power of two).
    @inline(__always)
    package static func index(of value: UInt64, bits: Int = halfBits) -> Int {
        let half = 1 << bits
        if value < UInt64(2 * half) { return Int(value) }
        let shift = (63 - value.leadingZeroBitCount) - bits
        return shift * half + Int(value >> UInt64(shift))
    }

    /// The smallest value that falls into `bucket`.
    package static func lowestEquivalent(_ bucket: Int, bits: Int = halfBits) -> UInt64 {
        let half = 1 << bits
        if bucket < 2 * half { return UInt64(bucket) }
        let shift = bucket / half - 1
        return UInt64(bucket - shift * half) << UInt64(shift)
    }

    /// The largest value that falls into `bucket`.
    package static func highestEquivalent(_ bucket: Int, bits: Int = halfBits) -> UInt64 {
        let half = 1 << bits
        if bucket < 2 * half { return UInt64(bucket) }
        let shift = bucket / half - 1
        return lowestEquivalent(bucket, bits: bits) + (UInt64(1) << UInt64(shift)) - 1
    }
}
