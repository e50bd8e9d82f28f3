import Foundation
import LarderStore
import LarderWire
import Synchronization

/// The answers to recent GETs on one event loop (the record's JSON, exactly as the store wrote it), so that a hot
/// document is served without a B-tree lookup: SQLite was a third of the server's CPU time on a GET load
/// (BENCHMARKS.md). Loop-only, bounded in bytes, first in first out.
///
/// Never stale as far as the shard has applied the change log. Every committed change reaches every shard's inbox
/// before the write that made it is acknowledged by this server (`Shard.publish`), and a lookup first applies whatever
/// the inbox holds, so a GET sent after an acknowledgement never finds the old answer. An answer read from the store is
/// kept only if no change arrived while it was being read: then every change to it that the shard applies later
/// removes it. On a database other servers write too (PostgreSQL), their changes arrive when this server's follower
/// reads them from the shared log: an entry is current through the shard's `publishedSeq` (and through the `seq` it
/// was read at, when that is newer), which is what `Shard.sharedGet` holds a GET with `afterSeq` to.
/// `--read-cache-bytes 0` turns it off.
struct ReadCache {
    /// A cached answer and a sequence number at or after the change that wrote it (0 when not known).
    struct Entry {
        var json: [UInt8]
        var seq: Int64
        /// The record's `$owner` once a user's GET read it (`CachedPointReads.getJSON(_:id:ownedBy:)`), so that the
        /// next one compares it instead of scanning the record again.
        var owner: TopLevelMember.Found? = nil
    }

    struct Key: Hashable {
        var collection: String
        var id: UUID

        /// The id alone: ids are random, so it spreads as well as both would, at half the hashing (equality still
        /// compares both). As two words: `UUID`'s own `hash(into:)` feeds its 16 bytes through the byte-buffer path.
        func hash(into hasher: inout Hasher) {
            withUnsafeBytes(of: id.uuid) { raw in
                hasher.combine(raw.loadUnaligned(as: UInt64.self))
                hasher.combine(raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            }
        }
    }

    let maxBytes: Int
    /// What a user's read of an id not cached compares its caller with (`CachedPointReads.getJSON(_:id:ownedBy:)`):
    /// an owner no user has (user ids hold no NUL), about as long as a user id, so the comparison costs what one
    /// with a cached copy's owner does.
    let decoy = Entry(json: [], seq: 0, owner: .string("\u{0}" + String(repeating: "-", count: 47)))
    private var entries: [Key: Entry] = [:]
    /// Insertion order for eviction; may hold keys already invalidated (skipped), compacted when it grows.
    private var order: [Key] = []
    private var orderHead = 0
    private(set) var bytes = 0

    init(maxBytes: Int) { self.maxBytes = maxBytes }

    var isEnabled: Bool { maxBytes > 0 }
    var count: Int { entries.count }

    func get(_ key: Key) -> Entry? { entries[key] }

    /// Notes the `$owner` read from the answer `key` holds, if it still holds one.
    mutating func setOwner(_ key: Key, _ owner: TopLevelMember.Found) {
        entries[key]?.owner = owner
    }

    mutating func insert(_ key: Key, _ json: [UInt8], seq: Int64 = 0, owner: TopLevelMember.Found? = nil) {
        let size = json.count + 64
        guard size <= maxBytes / 8 else { return }
        if let old = entries.updateValue(Entry(json: json, seq: seq, owner: owner), forKey: key) {
            bytes -= old.json.count + 64
        } else {
            order.append(key)
        }
        bytes += size
        while bytes > maxBytes && orderHead < order.count {
            let victim = order[orderHead]
            orderHead += 1
            if let removed = entries.removeValue(forKey: victim) { bytes -= removed.json.count + 64 }
        }
        if orderHead > 1024 && orderHead * 2 > order.count {
            order.removeFirst(orderHead)
            orderHead = 0
        }
    }

