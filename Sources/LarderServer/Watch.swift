import LarderStore
import LarderWire

/// One WATCH on one connection: what it follows and how far it got. Owned by its connection's event loop.
struct Subscription {
    enum State: Equatable {
        /// Events are pushed as commits are published to the shard.
        case live
        /// Replaying from the change log; waits for the connection's output to drain below half the watch buffer
        /// before reading the next page.
        case catchingUp
        /// A page of the change log is being read on the work pool.
        case reading
    }

    let id: UInt32
    let collection: String?
    let filter: Filter?
    let idsOnly: Bool
    /// Every change up to this sequence number has been handled: pushed, or found not to concern the subscription.
    var lastSeq: Int64
    var state: State
    /// The subscriber gave `since`: its first read checks that the log still covers it.
    var checkResync: Bool
    /// The collections the subscriber's token is limited to (nil: every one), whatever `collection` says.
    var allowed: Set<String>? = nil

    enum Match {
        /// Not this subscription's business.
        case no
        /// The document (after the write) passes the filter.
        case yes
        /// A replace or patch took the document out of the filter: sent with `matches: false`.
        case left
    }

    /// Whether `entry` concerns this subscription: its collection, and its document passing the filter after the
    /// write, or before it for a replace or patch (then `left`). A `drop` always passes, since every document of the
    /// collection went with it.
    func match(_ entry: ChangeEntry, data: () -> JSONObject?, previous: () -> JSONObject?) -> Match {
        if let collection, collection != entry.collection { return .no }
        if let allowed, !allowed.contains(entry.collection) { return .no }
        guard let filter else { return .yes }
        guard let record = entry.record else { return .yes }
        if let data = data(), FilterEvaluator.matches(filter, record: record, data: data) { return .yes }
        if let before = previous() {
            // The envelope before the write: one revision earlier (its `updatedAt` is not kept; the new one stands in).
            var old = record
            old.rev -= 1
            if FilterEvaluator.matches(filter, record: old, data: before) { return .left }
        }
        return .no
    }
}

/// A batch of committed changes being pushed to the subscriptions of one shard, with what they share computed once:
/// each document parsed at most once (for filters), each event body encoded at most once per `idsOnly`.
final class PreparedChanges {
    let entries: [ChangeEntry]
    private var parsed: [JSONObject??]
    private var parsedPrevious: [JSONObject??]
    private var bodies: [Int: [UInt8]] = [:]

    init(_ entries: [ChangeEntry]) {
        self.entries = entries
        parsed = Array(repeating: nil, count: entries.count)
        parsedPrevious = parsed
    }

    func data(_ index: Int) -> JSONObject? {
        if let done = parsed[index] { return done }
        let object = entries[index].record.flatMap { try? JSONParser.parseObject($0.data) }
        parsed[index] = .some(object)
        return object
    }

    func previous(_ index: Int) -> JSONObject? {
        if let done = parsedPrevious[index] { return done }
        let object = entries[index].previous.flatMap { try? JSONParser.parseObject($0) }
        parsedPrevious[index] = .some(object)
        return object
    }

    func match(_ index: Int, _ subscription: Subscription) -> Subscription.Match {
        subscription.match(entries[index], data: { data(index) }, previous: { previous(index) })
    }

    /// The event's JSON part for `subscription`.
    func event(_ index: Int, for subscription: UInt32, idsOnly: Bool, matches: Bool = true) -> [UInt8] {
        let key = index * 2 + (idsOnly ? 1 : 0)
        let body: [UInt8]
        if let cached = bodies[key] {
            body = cached
        } else {
            body = EventEncoder.body(entries[index], idsOnly: idsOnly)
            bodies[key] = body
        }
        return EventEncoder.event(subscription: subscription, body: body, matches: matches)
    }
}

