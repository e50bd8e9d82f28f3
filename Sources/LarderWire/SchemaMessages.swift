import Foundation

/// What a server does with a write whose record does not match its collection's schema (Protocol.md "Schemas").
public enum SchemaValidationAction: String, Sendable, Hashable, CaseIterable {
    /// Refuse the write: INVALID_ARGUMENT with the `violations` array.
    case error
    /// Accept the write; the server logs one line and counts it (STATS `schemaWarnings`).
    case warn
}

/// `SCHEMA_SET`: sets (or, with `schema` null, removes) a collection's schema.
package struct SchemaSetRequest: WireMessage, Equatable {
    package var collection: String
    /// The schema object; nil removes the collection's schema.
    package var schema: JSONObject?
    package var validationAction: SchemaValidationAction

    package init(collection: String, schema: JSONObject?, validationAction: SchemaValidationAction = .error) {
        self.collection = collection
        self.schema = schema
        self.validationAction = validationAction
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection", maxLength: 256)
        guard json["schema"] != nil else {
            throw .invalid("schema", "schema is required: a schema object, or null to remove the collection's schema")
        }
        schema = try r.optionalObject("schema")
        let action = try r.optionalString("validationAction", maxLength: 16) ?? "error"
        guard let parsed = SchemaValidationAction(rawValue: action) else {
            throw .invalid("validationAction", "validationAction must be \"error\" or \"warn\"")
        }
        validationAction = parsed
        try r.finish()
    }

    package var json: JSONObject {
        [
            "collection": .string(collection), "schema": schema.map { .object($0) } ?? .null,
            "validationAction": .string(validationAction.rawValue),
        ]
    }
}

/// `SCHEMA_SET` response: the schema's version, and the records already stored that do not match it.
public struct SchemaSetResponse: WireMessage, Equatable {
    /// The collection.
    public var collection: String
    /// The version of the collection's schema this call made (every SCHEMA_SET of a collection, a removal included,
    /// takes the next number).
    public var version: Int64
    /// How the collection's writes are checked from now on.
    public var validationAction: SchemaValidationAction
    /// How many of the records stored when the schema was set do not match it (0 when the schema was removed).
    public var nonMatchingCount: Int
    /// The ids of the first of them (at most `SchemaSetResponse.maxIDs`), in creation order.
    public var nonMatchingIDs: [UUID]

    /// The most ids `nonMatching.ids` lists.
    public static let maxIDs = 10

    /// A SCHEMA_SET answer with these members.
    public init(
        collection: String, version: Int64, validationAction: SchemaValidationAction, nonMatchingCount: Int,
        nonMatchingIDs: [UUID]
    ) {
        self.collection = collection
        self.version = version
        self.validationAction = validationAction
        self.nonMatchingCount = nonMatchingCount
        self.nonMatchingIDs = nonMatchingIDs
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection")
        version = try r.int("version", range: 0...Int64.max)
        validationAction = SchemaValidationAction(rawValue: try r.string("validationAction")) ?? .error
        var nonMatching = FieldReader(try r.object("nonMatching"), path: "nonMatching")
        nonMatchingCount = Int(try nonMatching.int("count", range: 0...Int64.max))
        nonMatchingIDs = try nonMatching.uuidArray("ids", maxCount: 1_000)
    }

    package var json: JSONObject {
        [
            "collection": .string(collection), "version": .int(version),
            "validationAction": .string(validationAction.rawValue),
            "nonMatching": [
                "count": .int(Int64(nonMatchingCount)), "ids": .array(nonMatchingIDs.map { .string($0.wireString) }),
            ],
        ]
    }
}

/// `SCHEMA_GET`: reads a collection's schema.
package struct SchemaGetRequest: WireMessage, Equatable {
    package var collection: String
    package init(collection: String) { self.collection = collection }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection", maxLength: 256)
        try r.finish()
    }
    package var json: JSONObject { ["collection": .string(collection)] }
}

/// `SCHEMA_GET` response: the schema as it was set (annotations included), or null when the collection has none.
public struct SchemaGetResponse: WireMessage, Equatable {
    /// The collection.
    public var collection: String
    /// The schema object; nil when the collection has no schema.
    public var schema: JSONObject?
    /// How the collection's writes are checked (`error` when it has no schema).
    public var validationAction: SchemaValidationAction
    /// The schema's version (0 when no schema was ever set).
    public var version: Int64

    /// A SCHEMA_GET answer with these members.
    public init(collection: String, schema: JSONObject?, validationAction: SchemaValidationAction, version: Int64) {
        self.collection = collection
        self.schema = schema
        self.validationAction = validationAction
        self.version = version
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection")
        schema = try r.optionalObject("schema")
        validationAction = SchemaValidationAction(rawValue: try r.string("validationAction")) ?? .error
        version = try r.optionalInt("version", range: 0...Int64.max) ?? 0
    }

    package var json: JSONObject {
        [
            "collection": .string(collection), "schema": schema.map { .object($0) } ?? .null,
            "validationAction": .string(validationAction.rawValue), "version": .int(version),
        ]
    }
}
