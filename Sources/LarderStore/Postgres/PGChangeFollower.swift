import Dispatch
import Foundation
import LarderIO
import LarderSync
import LarderWire

/// Keeps this server's change feed in step with the one change log that every server sharing the database writes, so
/// WATCH on any server delivers every committed write made through any server, in one order with one numbering.
///
/// Why reading past the last published number is enough: a batch takes its numbers from the one row of `larder_seq`
/// in its last statement before COMMIT and holds that row's lock until its COMMIT is visible (`PGWriter`), so numbers
/// follow commit order across servers, and a snapshot that holds change N holds every change before it. No writer
/// holds a number while it could still roll back into a hole: a transaction that rolls back returns its numbers with
/// the row, and one still open past its change insert holds the row, so the others wait behind it instead of
/// committing past it.
///
/// Wake-ups: no NOTIFY goes inside a write transaction (PostgreSQL serializes commits that carry notifications on one
/// global lock). After a batch commits, its writer hands the batch's last number to `announce`; this follower's thread
/// sends one NOTIFY for however many batches committed meanwhile, in a transaction of its own with
/// `synchronous_commit` off (a lost notification costs latency, never a change). It LISTENs on the same connection,
/// reads the log when another server's number is past what it published, and reads it anyway after
/// `fallbackPollMs` without a notification (a server killed between its COMMIT and its NOTIFY, a database restart).
final class PGChangeFollower: @unchecked Sendable {
    static let channel = "larder_changes"
    /// How long the follower waits for a notification before reading the log anyway.
    static let fallbackPollMs: Int32 = 1000
    /// How long it waits before connecting again after the database refused.
    static let reconnectMs: Int32 = 200

    private let core: StoreCore
    private let connector: PGConnector
    private let lock = Lock()
    private var closed = false  // under `lock`
    private var announceThrough: Int64 = 0  // under `lock`: the newest number committed here
    private var announced: Int64 = 0  // only on the follower's thread
    /// The newest number known committed (here, or by a server that notified), and since when (monotonic ms) a known
    /// number has not been published; under `lock`, for `lag`.
    private var known: Int64 = 0
    private var behindSince: UInt64?
    /// Testing only: called before each read of the log (`holdFollower`); under `lock`.
    private var hold: (@Sendable () -> Void)?
    /// A pipe that wakes the thread from its wait: a batch to announce, or `close`.
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let finished = DispatchSemaphore(value: 0)

    init(core: StoreCore, connector: PGConnector) throws(LarderError) {
        self.core = core
        self.connector = connector
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            throw LarderError(.internal, "cannot make the change follower's pipe: errno \(errno)")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        (wakeRead, wakeWrite) = (fds[0], fds[1])
        let thread = Thread { [self] in run() }
        thread.name = "larder.store.pg-follower"
        thread.start()
    }

    /// After a batch committed here with changes up to `seq`: the other servers are told soon, off the writer's path.
    func announce(_ seq: Int64) {
        lock.withLock { announceThrough = max(announceThrough, seq) }
        noteKnown(seq)
        wakeUp()
    }

    func setHold(_ hold: @escaping @Sendable () -> Void) { lock.withLock { self.hold = hold } }

    private func noteKnown(_ seq: Int64) {
        let applied = core.feed.lastSeq
        lock.withLock {
            known = max(known, seq)
            if known > applied && behindSince == nil { behindSince = monotonicMs() }
        }
    }

    private func caughtUp() {
        let applied = core.feed.lastSeq
        lock.withLock {
            known = min(known, applied)
            behindSince = nil
        }
    }

    /// How far the published changes are behind the newest number known committed.
    func lag() -> FollowerLag {
        let applied = core.feed.lastSeq
        return lock.withLock {
            guard known > applied else {
                behindSince = nil
                return FollowerLag(appliedSeq: applied, knownSeq: max(known, applied), ms: 0)
            }
            let since = behindSince ?? monotonicMs()
            behindSince = since
            return FollowerLag(appliedSeq: applied, knownSeq: known, ms: Int64(monotonicMs() &- since))
        }
    }

    /// Stops the thread and waits for it.
    func close() {
        let first: Bool = lock.withLock {
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        wakeUp()
        finished.wait()
        Glibc.close(wakeRead)
        Glibc.close(wakeWrite)
    }

    private func wakeUp() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)  // a full pipe already wakes the thread
    }

    private var isClosed: Bool { lock.withLock { closed } }

    /// Waits until the pipe or `socket` (when not -1) is readable, or `timeoutMs`; answers whether `socket` is.
    private func wait(socket: Int32, timeoutMs: Int32) -> (socketReadable: Bool, timedOut: Bool) {
        var fds = [
            pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
        ]
        let ready = poll(&fds, socket >= 0 ? 2 : 1, timeoutMs)
        if fds[0].revents != 0 {
            var sink = [UInt8](repeating: 0, count: 64)
            while read(wakeRead, &sink, sink.count) > 0 {}
        }
        return (socket >= 0 && fds[1].revents != 0, ready == 0)
    }

    private func run() {
        var connection: PGConnection?
        while !isClosed {
            guard let current = connection, current.isUsable else {
                connection = nil
                if case .success(let fresh) = connector.connect(),
                    (try? fresh.run([PGStatement("LISTEN \(PGChangeFollower.channel)")])) != nil
                {
                    connection = fresh
                    // Whatever committed while this server could not listen.
                    try? PGChangeFollower.catchUp(core, fresh)
                } else {
                    _ = wait(socket: -1, timeoutMs: PGChangeFollower.reconnectMs)
                }
                continue
            }
            let (_, timedOut) = wait(socket: current.socket, timeoutMs: PGChangeFollower.fallbackPollMs)
            do throws(LarderError) {
                let pending = lock.withLock { announceThrough }
                if pending > announced {
                    _ = try current.run([
                        PGStatement("BEGIN"), PGStatement("SET LOCAL synchronous_commit TO off"),
                        PGStatement(
                            "SELECT pg_notify($1, $2)", [.text(PGChangeFollower.channel), .text(String(pending))],
                            name: "notify"),
                        PGStatement("COMMIT"),
                    ])
                    announced = pending
                }
                let payloads = try current.notifications()
                // A notification names the newest number its server committed: one published here needs no read.
                let newest = payloads.map { Int64($0) ?? .max }.max() ?? 0
                if newest != .max { noteKnown(newest) }
                if timedOut || newest > core.feed.lastSeq {
                    lock.withLock { hold }?()
                    try PGChangeFollower.catchUp(core, current)
                    // Read to the log's end: whatever was known is applied. (A notification can name a number of
                    // another database's log on the same channel: it must not count as lag for ever.)
                    caughtUp()
                }
            } catch {
                connection = nil
            }
        }
        connection?.close()
        finished.signal()
    }

    /// Publishes every change in the log past what this server published, oldest first, in pages.
    static func catchUp(_ core: StoreCore, _ connection: PGConnection) throws(LarderError) {
        while true {
            let after = core.feed.lastSeq
            let page = try PostgresStore.changesPage(
                connection, after: after, collection: nil, limit: 1000, maxBytes: 16 << 20)
            guard !page.entries.isEmpty else { return }
            // False only for a hole the log cannot explain (never, by the numbering above): stop rather than spin.
            guard core.feed.publishInOrder(page.entries, prunedThrough: page.prunedThrough) else { return }
            if !page.more { return }
        }
    }
}
