import LarderSchema
import LarderWire
import Testing

/// What the suites share: compiling a schema, validating a record, and spelling an expected violation.
enum SchemaCheck {
    /// The schema `json`, compiled (a test fails on a refusal).
    static func compile(_ json: JSON, sourceLocation: SourceLocation = #_sourceLocation) throws -> CollectionSchema {
        do {
            return try CollectionSchema(json: json)
        } catch {
            Issue.record("schema refused: \(error)", sourceLocation: sourceLocation)
            throw error
        }
    }

    /// The violations of `record` under `schema`, found both over the record's bytes and over its tree (which must
    /// agree).
    static func violations(_ schema: JSON, _ record: JSON, sourceLocation: SourceLocation = #_sourceLocation) throws
        -> [SchemaViolation]
    {
        let compiled = try compile(schema, sourceLocation: sourceLocation)
        let fromBytes = compiled.validate(record.bytes)
        #expect(compiled.validate(record) == fromBytes, sourceLocation: sourceLocation)
        return fromBytes
    }

    /// The error compiling `schema` throws; nil (and a failed test) when it compiles.
    static func refusal(_ schema: JSON, sourceLocation: SourceLocation = #_sourceLocation) -> SchemaError? {
        do {
            _ = try CollectionSchema(json: schema)
            Issue.record("schema compiled", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }
}

/// A violation, shorter to write.
func violation(_ pointer: String, _ keyword: String, _ expected: String, _ found: String? = nil) -> SchemaViolation {
    SchemaViolation(pointer: pointer, keyword: keyword, expected: expected, found: found)
}
