import Foundation
import LarderSync
import LarderWire

/// A record of a replica as the app sees it: the value with its envelope, and whether local writes in it wait to be
/// applied by the server (like Firestore's `hasPendingWrites`).
public struct ReplicaRecord<Model: Codable & Sendable>: Sendable, Identifiable {
    /// The value and its envelope. `rev` is the server's revision the local writes were made over (0 for a record
    /// created locally and not yet stored by the server); the times are the local clock's for local writes.
    public var stored: Stored<Model>
    /// True while local writes of this record wait in the outbox.
    public var isPending: Bool

    /// The record's id.
    public var id: UUID { stored.id }
    /// The app's value.
    public var value: Model { stored.value }
}

extension ReplicaRecord: Equatable where Model: Equatable {}

/// A page of a replica's search: its records, and the cursor of the next page (nil on the last).
public struct ReplicaPage<Model: Codable & Sendable>: Sendable {
    /// The page's records that decode as `Model`.
    public var records: [ReplicaRecord<Model>]
    /// The cursor of the next page of the same search, or nil.
    public var nextCursor: String?
    /// The page's records that do not decode as `Model`, each with its `DECODING_FAILED` error.
    public var undecodable: [UndecodableRecord] = []

    /// The models alone.
    public var values: [Model] { records.map(\.value) }
}

/// Typed access to one collection of a `LarderReplica`: reads answered from the replica's file, writes applied to it
/// at once and queued for the server. Every method works offline.
///
/// ```swift
/// let todos = replica.collection("todos", of: Todo.self)
/// let milk = try todos.create(Todo(title: "Buy milk", isFinish: false))
/// try todos.update(milk) { $0.isFinish = true }
/// let done = try todos.count(Field("isFinish") == true)
/// ```
public struct ReplicaCollection<Model: Codable & Sendable>: Sendable {
    /// The collection's name.
    public let name: String
    /// The replica that holds it.
    public let replica: LarderReplica

    init(name: String, replica: LarderReplica) {
        self.name = name
        self.replica = replica
    }

    // MARK: Reads

    /// The record `id` as the replica holds it; nil when it has none.
    ///
    /// - Throws: `DECODING_FAILED` when it does not decode as `Model`; `INTERNAL` when the file fails.
    public func get(_ id: UUID) throws(LarderError) -> ReplicaRecord<Model>? {
        try replica.store.record(name, id).map { local throws(LarderError) in try Self.record(local) }
    }

    /// Every record, in creation order (records that do not decode as `Model` are left out).
    ///
    /// - Throws: `INTERNAL` when the file fails.
    public func all() throws(LarderError) -> [ReplicaRecord<Model>] {
        try replica.store.records(name).compactMap { try? Self.record($0) }
    }

    /// One page of the records matching a Swift query, sorted, with the server's semantics (SEARCH): the same
    /// filter, substring search, order and keyset cursor. Sorts under a collation are the server's alone.
    ///
    /// ```swift
    /// let page = try todos.search(Field("isFinish") == false, sortedBy: [Field("title").ascending], limit: 20)
    /// let next = try todos.search(Field("isFinish") == false, sortedBy: [Field("title").ascending], limit: 20,
    ///                             cursor: page.nextCursor)
    /// ```
    ///
    /// - Throws: `INVALID_ARGUMENT` for a mistake in the query, a sort under a collation, a `limit` outside
    ///   1...1000 or a cursor of another query; `INTERNAL` when the file fails.
    public func search(
        _ filter: FilterExpression? = nil, containing text: String? = nil, in fields: [Field]? = nil,
        sortedBy order: [Ordering] = [], limit: Int = SearchQuery.defaultLimit, cursor: String? = nil
    ) throws(LarderError) -> ReplicaPage<Model> {
        var query = try LarderCollection<Model>.query(filter: filter, text: text, fields: fields, order: order)
        query.limit = limit
        query.cursor = cursor
        return try search(query)
    }

