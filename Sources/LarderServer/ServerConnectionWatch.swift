import Dispatch
import LarderStore
import LarderWire
import LarderIO

/// The change feed's side effects on a connection: its `WatchStateMachine` decides, this performs, all on the
/// connection's loop (the log is read on the work pool).
extension ServerConnection {
    /// The answer to a WATCH or UNWATCH (`RequestPlan.watch`), on the shard's loop: they change this connection's
    /// subscriptions, so the answer is queued before any event of the subscription can be. `ruled`: for a connection
    /// held to the collections' rules, the WATCH as the rules narrowed it on the work pool (`Router.submitRuledWatch`),
    /// or their refusal.
    func answerWatch(_ frame: Frame, ruled: Result<Frame, LarderError>? = nil) -> Reply {
        let (reply, actions): (Reply, [WatchStateMachine.Action])
        if frame.opcode == .watch, let grant = machine.grant, let denied = grant.check(frame) {
            // Checked again: a WATCH held behind other requests runs after a reload that may have narrowed the token.
            (reply, actions) = (Reply(opcode: .watch, requestID: frame.requestID, error: denied), [])
        } else if let ruled {
            switch ruled {
            case .success(let narrowed):
                (reply, actions) = watches.watch(
                    narrowed, lastChangeSeq: context.router.store.lastChangeSeq, allowed: nil)
            case .failure(let error):
                (reply, actions) = (Reply(opcode: .watch, requestID: frame.requestID, error: error), [])
            }
        } else if frame.opcode == .watch {
            (reply, actions) = watches.watch(
                frame, lastChangeSeq: context.router.store.lastChangeSeq, allowed: machine.grant?.collections)
        } else {
            (reply, actions) = watches.unwatch(frame)
        }
        performWatch(actions)
        return reply
    }

    /// What counts against a subscription's buffer: the unsent output, less what a sender holds (on its way).
    private var watchOutput: WatchStateMachine.Output {
        .init(canPush: !closing && machine.canPush, bufferedBytes: machine.unsentBytes - bytesWithSender)
    }

    /// Committed changes, on the shard's loop (`Shard.drain`).
    func deliver(_ changes: PreparedChanges) {
        guard !closing else { return }
        performWatch(watches.deliver(changes, output: watchOutput))
    }

    /// The shard dropped changes this connection's live subscriptions were owed.
    func endLiveSubscriptionsWithGap() {
        guard !closing else { return }
        performWatch(watches.endLiveSubscriptionsWithGap(canPush: machine.canPush))
    }

    /// The token table was reloaded; on the shard's loop. A removed token ends the connection (UNAUTHENTICATED, and no
    /// event after it); a narrowed one ends the subscriptions that followed what it lost. Returns what happened, for
    /// the reload's log line.
    func tokensReloaded() -> TokenRecheck {
        guard !closing, machine.canPush else { return TokenRecheck() }
        performing { machine.tokensReloaded(now: shard.loop.now, into: &$0) }
        // Revoked: the connection is closing (`canPush` is false), so no event is queued after the error.
        guard machine.canPush else { return TokenRecheck(checked: 1, closed: 1) }
        let before = watches.subscriptions.count
        performWatch(watches.grantChanged(collections: machine.grant?.collections, canPush: machine.canPush))
        return TokenRecheck(checked: 1, subscriptionsEnded: before - watches.subscriptions.count)
    }

    /// Subscriptions replaying the log read their next page if the output has drained enough.
    func continueCatchUps() {
        guard !closing, !watches.subscriptions.isEmpty else { return }
        performWatch(watches.continueCatchUps(canPush: machine.canPush, unsentBytes: machine.unsentBytes))
    }

    /// The one place where the watch machine's actions become side effects. Pushed frames are queued in the
    /// connection's machine, whose own actions are performed at the end (after any room made mid-batch).
    func performWatch(_ actions: [WatchStateMachine.Action]) {
        var pending = actions
        var connectionActions: [ConnectionStateMachine.Action] = []
        var index = 0
        while index < pending.count {
            switch pending[index] {
            case .push(let subscription, let json):
                connectionActions += machine.push(opcode: .event, requestID: subscription, json: json)
            case .makeRoom:
                // Offer the socket what is queued before calling the buffer full.
                if watchOutput.bufferedBytes > watches.limits.maxWatchBufferBytes { writeNow(&connectionActions) }
                pending += watches.continueDelivery(output: watchOutput)
            case .readLog(let read):
                readLog(read)
            case .watching(let watching):
                machine.isWatching = watching
                shard.watchers[ObjectIdentifier(self)] = watching && !closing ? self : nil
            case .started:
                context.stats.watchStarted()
            case .ended(let count):
                context.stats.watchesEnded(count)
            case .delivered(let events, let gaps, let resyncs):
                context.stats.watchDelivered(events: events, gaps: gaps, resyncs: resyncs)
            case .info(let message):
                context.logger.info("conn \(id) \(message)")
            case .warning(let message):
                context.logger.warn("conn \(id) \(message)")
            }
            index += 1
        }
        perform(connectionActions)
    }

    private func readLog(_ read: WatchStateMachine.LogRead) {
        let store = context.router.store
        let shard = self.shard
        let wanted = read.subscription
        let started = context.router.pool.submit { [self] in
            let result: Result<LogPage, LarderError>
            do throws(LarderError) {
                let page = try store.changes(
                    after: wanted.lastSeq, collection: wanted.collection, limit: WatchStateMachine.LogRead.pageSize,
                    maxBytes: read.maxBytes)
                result = .success(LogPage(page, for: wanted))
            } catch {
                result = .failure(error)
            }
            shard.loop.async { [self] in
                guard !closing else { return }
                performWatch(
                    watches.logRead(wanted.id, result, publishedSeq: shard.publishedSeq, canPush: machine.canPush))
                continueCatchUps()
            }
        }
        // A full pool: the subscription tries again at the connection's next tick or flush.
        if !started { watches.logReadNotStarted(wanted.id) }
    }
}

/// What re-checking connections against a reloaded token table did, summed over the shards for the log.
struct TokenRecheck: Sendable {
    var checked = 0
    var closed = 0
    var subscriptionsEnded = 0

    static func + (a: TokenRecheck, b: TokenRecheck) -> TokenRecheck {
        TokenRecheck(
            checked: a.checked + b.checked, closed: a.closed + b.closed,
            subscriptionsEnded: a.subscriptionsEnded + b.subscriptionsEnded)
    }
}
