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
