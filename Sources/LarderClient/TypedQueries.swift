import LarderWire

extension LarderCollection {
    /// How many records match a Swift query (all of them without one).
    ///
    /// ```swift
    /// let cheap = try await purchases.count(Field("price") < 50)
    /// let inBeijing = try await students.count(containing: "北京", in: [Field("address")])
    /// ```
    ///
    /// - Parameters:
    ///   - filter: the records to count.
    ///   - text: a substring to look for in every string of a record, or in `fields` (any language, any length).
    ///   - fields: where `text` is looked for (needs `text`).
    /// - Throws: `INVALID_ARGUMENT` for a mistake in the query (an invalid field path, `fields` without `text`),
    ///   before anything is sent; the errors of COUNT otherwise.
    public func count(
        _ filter: FilterExpression? = nil, containing text: String? = nil, in fields: [Field]? = nil
    ) async throws(LarderError) -> Int {
        let query = try Self.query(filter: filter, text: text, fields: fields, order: [])
        return try await count(filter: query.filter, text: query.text)
    }

    /// Sections of the records matching a Swift query, by the value of `field`, in the order of an ascending sort on
    /// it: a catalogue's "Ball" and "Medicine" sections, each with its count and its first `perGroup` records.
    ///
    /// ```swift
    /// for section in try await items.group(by: Field("category")) {
    ///     print(section.key, section.count, section.records.map(\.value.name))
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - field: the field whose values name the sections; records without it form a section keyed `.null`.
    ///   - filter: the records to group (all of them without one).
    ///   - text: a substring to look for in every string of a record, or in `fields`.
    ///   - fields: where `text` is looked for (needs `text`).
    ///   - perGroup: how many records each section carries.
    /// - Returns: the sections; a record that does not decode as `Model` is in its section's `undecodable`.
    /// - Throws: `INVALID_ARGUMENT` for a mistake in the query, before anything is sent; the errors of GROUP
    ///   otherwise.
    public func group(
        by field: Field, _ filter: FilterExpression? = nil, containing text: String? = nil, in fields: [Field]? = nil,
        perGroup: Int = GroupRequest.defaultPerGroup
    ) async throws(LarderError) -> [Section<Model>] {
        let query = try Self.query(filter: filter, text: text, fields: fields, order: [])
        let path = try field.fieldPath(request: "field")
        return try await group(by: path.description, filter: query.filter, text: query.text, perGroup: perGroup)
    }

    /// The collection's changes as typed values, filtered by a Swift query: a record that enters or changes within
    /// the filter is `.created` or `.updated`, one that leaves it `.left`.
    ///
    /// ```swift
    /// for try await change in try await purchases.changes(matching: Field("price") < 50) {
    ///     if case .created(let purchase) = change.kind { show(purchase) }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - filter: the records to follow.
    ///   - since: a sequence number handed out before (`CollectionChange.seq`), to resume after it.
    ///   - bufferLimit: how many events may wait for the loop before the subscription resumes from the last one.
    /// - Throws: `INVALID_ARGUMENT` for a mistake in the filter, before anything is sent; the errors of
    ///   `changes(matching:since:bufferLimit:)` with a wire filter otherwise.
    public func changes(
        matching filter: FilterExpression? = nil, since: Int64? = nil, bufferLimit: Int = 10_000
    ) async throws(LarderError) -> CollectionChanges<Model> {
        let wire = try filter?.filter()
        return try await changes(matching: wire, since: since, bufferLimit: bufferLimit)
    }
}
