#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Synchronization
import LarderStore
import LarderSync
import LarderWire
import LarderIO

/// The change feed on a connection: WATCH and UNWATCH, live delivery and the catch-up from the log, all on the
/// connection's loop.
extension Connection {
    var limits: Limits { context.machineConfiguration.limits }

    /// WATCH and UNWATCH are answered here, on the shard's loop, because they change this connection's subscriptions:
    /// the answer is queued before any event of the subscription can be.
    func executeWatch(_ frame: Frame) {
        let started = DispatchTime.now().uptimeNanoseconds
        let reply = frame.opcode == .watch ? watch(frame) : unwatch(frame)
        let micros = (DispatchTime.now().uptimeNanoseconds &- started) / 1000
        context.stats.request(reply.opcode, reply.status, latencyMicros: micros)
        context.logger.slowRequest(connection: id, peer: peer, reply, micros: micros)
        if reply.status != .ok {
            context.logger.debug("conn \(id) request \(reply.requestID) \(reply.opcode.name) -> \(reply.status.name)")
        }
        perform(machine.requestCompleted(reply, now: shard.loop.now))
        continueCatchUps()
    }

    func watch(_ frame: Frame) -> Reply {
        do throws(LarderError) {
            guard frame.binary.isEmpty else { throw LarderError(.invalidArgument, "WATCH takes no binary part") }
            let request = try WatchRequest(json: frame.jsonObject())
            if let collection = request.collection { try SQLiteStore.validateCollection(collection) }
            guard subscriptions.count < limits.maxWatches else {
                throw LarderError(
                    .resourceExhausted, "this connection already holds \(limits.maxWatches) subscriptions; "
                        + "UNWATCH one or open another connection", details: ["limit": .int(Int64(limits.maxWatches))])
            }
            // Read before the subscription exists: every change after it is either published to this shard later
            // (and pushed live) or, with `since`, read from the log.
            let last = context.router.store.lastChangeSeq
            lastSubscriptionID = lastSubscriptionID == UInt32.max ? 1 : lastSubscriptionID + 1
            let subscriptionID = lastSubscriptionID
            subscriptions[subscriptionID] = Subscription(
                id: subscriptionID, collection: request.collection, filter: request.filter, idsOnly: request.idsOnly,
                lastSeq: request.since ?? last, state: request.since == nil ? .live : .catchingUp,
                checkResync: request.since != nil, allowed: machine.grant?.collections)
            watchingChanged()
            context.stats.watchStarted()
            return Reply(
                opcode: .watch, requestID: frame.requestID,
                json: WatchResponse(subscription: subscriptionID, seq: last).json.bytes)
        } catch {
            return Reply(opcode: .watch, requestID: frame.requestID, error: error)
        }
    }

    func unwatch(_ frame: Frame) -> Reply {
        do throws(LarderError) {
            guard frame.binary.isEmpty else { throw LarderError(.invalidArgument, "UNWATCH takes no binary part") }
            let request = try UnwatchRequest(json: frame.jsonObject())
            guard subscriptions.removeValue(forKey: request.subscription) != nil else {
                throw LarderError(
                    .notFound, "no subscription \(request.subscription) on this connection", field: "subscription")
            }
            watchingChanged()
            context.stats.watchesEnded(1)
            return Reply(
                opcode: .unwatch, requestID: frame.requestID,
                json: UnwatchResponse(subscription: request.subscription).json.bytes)
        } catch {
            return Reply(opcode: .unwatch, requestID: frame.requestID, error: error)
        }
    }

    /// Keeps the shard's list of watching connections and the machine's idle rule in step with `subscriptions`.
    func watchingChanged() {
        let watching = !subscriptions.isEmpty
        machine.isWatching = watching
        shard.watchers[ObjectIdentifier(self)] = watching && !closing ? self : nil
    }

    /// Committed changes, on the shard's loop: pushed to each live subscription they concern, in commit order. A
    /// subscription whose connection holds more than `maxWatchBufferBytes` unsent when an event is due gets a gap
    /// event and ends; the writer and the other connections never wait for it.
    func deliver(_ changes: PreparedChanges) {
        guard !closing, machine.canPush else { return }
        let bound = limits.maxWatchBufferBytes
        var actions: [ConnectionStateMachine.Action] = []
        var sent = 0
        var gaps = 0
        subscriptions: for subscriptionID in subscriptions.keys.sorted() {
            guard var subscription = subscriptions[subscriptionID], subscription.state == .live else { continue }
            var overflowed = false
            for index in changes.entries.indices where changes.entries[index].seq > subscription.lastSeq {
                let match = changes.match(index, subscription)
                if match != .no {
                    // Offer the socket what is queued before calling the buffer full (not while a sender writes:
                    // what it holds is on its way and does not count).
                    if machine.unsentBytes - bytesWithSender > bound { writeNow(&actions) }
                    guard machine.canPush else { break subscriptions }
                    if machine.unsentBytes - bytesWithSender > bound {
                        overflowed = true
                        break
                    }
                    let json = changes.event(
                        index, for: subscriptionID, idsOnly: subscription.idsOnly, matches: match == .yes)
                    actions += machine.push(opcode: .event, requestID: subscriptionID, json: json)
                    sent += 1
                }
                subscription.lastSeq = changes.entries[index].seq
            }
            if overflowed {
                subscriptions[subscriptionID] = nil
                let json = EventEncoder.gap(subscription: subscriptionID, seq: subscription.lastSeq)
                actions += machine.push(opcode: .event, requestID: subscriptionID, json: json)
                gaps += 1
                context.logger.info("conn \(id) subscription \(subscriptionID) fell behind its buffer of \(bound) bytes: gap")
            } else {
                subscriptions[subscriptionID] = subscription
            }
        }
        if gaps > 0 {
            watchingChanged()
            context.stats.watchesEnded(gaps)
        }
        context.stats.watchDelivered(events: sent, gaps: gaps, resyncs: 0)
        perform(actions)
    }