    /// One page of the records matching a query in the wire form (`SearchQuery`), as `search(_:containing:in:...)`.
    ///
    /// - Throws: what `search(_:containing:in:sortedBy:limit:cursor:)` throws.
    public func search(_ query: SearchQuery) throws(LarderError) -> ReplicaPage<Model> {
        let locals = try replica.store.records(name)
        var pending: [UUID: Bool] = [:]
        for local in locals { pending[local.item.envelope.id] = local.pending }
        let answer = try RecordQuery.search(locals.map(\.item), collection: name, query)
        var page = ReplicaPage<Model>(records: [], nextCursor: answer.nextCursor)
        for item in answer.items {
            let local = LocalRecord(item: item, pending: pending[item.envelope.id] ?? false)
            do throws(LarderError) {
                page.records.append(try Self.record(local))
            } catch {
                page.undecodable.append(UndecodableRecord(record: Self.wireRecord(item), error: error))
            }
        }
        return page
    }

    /// How many records match a Swift query (all of them without one).
    ///
    /// - Throws: `INVALID_ARGUMENT` for a mistake in the query; `INTERNAL` when the file fails.
    public func count(
        _ filter: FilterExpression? = nil, containing text: String? = nil, in fields: [Field]? = nil
    ) throws(LarderError) -> Int {
        let query = try LarderCollection<Model>.query(filter: filter, text: text, fields: fields, order: [])
        return RecordQuery.count(try replica.store.records(name).map(\.item), filter: query.filter, text: query.text)
    }

    /// Sections of the records matching a Swift query by the value of `field`, as GROUP answers them: in the order
    /// of an ascending sort on the field, each with its count and its first `perGroup` records (in creation order).
    ///
    /// - Throws: `INVALID_ARGUMENT` for a mistake in the query or a `perGroup` outside 0...100; `INTERNAL` when the
    ///   file fails.
    public func group(
        by field: Field, _ filter: FilterExpression? = nil, containing text: String? = nil, in fields: [Field]? = nil,
        perGroup: Int = GroupRequest.defaultPerGroup
    ) throws(LarderError) -> [Section<Model>] {
        guard (0...GroupRequest.maxPerGroup).contains(perGroup) else {
            throw LarderError(
                .invalidArgument, "'perGroup' must be an integer from 0 to \(GroupRequest.maxPerGroup)",
                field: "perGroup")
        }
        let query = try LarderCollection<Model>.query(filter: filter, text: text, fields: fields, order: [])
        let path = try field.fieldPath(request: "field")
        let items = try replica.store.records(name).map(\.item)
        return RecordQuery.group(items, field: path, filter: query.filter, text: query.text, perGroup: perGroup).map {
            section in
            var typed = Section<Model>(key: section.key, count: section.count, records: [])
            for item in section.items {
                do throws(LarderError) {
                    typed.records.append(try Self.record(LocalRecord(item: item, pending: false)).stored)
                } catch {
                    typed.undecodable.append(UndecodableRecord(record: Self.wireRecord(item), error: error))
                }
            }
            return typed
        }
    }

    /// The records matching a Swift query, sorted, now and again after every change to the collection (local writes
    /// and the server's alike) that changes them: what a list on screen shows, each record marked pending or synced.
    /// The sequence ends when the task iterating it is cancelled or the replica is closed.
    ///
    /// ```swift
    /// for await open in try todos.changes(matching: Field("isFinish") == false, sortedBy: [Field("title").ascending]) {
    ///     show(open.map { ($0.value.title, $0.isPending ? "sending…" : "saved") })
    /// }
    /// ```
    ///
    /// - Throws: `INVALID_ARGUMENT` for a mistake in the query (checked before the sequence is made).
    public func changes(
        matching filter: FilterExpression? = nil, containing text: String? = nil, in fields: [Field]? = nil,
        sortedBy order: [Ordering] = [], limit: Int = SearchQuery.maxLimit
    ) throws(LarderError) -> AsyncStream<[ReplicaRecord<Model>]> {
        var query = try LarderCollection<Model>.query(filter: filter, text: text, fields: fields, order: order)
        query.limit = limit
        _ = try search(query)
        let (stream, continuation) = AsyncStream<[ReplicaRecord<Model>]>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let last = Locked<[String]?>(nil)
        let collection = self
        let query_ = query
        // One answer at a time, from the search to its yield: an answer read before another's is never handed out
        // after it.
        let emit: @Sendable () -> Void = {
            last.withLock { last in
                guard let page = try? collection.search(query_) else { return }
                let key = page.records.map { record in
                    let data = (try? ModelCoding.encode(record.value))?.bytes ?? []
                    return "\(record.id.wireString) \(record.stored.rev) \(record.isPending) "
                        + String(decoding: data, as: UTF8.self)
                }
                guard key != last else { return }
                last = key
                continuation.yield(page.records)
            }
        }
        let token = replica.observe(name, emit)
        continuation.onTermination = { [replica, name] _ in replica.stopObserving(name, token) }
        emit()
        replica.onClose { continuation.finish() }
        return stream
    }

