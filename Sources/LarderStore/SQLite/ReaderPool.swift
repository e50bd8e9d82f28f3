import CSQLite
import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// The read-only connections of searches, lists and other reads on the work pool. Each borrower has a connection to
/// itself; WAL lets them read while the writer writes. Point reads on the event loops never borrow from here (they
/// own a connection each: `SQLitePointReads`), so a burst of slow searches cannot hold up a loop.
final class ReaderPool: @unchecked Sendable {
    private let lock = Lock()
    private var idle: [SQLiteConnection]
    private var closed = false
    private let semaphore: DispatchSemaphore
    private let path: String
    /// Called with each connection borrowed for `read`, before the body runs (`StoreConfiguration.readerHook`).
    private let hook: (@Sendable () -> Void)?

    /// The most of the database file each reader maps (address space, not memory: pages load on demand).
    static let mmapBytes = 1 << 30

    /// Whether the connections map the database file (`mmapBytes`); a pool that streams large blobs does not.
    private let mapped: Bool

    init(
        path: String, textIndexPath: String?, count: Int, hook: (@Sendable () -> Void)? = nil, mapped: Bool = true
    ) throws(LarderError) {
        self.mapped = mapped
        self.path = path
        self.hook = hook
        var connections: [SQLiteConnection] = []
        for _ in 0..<max(1, count) {
            let connection = try ReaderPool.open(path, mapped: mapped)
            if let textIndexPath { try connection.execute("ATTACH DATABASE \(SQL.literal(textIndexPath)) AS ix") }
            connections.append(connection)
        }
        idle = connections
        semaphore = DispatchSemaphore(value: connections.count)
    }

    /// A read-only connection to the documents' file.
    static func open(_ path: String, mapped: Bool = true) throws(LarderError) -> SQLiteConnection {
        let connection = try SQLiteConnection(path: path, readOnly: true)
        guard mapped else { return connection }
        // Reads of the main file become copies out of a shared mapping instead of one pread(2) per page: a 1 MiB
        // blob is ~256 overflow pages. Pages still in the WAL are read as before.
        try connection.execute("PRAGMA mmap_size=\(ReaderPool.mmapBytes)")
        return connection
    }

    /// A read-only connection outside the pool, for one owner (an event loop's point reads); UNAVAILABLE once the
    /// store is closed.
    func openOwn() throws(LarderError) -> SQLiteConnection {
        guard !isClosed else { throw LarderError(.unavailable, "the store is closed") }
        return try ReaderPool.open(path)
    }

    var isClosed: Bool { lock.withLock { closed } }

    /// Borrows a connection; `transaction` wraps the body in one read transaction (one consistent snapshot).
    func read<T>(transaction: Bool = false, _ body: (SQLiteConnection) throws(LarderError) -> T) throws(LarderError) -> T {
        let connection = try borrow()
        defer { giveBack(connection) }
        hook?()
        if transaction { try connection.run(.beginRead) }
        defer { if transaction { try? connection.run(.endRead) } }
        return try body(connection)
    }

    /// Takes a connection out of the pool (waiting while all are in use); `giveBack` returns it.
    private func borrow() throws(LarderError) -> SQLiteConnection {
        semaphore.wait()
        guard let connection = lock.withLock({ closed ? nil : idle.popLast() }) else {
            semaphore.signal()
            throw LarderError(.unavailable, "the store is closed")
        }
        return connection
    }

    private func giveBack(_ connection: SQLiteConnection) {
        lock.withLock { if !closed { idle.append(connection) } }
        semaphore.signal()
    }

    func close() {
        lock.withLock {
            closed = true
            idle.removeAll()
        }
    }
}
