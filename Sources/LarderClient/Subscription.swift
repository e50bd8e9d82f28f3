import Foundation
import LarderSync
import LarderWire

/// A live change feed: the events of one `WATCH`, as an `AsyncSequence`, resumed by itself when its connection drops.
///
/// ```swift
/// let feed = try await client.watch(collection: "todos", filter: .compare(try FieldPath("isFinish"), .eq, false))
/// for try await event in feed {
///     switch event.kind {
///     case .create, .replace, .patch: event.matches ? show(event.record!) : hide(event.id!)
///     case .delete: hide(event.id!)
///     case .resync: reloadEverything()      // the server's change log no longer reaches back to `since`
///     default: break                        // kinds a later server may add
///     }
/// }
/// ```
///
/// Events come in commit order, each once. When the connection breaks (the server restarts, the network goes) or the
/// consumer falls behind (a gap), the subscription WATCHes again with `since: lastSeq`, on a new connection (at the
/// next of the client's endpoints when it has several), trying again after 0.1 s, then twice as long each time up to
/// 5 s, until it is back: the loop above sees the events it missed, in order, none twice, as if nothing had happened;
/// or, when the server's change log no longer holds them, a `resync` event first. `reconnects` counts these
/// resumptions. With `resume: false` the sequence throws instead: `UNAVAILABLE` for the broken connection, or a gap
/// (`RESOURCE_EXHAUSTED`, `details["reason"] == "gap"`, `details["seq"]` the last change handled); resume with
/// `client.watch(..., since: subscription.lastSeq)`, which replays exactly what was missed.
///
/// Either way the sequence throws what resuming cannot mend: a server that refuses the WATCH (`PERMISSION_DENIED`
/// when the token lost the collection, `UNAUTHENTICATED`, `INVALID_ARGUMENT`). `cancel()` ends it (UNWATCH) and the
/// sequence finishes; so does cancelling the task that iterates it, also while it waits to resume.
public final class LarderSubscription: AsyncSequence, Sendable {
    /// The events: `ChangeEvent`.
    public typealias Element = ChangeEvent
    /// What the sequence throws: `LarderError`.
    public typealias Failure = LarderError

    /// What WATCH asks for, to ask again when resuming.
    struct Request: Sendable {
        var collection: String?
        var filter: Filter?
        var idsOnly: Bool
        var bufferLimit: Int
    }

    /// One WATCH: where its events arrive, and their stream.
    struct Feed: Sendable {
        let id: UInt32
        let sink: EventSink
        let stream: AsyncThrowingStream<ChangeEvent, any Error>
    }

    private struct State {
        var feed: Feed
        var cancelled = false
        var reconnects = 0
        /// Woken by `cancel()`: a wait before the next try to resume ends at once.
        var wake: AsyncStream<Void>.Continuation?
    }

    /// The last committed change when the subscription started (from the first WATCH answer).
    public let startSeq: Int64
    private let client: LarderClient?
    private let request: Request
    private let state: Locked<State>

    init(startSeq: Int64, feed: Feed, client: LarderClient?, request: Request) {
        self.startSeq = startSeq
        self.client = client
        self.request = request
        state = Locked(State(feed: feed))
    }

    deinit { cancel() }

    /// The subscription's id on its current connection (the request id of its event frames); a resumed subscription
    /// has a new one.
    public var id: UInt32 { state.withLock { $0.feed.id } }

    /// The sequence number of the last event handed out (`since` for a new subscription after a gap or a broken
    /// connection, and where a resumed one goes on from); before any event, the `since` the subscription was made
    /// with, or `startSeq`.
    public var lastSeq: Int64 { state.withLock { $0.feed.sink.lastSeq } }

    /// How many times the subscription WATCHed again by itself, after a broken connection or a gap.
    public var reconnects: Int { state.withLock { $0.reconnects } }

    /// Ends the subscription: UNWATCH is sent and the sequence finishes after the events already received.
    public func cancel() {
        let (sink, wake) = state.withLock { state in
            state.cancelled = true
            defer { state.wake = nil }
            return (state.feed.sink, state.wake)
        }
        sink.cancel()
        wake?.finish()
    }

    /// An iterator over the events from the last one handed out on; iterate with one at a time.
    public func makeAsyncIterator() -> Iterator {
        let feed = state.withLock { $0.feed }
        return Iterator(subscription: self, feed: feed, inner: feed.stream.makeAsyncIterator())
    }

    /// Reads the subscription's events.
    public struct Iterator: AsyncIteratorProtocol {
        /// The events: `ChangeEvent`.
        public typealias Element = ChangeEvent
        /// What the iterator throws: `LarderError`.
        public typealias Failure = LarderError

        let subscription: LarderSubscription
        var feed: Feed
        var inner: AsyncThrowingStream<ChangeEvent, any Error>.Iterator

        /// The next event; nil once the subscription was cancelled.
        ///
        /// - Throws: what `next(isolation:)` throws.
        public mutating func next() async throws(LarderError) -> ChangeEvent? {
            try await next(isolation: nil)
        }

