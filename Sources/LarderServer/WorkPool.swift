import Foundation
import LarderSync
import LarderWire

/// The server's one pool for work off the event loops: reads whose time depends on the data (searches, lists, blob
/// bytes), parsing writes before the store's writer, the change log read for a WATCH catch-up, backups, and writing
/// large answers (senders). Its jobs run on a concurrent Dispatch queue, as the server's other off-loop work does.
///
/// Its size is stated: at most `threads` jobs run at once (the queue is fed no more blocks than that), and at most
/// `maxWaiting` jobs are accepted and not yet started. A full pool refuses more work instead of queueing without
/// bound: `submit` returns false and the caller answers that request RESOURCE_EXHAUSTED at once (`Router.poolFull`);
/// a large send is then written by its event loop, and a catch-up read is tried again later. The event loops never
/// wait for the pool.
final class WorkPool: @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    let threads: Int
    let maxWaiting: Int
    static let defaultThreads = 16
    static let defaultMaxWaiting = Limits.default.maxQueuedWork

    private let dispatch = DispatchQueue(label: "larder.work", qos: .userInitiated, attributes: .concurrent)
    /// Guards every stored property below.
    private let lock = Lock()
    /// Jobs for the workers, in order; `counted` ones are accepted work (a lane's turn is not).
    private var queue: [(job: Job, counted: Bool)] = []
    private var head = 0
    /// Accepted jobs not yet started, lanes' included.
    private var waiting = 0
    /// Blocks on the Dispatch queue: each takes jobs until none is left, then ends.
    private var workers = 0
    /// Workers submitted and not yet at the queue.
    private var wakesPending = 0
    private var running = 0
    private var refused = 0
    private var stopped = false

    init(threads: Int = WorkPool.defaultThreads, maxWaiting: Int = WorkPool.defaultMaxWaiting) {
        self.threads = max(1, threads)
        self.maxWaiting = max(1, maxWaiting)
    }

    /// Runs `job` on the pool; false (and `job` is dropped) when `maxWaiting` jobs already wait.
    @discardableResult
    func submit(_ job: @escaping Job) -> Bool {
        lock.withLock { () -> Bool in
            guard admitLocked() else { return false }
            enqueueLocked(job, counted: true)
            return true
        }
    }

    /// A serial lane: its jobs run one after another, in the order submitted, on the pool. Each is accepted or
    /// refused as a job of the pool.
    func makeLane() -> Lane { Lane(pool: self) }

    /// What STATS shows.
    struct Snapshot: Equatable {
        /// The stated size; workers at work now (at most `threads`) and jobs running now; jobs waiting now, and
        /// refused since the start.
        var threads, maxWaiting, started, busy, waiting, refused: Int
    }

    var snapshot: Snapshot {
        lock.withLock {
            Snapshot(
                threads: threads, maxWaiting: maxWaiting, started: workers, busy: running, waiting: waiting,
                refused: refused)
        }
    }

    /// Refuses later work; what is queued still runs. `LarderServer.shutdown` and `deinit` call it.
    func stop() {
        lock.withLock { stopped = true }
    }

    private func admitLocked() -> Bool {
        guard !stopped, waiting < maxWaiting else {
            refused += 1
            return false
        }
        waiting += 1
        return true
    }

    private func enqueueLocked(_ job: @escaping Job, counted: Bool) {
        queue.append((job, counted))
        wakeOneLocked()
    }

    /// Starts one more worker, up to `threads`, while jobs wait and none is already on its way. Each worker that takes
    /// a job and leaves others waiting starts the next, so workers join one at a time while the work lasts: a burst
    /// of small jobs (parsing a CREATE takes microseconds) is drained by the few workers that keep up with it, not by
    /// one wake-up per job (which cost CREATE 40% more CPU), and a worker held by a slow job never strands the jobs
    /// queued behind it.
    private func wakeOneLocked() {
        guard head < queue.count, wakesPending == 0, workers < threads else { return }
        wakesPending += 1
        workers += 1
        dispatch.async { [self] in work() }
    }

    private static let nothing: Job = {}

    private func work() {
        lock.lock()
        wakesPending -= 1
        while head < queue.count {
            let (job, counted) = queue[head]
            queue[head] = (WorkPool.nothing, false)
            head += 1
            if head == queue.count {
                queue.removeAll(keepingCapacity: queue.capacity <= 4096)
                head = 0
            } else if head >= 1024 && head * 2 >= queue.count {
                queue.removeFirst(head)
                head = 0
            }
            if counted { waiting -= 1 }
            running += 1
            wakeOneLocked()
            lock.unlock()
            job()
            lock.lock()
            running -= 1
        }
        workers -= 1
        lock.unlock()
    }

    /// Jobs that must run one at a time in order (a connection's writes, which commit in the order it sent them).
    final class Lane: @unchecked Sendable {
        private let pool: WorkPool
        /// Guarded by the pool's lock.
        private var jobs: [Job] = []
        private var scheduled = false

        fileprivate init(pool: WorkPool) { self.pool = pool }

        /// Queues `job` after the lane's others; false (and `job` is dropped) when the pool is full.
        @discardableResult
        func submit(_ job: @escaping Job) -> Bool {
            pool.lock.withLock { () -> Bool in
                guard pool.admitLocked() else { return false }
                jobs.append(job)
                if !scheduled {
                    scheduled = true
                    pool.enqueueLocked({ [self] in runAll() }, counted: false)
                }
                return true
            }
        }

        /// The lane's turn on a thread: its jobs in order until none is left.
        private func runAll() {
            while let job = pool.lock.withLock({ () -> Job? in
                guard !jobs.isEmpty else {
                    scheduled = false
                    return nil
                }
                pool.waiting -= 1
                return jobs.removeFirst()
            }) {
                job()
            }
        }
    }
}
