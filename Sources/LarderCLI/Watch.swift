#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderClient
import LarderSync

extension Commands {
    /// The pause before the first try to reconnect a watch; it doubles after each failed try, up to `watchMaxDelay`.
    static let watchFirstDelay: Duration = .milliseconds(100)
    static let watchMaxDelay: Duration = .seconds(5)

    /// `larder watch [COLLECTION]`: prints each change as it is committed until Ctrl-C (exit 0). A gap (this process
    /// fell behind) resumes where it was. When the server goes away, one line on stderr says so and the watch
    /// reconnects with back-off, resuming after the last change printed, so that nothing is lost or repeated. A
    /// server that cannot be reached at the start is an error (exit 2), as for every command.
    static func watch(_ c: Context) async throws -> Int32 {
        // At the prompt, Ctrl-C already cancels the command; run alone, the watch makes Ctrl-C cancel it.
        if Interrupt.isPrompting { return try await follow(c) }
        let (result, _) = await Interrupt.cancellable(secondExits: true) { () async -> Result<Int32, any Error> in
            do {
                return .success(try await follow(c))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private static func follow(_ c: Context) async throws -> Int32 {
        let out = c.output
        let collection = c.arguments.first
        let since = try c.int("since", range: 0...Int.max).map(Int64.init)
        let filter = try FilterSyntax.filter(wheres: c.invocation.values["where"] ?? [], json: c.invocation.value("filter"))
        let idsOnly = c.invocation.flag("ids-only")
        var resume = since
        var subscribed = false
        var delay = watchFirstDelay
        while !Task.isCancelled {
            let feed: LarderSubscription
            do throws(LarderError) {
                // Resumed here rather than by the library, so that each loss of the server is told on stderr.
                feed = try await c.client.watch(
                    collection: collection, filter: filter, since: resume, idsOnly: idsOnly, resume: false)
            } catch {
                // Ctrl-C while subscribing ends the watch as it ends any other time.
                if Task.isCancelled { return 0 }
                // Still away: wait longer each time, silently (the line was printed when the server went).
                guard subscribed, error.status == .unavailable else { throw error }
                guard await pause(delay) else { return 0 }
                delay = min(delay * 2, watchMaxDelay)
                continue
            }
            if !subscribed && out.stderrIsTerminal {
                out.error(
                    "watching \(collection ?? "every collection") after change \(resume ?? feed.startSeq) (Ctrl-C to stop)")
            }
            subscribed = true
            delay = watchFirstDelay
            var events = feed.makeAsyncIterator()
            do throws(LarderError) {
                while let event = try await events.next() {
                    show(event, out)
                    out.flush()
                }
                // The sequence ends only when cancelled: Ctrl-C.
                return 0
            } catch {
                if Task.isCancelled { return 0 }
                // Every event handed out was printed: the subscription's last sequence number is the last printed.
                resume = feed.lastSeq
                if error.details["reason"] == "gap" {
                    let seq = error.details["seq"]?.intValue ?? feed.lastSeq
                    out.error("fell behind the feed; resuming after change \(seq)")
                    resume = seq
                    continue
                }
                guard error.status == .unavailable else { throw error }
                out.error(
                    "lost the server (\(error.message)); reconnecting, to resume after change \(feed.lastSeq)")
                guard await pause(delay) else { return 0 }
                delay = min(delay * 2, watchMaxDelay)
            }
        }
        return 0
    }

    /// Waits `delay`; false when the wait was cut short by Ctrl-C.
    private static func pause(_ delay: Duration) async -> Bool {
        do {
            try await Task.sleep(for: delay)
            return true
        } catch {
            return false
        }
    }

    /// One event: a JSON line, or `#SEQ kind collection/id rev N …` for people.
    static func show(_ event: ChangeEvent, _ out: Output) {
        if out.json { return out.json(.object(event.json)) }
        var parts = [out.dim("#\(event.seq)"), out.bold(event.kind.rawValue)]
        switch event.kind {
        case .resync:
            parts.append(
                "the server's change log starts at #\(event.oldestSeq ?? 0): reload, changes after #\(event.seq) follow")
        default:
            if let collection = event.collection {
                parts.append(collection + (event.id.map { "/" + $0.wireString } ?? ""))
            }
            if let rev = event.rev { parts.append("rev \(rev)") }
            if !event.matches { parts.append("left") }
            if let blob = event.blob {
                parts.append("blob \(blob.id.wireString) \(blob.width)x\(blob.height) \(ByteSize.format(blob.size))")
            }
            if let record = event.record {
                // What is left of the terminal's line after the other parts (at least a little).
                let used = parts.reduce(0) { $0 + Output.width($1) + 2 }
                parts.append(Output.cell(.object(record.data), limit: max(10, out.columns - used)))
            }
        }
        out.line(parts.joined(separator: "  "))
    }
}

/// Ctrl-C (SIGINT) for commands that run until interrupted and for the prompt: it cancels the running command's task
/// instead of killing the process, so a watch sends UNWATCH and the prompt comes back. Any other time it ends the
/// process as SIGINT does by default (a shell loop running larder stops too).
///
/// SIGINT is blocked from the first line of `main` and taken with `sigwait` by the main thread (`serve`), so none is
/// lost: a dispatch signal source starts listening a moment after it is activated, and a Ctrl-C in that moment was
/// ignored; and an async `main` parks the main thread in `sigsuspend` with no signal blocked, where SIGINT would kill.
public enum Interrupt {
    private static let state = Lock()
    /// Whether SIGINT is held and taken here (by `main`, or by `takeOver`'s thread).
    nonisolated(unsafe) private static var served = false
    /// The running command's task, while there is one.
    nonisolated(unsafe) private static var running: (any CancellableTask)?
    /// Whether a second Ctrl-C ends the process (a command run alone, in case it does not stop when asked).
    nonisolated(unsafe) private static var secondExits = false
    /// Whether the prompt is open: between its commands Ctrl-C does not end the process.
    nonisolated(unsafe) private static var prompting = false
    /// A Ctrl-C that came before the command it was meant for had started (the prompt hands a line over and the
    /// terminal signals again a moment before the command's task exists): that command starts cancelled.
    nonisolated(unsafe) private static var pending = false

    private static var interruptSignal: sigset_t {
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        return signals
    }

    /// Blocks SIGINT in the calling thread and in the threads it starts from now on. Call first in `main`, before any
    /// thread exists, then run the program off the main thread and `serve` on it.
    public static func hold() {
        var signals = interruptSignal
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        state.withLock { served = true }
    }

    /// Takes SIGINT for ever on the calling thread (the main thread, after `hold`).
    public static func serve() -> Never {
        var signals = interruptSignal
        var received: Int32 = 0
        while true {
            if sigwait(&signals, &received) == 0 { Interrupt.received() }
        }
    }

    /// Makes sure SIGINT is taken here: when `main` did not `serve` (the library used on its own), a thread of its
    /// own serves (a signal may still reach a thread started before that does not block it).
    static func takeOver() {
        let start = state.withLock {
            defer { served = true }
            return !served
        }
        guard start else { return }
        var signals = interruptSignal
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        Thread.detachNewThread { serve() }
    }

    /// Whether the prompt is open (its commands are cancelled by Ctrl-C already).
    static var isPrompting: Bool { state.withLock { prompting } }

    /// The prompt opens: Ctrl-C between commands is the line editor's, not the end of the process.
    static func promptOpened() {
        takeOver()
        state.withLock { prompting = true }
    }

    /// Runs `body` in a task that Ctrl-C cancels; returns what it returns, and whether Ctrl-C was pressed. With
    /// `secondExits`, a second Ctrl-C ends the process with status 130.
    static func cancellable<T: Sendable>(
        secondExits: Bool = false, _ body: @escaping @Sendable () async -> T
    ) async -> (T, interrupted: Bool) {
        takeOver()
        let task = Task { await body() }
        state.withLock {
            running = task
            Interrupt.secondExits = secondExits
            if pending { task.cancel() }
            pending = false
        }
        defer { state.withLock { running = nil } }
        let value = await task.value
        return (value, task.isCancelled)
    }

    /// Forgets a Ctrl-C that came between commands (the prompt calls it before reading the next line, whose editor
    /// takes Ctrl-C as a key).
    static func forgetPending() { state.withLock { pending = false } }

    /// One SIGINT, on the signal thread.
    private static func received() {
        let (task, exits, atPrompt) = state.withLock {
            if running == nil && prompting { pending = true }
            return (running, secondExits, prompting)
        }
        if let task {
            if !(task.isCancelled && exits) { return task.cancel() }
        } else if atPrompt {
            return
        }
        // As if SIGINT had not been taken: the default action ends the process, and its parent sees why.
        signal(SIGINT, SIG_DFL)
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
        raise(SIGINT)
        exit(CLI.cancelledStatus)
    }
}

/// A task `Interrupt` can cancel, whatever it returns.
protocol CancellableTask: Sendable {
    var isCancelled: Bool { get }
    func cancel()
}

extension Task: CancellableTask {}
