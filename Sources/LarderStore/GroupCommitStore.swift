import Dispatch
import LarderSync
import LarderWire

/// A store whose writes go through a group-commit writer (both stores): a write submitted from any thread joins the
/// writer's next transaction, and `syncWrite` waits for its COMMIT.
package protocol GroupCommitStore: DocumentStore, BlobStore {
    /// Whether the caller is on the writer's queue (where waiting for a write would wait on itself).
    var isOnWriterQueue: Bool { get }
}

extension GroupCommitStore {
    /// Submits and waits for the COMMIT; `single`: the body is one document write (`submitSingleWrite`).
    package func syncWrite<T: Sendable>(
        single: Bool = false, _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T
    ) throws(LarderError) -> T {
        guard !isOnWriterQueue else {
            throw LarderError(.internal, "a synchronous write was called from inside a write; use the WriteContext")
        }
        let box = ResultBox<T>()
        if single {
            submitSingleWrite(body) { box.set($0) }
        } else {
            submitWrite(body) { box.set($0) }
        }
        return try box.wait()
    }
}

/// A small thread-safe box for handing a result from the writer queue to a waiting thread.
final class ResultBox<T: Sendable>: @unchecked Sendable {
    private let lock = Lock()
    private var value: Result<T, LarderError>?
    let done = DispatchSemaphore(value: 0)

    func set(_ result: Result<T, LarderError>) {
        lock.withLock { value = result }
        done.signal()
    }

    func wait() throws(LarderError) -> T {
        done.wait()
        let result = lock.withLock { value! }
        return try result.get()
    }
}
