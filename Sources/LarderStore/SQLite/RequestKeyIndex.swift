import CXXHash
import Foundation
import LarderSync
import LarderWire

/// What the writer knows of the key table (`request_keys`) without reading it: which keys it may hold, and how far
/// the sweep that removes expired keys has come.
///
/// Nearly every key a write brings is new, and looking each up in the table cost a B-tree probe. A Bloom filter of
/// every key the table holds answers "not there" for those without touching the file; only a key the filter may hold
/// (a retry, or about one new key in a hundred) is looked up. The filter must never miss a key the table holds (the
/// write would be applied again), so every stored key enters it before its transaction commits, and a key whose
/// transaction rolls back stays in it, which only costs a lookup.
///
/// Expired keys leave the table by a sweep in key order, a slice of it with each prune of the change log, instead of
/// through an index by age that every keyed write would have had to update (one more B-tree, and one more page in
/// each commit's WAL frames). Each slice visits at least twice as many rows as keys were stored since the last, so a
/// whole pass ends before the table has grown by half, and an expired key stays at most about half a retention
/// longer. A filter cannot forget, so each pass fills a new one with every key it visits and every key stored while it
/// runs; when the pass ends, that filter holds every key the table holds and replaces the old one.
///
/// Stores open on one file in this process at once (`DataDirectoryLock` lets them share it) share its index
/// (`shared`): each writer must learn of the keys the others store. Its calls take a lock of its own, held by a sweep
/// for one slice.
final class RequestKeyIndex: @unchecked Sendable {  // its state only under `lock`
    private let lock = Lock()
    /// The keys the table may hold.
    private var current: KeyFilter
    /// The pass's filter: the keys it visited and the keys stored since it began.
    private var next: KeyFilter
    /// The last key the pass visited (key order is the text's); nil at the start of a pass.
    private var cursor: String?
    private var storedSinceSweep = 0

    /// The fewest rows a slice visits.
    static let minimumSlice = 1024

    /// The indexes of the files that open writers in this process use, by the file's device and inode, with how many
    /// writers use each. An index lives only while a writer is open on its file: the next writer to open after the
    /// last closed reads the table again, whatever changed it in between.
    private static let open = Locked<[String: (index: RequestKeyIndex, writers: Int)]>([:])

    /// Where `open` keeps this index.
    private var registered: String?

    /// The index of the database file at `path`, which `connection` has open: the one another open writer on it uses,
    /// else one made from its table. Its writer calls `release` when it closes.
    static func shared(_ connection: SQLiteConnection, path: String) throws(LarderError) -> RequestKeyIndex {
        let key = DataDirectoryLock.identity(path)
        return try open.withLock { (open) throws(LarderError) in
            if let entry = open[key] {
                open[key]?.writers += 1
                return entry.index
            }
            let index = try RequestKeyIndex(connection)
            index.registered = key
            open[key] = (index, 1)
            return index
        }
    }

    /// Called by a writer of `shared` as it closes.
    func release() {
        guard let key = registered else { return }
        Self.open.withLock { open in
            guard let entry = open[key], entry.index === self else { return }
            open[key] = entry.writers > 1 ? (entry.index, entry.writers - 1) : nil
        }
    }

    /// The filter for the keys `connection`'s table holds: one read of them all, as the store opens.
    init(_ connection: SQLiteConnection) throws(LarderError) {
        var keys: [UUID] = []
        var unreadable = false
        try connection.forEachRow("SELECT key FROM request_keys") { row in
            if let key = Self.key(row) {
                keys.append(key)
            } else {
                unreadable = true
            }
            return true
        }
        current = KeyFilter(capacity: keys.count, holdsAll: unreadable)
        for key in keys { current.insert(key) }
        next = KeyFilter(capacity: keys.count)
    }

    /// The key in the row's first column.
    private static func key(_ row: SQLiteStatement) -> UUID? {
        row.withBytes(0) { UUID(wireUTF8: $0.assumingMemoryBound(to: UInt8.self)) }
    }

    /// False only when the table surely does not hold `key`.
    func mayHold(_ key: UUID) -> Bool { lock.withLock { current.mayContain(key) } }

