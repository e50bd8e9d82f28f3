import LarderStore
import LarderWire

/// The change feed of one connection without sockets, locks or a clock: WATCH and UNWATCH, live delivery bounded by
/// the subscription buffer, the catch-up from the log and its resync check. Events in, actions out (STYLE.md #6);
/// the connection's shell (ConnectionWatch.swift) performs the actions on its event loop.
struct WatchStateMachine {
    enum Action {
        /// Queue an EVENT frame for `subscription` (a push).
        case push(subscription: UInt32, json: [UInt8])
        /// Read the next page of the log for a subscription off the loop; report it with `logRead` (or
        /// `logReadNotStarted` when it could not be started).
        case readLog(LogRead)
        /// The output is over the subscription buffer: offer the socket what is queued, then `continueDelivery`.
        case makeRoom
        /// Whether the connection holds any subscription changed (a watching connection is not idle).
        case watching(Bool)
        /// For STATS: a subscription started; `count` ended; events, gaps and resyncs pushed.
        case started
        case ended(Int)
        case delivered(events: Int, gaps: Int, resyncs: Int)
        /// For the server's log.
        case info(String)
        case warning(String)
    }

    /// What the catch-up asks the log for.
    struct LogRead {
        var subscription: Subscription
        var maxBytes: Int
        static let pageSize = 256
    }

    /// The connection's output, as the shell sees it when an event is due.
    struct Output {
        /// After HELLO and before closing.
        var canPush: Bool
        /// Unsent bytes that count against the subscription buffer (what a sender thread holds is on its way).
        var bufferedBytes: Int
    }

    let limits: Limits
    /// The subscriptions, by id.
    private(set) var subscriptions: [UInt32: Subscription] = [:]
    private var lastSubscriptionID: UInt32 = 0
    private(set) var isWatching = false
    /// A batch being pushed while the shell makes room (`makeRoom` .. `continueDelivery`).
    private var delivery: Delivery?

    init(limits: Limits) { self.limits = limits }

    // MARK: WATCH and UNWATCH

    /// WATCH: `lastChangeSeq` is the store's newest change, read before the subscription exists, so every later
    /// change is either published to the shard afterwards (and pushed live) or, with `since`, read from the log.
    /// `allowed` is the collections the connection's token is limited to (nil: every one).
    mutating func watch(_ frame: Frame, lastChangeSeq: Int64, allowed: Set<String>?) -> (Reply, [Action]) {
        do throws(LarderError) {
            guard frame.binary.isEmpty else { throw LarderError(.invalidArgument, "WATCH takes no binary part") }
            let request = try WatchRequest(json: frame.jsonObject())
            if let collection = request.collection { try CollectionName.validate(collection) }
            guard subscriptions.count < limits.maxWatches else {
                throw LarderError(
                    .resourceExhausted, "this connection already holds \(limits.maxWatches) subscriptions; "
                        + "UNWATCH one or open another connection", details: ["limit": .int(Int64(limits.maxWatches))])
            }
            lastSubscriptionID = lastSubscriptionID == UInt32.max ? 1 : lastSubscriptionID + 1
            let id = lastSubscriptionID
            subscriptions[id] = Subscription(
                id: id, collection: request.collection, filter: request.filter, idsOnly: request.idsOnly,
                lastSeq: request.since ?? lastChangeSeq, state: request.since == nil ? .live : .catchingUp,
                checkResync: request.since != nil, allowed: allowed)
            var actions: [Action] = []
            watchingChanged(&actions)
            actions.append(.started)
            let json = WatchResponse(subscription: id, seq: lastChangeSeq).json.bytes
            return (Reply(opcode: .watch, requestID: frame.requestID, json: json), actions)
        } catch {
            return (Reply(opcode: .watch, requestID: frame.requestID, error: error), [])
        }
    }

    mutating func unwatch(_ frame: Frame) -> (Reply, [Action]) {
        do throws(LarderError) {
            guard frame.binary.isEmpty else { throw LarderError(.invalidArgument, "UNWATCH takes no binary part") }
            let request = try UnwatchRequest(json: frame.jsonObject())
            guard subscriptions.removeValue(forKey: request.subscription) != nil else {
                throw LarderError(
                    .notFound, "no subscription \(request.subscription) on this connection", field: "subscription")
            }
            var actions: [Action] = []
            watchingChanged(&actions)
            actions.append(.ended(1))
            let json = UnwatchResponse(subscription: request.subscription).json.bytes
            return (Reply(opcode: .unwatch, requestID: frame.requestID, json: json), actions)
        } catch {
            return (Reply(opcode: .unwatch, requestID: frame.requestID, error: error), [])
        }
    }

    /// The connection closed: every subscription ends.
    mutating func closed() -> [Action] {
        delivery = nil
        guard !subscriptions.isEmpty else { return [] }
        var actions: [Action] = [.ended(subscriptions.count)]
        subscriptions.removeAll()
        watchingChanged(&actions)
        return actions
    }

    // MARK: Live delivery

