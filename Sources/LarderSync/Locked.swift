#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value that threads share, behind a pthread mutex: the one lock in Larder.
///
/// Why a pthread mutex and not `Synchronization.Mutex`: ThreadSanitizer intercepts `pthread_mutex_lock` and
/// `pthread_mutex_unlock`, so it sees every hand-off through this lock as ordering, and any access that skips the lock
/// as the race it is. On Linux `Mutex` is futex calls inside an uninstrumented library: TSan saw no ordering through
/// it, reported every pair of accesses under it as a race, and those reports had to be suppressed wholesale, along
/// with any real race that touched a `withLock` body (`scripts/sanitize` runs a canary that proves this one is seen).
///
/// The mutex and the value share one allocation and `withLock` is inlined into its callers, so an uncontended lock is
/// one call to `pthread_mutex_lock` and one to `pthread_mutex_unlock`. A copy of a `Locked` shares the original's lock
/// and value.
package struct Locked<Value> {
    @usableFromInline let storage: LockedStorage<Value>

    @inlinable
    package init(_ value: Value) {
        storage = LockedStorage.make(value)
    }

    /// Runs `body` with the value while holding the lock; `body` must not take this lock again (it is not recursive).
    @inlinable
    package func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        storage.lock()
        defer { storage.unlock() }
        return try body(&storage.value.pointee)
    }
}

extension Locked: @unchecked Sendable where Value: Sendable {}

/// A lock that guards no value of its own but the stored properties its owner says it guards.
package typealias Lock = Locked<Void>

extension Locked where Value == Void {
    @inlinable
    package init() { self.init(()) }

    /// Runs `body` while holding the lock.
    @inlinable
    package func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        storage.lock()
        defer { storage.unlock() }
        return try body()
    }

    /// Takes the lock, for a critical section that does not fit one closure; pair it with `unlock()` in a `defer`.
    @inlinable
    package func lock() { storage.lock() }

    @inlinable
    package func unlock() { storage.unlock() }
}

/// The value in the header and the mutex as the single element of one heap object: the mutex needs a stable address,
/// which a stored property of a class does not promise.
@usableFromInline
final class LockedStorage<Value>: ManagedBuffer<Value, pthread_mutex_t> {
    @inlinable
    static func make(_ value: Value) -> LockedStorage {
        let storage = unsafeDowncast(create(minimumCapacity: 1) { _ in value }, to: LockedStorage.self)
        let error = pthread_mutex_init(storage.mutex, nil)
        precondition(error == 0, "pthread_mutex_init failed with error \(error)")
        return storage
    }

    deinit {
        pthread_mutex_destroy(mutex)
    }

    @inlinable
    var mutex: UnsafeMutablePointer<pthread_mutex_t> {
        withUnsafeMutablePointerToElements { $0 }
    }

    @inlinable
    var value: UnsafeMutablePointer<Value> {
        withUnsafeMutablePointerToHeader { $0 }
    }

    @inlinable
    func lock() {
        let error = pthread_mutex_lock(mutex)
        precondition(error == 0, "pthread_mutex_lock failed with error \(error)")
    }

    @inlinable
    func unlock() {
        let error = pthread_mutex_unlock(mutex)
        precondition(error == 0, "pthread_mutex_unlock failed with error \(error)")
    }
}
