/// SplitMix64 (Steele, Lea and Flood): small, fast and statistically sound enough to pick keys and operations, split
/// points and test scripts; the same seed gives the same sequence, so a benchmark run or a test repeats exactly.
package struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    package init(seed: UInt64) { state = seed }

    @inline(__always)
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform integer in `0..<n` (multiply-high; the bias is below 2^-32 for any n a benchmark uses).
    @inline(__always)
    package mutating func below(_ n: UInt64) -> UInt64 { next().multipliedFullWidth(by: n).high }

    /// A uniform double in [0, 1).
    @inline(__always)
    package mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }
}
