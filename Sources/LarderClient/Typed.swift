import Foundation
import LarderWire

/// A stored model value with its envelope: id, revision and timestamps.
public struct Stored<Model: Codable & Sendable>: Sendable {
    /// The document's id.
    public var id: UUID
    /// The document's revision (1 after create, +1 per write); pass it back for optimistic concurrency.
    public var rev: Int64
    /// When the document was created (millisecond precision).
    public var createdAt: Date
    /// When the document was last written (millisecond precision).
    public var updatedAt: Date
    /// The app's model value.
    public var value: Model

    /// Decodes a record's data as `Model`.
    ///
    /// - Throws: `DECODING_FAILED` when `record.data` does not decode as `Model` (`field` names the member at fault).
    public init(_ record: Record) throws(LarderError) {
        id = record.id
        rev = record.rev
        createdAt = record.createdAt
        updatedAt = record.updatedAt
        value = try ModelCoding.decode(Model.self, from: record.data, id: record.id)
    }

    /// A record read from `answer` without a tree (`AnswerReader`): its `data` bytes go to the decoder as they are.
    /// Nil when that does not work out; the caller then reads the answer the general way, for the value or the error.
    init?(_ span: RecordSpan, in answer: [UInt8]) {
        guard let value = try? ModelCoding.decode(Model.self, json: Data(answer[span.data]), id: span.id) else {
            return nil
        }
        id = span.id
        rev = span.rev
        createdAt = Timestamp.date(span.createdAt)
        updatedAt = Timestamp.date(span.updatedAt)
        self.value = value
    }

    /// Decodes the JSON part of a record answer (GET, CREATE, REPLACE, PATCH), as the server sent it.
    ///
    /// - Throws: `INVALID_ARGUMENT` when `answer` is not a record's JSON; `DECODING_FAILED` when its data does not
    ///   decode as `Model`.
    public init(answer: [UInt8]) throws(LarderError) {
        if let span = AnswerReader.record(answer), let stored = Stored(span, in: answer) {
            self = stored
        } else {
            try self.init(try Record(json: try JSONParser.parseObject(answer, maxDepth: JSONParser.maxAnswerDepth)))
        }
    }
}

extension Stored: Equatable where Model: Equatable {}

/// A page of typed records; pass `nextCursor` back for the next page (nil on the last page).
///
/// A record that does not decode as `Model` (written by the CLI or an older app) does not fail the page: it is left
/// out of `records` and listed in `undecodable` with its error, in the order the server sent them.
public struct Page<Model: Codable & Sendable>: Sendable {
    /// The page's records that decode as `Model`.
    public var records: [Stored<Model>]
    /// The cursor of the next page, or nil.
    public var nextCursor: String?
    /// The page's records that do not decode as `Model`, each with its `DECODING_FAILED` error.
    public var undecodable: [UndecodableRecord] = []

    /// The models alone, without their envelopes.
    public var values: [Model] { records.map(\.value) }
}

/// A section of a GROUP answer: the key (e.g. `"Ball"`), how many records share it, and the first of them.
public struct Section<Model: Codable & Sendable>: Sendable {
    /// The grouped field's value; `.null` for records without it.
    public var key: JSON
    /// Records in the section (they may be more than `records`).
    public var count: Int
    /// The section's first records that decode as `Model`.
    public var records: [Stored<Model>]
    /// The section's first records that do not decode as `Model`, each with its `DECODING_FAILED` error.
    public var undecodable: [UndecodableRecord] = []
}

/// Converts Codable models to and from stored JSON objects. Dates are ISO 8601 UTC strings with milliseconds
/// (`2024-05-01T12:30:00.000Z`); both that form and the one without fraction are read.
public enum ModelCoding {
    /// Encodes a model as the JSON object that is stored.
    ///
    /// - Throws: `INVALID_ARGUMENT` when `value` does not encode as JSON, or encodes as something other than an object.
    public static func encode<Model: Encodable>(_ value: Model) throws(LarderError) -> JSONObject {
        try object(try encoded(value), Model.self)
    }

    /// Encodes a model as the compact JSON bytes that are stored (`encode(_:)`'s object, written out), without
    /// building the object: what the typed `create` and `replace` send.
    ///
    /// - Throws: `INVALID_ARGUMENT` when `value` does not encode as JSON, or encodes as something other than an object.
    public static func encodeDocument<Model: Encodable>(_ value: Model) throws(LarderError) -> [UInt8] {
        let data = try encoded(value)
        if let document = CompactJSON.object(Array(data)) { return document.bytes }
        return try object(data, Model.self).bytes
    }

