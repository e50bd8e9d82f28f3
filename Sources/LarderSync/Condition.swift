#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A condition variable that threads wait on while holding a `Lock` (a `pthread_cond_t`, which ThreadSanitizer
/// intercepts like the lock).
///
/// The state it signals lives in its owner's properties, guarded by the lock: not in a `Locked` value, whose `inout`
/// access must not be held across the wait that lets other threads change it.
package final class Condition: @unchecked Sendable {
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        defer { pthread_condattr_destroy(&attributes) }
#if !canImport(Darwin)
        // Timed waits measure against the monotonic clock, which a change of the wall clock does not move.
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
#endif
        let error = pthread_cond_init(condition, &attributes)
        precondition(error == 0, "pthread_cond_init failed with error \(error)")
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
    }

    /// Wakes every thread waiting on this condition; call it holding the lock they wait with.
    package func broadcast() {
        pthread_cond_broadcast(condition)
    }

    /// Releases `lock` (which the caller holds), waits until a `broadcast` or `deadline`, and takes `lock` again.
    /// Returns false when the deadline passed. A wait can also end for no reason: re-check the state in a loop.
    package func wait(on lock: Lock, until deadline: ContinuousClock.Instant) -> Bool {
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { return false }
        let (seconds, attoseconds) = left.components
        let nanoseconds = Int(attoseconds / 1_000_000_000)
#if canImport(Darwin)
        var relative = timespec(tv_sec: Int(seconds), tv_nsec: nanoseconds)
        let error = pthread_cond_timedwait_relative_np(condition, lock.storage.mutex, &relative)
#else
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        var nanosecondsPart = now.tv_nsec + nanoseconds
        var secondsPart = now.tv_sec + Int(seconds)
        if nanosecondsPart >= 1_000_000_000 {
            nanosecondsPart -= 1_000_000_000
            secondsPart += 1
        }
        var absolute = timespec(tv_sec: secondsPart, tv_nsec: nanosecondsPart)
        let error = pthread_cond_timedwait(condition, lock.storage.mutex, &absolute)
#endif
        precondition(error == 0 || error == ETIMEDOUT, "pthread_cond_timedwait failed with error \(error)")
        return error == 0
    }
}

extension Condition {
    /// Wakes one thread waiting on this condition; call it holding the lock they wait with.
    package func signal() {
        pthread_cond_signal(condition)
    }

    /// Releases `lock` (which the caller holds), waits until a `signal` or `broadcast`, and takes `lock` again. A wait
    /// can also end for no reason: re-check the state in a loop.
    package func wait(on lock: Lock) {
        let error = pthread_cond_wait(condition, lock.storage.mutex)
        precondition(error == 0, "pthread_cond_wait failed with error \(error)")
    }
}