    mutating func invalidate(_ key: Key) {
        guard let removed = entries.removeValue(forKey: key) else { return }
        bytes -= removed.json.count + 64
        // Keys invalidated stay in `order`; keep it within a few times the live entries.
        if order.count - orderHead > 4 * entries.count + 4096 {
            order = Array(order[orderHead...].filter { entries[$0] != nil })
            orderHead = 0
        }
    }

    /// Forgets every answer (changes were dropped, so which ones are stale is unknown).
    mutating func removeAll() {
        entries.removeAll()
        order.removeAll()
        orderHead = 0
        bytes = 0
    }

    mutating func invalidate(collection: String) {
        for key in entries.keys where key.collection == collection { invalidate(key) }
    }

    /// What a committed change makes stale.
    mutating func apply(_ entry: ChangeEntry) {
        guard !entries.isEmpty else { return }
        if let record = entry.record {
            invalidate(Key(collection: entry.collection, id: record.id))
        } else {
            invalidate(collection: entry.collection)
        }
    }
}

/// The shard's point reads with its read cache in front (loop-only).
final class CachedPointReads: PointReads {
    /// The shard owns this object and outlives it (no reference counting on the hot path).
    private unowned(unsafe) let shard: Shard
    private let reads: any PointReads

    init(shard: Shard, reads: any PointReads) {
        self.shard = shard
        self.reads = reads
    }

    func get(_ collection: String, id: UUID) throws(LarderError) -> StoredRecord { try reads.get(collection, id: id) }

    func getJSON(_ collection: String, id: UUID) throws(LarderError) -> [UInt8] {
        // Only ASCII names are looked up: `String` equality is Unicode-canonical ("\u{212A}eys" == "Keys"), while the
        // store compares bytes and accepts only ASCII names, so any other name goes to the store and its error.
        var name = collection  // `withUTF8` reads a native string's bytes in place, without the view's iterator
        guard name.withUTF8({ $0.allSatisfy { $0 < 0x80 } }) else { return try reads.getJSON(collection, id: id) }
        let key = ReadCache.Key(collection: collection, id: id)
        let published = shard.applyPublishedChanges()
        if let entry = shard.readCache.get(key) {
            shard.cacheHits += 1
            return entry.json
        }
        shard.cacheMisses += 1
        let json = try reads.getJSON(collection, id: id)
        // Kept only when nothing committed meanwhile: the read may have come from a snapshot older than that change.
        if shard.publishedBatches == published { shard.readCache.insert(key, json) }
        return json
    }

    /// A copy of a record someone else owns answers nothing: the store is read as for a record not cached, so that
    /// another user's record and a missing one take the same steps, and what it reads is kept only when it is
    /// `owner`'s.
    func getJSON(_ collection: String, id: UUID, ownedBy owner: String) throws(LarderError) -> [UInt8]? {
        var name = collection
        guard name.withUTF8({ $0.allSatisfy { $0 < 0x80 } }) else { return nil }
        let key = ReadCache.Key(collection: collection, id: id)
        let published = shard.applyPublishedChanges()
        // An id not cached takes the steps of another user's cached copy: its caller is compared with the owner of a
        // decoy entry, which is no user, as with the copy's owner; both then read the store.
        let entry = shard.readCache.get(key) ?? shard.readCache.decoy
        let known = entry.owner
        guard let found = known ?? TopLevelMember.find("$owner", inDataOf: entry.json) else { return nil }
        if known == nil { shard.readCache.setOwner(key, found) }
        if found == .string(owner) {
            shard.cacheHits += 1
            return entry.json
        }
        shard.cacheMisses += 1
        guard let json = try reads.getJSON(collection, id: id, ownedBy: owner) else { return nil }
        if shard.publishedBatches == published { shard.readCache.insert(key, json, owner: .string(owner)) }
        return json
    }

    func blobHead(_ id: UUID) throws(LarderError) -> BlobInfo { try reads.blobHead(id) }
    func end() { reads.end() }
}
