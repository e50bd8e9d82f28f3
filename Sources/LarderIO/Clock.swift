#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The monotonic clock in nanoseconds (never steps back, unlike the wall clock).
@inline(__always)
package func monotonicNanos() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
}

/// The monotonic clock in milliseconds, for the state machines' timers.
@inline(__always)
package func monotonicMs() -> UInt64 { monotonicNanos() / 1_000_000 }
