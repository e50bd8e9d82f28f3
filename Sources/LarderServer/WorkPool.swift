import Foundation
import LarderSync

/// The server's one pool of threads for work off the event loops: reads whose time depends on the data (searches,
/// lists, blob bytes), parsing writes before the store's writer, the change log read for a WATCH catch-up, backups,
/// and writing large answers (senders).
///
/// Its size is stated: at most `threads` threads (started as work arrives), and at most `maxWaiting` jobs accepted and
/// not yet started. A full pool refuses more work instead of queueing without bound: `submit` returns false and the
/// caller answers that request RESOURCE_EXHAUSTED at once (`Router.poolFull`); a large send is then written by its
/// event loop, and a catch-up read is tried again later. The event loops never wait for the pool.
final class WorkPool: @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    let threads: Int
    let maxWaiting: Int
    static let defaultThreads = 16
    static let defaultMaxWaiting = 10_000

    /// Guards every stored property below.
    private let lock = Lock()
    private let wake = Condition()
    /// Jobs for the threads, in order; `counted` ones are accepted work (a lane's turn is not).
    private var queue: [(job: Job, counted: Bool)] = []
    private var head = 0
    /// Accepted jobs not yet started, lanes' included.
    private var waiting = 0
    private var started = 0
    private var idle = 0
    /// Threads signalled or started and not yet back at the queue.
    private var wakesPending = 0
    private var running = 0
    private var refused = 0
    private var stopped = false

    init(threads: Int = WorkPool.defaultThreads, maxWaiting: Int = WorkPool.defaultMaxWaiting) {
        self.threads = max(1, threads)
        self.maxWaiting = max(1, maxWaiting)
    }

    /// Runs `job` on a thread of the pool; false (and `job` is dropped) when `maxWaiting` jobs already wait.
    @discardableResult
    func submit(_ job: @escaping Job) -> Bool {
        lock.withLock { () -> Bool in
            guard admitLocked() else { return false }
            enqueueLocked(job, counted: true)
            return true
        }
    }

    /// A serial lane: its jobs run one after another, in the order submitted, on the pool's threads. Each is accepted
    /// or refused as a job of the pool.
    func makeLane() -> Lane { Lane(pool: self) }

    /// What STATS shows.
    struct Snapshot: Equatable {
        /// The stated size; threads started so far and busy now; jobs waiting now, and refused since the start.
        var threads, maxWaiting, started, busy, waiting, refused: Int
    }

    var snapshot: Snapshot {
        lock.withLock {
            Snapshot(
                threads: threads, maxWaiting: maxWaiting, started: started, busy: running, waiting: waiting,
                refused: refused)
        }
    }

    /// Lets the threads finish what is queued and end; later work is refused. The threads hold the pool, so its owner
    /// must call this (`LarderServer.shutdown` and `deinit` do).
    func stop() {
        lock.withLock {
            stopped = true
            wake.broadcast()
        }
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

    /// Wakes (or starts, up to `threads`) one thread while jobs wait and none is already on its way. Each thread that
    /// takes a job and leaves others waiting wakes the next, so threads join one at a time while the work lasts: a
    /// burst of small jobs (parsing a CREATE takes microseconds) is drained by the few threads that keep up with it,
    /// not by one wake-up per job (which cost CREATE 40% more CPU), and a thread held by a slow job never strands
    /// the ones queued behind it.
    private func wakeOneLocked() {
        guard head < queue.count, wakesPending == 0 else { return }
        if idle > 0 {
            wakesPending += 1
            wake.signal()
        } else if started < threads {
            wakesPending += 1
            started += 1
            let thread = Thread { [self] in work() }
            thread.name = "larder.work"
            thread.stackSize = 8 << 20  // as a default pthread has: parsing deep JSON recurses
            thread.start()
        }
    }

    private static let nothing: Job = {}

    private func work() {
        lock.lock()
        wakesPending = max(0, wakesPending - 1)
        while true {
            if head < queue.count {
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
            } else if stopped {
                started -= 1
                lock.unlock()
                return
            } else {
                idle += 1
                wake.wait(on: lock)
                idle -= 1
                wakesPending = max(0, wakesPending - 1)
            }
        }
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
