import LarderStore

/// The committed changes waiting for one event loop, as a value (the shard keeps it under a lock: the store's writer
/// publishes, the loop takes). Bounded: past `limit` changes, what is pending is dropped and the next `take` says
/// through which change, so the loop ends its live subscriptions with a gap (each resumes with `since`) and empties
/// its read cache, instead of the inbox of an overloaded server growing without bound.
struct ChangeInbox {
    let limit: Int
    /// Changes published and not yet taken, in commit order.
    private(set) var pending: [ChangeEntry] = []
    /// A drain is scheduled on the loop.
    private(set) var scheduled = false
    /// The last change dropped since the last take.
    private(set) var droppedThrough: Int64?

    init(limit: Int) { self.limit = max(1, limit) }

    /// Queues a batch. `schedule`: the caller must schedule a drain (none is pending); `overflowed`: this batch began
    /// an overflow (for the count in STATS).
    mutating func publish(_ entries: [ChangeEntry]) -> (schedule: Bool, overflowed: Bool) {
        var overflowed = false
        if droppedThrough != nil || pending.count + entries.count > limit {
            // Fallen too far behind: what is pending goes too; the loop makes up for it (`take`'s `droppedThrough`).
            let last = entries.last?.seq ?? pending.last?.seq
            overflowed = droppedThrough == nil
            droppedThrough = max(droppedThrough ?? 0, last ?? 0)
            pending = []
        } else {
            pending += entries
        }
        defer { scheduled = true }
        return (!scheduled, overflowed)
    }

    /// Everything published since the last take, and the last change dropped meanwhile (nil: none).
    mutating func take() -> (entries: [ChangeEntry], droppedThrough: Int64?) {
        defer {
            pending = []
            droppedThrough = nil
            scheduled = false
        }
        return (pending, droppedThrough)
    }
}
