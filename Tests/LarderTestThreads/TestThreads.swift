import Foundation
import Testing

/// A suite trait that runs each of the suite's test cases on two threads of its own, with at most
/// `TestSlots.width` test cases running at once.
///
/// Swift concurrency on Linux runs every task on one thread per core, first come first served, and the testing
/// library starts every test case of the run at once. A synchronous test (a store test, a child process awaited)
/// holds one of those threads until it ends, so an async test's next step waited behind every synchronous test
/// queued before it: on two cores, minutes in which no async test moved and every wall-clock deadline ran out. On
/// threads of its own a test case's steps run as soon as they are ready, whatever other tests do; the slots keep
/// the run to a few test cases at a time instead of all of them.
///
/// Tasks a test makes with `Task { }` (a client's connection attempts, a replica's drain) still run on the shared
/// threads, which the suites with this trait no longer occupy.
public struct OwnThreads: SuiteTrait, TestTrait, TestScoping {
    /// Whether the test case runs with no other test case of these suites beside it (a measurement of timing).
    public var alone = false

    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> OwnThreads? {
        guard testCase != nil else { return nil }
        // A test's own `.alone` takes the place of its suite's trait.
        if !alone, test.traits.contains(where: { ($0 as? OwnThreads)?.alone == true }) { return nil }
        return self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let slots = alone ? TestSlots.shared.width : 1
        await TestSlots.shared.acquire(slots)
        defer { TestSlots.shared.release(slots) }
        let executor = TestThreadExecutor(threads: 2)
        defer { executor.finish() }
        try await withTaskExecutorPreference(executor) {
            try await function()
        }
    }
}

extension Trait where Self == OwnThreads {
    /// Each test case on threads of its own (see `OwnThreads`).
    public static var ownThreads: OwnThreads { OwnThreads() }

    /// On threads of its own, with no other test case of a suite with `.ownThreads` running beside it: for a test
    /// that measures timing.
    public static var alone: OwnThreads { OwnThreads(alone: true) }
}

/// How many test cases with `OwnThreads` run at once: `LARDER_TEST_WIDTH`, by default two per core.
public final class TestSlots: @unchecked Sendable {
    public static let shared = TestSlots(
        width: ProcessInfo.processInfo.environment["LARDER_TEST_WIDTH"].flatMap { Int($0) }.map { max(1, $0) }
            ?? 2 * ProcessInfo.processInfo.activeProcessorCount)

    public let width: Int
    private let lock = NSLock()
    private var taken = 0
    private var waiting: [(slots: Int, continuation: CheckedContinuation<Void, Never>)] = []

    init(width: Int) { self.width = width }

    /// Waits until `slots` slots are free, in the order the test cases asked.
    func acquire(_ slots: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.lock()
            if waiting.isEmpty && taken + slots <= width {
                taken += slots
                lock.unlock()
                continuation.resume()
            } else {
                waiting.append((slots, continuation))
                lock.unlock()
            }
        }
    }

    /// Frees `slots` slots and hands them to the longest waiting test cases that now fit.
    func release(_ slots: Int) {
        lock.lock()
        taken -= slots
        var ready: [CheckedContinuation<Void, Never>] = []
        while let first = waiting.first, taken + first.slots <= width {
            waiting.removeFirst()
            taken += first.slots
            ready.append(first.continuation)
        }
        lock.unlock()
        for continuation in ready { continuation.resume() }
    }
}

/// A task executor with threads of its own that run its jobs in order of arrival. After `finish`, its threads end
/// once the jobs already queued have run; a job that arrives later runs on a thread started for it.
final class TestThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var finished = false

    init(threads: Int) {
        for index in 0..<threads {
            // Named from inside: a Linux thread starts with its creator's name.
            Thread.detachNewThread { [self] in
                Thread.current.name = "test-\(index)"
                work()
            }
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        if finished {
            condition.unlock()
            let executor = asUnownedTaskExecutor()
            Thread.detachNewThread { job.runSynchronously(on: executor) }
            return
        }
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    func finish() {
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    private func work() {
        let executor = asUnownedTaskExecutor()
        while true {
            condition.lock()
            while jobs.isEmpty && !finished { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: executor)
        }
    }
}
