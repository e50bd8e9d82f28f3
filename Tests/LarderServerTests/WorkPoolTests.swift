import Dispatch
import LarderSync
import LarderTestThreads
import Testing

@testable import LarderServer

/// The one bounded pool for work off the event loops: a stated number of threads, a stated number of jobs that may
/// wait, and a refusal (never an unbounded queue, never a wait) past it. Jobs are held on semaphores the test opens.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct WorkPoolTests {
    @Test func jobsPastTheBoundAreRefusedAndTheRestRun() {
        let pool = WorkPool(threads: 1, maxWaiting: 2)
        defer { pool.stop() }
        let running = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        #expect(pool.submit {
            running.signal()
            gate.wait()
            done.signal()
        })
        running.wait()  // the only thread holds the first job
        #expect(pool.submit { done.signal() })
        #expect(pool.makeLane().submit { done.signal() })
        // Two wait: the third is refused at once, and counted.
        let refusedJob = pool.submit { Issue.record("a refused job ran") }
        let refusedLaneJob = pool.makeLane().submit { Issue.record("a refused lane job ran") }
        #expect(!refusedJob && !refusedLaneJob)
        let full = pool.snapshot
        #expect(full == .init(threads: 1, maxWaiting: 2, started: 1, busy: 1, waiting: 2, refused: 2))
        gate.signal()
        for _ in 0..<3 { done.wait() }
        // Room again.
        #expect(pool.submit { done.signal() })
        done.wait()
    }

    @Test func aLaneRunsItsJobsOneAtATimeInOrder() {
        let pool = WorkPool(threads: 4, maxWaiting: 1000)
        defer { pool.stop() }
        let lane = pool.makeLane()
        let order = Locked<[Int]>([])
        let active = Locked(0)
        let done = DispatchSemaphore(value: 0)
        for n in 0..<200 {
            let accepted = lane.submit {
                let overlapping = active.withLock { a -> Bool in
                    a += 1
                    return a > 1
                }
                #expect(!overlapping)
                order.withLock { $0.append(n) }
                active.withLock { $0 -= 1 }
                done.signal()
            }
            #expect(accepted)
        }
        for _ in 0..<200 { done.wait() }
        #expect(order.withLock { $0 } == Array(0..<200))
    }

    @Test func neverMoreThreadsThanTheStatedSize() {
        let pool = WorkPool(threads: 3, maxWaiting: 100)
        defer { pool.stop() }
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        for _ in 0..<10 {
            pool.submit {
                started.signal()
                gate.wait()
            }
        }
        for _ in 0..<3 { started.wait() }
        let held = pool.snapshot
        #expect(held.started == 3 && held.busy == 3 && held.waiting == 7)
        for _ in 0..<10 { gate.signal() }
        for _ in 0..<7 { started.wait() }
    }
}