    /// Notes `key` as stored in the table (before its transaction commits).
    func stored(_ key: UUID) {
        lock.withLock {
            current.insert(key)
            next.insert(key)
            storedSinceSweep += 1
        }
    }

    /// Sweeps the next slice of the table: deletes its keys stored before `oldest` (milliseconds since 1970), and
    /// ends the pass when the slice reaches the end of the table.
    func sweep(_ connection: SQLiteConnection, oldest: Int64) throws(LarderError) {
        lock.lock()
        defer { lock.unlock() }
        let slice = max(Self.minimumSlice, 2 * storedSinceSweep)
        storedSinceSweep = 0
        var visited = 0
        var expired: [String] = []
        var last: String?
        try connection.forEachRow(
            "SELECT key, createdAt FROM request_keys WHERE key > ?1 ORDER BY key LIMIT ?2",
            [.text(cursor ?? ""), .int(Int64(slice))]
        ) { [self] row in
            visited += 1
            let text = row.text(0)
            // Every key visited enters the pass's filter, an expired one too: if this transaction rolls back, the
            // key is back in the table.
            if let key = Self.key(row) { next.insert(key) } else { next.holdAll() }
            if row.int(1) < oldest { expired.append(text) }
            last = text
            return true
        }
        for key in expired { try connection.run("DELETE FROM request_keys WHERE key = ?1", [.text(key)]) }
        if visited < slice {
            current = next
            next = KeyFilter(capacity: 2 * current.count)
            cursor = nil
        } else {
            cursor = last
        }
    }
}

/// A Bloom filter of UUIDs, blocked: a key's seven bits all lie in one 64-byte block (one cache line), so a key
/// costs one memory access where a plain filter's seven probes cost seven. About ten bits per key for the capacity
/// it was made for keeps false positives near one in a hundred; past that it fills and answers "maybe" more often,
/// never "no" for a key it was given.
struct KeyFilter {
    private var words: [UInt64]
    /// The blocks (of eight words) less one: a power of two less one.
    private let blockMask: UInt64
    private var holdsAll: Bool
    /// The keys inserted (with repeats).
    private(set) var count = 0

    private static let probes = 7

    init(capacity: Int, holdsAll: Bool = false) {
        // A power of two of bits, at least 2^20 (128 KiB), at least ten per key.
        var bits = 1 << 20
        while bits < capacity * 10 { bits <<= 1 }
        words = [UInt64](repeating: 0, count: bits / 64)
        blockMask = UInt64(bits / 512 - 1)
        self.holdsAll = holdsAll
    }

    /// Makes the filter answer "maybe" for every key (when a key it should hold could not be read).
    mutating func holdAll() { holdsAll = true }

    mutating func insert(_ key: UUID) {
        count += 1
        let (block, bits) = Self.hashes(key)
        let base = Int(block & blockMask) * 8
        words.withUnsafeMutableBufferPointer { words in
            for i in 0..<UInt64(Self.probes) {
                let bit = (bits >> (9 * i)) & 511
                words[base + Int(bit >> 6)] |= 1 << (bit & 63)
            }
        }
    }

    func mayContain(_ key: UUID) -> Bool {
        if holdsAll { return true }
        let (block, bits) = Self.hashes(key)
        let base = Int(block & blockMask) * 8
        return words.withUnsafeBufferPointer { words in
            for i in 0..<UInt64(Self.probes) {
                let bit = (bits >> (9 * i)) & 511
                if words[base + Int(bit >> 6)] & (1 << (bit & 63)) == 0 { return false }
            }
            return true
        }
    }

    /// The key's block, and the bits (nine per probe) that choose its places in the block: two halves of XXH3's
    /// 128-bit hash of the key's 16 bytes.
    private static func hashes(_ key: UUID) -> (block: UInt64, bits: UInt64) {
        var bytes = key.uuid
        let hash = withUnsafeBytes(of: &bytes) { XXH3_128bits($0.baseAddress, 16) }
        return (hash.low64, hash.high64)
    }
}
