import CXXHash
import Foundation
import LarderSync
import LarderWire

/// What the writer knows of request keys without reading them: which keys the key table (`request_keys`) may hold,
/// how far the sweep that removes expired keys has come, and which rows keep a CREATE's key.
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
/// A CREATE's key stays out of the table: it rides in the row the CREATE makes (`documents.createKey`, see
/// `RequestKey.rowMark`), which the commit writes anyway, and a table of row numbers by key in memory (`RowKeys`)
/// finds it again, for a retry or for a key reused with another request. That table holds every such key of the rows
/// numbered from `requestKeyRowsFrom` (in `larder_meta`) on, read as the store opens: each sweep moves that mark past
/// the rows whose keys expired (in memory once its transaction commits), and the lookup checks a key's age.
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
    /// The rows that keep a CREATE's key, by key; a number may be stale (the row went, or its write rolled back):
    /// the row is read to be sure.
    private var rows = RowKeys()
    /// The lowest row number whose CREATE's key may not have expired (`requestKeyRowsFrom`).
    private var rowsFrom: Int64
    /// The last row number given out when the last sweep ran.
    private var newestAtSweep: Int64?

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

    /// The filter for the keys `connection`'s table holds, and the rows from the mark on that keep keys (expired ones
    /// too: each store sharing the index checks its own retention): one read of them all, as the store opens.
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
        for key in keys { current.insert(Self.hash(key)) }
        next = KeyFilter(capacity: keys.count)
        rowsFrom = try connection.scalar("SELECT value FROM larder_meta WHERE key = 'requestKeyRowsFrom'") ?? 0
        try connection.forEachRow(
            "SELECT seq, createKey FROM documents WHERE seq >= ?1 AND createKey IS NOT NULL", [.int(rowsFrom)]
        ) { [self] row in
            if let key = RequestKey.key(ofMark: row.bytes(1)) {
                rows.insert(Self.hash(key), row: row.int(0), keepingFrom: 0)
            }
            return true
        }
    }

    /// The key in the row's first column.
    private static func key(_ row: SQLiteStatement) -> UUID? {
        row.withBytes(0) { UUID(wireUTF8: $0.assumingMemoryBound(to: UInt8.self)) }
    }

    /// A seed for keys' hashes chosen by the process, so that no client can choose keys that collide.
    private static let seed = UInt64.random(in: .min ... .max)

    /// `key`'s hash, which both of the index's tables use: made once for a write's lookup and its insert.
    static func hash(_ key: UUID) -> UInt64 {
        var bytes = key.uuid
        return withUnsafeBytes(of: &bytes) { XXH3_64bits_withSeed($0.baseAddress, 16, seed) }
    }

    /// Where the key of `hash` may be: the numbers of the rows that may keep it (`documents.createKey`; usually
    /// none), and whether the table may hold it (false only when it surely does not). One look, under one lock.
    func find(_ hash: UInt64) -> (rows: [Int64], inTable: Bool) {
        lock.withLock { (rows.rows(holding: hash), current.mayContain(hash)) }
    }

    /// Notes the key of `hash` as stored in the table (before its transaction commits).
    func stored(_ hash: UInt64) {
        lock.withLock {
            current.insert(hash)
            next.insert(hash)
            storedSinceSweep += 1
        }
    }

    /// Notes the key of `hash` as kept in the row numbered `row` (before the row is written).
    func storedInRow(_ hash: UInt64, row: Int64) {
        lock.withLock {
            rows.insert(hash, row: row, keepingFrom: rowsFrom)
        }
    }

    /// Sweeps the next slice of the table: deletes its keys stored before `oldest` (milliseconds since 1970), and
    /// ends the pass when the slice reaches the end of the table; then moves `requestKeyRowsFrom` on in the table, and
    /// answers where to, for `passedRows` once the transaction commits. `newest` is the last row number given out.
    func sweep(_ connection: SQLiteConnection, oldest: Int64, newest: Int64) throws(LarderError) -> Int64? {
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
            if let key = Self.key(row) { next.insert(Self.hash(key)) } else { next.holdAll() }
            if row.int(1) < oldest { expired.append(text) }
            last = text
            return true
        }
        for key in expired { try connection.run("DELETE FROM request_keys WHERE key = ?1", [.text(key)]) }
        if visited < slice {
            // Both filters empty (no key held, none visited or stored since): swapping them would only zero a new one.
            if !(current.isEmpty && next.isEmpty) {
                current = next
                next = KeyFilter(capacity: 2 * current.count)
            }
            cursor = nil
        } else {
            cursor = last
        }
        return try advanceRows(connection, oldest: oldest, newest: newest)
    }

    /// Moves the mark in memory to `mark`, which a committed sweep wrote: the rows below it keep no live key, and the
    /// table of row keys may drop them.
    func passedRows(below mark: Int64) { lock.withLock { rowsFrom = max(rowsFrom, mark) } }

    /// Moves `requestKeyRowsFrom` past the next slice of rows whose keys expired: it stops at the first row made
    /// from `oldest` on. A slice visits at least twice as many rows as were numbered since the last, so the mark
    /// keeps up with the rows made.
    private func advanceRows(_ connection: SQLiteConnection, oldest: Int64, newest: Int64) throws(LarderError)
        -> Int64?
    {
        let made = newest - (newestAtSweep ?? newest)
        newestAtSweep = newest
        let slice = max(Int64(Self.minimumSlice), 2 * made)
        var from = rowsFrom
        try connection.forEachRow(
            "SELECT seq, createdAt FROM documents WHERE seq >= ?1 ORDER BY seq LIMIT ?2",
            [.int(from), .int(slice)]
        ) { row in
            guard row.int(1) < oldest else {
                from = row.int(0)
                return false
            }
            from = row.int(0) + 1
            return true
        }
        guard from > rowsFrom else { return nil }
        try connection.run(
            "INSERT INTO larder_meta(key, value) VALUES ('requestKeyRowsFrom', ?1) "
                + "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [.int(from)])
        return from
    }
}

