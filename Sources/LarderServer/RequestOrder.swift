import LarderWire

/// One connection's order (Protocol.md section 2.3): its requests take effect as if run one at a time in the order
/// they arrived, while consecutive reads, or consecutive writes, still run side by side.
///
/// The requests handed out and not yet answered are all reads or all writes. A request of the same kind as them is
/// handed out at once (unless others wait before it); one of the other kind waits until they are all answered, and
/// then goes out with the run of same-kind requests queued behind it. Writes handed out together reach the store's
/// writer in arrival order (the shell submits them through one lane), which commits them in that order. So a read sees
/// every write sent before it and none sent after it, and a slow SEARCH holds back a later write but never a later GET.
struct RequestOrder {
    /// Whether the requests handed out and not yet answered are writes, and how many there are.
    private(set) var runningWrites = false
    private(set) var running = 0
    /// Requests waiting for the other kind's run to end, in arrival order.
    private var held: [Frame] = []
    private var heldHead = 0

    /// Requests waiting.
    var heldCount: Int { held.count - heldHead }

    /// Whether `frame` may run now; if not, it is held until the run before it ends (`answered`).
    mutating func admit(_ frame: Frame) -> Bool {
        let write = frame.opcode.isWrite
        guard heldCount == 0, running == 0 || runningWrites == write else {
            held.append(frame)
            return false
        }
        runningWrites = write
        running += 1
        return true
    }

    /// A request handed out was answered; returns the requests that may run now, in arrival order.
    mutating func answered() -> [Frame] {
        guard running > 0 else { return [] }
        running -= 1
        guard running == 0, heldCount > 0 else { return [] }
        runningWrites = held[heldHead].opcode.isWrite
        var released: [Frame] = []
        while heldHead < held.count, held[heldHead].opcode.isWrite == runningWrites {
            released.append(held[heldHead])
            heldHead += 1
        }
        running = released.count
        if heldHead == held.count {
            held.removeAll(keepingCapacity: held.capacity <= 256)
            heldHead = 0
        }
        return released
    }
}

/// A connection's writes handed to its lane of the work pool and not yet answered: the rule that keeps its writes in
/// the order sent past the two ways to the store's writer. While one is on the lane, later writes take the lane too
/// (`RequestPlan.writeLane`), so that they reach the writer after it; with none there, a small write may go to the
/// writer straight from the event loop (`RequestPlan.writer`) without overtaking anything.
struct LaneWrites {
    private(set) var count = 0

    /// Whether a write is on the lane: the next write must follow it there.
    var isBusy: Bool { count > 0 }

    /// A write was handed to the lane.
    mutating func handedOut() { count += 1 }

    /// A write handed to the lane was answered.
    mutating func answered() { count -= 1 }
}

/// The requests a connection admitted and has not answered yet: how many, what they hold, and in what order they
/// may run.
struct InFlightRequests {
    enum Admission {
        /// Hand it out now.
        case run
        /// Held behind the requests before it (`answered` releases it).
        case held
        /// Its id is already in flight: refused, and nothing was counted.
        case duplicateID
    }

    private(set) var count = 0
    /// What they hold (JSON inflated plus binary), in total.
    private(set) var bytes = 0
    /// The size of each by request id: unique among them, since a reused id is refused.
    private var sizes = RequestSizes()
    private var order = RequestOrder()

    var heldCount: Int { order.heldCount }

    mutating func admit(_ frame: Frame) -> Admission {
        let size = frame.json.count + frame.binary.count
        guard sizes.insert(frame.requestID, size) else { return .duplicateID }
        count += 1
        bytes += size
        return order.admit(frame) ? .run : .held
    }

    /// The request `requestID` was answered; returns the requests that may run now, in arrival order.
    mutating func answered(_ requestID: UInt32) -> [Frame] {
        count -= 1
        if let size = sizes.remove(requestID) { bytes -= size }
        return order.answered()
    }
}

/// Request ids and sizes, each id at most once. Up to `listLimit` of them are a list searched in order: a
/// connection has a few requests in flight, and comparing a few ids costs less than hashing one (a dictionary was
/// a twentieth of a pipelined GET). Past the limit they move to a dictionary, so a connection allowed thousands in
/// flight is not searched linearly.
struct RequestSizes {
    static let listLimit = 32
    private var list: [(id: UInt32, size: Int)] = []
    private var table: [UInt32: Int]?

    /// False (and nothing changes) when `id` is already present.
    mutating func insert(_ id: UInt32, _ size: Int) -> Bool {
        if table != nil {
            guard table![id] == nil else { return false }
            table![id] = size
            return true
        }
        guard !list.contains(where: { $0.id == id }) else { return false }
        if list.count < RequestSizes.listLimit {
            list.append((id, size))
        } else {
            var moved = [UInt32: Int](minimumCapacity: list.count * 2)
            for entry in list { moved[entry.id] = entry.size }
            moved[id] = size
            table = moved
            list.removeAll()
        }
        return true
    }

    /// Removes `id`; its size, or nil when absent.
    mutating func remove(_ id: UInt32) -> Int? {
        if table != nil {
            let size = table!.removeValue(forKey: id)
            if table!.isEmpty { table = nil }
            return size
        }
        // Answers come mostly in the order asked: the oldest entry, first in the list, is the likeliest.
        guard let index = list.firstIndex(where: { $0.id == id }) else { return nil }
        return list.remove(at: index).size
    }
}