    /// Committed changes, in commit order: pushed to each live subscription they concern. A subscription whose
    /// connection holds more than `maxWatchBufferBytes` unsent when an event is due (after the shell was asked to make
    /// room) gets a gap event and ends; the writer and the other connections never wait for it.
    mutating func deliver(_ changes: PreparedChanges, output: Output) -> [Action] {
        guard output.canPush else { return [] }
        delivery = Delivery(
            changes: changes, ids: subscriptions.keys.sorted(),
            room: limits.maxWatchBufferBytes - output.bufferedBytes)
        return runDelivery()
    }

    /// The shell made what room it could after `makeRoom`: the batch goes on against the output as it is now.
    mutating func continueDelivery(output: Output) -> [Action] {
        guard var pending = delivery else { return [] }
        guard output.canPush else {
            // The connection is closing: nothing more is pushed (its subscriptions end as it closes).
            delivery = nil
            return pending.counts()
        }
        pending.room = limits.maxWatchBufferBytes - output.bufferedBytes
        pending.roomChecked = true
        delivery = pending
        return runDelivery()
    }

    private struct Delivery {
        let changes: PreparedChanges
        let ids: [UInt32]
        /// Bytes the buffer may still take, as estimated: every pushed event is counted at its uncompressed size, so
        /// the estimate never exceeds the real room.
        var room: Int
        /// `room` was measured since the last push (after `makeRoom`), so a negative value is an overflow.
        var roomChecked = false
        var next = 0
        var current: Subscription?
        var entry = 0
        var sent = 0
        var gaps = 0

        func counts() -> [Action] {
            sent + gaps > 0 ? [.delivered(events: sent, gaps: gaps, resyncs: 0)] : []
        }
    }

    private mutating func runDelivery() -> [Action] {
        guard var d = delivery else { return [] }
        var actions: [Action] = []
        let entries = d.changes.entries
        while d.next < d.ids.count {
            let id = d.ids[d.next]
            if d.current == nil {
                guard let subscription = subscriptions[id], subscription.state == .live else {
                    d.next += 1
                    continue
                }
                d.current = subscription
                d.entry = 0
            }
            guard var subscription = d.current else { break }
            var overflowed = false
            while d.entry < entries.count {
                let index = d.entry
                if entries[index].seq > subscription.lastSeq {
                    let match = d.changes.match(index, subscription)
                    if match != .no {
                        if d.room < 0 {
                            guard d.roomChecked else {
                                d.current = subscription
                                delivery = d
                                actions.append(.makeRoom)
                                return actions
                            }
                            overflowed = true
                            break
                        }
                        let json = d.changes.event(index, for: id, idsOnly: subscription.idsOnly, matches: match == .yes)
                        actions.append(.push(subscription: id, json: json))
                        d.room -= Frame.prefixSize + json.count
                        d.roomChecked = false
                        d.sent += 1
                    }
                    subscription.lastSeq = entries[index].seq
                }
                d.entry += 1
            }
            if overflowed {
                subscriptions[id] = nil
                actions.append(.push(subscription: id, json: EventEncoder.gap(subscription: id, seq: subscription.lastSeq)))
                d.gaps += 1
                actions.append(
                    .info("subscription \(id) fell behind its buffer of \(limits.maxWatchBufferBytes) bytes: gap"))
            } else {
                subscriptions[id] = subscription
            }
            d.current = nil
            d.next += 1
        }
        delivery = nil
        if d.gaps > 0 {
            watchingChanged(&actions)
            actions.append(.ended(d.gaps))
        }
        return actions + d.counts()
    }

    /// The shard dropped changes its live subscriptions were owed (`IOShard.publish`): each ends with a gap at the
    /// last change it handled. Subscriptions replaying the log go on: they read it up to what the shard has seen.
    mutating func endLiveSubscriptionsWithGap(canPush: Bool) -> [Action] {
        var actions: [Action] = []
        var gaps = 0
        for id in subscriptions.keys.sorted() {
            guard let subscription = subscriptions[id], subscription.state == .live else { continue }
            subscriptions[id] = nil
            gaps += 1
            guard canPush else { continue }
            actions.append(.push(subscription: id, json: EventEncoder.gap(subscription: id, seq: subscription.lastSeq)))
        }
        guard gaps > 0 else { return [] }
        actions.append(.warning("the server fell behind its change feed; \(gaps) subscriptions ended with a gap"))
        watchingChanged(&actions)
        actions += [.ended(gaps), .delivered(events: 0, gaps: gaps, resyncs: 0)]
        return actions
    }

    // MARK: Rights