/// Row numbers by request key: an open-addressing table of (hash of the key, row number) pairs, probed linearly, each
/// pair in one 16-byte slot (a probe touches one cache line). Several pairs may share a key (a write that rolled back
/// and its retry): `rows(holding:)` gives them all. Pairs of rows below the mark a sweep has passed are dropped when
/// the table grows.
struct RowKeys {
    private struct Slot {
        var hash: UInt64
        /// The row's number; 0 in an empty slot.
        var row: Int64
    }

    private var slots: [Slot] = []
    /// The pairs in the table, stale ones included.
    private var used = 0

    /// Adds the key of `hash` (`RequestKeyIndex.hash`) at row `row` (above 0); when the table is full,
    /// it is made again without the pairs below `from`.
    mutating func insert(_ hash: UInt64, row: Int64, keepingFrom from: Int64) {
        if (used + 1) * 10 > slots.count * 7 { grow(keepingFrom: from) }
        place(Slot(hash: hash, row: row))
    }

    func rows(holding hash: UInt64) -> [Int64] {
        guard !slots.isEmpty else { return [] }
        return slots.withUnsafeBufferPointer { slots in
            let mask = slots.count - 1
            var at = Int(truncatingIfNeeded: hash) & mask
            var found: [Int64] = []
            while slots[at].row != 0 {
                if slots[at].hash == hash { found.append(slots[at].row) }
                at = (at + 1) & mask
            }
            return found
        }
    }

    private mutating func place(_ slot: Slot) {
        slots.withUnsafeMutableBufferPointer { slots in
            let mask = slots.count - 1
            var at = Int(truncatingIfNeeded: slot.hash) & mask
            while slots[at].row != 0 { at = (at + 1) & mask }
            slots[at] = slot
        }
        used += 1
    }

    /// Makes the table again, at most a quarter full, with the pairs of rows from `from` on.
    private mutating func grow(keepingFrom from: Int64) {
        let kept = slots.filter { $0.row >= from && $0.row != 0 }
        var capacity = 1024
        while capacity < kept.count * 4 { capacity <<= 1 }
        slots = [Slot](repeating: Slot(hash: 0, row: 0), count: capacity)
        used = 0
        for slot in kept { place(slot) }
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

    /// Whether no key was ever given to the filter (it answers "no" for every key).
    var isEmpty: Bool { count == 0 && !holdsAll }

    /// Makes the filter answer "maybe" for every key (when a key it should hold could not be read).
    mutating func holdAll() { holdsAll = true }

    /// Adds the key of `hash` (`RequestKeyIndex.hash`).
    mutating func insert(_ hash: UInt64) {
        count += 1
        let (block, bits) = Self.hashes(hash)
        let base = Int(block & blockMask) * 8
        words.withUnsafeMutableBufferPointer { words in
            for i in 0..<UInt64(Self.probes) {
                let bit = (bits >> (9 * i)) & 511
                words[base + Int(bit >> 6)] |= 1 << (bit & 63)
            }
        }
    }

    func mayContain(_ hash: UInt64) -> Bool {
        if holdsAll { return true }
        let (block, bits) = Self.hashes(hash)
        let base = Int(block & blockMask) * 8
        return words.withUnsafeBufferPointer { words in
            for i in 0..<UInt64(Self.probes) {
                let bit = (bits >> (9 * i)) & 511
                if words[base + Int(bit >> 6)] & (1 << (bit & 63)) == 0 { return false }
            }
            return true
        }
    }

    /// The key's block, and the bits (nine per probe) that choose its places in the block: the hash itself for the
    /// bits, and for the block the high half of the hash, folded on itself and multiplied by an odd constant (bits of
    /// a product depend only on the factor's bits at or below them; the fold brings the hash's high bits down to
    /// them).
    private static func hashes(_ hash: UInt64) -> (block: UInt64, bits: UInt64) {
        (((hash ^ hash >> 32) &* 0x9E37_79B9_7F4A_7C15) >> 32, hash)
    }
}
