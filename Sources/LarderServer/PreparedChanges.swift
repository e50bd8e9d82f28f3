import LarderStore
import LarderWire

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