    /// Ends every live subscription with a gap at the last change it handled (its shard dropped changes it was owed:
    /// `IOShard.publish`). Subscriptions replaying the log go on: they read it up to what the shard has seen.
    func endLiveSubscriptionsWithGap() {
        guard !closing else { return }
        var actions: [ConnectionStateMachine.Action] = []
        var gaps = 0
        for subscriptionID in subscriptions.keys.sorted() {
            guard let subscription = subscriptions[subscriptionID], subscription.state == .live else { continue }
            subscriptions[subscriptionID] = nil
            gaps += 1
            guard machine.canPush else { continue }
            actions += machine.push(
                opcode: .event, requestID: subscriptionID,
                json: EventEncoder.gap(subscription: subscriptionID, seq: subscription.lastSeq))
        }
        guard gaps > 0 else { return }
        context.logger.warn("conn \(id): the server fell behind its change feed; \(gaps) subscriptions ended with a gap")
        watchingChanged()
        context.stats.watchesEnded(gaps)
        context.stats.watchDelivered(events: 0, gaps: gaps, resyncs: 0)
        perform(actions)
    }

    /// Starts a log read for each subscription replaying it, while the output is below half the watch buffer (the
    /// replay is paced by the subscriber's reading, so it never overflows).
    func continueCatchUps() {
        for id in subscriptions.keys.sorted() where subscriptions[id]?.state == .catchingUp {
            guard !closing, machine.canPush, machine.unsentBytes <= limits.maxWatchBufferBytes / 2 else { return }
            readLog(id)
        }
    }

    func readLog(_ subscriptionID: UInt32) {
        guard var subscription = subscriptions[subscriptionID] else { return }
        subscription.state = .reading
        subscriptions[subscriptionID] = subscription
        let store = context.router.store
        let maxBytes = max(16 << 10, limits.maxWatchBufferBytes / 4)
        let shard = self.shard
        let wanted = subscription
        context.router.workQueue.async { [self] in
            let result: Result<LogPage, LarderError>
            do throws(LarderError) {
                let page = try store.changes(
                    after: wanted.lastSeq, collection: wanted.collection, limit: Connection.catchUpPageSize,
                    maxBytes: maxBytes)
                result = .success(LogPage(page, for: wanted))
            } catch {
                result = .failure(error)
            }
            shard.loop.async { self.logRead(subscriptionID, result) }
        }
    }

    /// A page of the log arrived for a subscription catching up: check `since` against the retention (first page),
    /// push the page's events, and go live once the log has been read past everything published to this shard.
    func logRead(_ subscriptionID: UInt32, _ result: Result<LogPage, LarderError>) {
        guard !closing, machine.canPush, var subscription = subscriptions[subscriptionID], subscription.state == .reading
        else { return }
        var actions: [ConnectionStateMachine.Action] = []
        switch result {
        case .failure(let error):
            context.logger.warn("conn \(id) subscription \(subscriptionID): the change log failed to read: \(error)")
            subscriptions[subscriptionID] = nil
            watchingChanged()
            context.stats.watchesEnded(1)
            context.stats.watchDelivered(events: 0, gaps: 1, resyncs: 0)
            actions += machine.push(
                opcode: .event, requestID: subscriptionID,
                json: EventEncoder.gap(subscription: subscriptionID, seq: subscription.lastSeq))
        case .success(let page):
            var exhausted = !page.more
            var events = page.events
            var resyncs = 0
            if subscription.checkResync {
                subscription.checkResync = false
                if subscription.lastSeq < page.prunedThrough || subscription.lastSeq > page.lastSeq {
                    // Never a silent gap: the subscriber must reload, then follows the changes after `lastSeq`.
                    actions += machine.push(
                        opcode: .event, requestID: subscriptionID,
                        json: EventEncoder.resync(
                            subscription: subscriptionID, seq: page.lastSeq, oldestSeq: page.prunedThrough + 1))
                    subscription.lastSeq = page.lastSeq
                    events = []
                    exhausted = true
                    resyncs = 1
                }
            }
            if resyncs == 0 {
                subscription.lastSeq = page.more ? page.lastEntrySeq : max(subscription.lastSeq, page.lastSeq)
            }
            for json in events { actions += machine.push(opcode: .event, requestID: subscriptionID, json: json) }
            subscription.state = exhausted && shard.publishedSeq <= subscription.lastSeq ? .live : .catchingUp
            subscriptions[subscriptionID] = subscription
            context.stats.watchDelivered(events: events.count, gaps: 0, resyncs: resyncs)
        }
        perform(actions)
        continueCatchUps()
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
