import Dispatch
import Foundation
import LarderSync
import LarderWire

/// Makes connections for the writer and the pool. After a failed attempt it answers that failure again for a short
/// while instead of trying at once (a stopped database is not asked again by every request), then tries anew.
final class PGConnector: @unchecked Sendable {
    let settings: PGSettings
    let timeoutMs: Int
    /// Run on every new connection before it is used (`SET synchronous_commit TO on` for `--synchronous full`).
    let session: [PGStatement]
    static let retryAfterMs: UInt64 = 200
    private let lock = Lock()
    private var lastFailure: (at: UInt64, error: LarderError)?

    init(settings: PGSettings, timeoutMs: Int, session: [PGStatement] = []) {
        self.settings = settings
        self.timeoutMs = timeoutMs
        self.session = session
    }

    /// A new connection with the session's settings, or the failure (no retry pause: `connect` adds that).
    func open() throws(LarderError) -> PGConnection {
        let connection = try PGConnection(settings: settings, timeoutMs: timeoutMs)
        if !session.isEmpty { _ = try connection.run(session) }
        return connection
    }

    func connect() -> Result<PGConnection, LarderError> {
        let now = DispatchTime.now().uptimeNanoseconds / 1_000_000
        if let failure = lock.withLock({ lastFailure }), now &- failure.at < PGConnector.retryAfterMs {
            return .failure(failure.error)
        }
        do throws(LarderError) {
            let connection = try open()
            lock.withLock { lastFailure = nil }
            return .success(connection)
        } catch {
            let failure =
                error.status == .unavailable
                ? LarderError(.unavailable, "\(error.message); retry shortly") : error
            lock.withLock { lastFailure = (now, failure) }
            return .failure(failure)
        }
    }

    func unavailable(_ reason: String) -> LarderError {
        LarderError(.unavailable, "\(settings.label) is unavailable: \(reason); retry shortly")
    }
}

/// The reader connections: at most `size` at once, made when first needed and again after one breaks.
final class PGPool: @unchecked Sendable {
    private let connector: PGConnector
    private let lock = Lock()
    private var idle: [PGConnection] = []
    private var closed = false
    private let semaphore: DispatchSemaphore

    init(connector: PGConnector, size: Int) {
        self.connector = connector
        semaphore = DispatchSemaphore(value: size)
    }

    /// Runs `body` on a connection. A read that fails because a connection kept from before broke (the database
    /// restarted since) is tried once more on a new connection: reads change nothing.
    func read<T>(_ body: (PGConnection) throws(LarderError) -> T) throws(LarderError) -> T {
        semaphore.wait()
        defer { semaphore.signal() }
        var retried = false
        while true {
            guard !lock.withLock({ closed }) else { throw LarderError(.unavailable, "the store is closed") }
            let kept = lock.withLock { idle.popLast() }
            let connection: PGConnection
            if let kept {
                connection = kept
            } else {
                switch connector.connect() {
                case .success(let fresh): connection = fresh
                case .failure(let error): throw error
                }
            }
            do throws(LarderError) {
                let value = try body(connection)
                giveBack(connection)
                return value
            } catch {
                if connection.isUsable {
                    giveBack(connection)
                } else if kept != nil && !retried {
                    retried = true
                    continue
                }
                throw error
            }
        }
    }

    private func giveBack(_ connection: PGConnection) {
        if connection.inTransaction { _ = try? connection.run([PGStatement("ROLLBACK")]) }
        guard connection.isUsable else { return }
        lock.withLock { if !closed { idle.append(connection) } }
    }

    func close() {
        let connections = lock.withLock { () -> [PGConnection] in
            closed = true
            defer { idle.removeAll() }
            return idle
        }
        for connection in connections { connection.close() }
    }
}
