import Foundation
import LarderWire

/// One change to a collection's documents, as `LarderCollection.changes(matching:since:)` yields it: what happened,
/// and the sequence number to resume after it.
///
/// ```swift
/// for try await change in try await todos.changes(matching: .compare(try FieldPath("isFinish"), .eq, false)) {
///     switch change.kind {
///     case .created(let todo), .updated(let todo): list[todo.id] = todo
///     case .deleted(let id), .left(let id): list[id] = nil
///     case .resync, .dropped: list = try await reload()
///     case .undecodable(let id, let error): log("\(id): \(error.localizedDescription)")
///     }
///     savedSeq = change.seq   // `since:` for the next launch
/// }
/// ```
public struct CollectionChange<Model: Codable & Sendable>: Sendable {
    /// What happened to the collection.
    public enum Kind: Sendable {
        /// A document was created; its value.
        case created(Stored<Model>)
        /// A document was replaced or patched; its new value.
        case updated(Stored<Model>)
        /// A document was deleted; its id.
        case deleted(UUID)
        /// A write took the document out of the filter (it still exists): a filtered view drops it.
        case left(UUID)
        /// The collection was dropped: every document in it is gone.
        case dropped
        /// The server's change log no longer reaches back to `since`: reload, then apply the changes that follow
        /// (they may repeat what the reload showed: compare `rev`).
        case resync
        /// A document was created or written, but its data does not decode as `Model` (written by the CLI or an
        /// older app): its id, and the `DECODING_FAILED` error naming the field. The sequence goes on.
        case undecodable(UUID, LarderError)
    }

    /// The change's sequence number: pass the last one handled as `since` to resume after it.
    public var seq: Int64
    /// What happened.
    public var kind: Kind
    /// When the write was applied (server clock); nil for `resync`.
    public var time: Date?
}

/// The changes to one collection as typed values: an `AsyncSequence` of `CollectionChange`, resumed by itself after a
/// broken connection or a gap, as `LarderSubscription` is. `cancel()` (or cancelling the iterating task) ends it.
public final class CollectionChanges<Model: Codable & Sendable>: AsyncSequence, Sendable {
    /// The changes: `CollectionChange<Model>`.
    public typealias Element = CollectionChange<Model>
    /// What the sequence throws: `LarderError`.
    public typealias Failure = LarderError

    /// The change feed underneath.
    public let subscription: LarderSubscription

    init(_ subscription: LarderSubscription) {
        self.subscription = subscription
    }

    /// The sequence number of the last change handed out: `since` to resume after it (before any, the `since` the
    /// changes were asked with, or the last change committed then).
    public var lastSeq: Int64 { subscription.lastSeq }

    /// Ends the changes: UNWATCH is sent and the sequence finishes.
    public func cancel() { subscription.cancel() }

    /// An iterator over the changes from the last one handed out on; iterate with one at a time.
    public func makeAsyncIterator() -> Iterator { Iterator(events: subscription.makeAsyncIterator()) }

    /// Reads the changes.
    public struct Iterator: AsyncIteratorProtocol {
        /// The changes: `CollectionChange<Model>`.
        public typealias Element = CollectionChange<Model>
        /// What the iterator throws: `LarderError`.
        public typealias Failure = LarderError

        var events: LarderSubscription.Iterator

        /// The next change; nil once cancelled.
        ///
        /// - Throws: what `next(isolation:)` throws.
        public mutating func next() async throws(LarderError) -> CollectionChange<Model>? {
            try await next(isolation: nil)
        }

        /// The next change, awaited on `actor`'s executor. Blob events are passed over (they change no value).
        ///
        /// - Throws: what the subscription's events throw (`LarderSubscription.Iterator.next(isolation:)`).
        public mutating func next(
            isolation actor: isolated (any Actor)?
        ) async throws(LarderError) -> CollectionChange<Model>? {
            while let event = try await events.next(isolation: actor) {
                if let change = CollectionChange<Model>(event) { return change }
            }
            return nil
        }
    }
}

extension CollectionChange {
    /// The typed form of `event`; nil for the kinds that change no document's value (blob events, and kinds a later
    /// server may add).
    init?(_ event: ChangeEvent) {
        seq = event.seq
        time = event.time
        switch event.kind {
        case .resync:
            kind = .resync
        case .drop:
            kind = .dropped
        case .delete:
            guard let id = event.id else { return nil }
            kind = .deleted(id)
        case .create, .replace, .patch:
            guard let id = event.id else { return nil }
            if !event.matches {
                kind = .left(id)
                return
            }
            guard let record = event.record else { return nil }
            do throws(LarderError) {
                let stored = try Stored<Model>(record)
                kind = event.kind == .create ? .created(stored) : .updated(stored)
            } catch {
                kind = .undecodable(id, error)
            }
        default:
            return nil
        }
    }
}

extension LarderCollection {
    /// The changes to this collection's documents that match `filter` (all of them when nil), as typed values, from
    /// now on, or with `since` first those after that sequence number (a `CollectionChange.seq` the app saved).
    ///
    /// ```swift
    /// let changes = try await todos.changes(since: savedSeq)
    /// for try await change in changes {
    ///     if case .created(let todo) = change.kind { print("new:", todo.value.title) }
    ///     savedSeq = change.seq
    /// }
    /// ```
    ///
    /// A document whose data does not decode as `Model` comes as `.undecodable`, and the changes go on. A broken
    /// connection or a consumer that falls behind is mended by WATCHing again from the last change handed out
    /// (`LarderSubscription`), so the loop sees each change once, in commit order.
    ///
    /// - Throws: the errors of WATCH: `UNAVAILABLE` when no server can be reached, `INVALID_ARGUMENT` for a bad
    ///   filter, `PERMISSION_DENIED` for a collection the token may not read; the sequence throws what resuming
    ///   cannot mend (`LarderSubscription`).
    @_disfavoredOverload
    public func changes(
        matching filter: Filter? = nil, since: Int64? = nil, bufferLimit: Int = 10_000
    ) async throws(LarderError) -> CollectionChanges<Model> {
        CollectionChanges(
            try await client.watch(collection: name, filter: filter, since: since, bufferLimit: bufferLimit))
    }
}
