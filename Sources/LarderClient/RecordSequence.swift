import Foundation
import LarderWire

/// A stored record that does not decode as the app's model, e.g. one written by the CLI or by an older version of the
/// app: a typed page leaves it out of its records and reports it here, so that the records that do decode still
/// arrive.
public struct UndecodableRecord: Sendable, Equatable, CustomStringConvertible {
    /// The record as the server sent it: its envelope and its data, to show, repair or delete.
    public var record: Record
    /// Why it does not decode: status `.decodingFailed`, with the model's field at fault in `field`.
    public var error: LarderError

    /// The record's id.
    public var id: UUID { record.id }

    /// A record and the error its decoding threw.
    public init(record: Record, error: LarderError) {
        self.record = record
        self.error = error
    }

    /// The record's id and the error's message (not the record's data).
    public var description: String { "record \(id.wireString): \(error.message)" }

    /// The record of `span` in a page answer, and the error decoding it as `Model` throws; nil when its data is not a
    /// JSON object or decodes after all (the caller then reads the answer the general way).
    init?<Model: Decodable>(_ span: RecordSpan, in answer: [UInt8], as _: Model.Type) {
        guard let data = try? JSONParser.parseObject(Array(answer[span.data]), maxDepth: JSONParser.maxAnswerDepth)
        else { return nil }
        do throws(LarderError) {
            _ = try ModelCoding.decode(Model.self, from: data, id: span.id)
            return nil
        } catch {
            record = Record(
                id: span.id, rev: span.rev, createdAtMs: span.createdAt, updatedAtMs: span.updatedAt, data: data)
            self.error = error
        }
    }
}

/// Every page of a typed LIST or SEARCH, as an `AsyncSequence`: it asks for the first page when iteration starts and
/// for each next page (passing the previous page's `nextCursor`) only when the one before has been consumed.
///
/// Each page holds the records that decode (`records`) and those that do not (`undecodable`). Use it when an app
/// wants page boundaries or the undecodable records; `RecordSequence` gives the records one by one.
///
/// ```swift
/// for try await page in todos.search(Field("isFinish") == false).pages {
///     show(page.values)
///     for bad in page.undecodable { log("skipped \(bad)") }
/// }
/// ```
///
/// Iteration throws what a page request throws, and `DEADLINE_EXCEEDED` when its task is cancelled: a cancelled task
/// requests no further page. After it throws, the iterator ends.
public struct PageSequence<Model: Codable & Sendable>: AsyncSequence, Sendable {
    /// The pages' type.
    public typealias Element = Page<Model>
    /// What iteration throws.
    public typealias Failure = LarderError

    /// Where the pages come from.
    enum Source: Sendable {
        /// LIST: the collection in creation order.
        case list
        /// SEARCH with this query (its `limit` and `cursor` are set for each page), or the mistake that kept it from
        /// being built.
        case search(Result<SearchQuery, LarderError>)
    }

    /// The collection the pages are read from.
    public let collection: LarderCollection<Model>
    let source: Source
    /// The most records one page request asks for (1 to 1,000).
    public let pageSize: Int
    /// The most records read in all (those that do not decode included), or nil for every one.
    public let limit: Int?
    /// The cursor the first page continues from (a previous page's `nextCursor`), or nil for the beginning.
    public let cursor: String?

    init(collection: LarderCollection<Model>, source: Source, pageSize: Int, limit: Int?, cursor: String?) {
        self.collection = collection
        self.source = source
        self.pageSize = pageSize
        self.limit = limit
        self.cursor = cursor
    }

    /// The SEARCH query the pages send (`limit` and `cursor` aside), nil for a LIST.
    ///
    /// - Throws: `INVALID_ARGUMENT` when the query could not be built (an invalid field path, say): the error the
    ///   first page would throw.
    public func query() throws(LarderError) -> SearchQuery? {
        switch source {
        case .list: nil
        case .search(let built): try built.get()
        }
    }

