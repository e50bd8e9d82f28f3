import Foundation

/// The CPU time the calling thread has used, in nanoseconds.
func threadCPUNanos() -> Int {
    var spec = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
    return Int(spec.tv_sec) * 1_000_000_000 + Int(spec.tv_nsec)
}

/// Milliseconds since the Unix epoch, from the wall clock.
func nowMillis() -> Int64 {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
}
