#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderStore
import LarderSync
import LarderTLS
import LarderWire
import LarderIO

// SIGTERM, SIGINT and SIGHUP: held from the start of `main`, then taken by `runUntilSignalled`.
extension LarderServer {
    /// Blocks SIGTERM and SIGINT in the calling thread and in every thread it starts from now on, so that either
    /// signal waits, pending, for `runUntilSignalled` instead of ending the process (or being lost). Call it first in
    /// `main`, before anything starts a thread.
    public static func holdTerminationSignals() {
        var signals = terminationSignals
        pthread_sigmask(SIG_BLOCK, &signals, nil)
    }

    private static var terminationSignals: sigset_t {
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGHUP)  // reload, not termination: held the same way so that it is never lost
        return signals
    }

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully and returns. Call from the main thread after
    /// `start()`, with the signals held since the start of `main` (`holdTerminationSignals`). `ready` runs first:
    /// print the start-up line there. A signal sent at any time after the hold, even before `ready`, is taken here
    /// (dispatch signal sources, used before, start listening a moment after they are activated, and a supervisor
    /// that sent SIGTERM on reading the line in that moment left the server running).
    public func runUntilSignalled(ready: () -> Void = {}) {
        LarderServer.holdTerminationSignals()  // at least this thread, if `main` did not
        ready()
        var signals = LarderServer.terminationSignals
        var received: Int32 = 0
        while true {
            while sigwait(&signals, &received) != 0 {}
            guard received == SIGHUP else { break }
            reload()
        }
        context.logger.info("\(received == SIGINT ? "SIGINT" : "SIGTERM") received")
        shutdown()
    }
}