    /// The connection's token now reaches only `collections` (nil: every one), after a reload of the token file. A
    /// subscription that followed anything outside them ends with a gap carrying PERMISSION_DENIED at the last change
    /// it handled: one on a collection the token lost, and one on every collection whose token lost any collection it
    /// was seeing. The others go on untouched; a widened token widens no subscription (a new WATCH sees the new set).
    mutating func grantChanged(collections: Set<String>?, canPush: Bool) -> [Action] {
        guard let collections else { return [] }
        var actions: [Action] = []
        var ended: [UInt32] = []
        for id in subscriptions.keys.sorted() {
            guard let subscription = subscriptions[id] else { continue }
            let kept: Bool
            if let collection = subscription.collection {
                kept = collections.contains(collection)
            } else {
                kept = subscription.allowed?.isSubset(of: collections) ?? false
            }
            guard !kept else { continue }
            subscriptions[id] = nil
            ended.append(id)
            guard canPush else { continue }
            let reason = Self.revokedReason(subscription.collection, collections)
            actions.append(
                .push(
                    subscription: id,
                    json: EventEncoder.gap(subscription: id, seq: subscription.lastSeq, ending: reason)))
        }
        guard !ended.isEmpty else { return [] }
        let list = ended.map(String.init).joined(separator: ", ")
        actions.append(.info("subscriptions \(list) ended: the reloaded token file narrowed the token's collections"))
        watchingChanged(&actions)
        actions += [.ended(ended.count), .delivered(events: 0, gaps: ended.count, resyncs: 0)]
        return actions
    }

    /// Why a subscription on `collection` (nil: every collection) ended when its token was narrowed to `collections`.
    static func revokedReason(_ collection: String?, _ collections: Set<String>) -> LarderError {
        let what = collection ?? "every collection"
        return LarderError(
            .permissionDenied,
            "this token may no longer watch \(what): it is now limited to \(Grant.list(collections)); WATCH again "
                + "within them", details: ["opcode": .string(Opcode.watch.name)])
    }

    // MARK: Catch-up from the log

    /// Starts a log read for each subscription replaying it, while the output is below half the watch buffer (the
    /// replay is paced by the subscriber's reading, so it never overflows). `unsentBytes` counts everything unsent.
    mutating func continueCatchUps(canPush: Bool, unsentBytes: Int) -> [Action] {
        var actions: [Action] = []
        for id in subscriptions.keys.sorted() where subscriptions[id]?.state == .catchingUp {
            guard canPush, unsentBytes <= limits.maxWatchBufferBytes / 2 else { break }
            subscriptions[id]?.state = .reading
            guard let subscription = subscriptions[id] else { continue }
            actions.append(
                .readLog(LogRead(subscription: subscription, maxBytes: max(16 << 10, limits.maxWatchBufferBytes / 4))))
        }
        return actions
    }

    /// The read could not be started (the work pool was full): the subscription waits for the next try.
    mutating func logReadNotStarted(_ id: UInt32) {
        guard subscriptions[id]?.state == .reading else { return }
        subscriptions[id]?.state = .catchingUp
    }

    /// A page of the log arrived for a subscription catching up: `since` is checked against the retention (first
    /// page), the page's events are pushed, and the subscription goes live once the log has been read past
    /// `publishedSeq`, everything published to the shard.
    mutating func logRead(
        _ id: UInt32, _ result: Result<LogPage, LarderError>, publishedSeq: Int64, canPush: Bool
    ) -> [Action] {
        guard canPush, var subscription = subscriptions[id], subscription.state == .reading else { return [] }
        switch result {
        case .failure(let error):
            subscriptions[id] = nil
            var actions: [Action] = [.warning("subscription \(id): the change log failed to read: \(error)")]
            watchingChanged(&actions)
            actions += [
                .ended(1), .delivered(events: 0, gaps: 1, resyncs: 0),
                .push(subscription: id, json: EventEncoder.gap(subscription: id, seq: subscription.lastSeq)),
            ]
            return actions
        case .success(let page):
            var actions: [Action] = []
            var exhausted = !page.more
            var events = page.events
            var resyncs = 0
            if subscription.checkResync {
                subscription.checkResync = false
                if subscription.lastSeq < page.prunedThrough || subscription.lastSeq > page.lastSeq {
                    // Never a silent gap: the subscriber must reload, then follows the changes after `lastSeq`.
                    let json = EventEncoder.resync(subscription: id, seq: page.lastSeq, oldestSeq: page.prunedThrough + 1)
                    actions.append(.push(subscription: id, json: json))
                    subscription.lastSeq = page.lastSeq
                    events = []
                    exhausted = true
                    resyncs = 1
                }
            }
            if resyncs == 0 {
                subscription.lastSeq = page.more ? page.lastEntrySeq : max(subscription.lastSeq, page.lastSeq)
            }
            for json in events { actions.append(.push(subscription: id, json: json)) }
            subscription.state = exhausted && publishedSeq <= subscription.lastSeq ? .live : .catchingUp
            subscriptions[id] = subscription
            if events.count + resyncs > 0 { actions.append(.delivered(events: events.count, gaps: 0, resyncs: resyncs)) }
            return actions
        }
    }

    private mutating func watchingChanged(_ actions: inout [Action]) {
        guard isWatching != !subscriptions.isEmpty else { return }
        isWatching.toggle()
        actions.append(.watching(isWatching))
    }
}
