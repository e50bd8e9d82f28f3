import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// The queue in front of a single writer, the same for both stores: jobs submitted from any thread run on one serial
/// dispatch queue in batches of at most `maxBatch`, and whatever arrives while a batch runs goes into the next one
/// (group commit: one transaction, one COMMIT for the batch).
final class GroupCommitQueue<Job>: @unchecked Sendable {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<ObjectIdentifier>()
    private let maxBatch: Int
    private let lock = Lock()
    private var jobs: [Job] = []  // under `lock`
    /// The last batch's array, emptied with its capacity kept (only on `queue`): swapped with `jobs` as the next batch
    /// is taken, so that taking a batch and queueing the next one's jobs allocate nothing in steady state.
    private var spare: [Job] = []
    private var scheduled = false  // under `lock`
    private var closed = false  // under `lock`
    private var runBatch: (([Job]) -> Void)?  // set once, before the first job
    /// Batches run, jobs run in them, and the writer thread's CPU time spent running them (STATS `store.writer`).
    private let batchCount = Atomic<Int>(0)
    private let jobCount = Atomic<Int>(0)
    private let cpuNanos = Atomic<Int>(0)

    init(label: String, maxBatch: Int) {
        queue = DispatchQueue(label: label, qos: .userInitiated)
        self.maxBatch = maxBatch
        queue.setSpecific(key: key, value: ObjectIdentifier(self))
    }

    /// Sets what runs each batch (on `queue`); call before the first `enqueue`.
    func start(_ run: @escaping ([Job]) -> Void) { runBatch = run }

    var isOnQueue: Bool { DispatchQueue.getSpecific(key: key) == ObjectIdentifier(self) }

    /// Queues a job; schedules a drain only when none is pending, so a burst of writes shares one transaction. False
    /// once closed.
    func enqueue(_ job: Job) -> Bool {
        var mustSchedule = false
        let accepted: Bool = lock.withLock {
            guard !closed else { return false }
            jobs.append(job)
            if !scheduled {
                scheduled = true
                mustSchedule = true
            }
            return true
        }
        if mustSchedule { queue.async { self.drain() } }
        return accepted
    }

    private func drain() {
        while true {
            var batch: [Job] = []
            swap(&batch, &spare)
            let taken: Bool = lock.withLock {
                if jobs.isEmpty {
                    scheduled = false
                    return false
                }
                if jobs.count <= maxBatch {
                    swap(&batch, &jobs)
                } else {
                    batch.append(contentsOf: jobs[..<maxBatch])
                    jobs.removeFirst(maxBatch)
                }
                return true
            }
            guard taken else {
                spare = batch
                return
            }
            let start = threadCPUNanos()
            runBatch?(batch)
            cpuNanos.add(threadCPUNanos() - start, ordering: .relaxed)
            jobCount.add(batch.count, ordering: .relaxed)
            batchCount.add(1, ordering: .relaxed)
            // The jobs' closures go now (they hold the requests); the capacity stays for the next batch.
            batch.removeAll(keepingCapacity: true)
            if batch.capacity <= maxBatch { spare = batch }
        }
    }

    /// What the writer has done so far.
    var stats: WriterStats {
        WriterStats(
            batches: batchCount.load(ordering: .relaxed), writes: jobCount.load(ordering: .relaxed),
            cpuMicros: Int64(cpuNanos.load(ordering: .relaxed) / 1000))
    }

    /// Refuses new jobs and returns once the queued ones ran (at once when called on the queue itself).
    func close() {
        lock.withLock { closed = true }
        guard !isOnQueue else { return }
        queue.sync {}  // a drain scheduled before `closed` finishes first
    }
}