        /// The next event, awaited on `actor`'s executor.
        ///
        /// - Throws: what resuming cannot mend: a refused WATCH (`PERMISSION_DENIED` when the token lost the
        ///   collection, `UNAUTHENTICATED`, `INVALID_ARGUMENT`); with `resume: false`, `UNAVAILABLE` for a broken
        ///   connection and `RESOURCE_EXHAUSTED` for a gap.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(LarderError) -> ChangeEvent? {
            while true {
                let event: ChangeEvent?
                do {
                    event = try await inner.next(isolation: actor)
                } catch {
                    let failure =
                        error as? LarderError ?? LarderError(.internal, "the change feed failed: \(error)")
                    // Every event before the failure was handed out: the new WATCH starts after the last of them.
                    guard let resumed = try await subscription.resume(after: failure, from: feed.sink.lastSeq) else {
                        return nil
                    }
                    feed = resumed
                    inner = resumed.stream.makeAsyncIterator()
                    continue
                }
                if let event, !event.kind.isControl || event.kind == .resync { feed.sink.handed(event) }
                return event
            }
        }
    }

    /// The first pause before WATCHing again after a failed try; it doubles after each, up to `maxResumeDelay`.
    static let firstResumeDelay: Duration = .milliseconds(100)
    static let maxResumeDelay: Duration = .seconds(5)

    /// Whether a subscription that ended with `error` can go on with a new WATCH: the connection broke or timed
    /// out, or the consumer fell behind. A gap that carries its own reason (rights taken away) cannot.
    static func isResumable(_ error: LarderError) -> Bool {
        switch error.status {
        case .unavailable, .deadlineExceeded: true
        case .resourceExhausted: error.details["reason"] == "gap"
        default: false
        }
    }

    /// After the current feed failed with `error`: a new feed from `seq` on, WATCHed again until it works (waiting
    /// longer each time), or nil when the subscription was cancelled meanwhile; `error` itself when it cannot be
    /// resumed (or resuming is off), and the server's refusal of a new WATCH.
    func resume(after error: LarderError, from seq: Int64) async throws(LarderError) -> Feed? {
        guard let client, Self.isResumable(error) else { throw error }
        var delay = Self.firstResumeDelay
        while true {
            let (wait, wake) = AsyncStream.makeStream(of: Void.self)
            let cancelled = state.withLock { state in
                state.wake = wake
                return state.cancelled
            }
            if cancelled || Task.isCancelled { return nil }
            do throws(LarderError) {
                let feed = try await client.subscribe(request, since: seq).feed
                let adopted = state.withLock { state in
                    guard !state.cancelled else { return false }
                    state.feed = feed
                    state.reconnects += 1
                    state.wake = nil
                    return true
                }
                guard adopted else {
                    feed.sink.cancel()
                    return nil
                }
                return feed
            } catch where Self.isResumable(error) {
                // Still away: wait, unless cancelled meanwhile (by `cancel()`, or the consumer's task).
                guard await Self.pause(delay, unless: wait) else { return nil }
                delay = Swift.min(delay * 2, Self.maxResumeDelay)
            }
        }
    }

    /// Waits `delay`; false when `wake` finished first or the task was cancelled.
    private static func pause(_ delay: Duration, unless wake: AsyncStream<Void>) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { (try? await Task.sleep(for: delay)) != nil }
            group.addTask {
                for await _ in wake {}
                return false
            }
            let slept = await group.next() ?? false
            group.cancelAll()
            return slept && !Task.isCancelled
        }
    }
}

/// Where a connection's reader thread delivers one subscription's events: a bounded stream, plus the state that
/// decides whether cancelling must send UNWATCH.
final class EventSink: @unchecked Sendable {
    private let lock = Lock()
    private let continuation: AsyncThrowingStream<ChangeEvent, any Error>.Continuation
    private weak var connection: Connection?
    private var id: UInt32?
    private var ended = false
    /// Without `since`, the subscription starts at the WATCH answer's `seq`.
    private let fromNow: Bool
    private var last: Int64
    /// The newest event given to the stream (its `seq` names the resume point when the consumer falls behind).
    private var lastYielded: Int64

    init(
        connection: Connection, since: Int64?, continuation: AsyncThrowingStream<ChangeEvent, any Error>.Continuation
    ) {
        self.connection = connection
        self.continuation = continuation
        fromNow = since == nil
        last = since ?? 0
        lastYielded = last
    }

    var lastSeq: Int64 { lock.withLock { last } }

    func handed(_ event: ChangeEvent) { lock.withLock { last = max(last, event.seq) } }

    /// The WATCH answer arrived (on the reader thread, before any event of the subscription is read). False when the
    /// subscription was cancelled meanwhile: the caller then sends UNWATCH.
    func started(_ response: WatchResponse) -> Bool {
        lock.withLock {
            guard !ended else { return false }
            id = response.subscription
            if fromNow { last = response.seq }
            lastYielded = max(lastYielded, last)
            return true
        }
    }

