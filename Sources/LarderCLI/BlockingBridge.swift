#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderSync

extension Thread {
    /// Runs blocking `work` on a thread of its own and returns its result, leaving the cooperative pool free.
    static func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: work()) }
        }
    }
}

/// Waits (blocking this thread, which must not be one of the cooperative pool's) for `work` to finish, at most
/// `seconds`; nil when it did not.
func waitFor<T: Sendable>(seconds: Double, _ work: @escaping @Sendable () async -> T) -> T? {
    let result = Locked<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        let value = await work()
        result.set(value)
        done.signal()
    }
    guard done.wait(timeout: .now() + seconds) == .success else { return nil }
    return result.value
}

/// A value shared between threads.
final class Locked<Value>: @unchecked Sendable {
    private let lock = Lock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func set(_ value: Value) { lock.withLock { stored = value } }
}
