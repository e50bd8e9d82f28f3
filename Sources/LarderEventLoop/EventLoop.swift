#if os(Linux)
import CEpoll
import Dispatch
import Foundation
import LarderIO
import LarderSync
import Synchronization

/// What an event loop calls back; only ever on the loop's thread.
package protocol EventLoopHandler: AnyObject {
    /// The descriptor has bytes to read, reached end of file or failed (reported only while reading is wanted).
    func readable()
    /// The descriptor takes more output (reported only while writing is wanted).
    func writable()
    /// Called once at the end of the loop turn in which `flushAtEndOfTurn` asked for it.
    func endOfTurn()
}

/// One thread running an `epoll` loop: the executor of an I/O shard. Ready descriptors, tasks posted from other
/// threads (request completions from the work queue, committed changes) and a periodic tick all run on this thread,
/// so a connection's state needs no lock.
///
/// Why not dispatch sources: on Linux libdispatch watches every descriptor from its manager thread and hands each
/// readiness event to a queue's worker thread, so a request without pipelining costs two thread wake-ups before any
/// work is done (23% of the server's samples were in `finish_task_switch`; BENCHMARKS.md). Here the thread that waits
/// is the thread that reads, answers a point read and writes, like Redis's loop or a SwiftNIO event loop.
///
/// Level-triggered: a handler reads or writes once per event and is called again while more is ready. Output
/// produced during a turn is written at its end (`flushAtEndOfTurn`), so the answers to everything read in one turn
/// leave in one `write(2)` per connection.
package final class EventLoop: @unchecked Sendable {
    package let name: String
    private let epollFD: Int32
    private let wakeFD: Int32
    /// Tasks posted from any thread, whether the loop is awake (then nobody needs to write the eventfd: it runs every
    /// posted task before it waits again), and whether its thread has ended (then tasks are not queued: `async` drops
    /// them and `sync` runs inline). The descriptors are closed only in `deinit`, so a late `async` can never write
    /// into a number the process has since given to another file.
    private let posted = Locked<(tasks: [@Sendable () -> Void], awake: Bool, ended: Bool)>(([], false, false))
    private let stopRequested = Atomic<Bool>(false)
    private let exited = DispatchSemaphore(value: 0)
    /// Set once, before any task can run; read by `inLoop`.
    private let threadID = Locked<pthread_t?>(nil)

    // Loop-thread state.
    private struct Registration {
        var handler: any EventLoopHandler
        var read: Bool
        var write: Bool
        /// In the epoll set. A descriptor that hung up while neither direction is wanted is taken out, or its
        /// EPOLLHUP (always reported) would wake the loop forever; it returns when a direction is wanted again.
        var inSet: Bool
    }
    /// Indexed by descriptor: looked up once or twice per event, where a dictionary hashed the descriptor each time.
    @exclusivity(unchecked) private var registrations = Registrations()
    @exclusivity(unchecked) private var endOfTurn: [any EventLoopHandler] = []
    /// The arrays of the last run of posted tasks and of end-of-turn handlers, emptied with their capacity kept:
    /// swapped in as the next ones are taken, so that a burst of completions (one task each) and its flushes grow no
    /// array from empty every turn.
    @exclusivity(unchecked) private var spareTasks: [@Sendable () -> Void] = []
    @exclusivity(unchecked) private var spareEndOfTurn: [any EventLoopHandler] = []
    /// The largest spare kept: a rare burst's array is not held for the loop's life.
    private static let spareCapacity = 1024
    /// The registrations by descriptor: a table as long as the highest descriptor watched. Descriptors are small
    /// numbers the kernel hands out lowest first, so it is about as long as the number of open files.
    private struct Registrations {
        private var slots: [Registration?] = []

        subscript(fd: Int32) -> Registration? {
            get { fd >= 0 && Int(fd) < slots.count ? slots[Int(fd)] : nil }
            set {
                guard fd >= 0 else { return }
                if Int(fd) >= slots.count {
                    guard newValue != nil else { return }
                    slots.append(contentsOf: repeatElement(nil, count: max(Int(fd) + 1, slots.count * 2) - slots.count))
                }
                slots[Int(fd)] = newValue
            }
        }

        mutating func removeValue(forKey fd: Int32) -> Registration? {
            defer { self[fd] = nil }
            return self[fd]
        }

        mutating func removeAll() { slots.removeAll() }
    }
    private var tick: (intervalMs: UInt64, next: UInt64, handler: () -> Void)?
    /// Wake-ups so far (for tests: a loop that spins shows here).
    package private(set) var turns = 0

    deinit {
        Glibc.close(wakeFD)
        Glibc.close(epollFD)
    }

    package init(name: String) {
        self.name = name
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK))
        precondition(epollFD >= 0 && wakeFD >= 0, "epoll_create1/eventfd failed: errno \(errno)")
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        precondition(epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0, "epoll_ctl(eventfd) failed")
        let started = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            threadID.withLock { $0 = pthread_self() }
            started.signal()
            run()
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
        started.wait()
    }

    /// True on the loop's own thread.
    package var inLoop: Bool {
        guard let id = threadID.withLock({ $0 }) else { return false }
        return pthread_equal(id, pthread_self()) != 0
    }

    /// Runs `task` on the loop thread, after the events of the current turn. From any thread.
    /// Once the loop has ended, the task is dropped (it would have run on a thread that no longer exists).
    package func async(_ task: @escaping @Sendable () -> Void) {
        _ = enqueue(task)
    }

    /// Queues `task` unless the loop has ended; false when it has.
    private func enqueue(_ task: @escaping @Sendable () -> Void) -> Bool {
        let (queued, wake) = posted.withLock { posted -> (Bool, Bool) in
            guard !posted.ended else { return (false, false) }
            posted.tasks.append(task)
            defer { posted.awake = true }
            return (true, !posted.awake)
        }
        if wake { signal() }
        return queued
    }

    /// Runs `body` on the loop thread and waits for it (inline when already there or when the loop has ended).
    package func sync<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
        if inLoop { return body() }
        let done = DispatchSemaphore(value: 0)
        let result = Locked<T?>(nil)
        // A task queued before the loop ends is run by it, at the latest as it ends (`run`).
        guard enqueue({
            let value = body()
            result.withLock { $0 = value }
            done.signal()
        }) else { return body() }
        done.wait()
        return result.withLock { $0! }
    }

    private func signal() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { Glibc.write(wakeFD, $0.baseAddress, 8) }
    }

    // MARK: On the loop thread

    /// Watches `fd` for reading (and writing if asked) on behalf of `handler`.
    package func register(_ fd: Int32, handler: any EventLoopHandler, read: Bool = true, write: Bool = false) {
        registrations[fd] = Registration(handler: handler, read: read, write: write, inSet: false)
        apply(fd)
    }

    /// Changes which directions of `fd` are watched.
    package func setInterest(_ fd: Int32, read: Bool, write: Bool) {
        guard var registration = registrations[fd], registration.read != read || registration.write != write else {
            return
        }
        registration.read = read
        registration.write = write
        registrations[fd] = registration
        apply(fd)
    }

    /// Stops watching `fd`; call before closing it.
    package func deregister(_ fd: Int32) {
        guard let registration = registrations.removeValue(forKey: fd) else { return }
        if registration.inSet { _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil) }
    }

    private func apply(_ fd: Int32) {
        guard var registration = registrations[fd] else { return }
        var event = epoll_event()
        event.events = (registration.read ? EPOLLIN.rawValue | EPOLLRDHUP.rawValue : 0)
            | (registration.write ? EPOLLOUT.rawValue : 0)
        event.data.fd = fd
        if registration.inSet {
            _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
        } else if registration.read || registration.write {
            // Fails only for a descriptor that is not a socket or is already closed: nothing would ever be reported,
            // so the handler is told as if it had failed.
            if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 {
                registration.inSet = true
                registrations[fd] = registration
            } else {
                registration.handler.readable()
            }
        }
    }

    /// Asks for `handler.endOfTurn()` once this turn's events and tasks are done. The caller keeps its own flag
    /// so that it asks once per turn.
    package func flushAtEndOfTurn(_ handler: any EventLoopHandler) {
        endOfTurn.append(handler)
    }

    /// Calls `handler` every `intervalMs` (replacing an earlier tick). On the loop thread.
    package func setTick(intervalMs: Int, _ handler: @escaping () -> Void) {
        let interval = UInt64(max(1, intervalMs))
        tick = (interval, monotonicMs() + interval, handler)
    }

    package func cancelTick() { tick = nil }

    /// Ends the loop after the current turn; the thread exits. Waits for it unless called on the loop itself. Tasks
    /// queued before the end still run; later ones are dropped (`async`) or run inline (`sync`).
    package func stop() {
        guard !stopRequested.exchange(true, ordering: .acquiringAndReleasing) else { return }
        signal()
        if !inLoop { exited.wait() }
    }

    /// The monotonic clock in milliseconds, read once per turn as the loop wakes (loop thread only): what the
    /// connections' timers are measured with, without a clock read per request.
    package private(set) var now: UInt64 = monotonicMs()

    private func run() {
        let capacity: Int32 = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(capacity))
        defer {
            events.deallocate()
            // Whatever was queued before the end runs now (a `sync` caller waits for its task); nothing queues after.
            while true {
                let tasks = posted.withLock { posted -> [@Sendable () -> Void] in
                    posted.ended = true
                    defer { posted.tasks = [] }
                    return posted.tasks
                }
                if tasks.isEmpty { break }
                for task in tasks { task() }
            }
            finishTurn()
            registrations.removeAll()
            endOfTurn.removeAll()
            stopRequested.store(true, ordering: .releasing)
            exited.signal()
        }
        while !stopRequested.load(ordering: .acquiring) {
            let count = epoll_wait(epollFD, events, capacity, timeoutMs())
            now = monotonicMs()
            posted.withLock { $0.awake = true }
            turns &+= 1
            if count < 0 && errno != EINTR {
                // Only EBADF/EFAULT/EINVAL, which would be a bug here: say so rather than spin.
                FileHandle.standardError.write("\(name): epoll_wait failed: errno \(errno)\n".data(using: .utf8)!)
                return
            }
            for index in 0..<Int(max(0, count)) {
                let event = events[index]
                let fd = event.data.fd
                if fd == wakeFD {
                    var counter: UInt64 = 0
                    _ = withUnsafeMutableBytes(of: &counter) { Glibc.read(wakeFD, $0.baseAddress, 8) }
                    continue
                }
                dispatch(fd, event.events)
            }
            runTasks()
            if let current = tick, monotonicMs() >= current.next {
                tick?.next = monotonicMs() + current.intervalMs
                current.handler()
            }
            finishTurn()
        }
    }

    private func dispatch(_ fd: Int32, _ events: UInt32) {
        guard let registration = registrations[fd] else { return }
        let failed = events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
        if registration.read && events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue) != 0 || registration.read && failed {
            registration.handler.readable()
        } else if failed && !registration.write {
            // Hung up while neither direction is wanted (reading paused, nothing to write): out of the set until
            // a direction is wanted again; the read then sees the end of the stream.
            if registration.inSet, var current = registrations[fd] {
                _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
                current.inSet = false
                registrations[fd] = current
            }
            return
        }
        // The read handler may have closed the descriptor or stopped wanting output.
        if let current = registrations[fd], current.write, events & (EPOLLOUT.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
            current.handler.writable()
        }
    }

    /// Runs every posted task, including those the tasks post, then marks the loop asleep-to-be.
    private func runTasks() {
        while true {
            var tasks: [@Sendable () -> Void] = []
            swap(&tasks, &spareTasks)
            let taken = posted.withLock { posted -> Bool in
                if posted.tasks.isEmpty {
                    posted.awake = false
                    return false
                }
                swap(&tasks, &posted.tasks)
                return true
            }
            guard taken else {
                spareTasks = tasks
                return
            }
            for task in tasks { task() }
            tasks.removeAll(keepingCapacity: true)
            if tasks.capacity <= EventLoop.spareCapacity { spareTasks = tasks }
            // Flushes asked for by these tasks happen before the next batch runs, so a burst of completions is
            // written once, not held back by the next burst.
            finishTurn()
        }
    }

    private func finishTurn() {
        while !endOfTurn.isEmpty {
            var handlers: [any EventLoopHandler] = []
            swap(&handlers, &spareEndOfTurn)
            swap(&handlers, &endOfTurn)
            for handler in handlers { handler.endOfTurn() }
            handlers.removeAll(keepingCapacity: true)
            if handlers.capacity <= EventLoop.spareCapacity { spareEndOfTurn = handlers }
        }
    }

    /// Milliseconds until the next tick, or -1 (forever).
    private func timeoutMs() -> Int32 {
        guard let tick else { return -1 }
        let now = monotonicMs()
        return tick.next <= now ? 0 : Int32(min(tick.next - now, UInt64(Int32.max)))
    }
}
#endif
