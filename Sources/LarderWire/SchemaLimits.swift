/// The bounds a collection schema (SCHEMA_SET) must stay within when it is compiled, and the step bound of each
/// `pattern` match; a server announces them in HELLO's limits (Protocol.md sections 5.9 and 8).
public struct SchemaLimits: Sendable, Equatable {
    /// The deepest nesting of subschemas (through `properties` and `items`), and of `enum`/`const` values; the root
    /// is level 0.
    public var maxDepth: Int
    /// The most subschemas in one schema, the root included.
    public var maxNodes: Int
    /// The most values in one `enum`.
    public var maxEnumValues: Int
    /// The most JSON values (each element and member counted) in all the `enum` and `const` values of a schema.
    public var maxConstantValues: Int
    /// The longest `pattern`, in UTF-8 bytes.
    public var maxPatternBytes: Int
    /// The most `pattern`s in one schema.
    public var maxPatterns: Int
    /// The most names in one `required`.
    public var maxRequired: Int
    /// The most backtracking steps one `pattern` match may take before it gives up (a violation that says so).
    public var patternMatchSteps: Int

    /// Bounds with these values; each default is the one Protocol.md documents (`SchemaLimits.default`).
    public init(
        maxDepth: Int = 32, maxNodes: Int = 2_000, maxEnumValues: Int = 1_000, maxConstantValues: Int = 10_000,
        maxPatternBytes: Int = 1_000, maxPatterns: Int = 100, maxRequired: Int = 1_000,
        patternMatchSteps: Int = 1_000_000
    ) {
        self.maxDepth = maxDepth
        self.maxNodes = maxNodes
        self.maxEnumValues = maxEnumValues
        self.maxConstantValues = maxConstantValues
        self.maxPatternBytes = maxPatternBytes
        self.maxPatterns = maxPatterns
        self.maxRequired = maxRequired
        self.patternMatchSteps = patternMatchSteps
    }

    /// The defaults documented in Protocol.md.
    public static let `default` = SchemaLimits()

    /// The largest `patternMatchSteps` a server takes (PCRE2 counts steps in 32 bits).
    public static let maxPatternMatchSteps = Int(UInt32.max)

    /// These limits with the compile-time bounds lifted and `patternMatchSteps` kept: for a schema a store already
    /// accepted under its server's limits when it was set, read back from the database.
    public var lifted: SchemaLimits {
        SchemaLimits(
            maxDepth: Int.max, maxNodes: Int.max, maxEnumValues: Int.max, maxConstantValues: Int.max,
            maxPatternBytes: Int.max, maxPatterns: Int.max, maxRequired: Int.max, patternMatchSteps: patternMatchSteps)
    }

    /// The names (as announced in HELLO's limits) and values.
    package var named: [(String, Int)] {
        [
            ("maxSchemaDepth", maxDepth), ("maxSchemaNodes", maxNodes), ("maxSchemaEnumValues", maxEnumValues),
            ("maxSchemaConstantValues", maxConstantValues), ("maxSchemaPatternBytes", maxPatternBytes),
            ("maxSchemaPatterns", maxPatterns), ("maxSchemaRequired", maxRequired),
            ("schemaPatternMatchSteps", patternMatchSteps),
        ]
    }

    /// Sets the limit announced as `name`; false when there is none of that name.
    package mutating func set(_ name: String, _ value: Int) -> Bool {
        switch name {
        case "maxSchemaDepth": maxDepth = value
        case "maxSchemaNodes": maxNodes = value
        case "maxSchemaEnumValues": maxEnumValues = value
        case "maxSchemaConstantValues": maxConstantValues = value
        case "maxSchemaPatternBytes": maxPatternBytes = value
        case "maxSchemaPatterns": maxPatterns = value
        case "maxSchemaRequired": maxRequired = value
        case "schemaPatternMatchSteps": patternMatchSteps = value
        default: return false
        }
        return true
    }
}
