import Foundation
import LarderSync
import LarderWire

/// One committed write as the change log keeps it.
///
/// Every document write (create, replace, patch, delete), every blob attached to or deleted from a document, and
/// every dropped collection gets one entry, written in the same transaction as the write itself, so an entry exists
/// exactly when its write committed. Unattached blobs and index declarations belong to no collection and are not
/// logged.
public struct ChangeEntry: Sendable, Equatable {
    /// Strictly increasing, durable, never reused (SQLite AUTOINCREMENT); commit order.
    public var seq: Int64
    /// One of `ChangeKind.changes`.
    public var kind: ChangeKind
    public var collection: String
    /// When the write was applied, in milliseconds since 1970.
    public var time: Int64
    /// The document after the write; for `delete` the document as it was (so a filter can still be evaluated); for
    /// blob kinds the document the blob is attached to; nil for `drop`.
    public var record: StoredRecord?
    /// The blob of a `blobAttach` or `blobDelete`.
    public var blob: BlobInfo?
    /// The document's data before a `replace` or `patch`, so a filter can tell a document that stopped matching.
    public var previous: [UInt8]?

    /// An entry; the store makes these, the public initializer is for tests and tools.
    public init(
        seq: Int64, kind: ChangeKind, collection: String, time: Int64, record: StoredRecord?, blob: BlobInfo? = nil,
        previous: [UInt8]? = nil
    ) {
        self.seq = seq
        self.kind = kind
        self.collection = collection
        self.time = time
        self.record = record
        self.blob = blob
        self.previous = previous
    }
}

/// A page of the change log and where the log stood when it was read (one consistent snapshot).
public struct ChangePage: Sendable, Equatable {
    /// The entries after the requested sequence number, oldest first.
    public var entries: [ChangeEntry]
    /// True when the page stopped at its count or byte budget: read again after the last entry.
    public var more: Bool
    /// The last committed change when the page was read (0 when nothing was ever logged).
    public var lastSeq: Int64
    /// Every change up to and including this one has been pruned; a reader that saw less has missed some.
    public var prunedThrough: Int64

    /// A page; the store makes these.
    public init(entries: [ChangeEntry], more: Bool, lastSeq: Int64, prunedThrough: Int64) {
        self.entries = entries
        self.more = more
        self.lastSeq = lastSeq
        self.prunedThrough = prunedThrough
    }
}

/// The in-memory side of the change log: the last committed sequence number and the listeners told of each commit.
final class ChangeFeedState: @unchecked Sendable {
    private let lock = Lock()
    private var last: Int64
    private var listeners: [@Sendable ([ChangeEntry]) -> Void] = []

    init(lastSeq: Int64) { last = lastSeq }

    var lastSeq: Int64 { lock.withLock { last } }

    func add(_ listener: @escaping @Sendable ([ChangeEntry]) -> Void) {
        lock.withLock { listeners.append(listener) }
    }

    /// Forgets every listener, once the store has closed and nothing more can commit: a listener that holds the store
    /// (or something that holds it) would otherwise keep both alive in a cycle.
    func removeAllListeners() {
        lock.withLock { listeners = [] }
    }

    /// Called on the writer queue after a COMMIT: moves the last sequence number first, then tells the listeners, so
    /// that anyone who reads `lastSeq` and then registers for what follows cannot miss a commit.
    func committed(_ entries: [ChangeEntry]) {
        guard let newest = entries.last?.seq else { return }
        let current = lock.withLock { () -> [@Sendable ([ChangeEntry]) -> Void] in
            last = max(last, newest)
            return listeners
        }
        for listener in current { listener(entries) }
    }

    /// Held while entries are published in order (`publishInOrder`), so that two publishers (a writer and the
    /// follower of a shared log) never tell the listeners out of order.
    private let order = Lock()

    /// Publishes the part of `entries` (ascending, contiguous) past `lastSeq`, for a log that several processes write
    /// (PostgreSQL): false, publishing nothing, when they do not follow on from `lastSeq`, since changes committed
    /// elsewhere come between (the caller reads those from the log and publishes them first). `prunedThrough` says
    /// what the log no longer holds: entries just past it follow on whatever was published (nothing to read).
    func publishInOrder(_ entries: [ChangeEntry], prunedThrough: Int64 = 0) -> Bool {
        order.lock()
        defer { order.unlock() }
        let last = lastSeq
        let fresh = entries.drop { $0.seq <= last }
        guard let first = fresh.first else { return true }
        guard first.seq <= max(last, prunedThrough) + 1 else { return false }
        committed(Array(fresh))
        return true
    }
}

/// When the writer prunes the log: by count every 1/64 of the retention (at least every change), and by age at
/// most once a second.
struct PruneSchedule {
    var changesSincePrune = 0
    var lastPruneAt: Int64 = 0

    mutating func isDue(retainEvents: Int, now: Int64) -> Bool {
        changesSincePrune >= max(1, retainEvents / 64) || now - lastPruneAt >= 1000
    }

    mutating func pruned(now: Int64) {
        changesSincePrune = 0
        lastPruneAt = now
    }
}
