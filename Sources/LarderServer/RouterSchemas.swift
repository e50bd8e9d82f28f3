import Dispatch
import Foundation
import LarderSchema
import LarderStore
import LarderSync
import LarderWire

// SCHEMA_SET: compile, commit, then report the stored records that do not match.
extension Router {
    /// The records read at a time when SCHEMA_SET checks a collection's stored records against its new schema.
    static let schemaScanPage = 500

    /// Runs a SCHEMA_SET on the connection's write lane: compiles the schema there (a bad one is INVALID_ARGUMENT
    /// naming its keyword and pointer), waits for the COMMIT that stores it, then reads the collection's records in
    /// pages on reader connections (never on the writer) and answers how many do not match, with the first ids.
    func schemaSet(_ frame: Frame) throws(LarderError) -> ([UInt8], [UInt8]) {
        let request = try SchemaSetRequest(json: try frame.jsonObject())
        try CollectionName.validate(request.collection)
        let compiled = try request.schema.map { (object) throws(LarderError) in try Router.compile(.object(object), limits: schemaLimits) }
        let action = request.validationAction
        let version = try Router.waitForWrite(store) { (c) throws(LarderError) in
            try c.setSchema(request.collection, schema: compiled, action: action)
        }
        var count = 0
        var ids: [UUID] = []
        if let compiled {
            var cursor: String?
            repeat {
                let page = try store.list(request.collection, limit: Router.schemaScanPage, cursor: cursor)
                for record in page.records where !compiled.validate(record.data).isEmpty {
                    count += 1
                    if ids.count < SchemaSetResponse.maxIDs { ids.append(record.id) }
                }
                cursor = page.nextCursor
            } while cursor != nil
        }
        let response = SchemaSetResponse(
            collection: request.collection, version: version, validationAction: action, nonMatchingCount: count,
            nonMatchingIDs: ids)
        return (response.json.bytes, [])
    }

    /// `schema` compiled, or INVALID_ARGUMENT (field `schema`) with the offending keyword and its JSON Pointer in the
    /// schema (details `pointer`, `keyword`); a bound of `limits` passed is named in the message.
    static func compile(_ schema: JSON, limits: SchemaLimits) throws(LarderError) -> CollectionSchema {
        do {
            return try CollectionSchema(json: schema, limits: limits)
        } catch {
            var details: JSONObject = ["pointer": .string(error.pointer)]
            if let keyword = error.keyword { details["keyword"] = .string(keyword) }
            throw LarderError(.invalidArgument, error.description, field: "schema", details: details)
        }
    }

    /// Submits `body` to the store's writer and waits for its COMMIT (on a work-pool lane, never on a loop).
    static func waitForWrite<T: Sendable>(
        _ store: Store, _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T
    ) throws(LarderError) -> T {
        let done = DispatchSemaphore(value: 0)
        let outcome = Locked<Result<T, LarderError>?>(nil)
        store.submitWrite(body) { result in
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        let result = outcome.withLock { $0 }!
        return try result.get()
    }
}
