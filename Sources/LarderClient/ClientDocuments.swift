import Foundation
import LarderSync
import LarderWire

// LarderClient's document and collection calls: CRUD, search, count, group, collections, indexes.
extension LarderClient {
    // MARK: - Documents

    /// Stores a new document and returns its record; the server assigns the id unless `id` is given.
    ///
    /// - Throws: `CONFLICT` when `id` exists; `PAYLOAD_TOO_LARGE` for data over `maxDocumentBytes`; `INVALID_ARGUMENT`
    ///   for a bad collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func create(_ collection: String, _ data: JSONObject, id: UUID? = nil) async throws(LarderError) -> Record {
        try await message(Record.self, .create, CreateRequest(collection: collection, id: id, data: data).json)
    }

    /// `create` that calls `enqueued` once the request is queued on its connection, behind every request sent on it
    /// before (or at once, when it fails before that). A caller that sends the next create only then has its creates
    /// committed in its order, pipelined: the server commits one connection's writes in the order they were sent.
    package func create(
        _ collection: String, _ data: JSONObject, id: UUID?, enqueued: @escaping @Sendable () -> Void
    ) async throws(LarderError) -> Record {
        defer { enqueued() }
        let json = CreateRequest(collection: collection, id: id, data: data).json.bytes
        return try Record(json: try await call(.create, jsonBytes: json, enqueued: enqueued).jsonObject())
    }

    /// `create` with the document already written as compact JSON (`ModelCoding.encodeDocument`); the answer's JSON.
    func create(_ collection: String, document: [UInt8], id: UUID?) async throws(LarderError) -> [UInt8] {
        let json = DocumentWrite.request(collection: collection, id: id, document: document)
        return try await call(.create, jsonBytes: json).json
    }

    /// `replace` with the document already written as compact JSON (`ModelCoding.encodeDocument`); the answer's JSON.
    func replace(_ collection: String, id: UUID, document: [UInt8], rev: Int64?) async throws(LarderError) -> [UInt8] {
        let json = DocumentWrite.request(collection: collection, id: id, document: document, rev: rev)
        return try await call(.replace, jsonBytes: json).json
    }

    /// Reads one document (NOT_FOUND when it does not exist).
    ///
    /// - Throws: `NOT_FOUND` when no such document; `INVALID_ARGUMENT` for a bad collection name; and `UNAVAILABLE`,
    ///   `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func get(_ collection: String, id: UUID) async throws(LarderError) -> Record {
        try await message(Record.self, .get, GetRequest(collection: collection, id: id).json)
    }

    /// Reads up to 1,000 documents by id: the records found, in request order, and the ids that were not.
    ///
    /// - Throws: `INVALID_ARGUMENT` for more than 1,000 ids or a bad collection name; `PAYLOAD_TOO_LARGE` when the
    ///   records would not fit in one answer (ask for fewer); and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or
    ///   `PERMISSION_DENIED` as any request.
    public func getMany(_ collection: String, ids: [UUID]) async throws(LarderError) -> GetManyResponse {
        try await message(GetManyResponse.self, .getMany, GetManyRequest(collection: collection, ids: ids).json)
    }

    /// Replaces a document's data; with `rev`, only if that is still its revision (CONFLICT otherwise).
    ///
    /// - Throws: `NOT_FOUND` when no such document; `CONFLICT` when `rev` is not current; `PAYLOAD_TOO_LARGE` for data
    ///   over `maxDocumentBytes`; `INVALID_ARGUMENT` for a bad collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED`
    ///   or `PERMISSION_DENIED` as any request.
    public func replace(
        _ collection: String, id: UUID, data: JSONObject, rev: Int64? = nil
    ) async throws(LarderError) -> Record {
        try await message(
            Record.self, .replace, ReplaceRequest(collection: collection, id: id, data: data, rev: rev).json)
    }

    /// Applies an RFC 7396 merge patch (null removes a member); with `rev`, only if that is still the revision.
    ///
    /// - Throws: `NOT_FOUND` when no such document; `CONFLICT` when `rev` is not current; `PAYLOAD_TOO_LARGE` when the
    ///   patched document is over `maxDocumentBytes`; `INVALID_ARGUMENT` for a bad collection name; and `UNAVAILABLE`,
    ///   `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func patch(
        _ collection: String, id: UUID, patch: JSONObject, rev: Int64? = nil
    ) async throws(LarderError) -> Record {
        try await message(Record.self, .patch, PatchRequest(collection: collection, id: id, patch: patch, rev: rev).json)
    }

    /// Deletes a document and the blobs attached to it; with `rev`, only if that is still its revision.
    ///
    /// - Throws: `NOT_FOUND` when no such document; `CONFLICT` when `rev` is not current; `INVALID_ARGUMENT` for a bad
    ///   collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    @discardableResult
    public func delete(_ collection: String, id: UUID, rev: Int64? = nil) async throws(LarderError) -> DeleteResponse {
        try await message(DeleteResponse.self, .delete, DeleteRequest(collection: collection, id: id, rev: rev).json)
    }

    /// One page of a collection in creation order; pass the page's `nextCursor` back for the next.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a bad collection name, a `limit` outside 1...1000 or a cursor of another
    ///   request; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func list(
        _ collection: String, limit: Int = defaultPageLimit, cursor: String? = nil
    ) async throws(LarderError) -> PageResponse {
        try await message(
            PageResponse.self, .list, ListRequest(collection: collection, limit: limit, cursor: cursor).json)
    }

    /// One page of the records matching `query`.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a bad collection name, a filter, text or sort the server refuses, a `limit`
    ///   outside 1...1000 or a cursor of another query; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED`
    ///   as any request.
    public func search(_ collection: String, _ query: SearchQuery) async throws(LarderError) -> PageResponse {
        try await message(PageResponse.self, .search, SearchRequest(collection: collection, query: query).json)
    }

    /// How many records match `filter` and `text` (all of them when both are nil).
    ///
    /// - Throws: `INVALID_ARGUMENT` for a bad collection name, filter or text; and `UNAVAILABLE`, `DEADLINE_EXCEEDED`
    ///   or `PERMISSION_DENIED` as any request.
    public func count(
        _ collection: String, filter: Filter? = nil, text: TextQuery? = nil
    ) async throws(LarderError) -> Int {
        try await message(
            CountResponse.self, .count, CountRequest(collection: collection, filter: filter, text: text).json
        ).count
    }

    /// Sections of a collection by the value of `field` (e.g. `category`), each with its count and first records.
    ///
    /// - Throws: `INVALID_ARGUMENT` for an invalid field path (before anything is sent), a bad collection name, filter
    ///   or text, or a `perGroup` outside 0...100; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any
    ///   request.
    public func group(
        _ collection: String, by field: String, filter: Filter? = nil, text: TextQuery? = nil,
        perGroup: Int = GroupRequest.defaultPerGroup
    ) async throws(LarderError) -> GroupResponse {
        let request = GroupRequest(
            collection: collection, field: try FieldPath(field), filter: filter, text: text, perGroup: perGroup)
        return try await message(GroupResponse.self, .group, request.json)
    }

    // MARK: - Collections

    /// Every collection with its document count.
    ///
    /// - Throws: `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request (a token limited to collections is shown only
    ///   those).
    public func collections() async throws(LarderError) -> [CollectionsResponse.Entry] {
        try await message(CollectionsResponse.self, .collections, [:]).collections
    }

    /// Deletes a collection, its documents and their blobs.
    ///
    /// - Throws: `NOT_FOUND` when no such collection; `INVALID_ARGUMENT` for a bad collection name; `PERMISSION_DENIED`
    ///   for a token that is not `admin` or not given the collection; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any
    ///   request.
    @discardableResult
    public func dropCollection(_ collection: String) async throws(LarderError) -> DropCollectionResponse {
        try await message(
            DropCollectionResponse.self, .dropCollection, DropCollectionRequest(collection: collection).json)
    }

    /// Declares an index on a field path (idempotent); `created` is false when it already existed. With `collation`
    /// (and `strength`) the index orders the field's strings under that ICU collation, so searches sorted by
    /// `Field(field).ascending.collated(collation, strength: strength)` use it; it is another index than the one
    /// without.
    ///
    /// - Throws: `INVALID_ARGUMENT` for an invalid field path (before anything is sent), a bad collection name or a
    ///   collation the server's ICU cannot collate by (field `collation`); `PERMISSION_DENIED` for a token that is not
    ///   `admin` or not given the collection; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    @discardableResult
    public func index(_ collection: String, field: String, collation: String? = nil, strength: Int? = nil)
        async throws(LarderError) -> IndexResponse
    {
        let request = IndexRequest(
            collection: collection, field: try FieldPath(field), collation: collation, strength: strength)
        return try await message(IndexResponse.self, .index, request.json)
    }
}