/// A page of the change log prepared off the I/O loop for one subscription: its matching events already encoded.
struct LogPage: Sendable {
    var events: [[UInt8]]
    var more: Bool
    /// The last change in the page (valid when `more`).
    var lastEntrySeq: Int64
    var lastSeq: Int64
    var prunedThrough: Int64

    init(_ page: ChangePage, for subscription: Subscription) {
        let changes = PreparedChanges(page.entries)
        events = page.entries.indices.compactMap { index in
            let match = changes.match(index, subscription)
            guard match != .no else { return nil }
            return changes.event(index, for: subscription.id, idsOnly: subscription.idsOnly, matches: match == .yes)
        }
        more = page.more
        lastEntrySeq = page.entries.last?.seq ?? 0
        lastSeq = page.lastSeq
        prunedThrough = page.prunedThrough
    }
}

/// The JSON parts of EVENT frames, written by hand so a record's stored bytes are spliced in, not re-encoded. The
/// member order is `subscription` first, so one body serves every subscriber of an event.
enum EventEncoder {
    /// `"seq":…,"kind":…,"collection":…[,"id":…,"rev":…],"time":…[,"record":…][,"blob":…]}`.
    static func body(_ entry: ChangeEntry, idsOnly: Bool) -> [UInt8] {
        var out = Array(#""seq":"#.utf8)
        out.reserveCapacity(160 + (idsOnly ? 0 : entry.record?.data.count ?? 0))
        JSONWriter.writeInt(entry.seq, into: &out)
        out.append(contentsOf: #","kind":"#.utf8)
        JSONWriter.writeString(entry.kind.rawValue, into: &out)
        out.append(contentsOf: #","collection":"#.utf8)
        JSONWriter.writeString(entry.collection, into: &out)
        if let record = entry.record {
            out.append(contentsOf: #","id":"#.utf8)
            JSONWriter.writeString(record.id.wireString, into: &out)
            out.append(contentsOf: #","rev":"#.utf8)
            JSONWriter.writeInt(record.rev, into: &out)
        }
        out.append(contentsOf: #","time":"#.utf8)
        Timestamp.writeQuoted(entry.time, into: &out)
        let carriesRecord = entry.kind == .create || entry.kind == .replace || entry.kind == .patch
        if carriesRecord, !idsOnly, let record = entry.record {
            out.append(contentsOf: #","record":"#.utf8)
            record.write(into: &out)
        }
        if let blob = entry.blob {
            out.append(contentsOf: #","blob":"#.utf8)
            blob.json.write(into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func event(subscription: UInt32, body: [UInt8], matches: Bool = true) -> [UInt8] {
        var out = Array(#"{"subscription":"#.utf8)
        out.reserveCapacity(out.count + 30 + body.count)
        JSONWriter.writeInt(Int64(subscription), into: &out)
        out.append(contentsOf: matches ? Array(",".utf8) : Array(#","matches":false,"#.utf8))
        out.append(contentsOf: body)
        return out
    }

    /// `since` is older than the log (or newer than anything committed): reload, then follow the events after `seq`.
    static func resync(subscription: UInt32, seq: Int64, oldestSeq: Int64) -> [UInt8] {
        ChangeEvent(subscription: subscription, seq: seq, kind: .resync, oldestSeq: oldestSeq).json.bytes
    }

    /// The subscription ended; `seq` is the last change it handled. It fell behind, unless `ending` says why else.
    static func gap(subscription: UInt32, seq: Int64, ending: LarderError? = nil) -> [UInt8] {
        ChangeEvent(subscription: subscription, seq: seq, kind: .gap, error: ending).json.bytes
    }
}

/// Tells every I/O shard of each commit, in commit order. Called on the store's writer queue, so it only hands the
/// batch over: filtering, encoding and writing happen on the shards' event loops, and a slow subscriber never holds up a
/// write.
final class WatchHub: Sendable {
    let shards: [IOShard]

    init(shards: [IOShard]) { self.shards = shards }

    func publish(_ entries: [ChangeEntry]) {
        for shard in shards { shard.publish(entries) }
    }
}
