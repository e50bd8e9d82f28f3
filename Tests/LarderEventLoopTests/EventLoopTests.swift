import Foundation
import LarderEventLoop
import LarderIO
import LarderSync
import LarderTestThreads
import Testing

/// A handler that counts its calls and reads what arrives.
private final class Probe: EventLoopHandler, @unchecked Sendable {
    let fd: Int32
    struct Calls {
        var readable = 0
        var writable = 0
        var endOfTurn = 0
        var bytes: [UInt8] = []
        var eof = false
    }
    let calls = Locked(Calls())

    init(fd: Int32) { self.fd = fd }

    func readable() {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = read(fd, &buffer, buffer.count)
        calls.withLock {
            $0.readable += 1
            if count > 0 { $0.bytes += buffer[0..<count] }
            if count == 0 { $0.eof = true }
        }
    }

    func writable() { calls.withLock { $0.writable += 1 } }
    func endOfTurn() { calls.withLock { $0.endOfTurn += 1 } }
}

private func socketPair() -> (Int32, Int32) {
    var fds: [Int32] = [0, 0]
    precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
    for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
    return (fds[0], fds[1])
}

private func waitUntil(_ seconds: Double = 120, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(1_000)
    }
    return condition()
}

@Suite("EventLoop: the I/O shard's thread", .ownThreads, .timeLimit(.minutes(20)))
struct EventLoopTests {
    @Test("tasks posted from many threads all run, on the loop thread, in each poster's order")
    func postedTasksRunInOrderOnTheLoop() {
        let loop = EventLoop(name: "test.loop")
        defer { loop.stop() }
        let seen = Locked<[Int: [Int]]>([:])
        let offLoop = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 4) { poster in
            for value in 0..<2_000 {
                loop.async {
                    if !loop.inLoop { offLoop.withLock { $0 += 1 } }
                    seen.withLock { $0[poster, default: []].append(value) }
                }
            }
        }
        // sync runs after everything posted before it.
        let total = loop.sync { seen.withLock { $0.values.reduce(0) { $0 + $1.count } } }
        #expect(total == 8_000)
        #expect(offLoop.withLock { $0 } == 0)
        for poster in 0..<4 { #expect(seen.withLock { $0[poster] } == Array(0..<2_000)) }
    }

    @Test("a readable socket is reported until drained, and the end of turn follows a flush request")
    func readinessAndEndOfTurn() {
        let loop = EventLoop(name: "test.loop")
        defer { loop.stop() }
        let (ours, theirs) = socketPair()
        defer {
            close(ours)
            close(theirs)
        }
        let probe = Probe(fd: ours)
        loop.sync { loop.register(ours, handler: probe) }
        let message = Array("hello, loop".utf8)
        #expect(write(theirs, message, message.count) == message.count)
        #expect(waitUntil { probe.calls.withLock { $0.bytes } == message })
        loop.sync { loop.flushAtEndOfTurn(probe) }
        #expect(waitUntil { probe.calls.withLock { $0.endOfTurn } == 1 })
        // Writing wanted: an idle socket is writable at once.
        loop.sync { loop.setInterest(ours, read: true, write: true) }
        #expect(waitUntil { probe.calls.withLock { $0.writable } > 0 })
        loop.sync {
            loop.setInterest(ours, read: true, write: false)
            loop.deregister(ours)
        }
    }

    @Test("a peer that hangs up while reading is paused does not spin the loop; the end is read once resumed")
    func hangUpWhilePausedIsHeldUntilResumed() {
        let loop = EventLoop(name: "test.loop")
        defer { loop.stop() }
        let (ours, theirs) = socketPair()
        defer { close(ours) }
        let probe = Probe(fd: ours)
        loop.sync {
            loop.register(ours, handler: probe)
            loop.setInterest(ours, read: false, write: false)
        }
        let turnsBefore = loop.sync { loop.turns }
        close(theirs)
        // EPOLLHUP is reported whatever the interest: left in the set, it would wake the loop without end.
        usleep(200_000)
        let turnsWhilePaused = loop.sync { loop.turns } - turnsBefore
        #expect(probe.calls.withLock { $0.readable } == 0)
        #expect(turnsWhilePaused < 10)
        loop.sync { loop.setInterest(ours, read: true, write: false) }
        #expect(waitUntil { probe.calls.withLock { $0.eof } })
        loop.sync { loop.deregister(ours) }
    }

    @Test("after stop: sync runs inline, async is dropped; a sync racing a stop never hangs")
    func stopIsSafeForLateCallers() {
        for _ in 0..<200 {
            let loop = EventLoop(name: "test.loop")
            let ran = Locked(0)
            let group = DispatchGroup()
            DispatchQueue.global().async(group: group) { loop.stop() }
            DispatchQueue.global().async(group: group) {
                let value = loop.sync { 7 }
                ran.withLock { $0 += value }
            }
            #expect(group.wait(timeout: .now() + 10) == .success, "a sync racing stop() hung")
            #expect(ran.withLock { $0 } == 7)
            // Ended: async drops the task (no thread to run it, and nothing is written to the wake descriptor).
            loop.async { ran.withLock { $0 += 100 } }
            #expect(loop.sync { 1 } == 1)
            #expect(ran.withLock { $0 } == 7)
        }
    }
}