    private static func encoded<Model: Encodable>(_ value: Model) throws(LarderError) -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.string(Int64((date.timeIntervalSince1970 * 1000).rounded())))
        }
        do {
            return try encoder.encode(value)
        } catch {
            throw LarderError(.invalidArgument, "cannot encode \(Model.self) as JSON: \(error)")
        }
    }

    private static func object<Model>(_ data: Data, _: Model.Type) throws(LarderError) -> JSONObject {
        do throws(LarderError) {
            return try JSONParser.parseObject(data)
        } catch {
            throw LarderError(
                .invalidArgument, "\(Model.self) must encode as a JSON object (a struct or class with keyed members)")
        }
    }

    /// Decodes a stored JSON object as a model; `id` names the record in the error.
    ///
    /// - Throws: `DECODING_FAILED` when `object` does not decode as `Model` (`field` names the member at fault).
    public static func decode<Model: Decodable>(
        _ type: Model.Type, from object: JSONObject, id: UUID? = nil
    ) throws(LarderError) -> Model {
        try decode(type, json: Data(object.bytes), id: id)
    }

    /// `decode(_:from:id:)` from the object's JSON bytes.
    static func decode<Model: Decodable>(_ type: Model.Type, json: Data, id: UUID?) throws(LarderError) -> Model {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            if let ms = Timestamp.parse(text) { return Timestamp.date(ms) }
            if let date = try? Date(text, strategy: .iso8601) { return date }
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "'\(text)' is not an ISO 8601 date such as 2024-05-01T12:30:00Z")
        }
        do {
            return try decoder.decode(Model.self, from: json)
        } catch let error as DecodingError {
            let record = id.map { "record \($0.wireString)" } ?? "a record"
            var path = ""
            var detail = "\(error)"
            switch error {
            case .keyNotFound(let key, let context):
                path = (context.codingPath + [key]).map(\.stringValue).joined(separator: ".")
                detail = "missing field"
            case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
                path = context.codingPath.map(\.stringValue).joined(separator: ".")
                detail = context.debugDescription
            @unknown default: break
            }
            throw LarderError(
                .decodingFailed, "\(record) does not decode as \(Model.self): \(detail)",
                field: path.isEmpty ? nil : path, details: id.map { ["id": .string($0.wireString)] } ?? [:])
        } catch {
            throw LarderError(.decodingFailed, "cannot decode \(Model.self): \(error)")
        }
    }
}

/// Typed access to one collection: app model structs in, `Stored` models out, no hand-written JSON.
///
/// ```swift
/// struct Todo: Codable, Sendable { var title: String; var isFinish: Bool; var due: Date? }
/// let todos = client.collection("todos", of: Todo.self)
/// let stored = try await todos.create(Todo(title: "Buy milk", isFinish: false, due: nil), id: UUID())
/// ```
public struct LarderCollection<Model: Codable & Sendable>: Sendable {
    /// The collection's name.
    public let name: String
    /// The client requests go through.
    public let client: LarderClient

    /// Typed access to collection `name` through `client`.
    public init(name: String, client: LarderClient) {
        self.name = name
        self.client = client
    }