    /// An iterator at the sequence's first page.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(sequence: self, cursor: cursor, remaining: limit)
    }

    /// Reads one page after another.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let sequence: PageSequence
        var cursor: String?
        var remaining: Int?
        var finished = false

        init(sequence: PageSequence, cursor: String?, remaining: Int?) {
            self.sequence = sequence
            self.cursor = cursor
            self.remaining = remaining
        }

        /// The next page, or nil after the last one (or after `limit` records).
        ///
        /// - Throws: the page request's error; `DEADLINE_EXCEEDED` when the task is cancelled, before anything is
        ///   sent; `INVALID_ARGUMENT` for a page size outside 1...1000, a negative limit, or a query that could not
        ///   be built.
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async throws(LarderError)
            -> Page<Model>?
        {
            guard !finished else { return nil }
            finished = true  // Until the page below arrives: an error ends the iteration.
            guard !Task.isCancelled else {
                throw LarderError(
                    .deadlineExceeded,
                    "reading \(sequence.collection.name) was cancelled; no further page was requested")
            }
            guard (1...maxPageLimit).contains(sequence.pageSize) else {
                throw LarderError(
                    .invalidArgument, "pageSize must be from 1 to \(maxPageLimit), not \(sequence.pageSize)",
                    field: "pageSize")
            }
            if let remaining {
                guard remaining >= 0 else {
                    throw LarderError(.invalidArgument, "limit must be 0 or more, not \(remaining)", field: "limit")
                }
                if remaining == 0 { return nil }
            }
            let size = Swift.min(sequence.pageSize, remaining ?? Int.max)
            let page = try await sequence.collection.page(of: sequence.source, limit: size, cursor: cursor)
            if let remaining { self.remaining = remaining - page.records.count - page.undecodable.count }
            cursor = page.nextCursor
            finished = cursor == nil || self.remaining.map { $0 <= 0 } == true
            return page
        }

        /// The next page, or nil after the last one (see `next(isolation:)`).
        ///
        /// - Throws: what `next(isolation:)` throws.
        public mutating func next() async throws(LarderError) -> Page<Model>? {
            try await next(isolation: nil)
        }
    }
}

/// The records of a typed LIST or SEARCH, one by one across every page, as an `AsyncSequence`: what
/// `LarderCollection.search(_:containing:in:sortedBy:limit:pageSize:cursor:)` returns.
///
/// It requests a page of `pageSize` records when iteration starts, and the next page (following the cursor) only
/// once the records of the one before have all been taken, so a loop that breaks early reads no more pages. Cursors
/// are keyset positions: records inserted or deleted meanwhile never make a record that was there throughout be
/// skipped or given twice.
///
/// ```swift
/// for try await item in items.search(Field("price") < 50, sortedBy: [Field("price").ascending]) {
///     print(item.value.name, item.value.price)
/// }
/// let everyBall = try await items.search(Field("category") == "Ball").collect()
/// ```
///
/// Records that do not decode as `Model` (written by the CLI or an older app) are not elements: the sequence goes on
/// past them. To see them, give a handler with `onUndecodable(_:)`, or iterate `pages`, whose pages list them.
///
/// Iteration throws what a page request throws (`UNAVAILABLE`, `INVALID_ARGUMENT` for a query that could not be
/// built, ...), and `DEADLINE_EXCEEDED` once its task is cancelled: a cancelled task takes no further record and
/// requests no further page.
public struct RecordSequence<Model: Codable & Sendable>: AsyncSequence, Sendable {
    /// A stored model value with its envelope.
    public typealias Element = Stored<Model>
    /// What iteration throws.
    public typealias Failure = LarderError

    /// The same records page by page, each page with the records that did not decode.
    public let pages: PageSequence<Model>
    private let report: (@Sendable (UndecodableRecord) -> Void)?

    init(pages: PageSequence<Model>, report: (@Sendable (UndecodableRecord) -> Void)? = nil) {
        self.pages = pages
        self.report = report
    }

    /// The same sequence, calling `handler` with each record that does not decode as `Model` (when its page
    /// arrives, before that page's records are given).
    ///
    /// ```swift
    /// let todos = try await todosCollection.search(Field("isFinish") == false)
    ///     .onUndecodable { bad in logger.warning("\(bad)") }
    ///     .collect()
    /// ```
    public func onUndecodable(_ handler: @escaping @Sendable (UndecodableRecord) -> Void) -> RecordSequence {
        RecordSequence(pages: pages, report: handler)
    }

    /// The first page alone, with one request: for an app that shows a page at a time. Continue with the same
    /// search and `cursor: page.nextCursor`.
    ///
    /// - Throws: the request's error, or `INVALID_ARGUMENT` for a query that could not be built.
    public func page() async throws(LarderError) -> Page<Model> {
        var iterator = pages.makeAsyncIterator()
        return try await iterator.next(isolation: nil) ?? Page(records: [], nextCursor: nil)
    }

    /// Every record of the sequence in an array, read page after page.
    ///
    /// - Throws: what iteration throws.
    public func collect() async throws(LarderError) -> [Stored<Model>] {
        var result: [Stored<Model>] = []
        var iterator = makeAsyncIterator()
        while let stored = try await iterator.next(isolation: nil) { result.append(stored) }
        return result
    }