    /// An EVENT frame, on the reader thread. Returns false once the subscription is over (the connection forgets it).
    func receive(_ event: ChangeEvent) -> Bool {
        let outcome: (Bool, LarderError?) = lock.withLock {
            guard !ended else { return (false, nil) }
            if event.kind == .gap {
                ended = true
                // A gap that carries an error ended for that reason (the token lost the collection), not for lag.
                return (false, event.error ?? LarderSubscription.gapError(seq: event.seq))
            }
            if case .dropped = continuation.yield(event) {
                // The consumer fell behind the client's buffer: end as the server would.
                ended = true
                return (false, LarderSubscription.gapError(seq: lastYielded))
            }
            lastYielded = max(lastYielded, event.seq)
            return (true, nil)
        }
        if let error = outcome.1 {
            continuation.finish(throwing: error)
            if event.kind != .gap, let id = lock.withLock({ id }) { connection?.unwatch(id) }
        }
        return outcome.0
    }

    /// The connection broke or closed.
    func fail(_ error: LarderError) {
        let first = lock.withLock { () -> Bool in
            defer { ended = true }
            return !ended
        }
        if first { continuation.finish(throwing: error) }
    }

    /// The consumer is done (cancel, deinit, or its task cancelled): UNWATCH if the server still has it.
    func cancel() {
        let id: UInt32? = lock.withLock {
            guard !ended else { return nil }
            ended = true
            return self.id
        }
        continuation.finish()
        if let id { connection?.unwatch(id) }
    }
}

extension LarderSubscription {
    static func gapError(seq: Int64) -> LarderError {
        LarderError(
            .resourceExhausted, "the subscription fell behind and ended after change \(seq); watch again with since: \(seq)",
            details: ["reason": "gap", "seq": .int(seq)])
    }
}

extension LarderClient {
    /// Subscribes to the change feed (`WATCH`): the committed writes to `collection` (every collection when nil) whose
    /// document matches `filter`, as they happen; with `since`, first those after that sequence number. The
    /// subscription resumes by itself after a broken connection or a gap (`LarderSubscription`).
    ///
    /// ```swift
    /// let feed = try await client.watch(collection: "todos", since: savedSeq)
    /// for try await event in feed { apply(event); savedSeq = event.seq }
    /// ```
    ///
    /// - Parameters:
    ///   - collection: the collection to follow, or nil for all.
    ///   - filter: the SEARCH filter language; a document that a write takes out of the filter is reported once, with
    ///     `matches == false`.
    ///   - since: replay the changes after this sequence number first (a subscription's `lastSeq`, or the `seq` of
    ///     the last event an app handled, saved); a `resync` event comes first when the server's change log no longer
    ///     reaches back that far.
    ///   - idsOnly: leave the documents out of the events.
    ///   - bufferLimit: events the client holds for a consumer that is slower than the feed; past it the
    ///     subscription ends with a gap, and resumes (or, with `resume: false`, throws the gap error), as the server
    ///     does for a connection that stops reading.
    ///   - resume: WATCH again by itself, from `lastSeq`, after a broken connection or a gap; false leaves that to
    ///     the caller: the sequence then throws.
    /// - Throws: the errors of the first WATCH: `UNAVAILABLE` when no server can be reached, `INVALID_ARGUMENT` for a
    ///   bad collection name or filter, `PERMISSION_DENIED` for a collection the token may not read,
    ///   `RESOURCE_EXHAUSTED` past the connection's `maxWatches`.
    public func watch(
        collection: String? = nil, filter: Filter? = nil, since: Int64? = nil, idsOnly: Bool = false,
        bufferLimit: Int = 10_000, resume: Bool = true
    ) async throws(LarderError) -> LarderSubscription {
        let request = LarderSubscription.Request(
            collection: collection, filter: filter, idsOnly: idsOnly, bufferLimit: bufferLimit)
        let (feed, startSeq) = try await subscribe(request, since: since)
        return LarderSubscription(startSeq: startSeq, feed: feed, client: resume ? self : nil, request: request)
    }

    /// One WATCH on a connection of the pool: its feed, and the answer's `seq` (the last committed change).
    func subscribe(_ request: LarderSubscription.Request, since: Int64?) async throws(LarderError)
        -> (feed: LarderSubscription.Feed, seq: Int64)
    {
        let connection = try await connection()
        let watch = WatchRequest(
            collection: request.collection, filter: request.filter, since: since, idsOnly: request.idsOnly)
        let (stream, continuation) = AsyncThrowingStream.makeStream(
            of: ChangeEvent.self, throwing: (any Error).self,
            bufferingPolicy: .bufferingOldest(max(1, request.bufferLimit)))
        let sink = EventSink(connection: connection, since: since, continuation: continuation)
        continuation.onTermination = { termination in
            // The consumer's task was cancelled or it dropped the sequence: tell the server.
            if case .cancelled = termination { sink.cancel() }
        }
        let reply: Frame
        do {
            reply = try await connection.watch(watch.json.bytes, sink: sink, timeout: configuration.requestTimeout)
        } catch {
            sink.cancel()
            throw error
        }
        let response: WatchResponse
        do throws(LarderError) {
            response = try WatchResponse(json: try reply.jsonObject())
        } catch {
            sink.cancel()
            throw error
        }
        return (LarderSubscription.Feed(id: response.subscription, sink: sink, stream: stream), response.seq)
    }
}