    /// Stores a new value; the server assigns the id unless `id` is given (CONFLICT if it exists).
    ///
    /// - Throws: `CONFLICT` when `id` exists; `PAYLOAD_TOO_LARGE` for a value over `maxDocumentBytes`;
    ///   `INVALID_ARGUMENT` when `Model` does not encode as a JSON object (before anything is sent) or for a bad
    ///   collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func create(_ value: Model, id: UUID? = nil) async throws(LarderError) -> Stored<Model> {
        try Stored(answer: try await client.create(name, document: try ModelCoding.encodeDocument(value), id: id))
    }

    /// Reads one value (NOT_FOUND when it does not exist).
    ///
    /// - Throws: `NOT_FOUND` when no such document; `DECODING_FAILED` when it does not decode as `Model`;
    ///   `INVALID_ARGUMENT` for a bad collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as
    ///   any request.
    public func get(_ id: UUID) async throws(LarderError) -> Stored<Model> {
        try Stored(answer: try await client.call(.get, GetRequest(collection: name, id: id).json).json)
    }

    /// Reads many values by id, in request order; missing ids are skipped.
    ///
    /// - Throws: `DECODING_FAILED` when a record does not decode as `Model`; `PAYLOAD_TOO_LARGE` when the records of
    ///   1,000 ids would not fit in one answer; `INVALID_ARGUMENT` for a bad collection name; and `UNAVAILABLE`,
    ///   `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func get(_ ids: [UUID]) async throws(LarderError) -> [Stored<Model>] {
        var result: [Stored<Model>] = []
        var start = 0
        while start < ids.count {
            let chunk = Array(ids[start..<min(ids.count, start + maxGetManyIDs)])
            for record in try await client.getMany(name, ids: chunk).records { result.append(try Stored(record)) }
            start += chunk.count
        }
        return result
    }

    /// Replaces the value of document `id`; with `rev`, only if that is still its revision (CONFLICT otherwise).
    ///
    /// - Throws: `NOT_FOUND` when no such document; `CONFLICT` when `rev` is not current; `PAYLOAD_TOO_LARGE` for a
    ///   value over `maxDocumentBytes`; `INVALID_ARGUMENT` when `Model` does not encode as a JSON object (before
    ///   anything is sent) or for a bad collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED`
    ///   as any request.
    public func replace(_ id: UUID, with value: Model, rev: Int64? = nil) async throws(LarderError) -> Stored<Model> {
        let document = try ModelCoding.encodeDocument(value)
        return try Stored(answer: try await client.replace(name, id: id, document: document, rev: rev))
    }

    /// Writes back an edited stored value, failing with CONFLICT if someone else wrote it since it was read.
    ///
    /// - Throws: `CONFLICT` when the document's revision is no longer `stored.rev`; otherwise what
    ///   `replace(_:with:rev:)` throws.
    public func save(_ stored: Stored<Model>) async throws(LarderError) -> Stored<Model> {
        try await replace(stored.id, with: stored.value, rev: stored.rev)
    }

    /// Applies a merge patch (e.g. `["isFinish": true]`) and returns the new value.
    ///
    /// - Throws: `NOT_FOUND` when no such document; `CONFLICT` when `rev` is not current; `PAYLOAD_TOO_LARGE` when the
    ///   patched document is over `maxDocumentBytes`; `DECODING_FAILED` when it does not decode as `Model` (the patch
    ///   was applied); `INVALID_ARGUMENT` for a bad collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or
    ///   `PERMISSION_DENIED` as any request.
    public func patch(_ id: UUID, _ patch: JSONObject, rev: Int64? = nil) async throws(LarderError) -> Stored<Model> {
        try Stored(try await client.patch(name, id: id, patch: patch, rev: rev))
    }

    /// Deletes document `id` and the blobs attached to it.
    ///
    /// - Throws: `NOT_FOUND` when no such document; `CONFLICT` when `rev` is not current; `INVALID_ARGUMENT` for a bad
    ///   collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    @discardableResult
    public func delete(_ id: UUID, rev: Int64? = nil) async throws(LarderError) -> DeleteResponse {
        try await client.delete(name, id: id, rev: rev)
    }

    /// One page in creation order; records that do not decode are in the page's `undecodable`.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a `limit` outside 1...1000, a cursor of another request or a bad collection
    ///   name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any request.
    public func list(limit: Int = defaultPageLimit, cursor: String? = nil) async throws(LarderError) -> Page<Model> {
        let request = ListRequest(collection: name, limit: limit, cursor: cursor)
        return try Self.page(answer: try await client.call(.list, request.json).json)
    }

    /// Every value in creation order, reading page after page (of 1,000).
    ///
    /// Records that do not decode as `Model` are left out; `onUndecodable` is called with each of them.
    ///
    /// - Throws: what a page request throws; `DEADLINE_EXCEEDED` when the task is cancelled between pages.
    public func all(
        onUndecodable: (@Sendable (UndecodableRecord) -> Void)? = nil
    ) async throws(LarderError) -> [Stored<Model>] {
        let pages = PageSequence(collection: self, source: .list, pageSize: maxPageLimit, limit: nil, cursor: nil)
        return try await RecordSequence(pages: pages, report: onUndecodable).collect()
    }

    /// One page of the values matching `query`; records that do not decode are in the page's `undecodable`.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a filter, text or sort the server refuses, a `limit` outside 1...1000, a cursor
    ///   of another query or a bad collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as
    ///   any request.
    public func search(_ query: SearchQuery) async throws(LarderError) -> Page<Model> {
        try Self.page(answer: try await client.call(.search, SearchRequest(collection: name, query: query).json).json)
    }

    /// One page of the values matching a filter and a text search, sorted; `cursor` (a previous page's
    /// `nextCursor` of the same search) continues after that page.
    ///
    /// A call with only `limit:` and `cursor:` (or none) could also be the `RecordSequence` of
    /// `search(_:containing:in:sortedBy:limit:pageSize:cursor:)`: in async code Swift picks this one unless the
    /// result is iterated or a `RecordSequence` is expected; give `pageSize:` to ask for the sequence.
    ///
    /// - Throws: what `search(_:)` throws.
    @_disfavoredOverload
    public func search(
        filter: Filter? = nil, text: TextQuery? = nil, sort: [SortKey] = [], limit: Int = SearchQuery.defaultLimit,
        cursor: String? = nil
    ) async throws(LarderError) -> Page<Model> {
        try await search(SearchQuery(filter: filter, text: text, sort: sort, limit: limit, cursor: cursor))
    }

    /// How many values match a query in the JSON form (`count(_:containing:in:)` takes a Swift one).
    ///
    /// - Throws: `INVALID_ARGUMENT` for a bad filter, text or collection name; and `UNAVAILABLE`, `DEADLINE_EXCEEDED`
    ///   or `PERMISSION_DENIED` as any request.
    @_disfavoredOverload
    public func count(filter: Filter? = nil, text: TextQuery? = nil) async throws(LarderError) -> Int {
        try await client.count(name, filter: filter, text: text)
    }

    /// Sections by the value of `field`, in the order of an ascending sort on it (Protocol.md §5.2), for a query in
    /// the JSON form (`group(by:_:containing:in:perGroup:)` takes a Swift one). A record that does not decode as
    /// `Model` is in its section's `undecodable`.
    ///
    /// - Throws: `INVALID_ARGUMENT` for an invalid field path (before anything is sent), a bad filter, text or
    ///   collection name, or a `perGroup` outside 0...100; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or
    ///   `PERMISSION_DENIED` as any request.
    public func group(
        by field: String, filter: Filter? = nil, text: TextQuery? = nil, perGroup: Int = GroupRequest.defaultPerGroup
    ) async throws(LarderError) -> [Section<Model>] {
        var sections: [Section<Model>] = []
        for group in try await client.group(name, by: field, filter: filter, text: text, perGroup: perGroup).groups {
            var section = Section<Model>(key: group.key, count: group.count, records: [])
            for record in group.records {
                do throws(LarderError) {
                    section.records.append(try Stored(record))
                } catch {
                    section.undecodable.append(UndecodableRecord(record: record, error: error))
                }
            }
            sections.append(section)
        }
        return sections
    }

    /// A page answer, its records read without a tree when it has the server's usual form (`AnswerReader`).
    static func page(answer: [UInt8]) throws(LarderError) -> Page<Model> {
        if let (spans, nextCursor) = AnswerReader.page(answer) {
            var page = Page<Model>(records: [], nextCursor: nextCursor)
            page.records.reserveCapacity(spans.count)
            for span in spans {
                if let stored = Stored<Model>(span, in: answer) {
                    page.records.append(stored)
                } else if let failure = UndecodableRecord(span, in: answer, as: Model.self) {
                    page.undecodable.append(failure)
                } else {
                    break
                }
            }
            if page.records.count + page.undecodable.count == spans.count { return page }
        }
        return page(try PageResponse(json: try JSONParser.parseObject(answer, maxDepth: JSONParser.maxAnswerDepth)))
    }

    private static func page(_ response: PageResponse) -> Page<Model> {
        var page = Page<Model>(records: [], nextCursor: response.nextCursor)
        page.records.reserveCapacity(response.records.count)
        for record in response.records {
            do throws(LarderError) {
                page.records.append(try Stored(record))
            } catch {
                page.undecodable.append(UndecodableRecord(record: record, error: error))
            }
        }
        return page
    }
}

extension LarderClient {
    /// Typed access to collection `name`, storing and loading `Model` values.
    public func collection<Model: Codable & Sendable>(
        _ name: String, of type: Model.Type = Model.self
    ) -> LarderCollection<Model> {
        LarderCollection(name: name, client: self)
    }
}
