// Collection schemas (Protocol.md section 5.9): set, read and remove a collection's schema. A write the schema refuses
// throws INVALID_ARGUMENT whose `LarderError.violations` lists what did not match.

extension LarderClient {
    /// Sets `collection`'s schema (a JSON Schema 2020-12 subset, Protocol.md section 5.9): from then on every CREATE,
    /// REPLACE and PATCH of the collection, through any server of the store, must match it. Answers the schema's
    /// version and the records already stored that do not match (they are left as they are).
    ///
    /// ```swift
    /// let set = try await client.setSchema("todos", ["type": "object", "required": ["title"],
    ///     "properties": ["title": ["type": "string", "minLength": 1]]])
    /// print(set.nonMatchingCount, set.nonMatchingIDs)
    /// ```
    ///
    /// - Parameter validationAction: `.error` refuses a record that does not match (the default); `.warn` stores it,
    ///   and the server logs and counts it.
    /// - Throws: `INVALID_ARGUMENT` (field `schema`, details `pointer` and `keyword`) for a schema the server does not
    ///   support, or a bad collection name; `PERMISSION_DENIED` for a token that is not `admin` or not given the
    ///   collection; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    @discardableResult
    public func setSchema(
        _ collection: String, _ schema: JSONObject, validationAction: SchemaValidationAction = .error
    ) async throws(LarderError) -> SchemaSetResponse {
        try await message(
            SchemaSetResponse.self, .schemaSet,
            SchemaSetRequest(collection: collection, schema: schema, validationAction: validationAction).json)
    }

    /// Removes `collection`'s schema: its writes are no longer checked.
    ///
    /// - Throws: as `setSchema`.
    @discardableResult
    public func removeSchema(_ collection: String) async throws(LarderError) -> SchemaSetResponse {
        try await message(
            SchemaSetResponse.self, .schemaSet, SchemaSetRequest(collection: collection, schema: nil).json)
    }

    /// `collection`'s schema as it was set (annotations included), its validation action and its version;
    /// `schema` is nil when the collection has none.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a bad collection name; `PERMISSION_DENIED` for a token that is not `admin` or
    ///   not given the collection; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request.
    public func schema(_ collection: String) async throws(LarderError) -> SchemaGetResponse {
        try await message(SchemaGetResponse.self, .schemaGet, SchemaGetRequest(collection: collection).json)
    }
}

extension LarderCollection {
    /// Sets this collection's schema; see `LarderClient.setSchema(_:_:validationAction:)`. A write of a value whose
    /// record does not match then throws INVALID_ARGUMENT with `error.violations`.
    ///
    /// ```swift
    /// try await todos.setSchema(["type": "object", "required": ["title"]])
    /// do { try await todos.create(Todo(title: "")) } catch { print(error.violations) }
    /// ```
    ///
    /// - Throws: as `LarderClient.setSchema`.
    @discardableResult
    public func setSchema(_ schema: JSONObject, validationAction: SchemaValidationAction = .error)
        async throws(LarderError) -> SchemaSetResponse
    {
        try await client.setSchema(name, schema, validationAction: validationAction)
    }

    /// This collection's schema, its validation action and version (`schema` nil when it has none).
    ///
    /// - Throws: as `LarderClient.schema`.
    public func schema() async throws(LarderError) -> SchemaGetResponse { try await client.schema(name) }

    /// Removes this collection's schema.
    ///
    /// - Throws: as `LarderClient.removeSchema`.
    @discardableResult
    public func removeSchema() async throws(LarderError) -> SchemaSetResponse { try await client.removeSchema(name) }
}