    // MARK: Writes

    /// Stores a new value in the replica at once, and queues its CREATE; without `id`, the replica makes a
    /// time-ordered one (as the server would).
    ///
    /// - Throws: `CONFLICT` when the replica holds `id`; `INVALID_ARGUMENT` when `Model` does not encode as a JSON
    ///   object; `INTERNAL` when the file fails.
    @discardableResult
    public func create(_ value: Model, id: UUID? = nil) throws(LarderError) -> ReplicaRecord<Model> {
        try write(id ?? replica.store.newID(), .create, try ModelCoding.encode(value))!
    }

    /// Replaces the value of `id` in the replica at once, and queues its REPLACE, made over the revision the replica
    /// holds.
    ///
    /// - Throws: `NOT_FOUND` when the replica does not hold `id`; `INVALID_ARGUMENT` when `Model` does not encode as
    ///   a JSON object; `INTERNAL` when the file fails.
    @discardableResult
    public func replace(_ id: UUID, with value: Model) throws(LarderError) -> ReplicaRecord<Model> {
        try write(id, .replace, try ModelCoding.encode(value))!
    }

    /// Edits a record and queues only what the edit changed, as a merge patch (as `LarderCollection.update` sends
    /// it). An edit that changes nothing queues nothing.
    ///
    /// - Throws: `NOT_FOUND` when the replica no longer holds the record; `INVALID_ARGUMENT` when `Model` does not
    ///   encode as a JSON object; `INTERNAL` when the file fails.
    @discardableResult
    public func update(_ record: ReplicaRecord<Model>, _ edit: (inout Model) -> Void) throws(LarderError)
        -> ReplicaRecord<Model>
    {
        var value = record.value
        edit(&value)
        let patch = MergePatchDiff.diff(from: try ModelCoding.encode(record.value), to: try ModelCoding.encode(value))
        if patch.isEmpty { return record }
        return try self.patch(record.id, patch)
    }

    /// Applies a merge patch to `id` in the replica at once, and queues its PATCH.
    ///
    /// - Throws: `NOT_FOUND` when the replica does not hold `id`; `DECODING_FAILED` when the patched value does not
    ///   decode as `Model` (nothing is changed); `INTERNAL` when the file fails.
    @discardableResult
    public func patch(_ id: UUID, _ patch: JSONObject) throws(LarderError) -> ReplicaRecord<Model> {
        if let current = try replica.store.record(name, id) {
            _ = try ModelCoding.decode(Model.self, from: MergePatch.apply(patch, to: current.item.data), id: id)
        }
        return try write(id, .patch, patch)!
    }

    /// Deletes `id` from the replica at once, and queues its DELETE.
    ///
    /// - Throws: `NOT_FOUND` when the replica does not hold `id`; `INTERNAL` when the file fails.
    public func delete(_ id: UUID) throws(LarderError) {
        _ = try write(id, .delete, nil)
    }

    private func write(_ id: UUID, _ operation: OutboxWrite.Operation, _ body: JSONObject?) throws(LarderError)
        -> ReplicaRecord<Model>?
    {
        let local = try replica.store.write(name, id, operation, body)
        replica.queued(name)
        return try local.map { local throws(LarderError) in try Self.record(local) }
    }

    // MARK: Conversions

    static func record(_ local: LocalRecord) throws(LarderError) -> ReplicaRecord<Model> {
        ReplicaRecord(stored: try Stored<Model>(wireRecord(local.item)), isPending: local.pending)
    }

    static func wireRecord(_ item: RecordQuery.Item) -> Record {
        Record(
            id: item.envelope.id, rev: item.envelope.rev, createdAtMs: item.envelope.createdAt,
            updatedAtMs: item.envelope.updatedAt, data: item.data)
    }
}