    /// An iterator at the first record.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(pages: pages.makeAsyncIterator(), report: report)
    }

    /// Gives the records of one page after another.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var pages: PageSequence<Model>.AsyncIterator
        let report: (@Sendable (UndecodableRecord) -> Void)?
        var buffer: [Stored<Model>] = []
        var index = 0

        init(pages: PageSequence<Model>.AsyncIterator, report: (@Sendable (UndecodableRecord) -> Void)?) {
            self.pages = pages
            self.report = report
        }

        /// The next record, or nil after the last one.
        ///
        /// - Throws: the page request's error; `DEADLINE_EXCEEDED` once the task is cancelled.
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async throws(LarderError)
            -> Stored<Model>?
        {
            while true {
                guard !Task.isCancelled else {
                    buffer = []
                    pages.finished = true
                    throw LarderError(
                        .deadlineExceeded,
                        "reading \(pages.sequence.collection.name) was cancelled; no further page was requested")
                }
                if index < buffer.count {
                    index += 1
                    return buffer[index - 1]
                }
                guard let page = try await pages.next(isolation: actor) else { return nil }
                if let report { for failure in page.undecodable { report(failure) } }
                buffer = page.records
                index = 0
            }
        }

        /// The next record, or nil after the last one (see `next(isolation:)`).
        ///
        /// - Throws: what `next(isolation:)` throws.
        public mutating func next() async throws(LarderError) -> Stored<Model>? {
            try await next(isolation: nil)
        }
    }
}

extension LarderCollection {
    /// The values matching a Swift query, streamed across every page: `for try await item in items.search(...)`.
    ///
    /// ```swift
    /// let items = client.collection("items", of: Item.self)
    /// for try await item in items.search(
    ///     Field("price") < 50 && Field("category").in(["Ball", "Medicine"]),
    ///     sortedBy: [Field("price").descending], limit: 20
    /// ) {
    ///     print(item.value.name)
    /// }
    /// let students = try await register.search(containing: "北京", in: [Field("address")]).collect()
    /// ```
    ///
    /// Nothing is sent until iteration starts (or `page()` / `collect()` is called); see `RecordSequence` for how
    /// pages are requested, cancelled and how records that do not decode are reported.
    ///
    /// - Parameters:
    ///   - filter: the condition records must meet (nil: every record).
    ///   - text: a substring every match contains, in any case and script, in any string of the record or, with
    ///     `fields`, in those fields (including strings inside arrays and objects they hold). `Field.contains`
    ///     instead tests one string field within a filter.
    ///   - fields: where `text` is looked for (at most 32 data fields; needs `text`).
    ///   - order: sort keys, first the most significant (at most 8); the id breaks ties. Without them, id order.
    ///   - limit: the most records read in all (nil: every match).
    ///   - pageSize: the most records one request asks for, 1 to 1,000 (default 100).
    ///   - cursor: a `nextCursor` of an earlier page of this same search, to continue from there.
    /// - Returns: the records as an `AsyncSequence` (`pages` gives them page by page). A mistake in the query (an
    ///   invalid field path, `fields` without `text`, more than 8 sort keys) is thrown as `INVALID_ARGUMENT` by the
    ///   first `next()`, before anything is sent.
    public func search(
        _ filter: FilterExpression? = nil, containing text: String? = nil, in fields: [Field]? = nil,
        sortedBy order: [Ordering] = [], limit: Int? = nil, pageSize: Int = 100, cursor: String? = nil
    ) -> RecordSequence<Model> {
        let query = Result { () throws(LarderError) -> SearchQuery in
            try Self.query(filter: filter, text: text, fields: fields, order: order)
        }
        return RecordSequence(
            pages: PageSequence(
                collection: self, source: .search(query), pageSize: pageSize, limit: limit, cursor: cursor))
    }

    /// The wire query of a Swift one, checked as the server would check it.
    static func query(
        filter: FilterExpression?, text: String?, fields: [Field]?, order: [Ordering]
    ) throws(LarderError) -> SearchQuery {
        var json: JSONObject = [:]
        if let filter { json["filter"] = try filter.filter().json }
        if let text {
            var textJSON: JSONObject = ["query": .string(text)]
            if let fields {
                var paths: [JSON] = []
                for field in fields { paths.append(.string(try field.fieldPath(request: "text.fields").description)) }
                textJSON["fields"] = .array(paths)
            }
            json["text"] = .object(textJSON)
        } else if fields != nil {
            throw LarderError(
                .invalidArgument, "search(in:) names where to look for text: give the text with containing:",
                field: "text.fields")
        }
        if !order.isEmpty {
            var keys: [JSON] = []
            for ordering in order { keys.append(try ordering.sortKey().json) }
            json["sort"] = .array(keys)
        }
        // The JSON form's parser holds every rule and limit; its errors name the member at fault.
        return try SearchQuery(json: json)
    }

    /// One page of `source`: at most `limit` records after `cursor`.
    func page(of source: PageSequence<Model>.Source, limit: Int, cursor: String?) async throws(LarderError)
        -> Page<Model>
    {
        switch source {
        case .list:
            return try await list(limit: limit, cursor: cursor)
        case .search(let built):
            var query = try built.get()
            query.limit = limit
            query.cursor = cursor
            return try await search(query)
        }
    }
}
