import Foundation
import LarderSync
import LarderWire

/// A live change feed: the events of one `WATCH`, as an `AsyncSequence`.
///
/// ```swift
/// let feed = try await client.watch(collection: "todos", filter: .compare(try FieldPath("isFinish"), .eq, false))
/// for try await event in feed {
///     switch event.kind {
///     case .create, .replace, .patch: event.matches ? show(event.record!) : hide(event.id!)
///     case .delete: hide(event.id!)
///     case .resync: reloadEverything()      // `since` was older than the server's change log
///     default: break                        // kinds a later server may add
///     }
/// }
/// ```
///
/// Events come in commit order, each once. The sequence throws when the subscription cannot go on: a gap (the
/// consumer fell behind: `LarderError` `RESOURCE_EXHAUSTED`, `details["reason"] == "gap"`, `details["seq"]` the last
/// change handled) or the connection breaking (`UNAVAILABLE`). Either way, resume with
/// `client.watch(..., since: subscription.lastSeq)`, which replays exactly what was missed. `cancel()` ends it (UNWATCH)
/// and the sequence finishes; so does cancelling the task that iterates it.
public final class LarderSubscription: AsyncSequence, Sendable {
    public typealias Element = ChangeEvent
    public typealias Failure = LarderError

    /// The subscription's id on its connection (the request id of its event frames).
    public let id: UInt32
    /// The last committed change when the subscription started (from the WATCH answer).
    public let startSeq: Int64
    private let sink: EventSink
    private let stream: AsyncThrowingStream<ChangeEvent, any Error>

    init(id: UInt32, startSeq: Int64, sink: EventSink, stream: AsyncThrowingStream<ChangeEvent, any Error>) {
        self.id = id
        self.startSeq = startSeq
        self.sink = sink
        self.stream = stream
    }

    deinit { sink.cancel() }

    /// The sequence number of the last event handed out (`since` for a new subscription after a gap or a broken
    /// connection); before any event, the `since` the subscription was made with, or `startSeq`.
    public var lastSeq: Int64 { sink.lastSeq }

    /// Ends the subscription: UNWATCH is sent and the sequence finishes after the events already received.
    public func cancel() { sink.cancel() }

    public func makeAsyncIterator() -> Iterator { Iterator(inner: stream.makeAsyncIterator(), sink: sink) }

    /// Reads the subscription's events.
    public struct Iterator: AsyncIteratorProtocol {
        public typealias Element = ChangeEvent
        public typealias Failure = LarderError

        var inner: AsyncThrowingStream<ChangeEvent, any Error>.Iterator
        let sink: EventSink

        /// The next event; nil once the subscription was cancelled.
        public mutating func next() async throws(LarderError) -> ChangeEvent? {
            try await next(isolation: nil)
        }

        /// The next event, awaited on `actor`'s executor.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(LarderError) -> ChangeEvent? {
            let event: ChangeEvent?
            do {
                event = try await inner.next(isolation: actor)
            } catch let error as LarderError {
                throw error
            } catch {
                throw LarderError(.internal, "the change feed failed: \(error)")
            }
            if let event, !event.kind.isControl || event.kind == .resync { sink.handed(event) }
            return event
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
    /// document matches `filter`, as they happen; with `since`, first those after that sequence number.
    ///
    /// - Parameters:
    ///   - collection: the collection to follow, or nil for all.
    ///   - filter: the SEARCH filter language; a document that a write takes out of the filter is reported once, with
    ///     `matches == false`.
    ///   - since: replay the changes after this sequence number first (a subscription's `lastSeq`); a `resync`
    ///     event comes first when the server's change log no longer reaches back that far.
    ///   - idsOnly: leave the documents out of the events.
    ///   - bufferLimit: events the client holds for a consumer that is slower than the feed; past it the sequence
    ///     throws a gap error (as the server does for a connection that stops reading).
    public func watch(
        collection: String? = nil, filter: Filter? = nil, since: Int64? = nil, idsOnly: Bool = false,
        bufferLimit: Int = 10_000
    ) async throws(LarderError) -> LarderSubscription {
        let connection = try await connection()
        let request = WatchRequest(collection: collection, filter: filter, since: since, idsOnly: idsOnly)
        let (stream, continuation) = AsyncThrowingStream.makeStream(
            of: ChangeEvent.self, throwing: (any Error).self, bufferingPolicy: .bufferingOldest(max(1, bufferLimit)))
        let sink = EventSink(connection: connection, since: since, continuation: continuation)
        continuation.onTermination = { termination in
            // The consumer's task was cancelled or it dropped the sequence: tell the server.
            if case .cancelled = termination { sink.cancel() }
        }
        let reply: Frame
        do {
            reply = try await connection.watch(request.json.bytes, sink: sink, timeout: configuration.requestTimeout)
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
        return LarderSubscription(id: response.subscription, startSeq: response.seq, sink: sink, stream: stream)
    }
}
