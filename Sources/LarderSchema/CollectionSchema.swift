import LarderWire

/// A collection's schema, compiled: a subset of JSON Schema (2020-12) that covers what apps need and nothing that is
/// slow to check. Compile it once when the schema is set (`init(json:)`), then `validate` each record written.
///
/// The keywords, and nothing else (any other member of a schema object is refused, by name, when the schema is
/// compiled; a subschema may also be `true` or `false`):
///
/// - `type`: one of `null`, `boolean`, `object`, `array`, `number`, `string`, `integer`, or a list of them.
///   `integer` is a number without a fraction, `1.0` included.
/// - `properties` (an object of subschemas), `required` (an array of distinct names; a missing one is reported at
///   the pointer it would have, `/title`), `additionalProperties` (a boolean only; `false` reports each member not
///   in `properties`).
/// - `enum` (a non-empty array), `const`: compared by JSON equality, so `1` equals `1.0` and an object's member
///   order does not matter.
/// - `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (numbers, compared exactly).
/// - `minLength`, `maxLength`: in characters, that is Unicode code points.
/// - `pattern`: a regular expression (PCRE2, close to ECMA-262), unanchored, matched under a step limit: a match
///   that reaches the limit is a violation that says so.
/// - `items` (one subschema for every element), `minItems`, `maxItems`.
/// - `format`: `uuid` (RFC 9562's text form) or `date-time` (RFC 3339). Unlike JSON Schema's default, where a
///   format is only an annotation, here it is an assertion: a value not of its format is a violation.
///
/// Annotations, kept in `json` and never checked against a record: `title`, `description` and `$comment` (strings),
/// and `$schema`, which may only name the 2020-12 dialect (`CollectionSchema.dialect`), in any subschema.
///
/// A keyword that concerns one type (`minLength`, `properties`, ...) ignores values of other types, as in JSON
/// Schema; `type` is what refuses them.
///
/// Hostile schemas are refused when compiled, past the bounds of `SchemaLimits` (defaults below): subschemas nested
/// deeper than `maxDepth`, more than `maxNodes` subschemas, an `enum` of more than `maxEnumValues` values, more than
/// `maxConstantValues` JSON values in all of the `enum`s and `const`s, a `pattern` longer than `maxPatternBytes` or
/// more than `maxPatterns` patterns, a `required` of more than `maxRequired` names.
public struct CollectionSchema: Sendable {
    /// The schema as it was given.
    public let json: JSON
    /// The compiled root.
    let root: SchemaNode

    /// The bounds this schema was compiled under (`SchemaLimits`; a server's are configurable).
    public let limits: SchemaLimits
    /// The default deepest nesting of subschemas (through `properties` and `items`); the root is level 0.
    public static let maxDepth = SchemaLimits.default.maxDepth
    /// The default most subschemas in one schema, the root included.
    public static let maxNodes = SchemaLimits.default.maxNodes
    /// The default most values in one `enum`.
    public static let maxEnumValues = SchemaLimits.default.maxEnumValues
    /// The default most JSON values (each element and member counted) in all the `enum` and `const` values.
    public static let maxConstantValues = SchemaLimits.default.maxConstantValues
    /// The default longest `pattern`, in UTF-8 bytes.
    public static let maxPatternBytes = SchemaLimits.default.maxPatternBytes
    /// The default most `pattern`s in one schema.
    public static let maxPatterns = SchemaLimits.default.maxPatterns
    /// The default most names in one `required`.
    public static let maxRequired = SchemaLimits.default.maxRequired
    /// The most violations `validate` reports; it stops at the last.
    public static let maxViolations = 20
    /// The one dialect `$schema` may name: JSON Schema 2020-12.
    public static let dialect = "https://json-schema.org/draft/2020-12/schema"

    /// Compiles `json` within `limits`; throws `SchemaError` naming the first keyword refused (unsupported, of the
    /// wrong type, or past a limit) and where it is in the schema.
    public init(json: JSON, limits: SchemaLimits = .default) throws(SchemaError) {
        var compiler = SchemaCompiler(limits: limits)
        root = try compiler.node(json, at: "", depth: 0)
        self.json = json
        self.limits = limits
    }
}

/// Reads a schema's JSON into `SchemaNode`s, counting what the limits bound.
struct SchemaCompiler {
    /// The bounds.
    let limits: SchemaLimits
    /// Subschemas read so far.
    private var nodes = 0
    /// JSON values in `enum` and `const` values so far.
    private var constants = 0
    /// Patterns compiled so far.
    private var patterns = 0

    /// A compiler of one schema within `limits`.
    init(limits: SchemaLimits) { self.limits = limits }

    /// The keywords a schema object may have.
    static let keywords: Set<String> = [
        "type", "properties", "required", "additionalProperties", "enum", "const", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "items", "minItems", "maxItems",
        "format",
    ]

    /// The annotations a schema object may have: kept, not checked against records.
    static let annotations: Set<String> = ["$schema", "title", "description", "$comment"]

    /// The node of the subschema `json`, found at `pointer` in the schema, `depth` subschemas down.
    mutating func node(_ json: JSON, at pointer: String, depth: Int) throws(SchemaError) -> SchemaNode {
        nodes += 1
        guard nodes <= limits.maxNodes else {
            throw SchemaError(
                pointer: pointer, keyword: nil,
                message: "the schema has more than \(limits.maxNodes) subschemas")
        }
        switch json {
        case .bool(true): return SchemaNode()
        case .bool(false): return SchemaNode(refusesAll: true)
        case .object: break
        default:
            throw SchemaError(
                pointer: pointer, keyword: nil,
                message: "a schema must be an object or a boolean, not \(json.typeNameWithArticle)")
        }
        let object = json.objectValue!
        for key in object.keys where Self.annotations.contains(key) {
            try checkAnnotation(key, object[key]!, at: pointer + "/" + key)
        }
        for key in object.keys where !Self.keywords.contains(key) && !Self.annotations.contains(key) {
            throw SchemaError(
                pointer: pointer + "/" + pointerToken(key), keyword: key,
                message: "the keyword \(key) is not supported (supported: "
                    + Self.keywords.sorted().joined(separator: ", ") + ")")
        }
        let reader = KeywordReader(object: object, pointer: pointer)
        let (types, typeExpected) = try reader.types()
        let required = try reader.required(maxNames: limits.maxRequired)
        var members: [NamedMember] = []
        var declared = Set<String>()
        if let properties = try reader.object("properties") {
            try checkDepth(depth, pointer + "/properties", "properties")
            for (name, subschema) in properties {
                let child = try node(subschema, at: pointer + "/properties/" + pointerToken(name), depth: depth + 1)
                declared.insert(name)
                members.append(
                    NamedMember(
                        name: Array(name.utf8), schema: child.acceptsAll ? nil : child, declared: true,
                        requiredIndex: required.firstIndex(of: name) ?? -1))
            }
        }
        for (index, name) in required.enumerated() where !declared.contains(name) {
            members.append(NamedMember(name: Array(name.utf8), schema: nil, declared: false, requiredIndex: index))
        }
        var items: SchemaNode?
        if let value = object["items"] {
            if case .array = value {
                throw SchemaError(
                    pointer: pointer + "/items", keyword: "items",
                    message: "items must be one schema for every element "
                        + "(an array of schemas is prefixItems, which is not supported)")
            }
            try checkDepth(depth, pointer + "/items", "items")
            let child = try node(value, at: pointer + "/items", depth: depth + 1)
            items = child.acceptsAll ? nil : child
        }
        var pattern: SchemaPattern?
        if let source = try reader.string("pattern") {
            pattern = try compilePattern(source, at: pointer + "/pattern")
        }
        return SchemaNode(
            types: types, typeExpected: typeExpected, members: members, required: required,
            additionalProperties: try reader.bool("additionalProperties") ?? true,
            enumValues: try enumValues(object["enum"], at: pointer + "/enum"),
            constValue: try constValue(object["const"], at: pointer + "/const"),
            minimum: try reader.number("minimum"), maximum: try reader.number("maximum"),
            exclusiveMinimum: try reader.number("exclusiveMinimum"),
            exclusiveMaximum: try reader.number("exclusiveMaximum"),
            minLength: try reader.count("minLength"), maxLength: try reader.count("maxLength"), pattern: pattern,
            format: try reader.format(), items: items, minItems: try reader.count("minItems"),
            maxItems: try reader.count("maxItems"))
    }

    /// Checks an annotation's value: a string, and for `$schema` the 2020-12 dialect's URI.
    private func checkAnnotation(_ key: String, _ value: JSON, at pointer: String) throws(SchemaError) {
        guard let text = value.stringValue else {
            throw SchemaError(
                pointer: pointer, keyword: key, message: "\(key) must be a string, not \(value.typeNameWithArticle)")
        }
        guard key != "$schema" || text == CollectionSchema.dialect else {
            throw SchemaError(
                pointer: pointer, keyword: key,
                message: "$schema names \(Rendering.string(text)); the only dialect supported is "
                    + "\(CollectionSchema.dialect) (or leave $schema out)")
        }
    }

    /// Throws when a subschema under `keyword` at `pointer` would pass `maxDepth`.
    private func checkDepth(_ depth: Int, _ pointer: String, _ keyword: String) throws(SchemaError) {
        guard depth < limits.maxDepth else {
            throw SchemaError(
                pointer: pointer, keyword: keyword,
                message: "subschemas are nested more than \(limits.maxDepth) levels deep")
        }
    }

    /// `pattern`, compiled.
    private mutating func compilePattern(_ source: String, at pointer: String) throws(SchemaError) -> SchemaPattern {
        patterns += 1
        guard patterns <= limits.maxPatterns else {
            throw SchemaError(
                pointer: pointer, keyword: "pattern",
                message: "the schema has more than \(limits.maxPatterns) patterns")
        }
        guard source.utf8.count <= limits.maxPatternBytes else {
            throw SchemaError(
                pointer: pointer, keyword: "pattern",
                message: "pattern is \(source.utf8.count) bytes long; the limit is \(limits.maxPatternBytes)")
        }
        do {
            return try SchemaPattern(source, matchSteps: limits.patternMatchSteps)
        } catch {
            throw SchemaError(
                pointer: pointer, keyword: "pattern",
                message: "pattern is not a valid regular expression: \(error.message) at byte \(error.offset)")
        }
    }

    /// `enum`: a non-empty array of at most `maxEnumValues` values.
    private mutating func enumValues(_ value: JSON?, at pointer: String) throws(SchemaError) -> ConstantSet? {
        guard let value else { return nil }
        guard case .array(let values) = value, !values.isEmpty else {
            throw SchemaError(pointer: pointer, keyword: "enum", message: "enum must be a non-empty array of values")
        }
        guard values.count <= limits.maxEnumValues else {
            throw SchemaError(
                pointer: pointer, keyword: "enum",
                message: "enum has \(values.count) values; the limit is \(limits.maxEnumValues)")
        }
        for element in values { try countConstant(element, at: pointer, keyword: "enum", depth: 0) }
        let listed = Rendering.value(value, limit: Int.max)
        let expected = listed.utf8.count <= 100 ? "one of \(listed)" : "one of the \(values.count) values of enum"
        return ConstantSet(values, expected: expected)
    }

    /// `const`: any value.
    private mutating func constValue(_ value: JSON?, at pointer: String) throws(SchemaError) -> ConstantSet? {
        guard let value else { return nil }
        try countConstant(value, at: pointer, keyword: "const", depth: 0)
        return ConstantSet([value], expected: Rendering.value(value))
    }

    /// Counts `value`'s JSON values against `maxConstantValues`, and its nesting against `maxDepth`.
    private mutating func countConstant(_ value: JSON, at pointer: String, keyword: String, depth: Int)
        throws(SchemaError)
    {
        constants += 1
        guard constants <= limits.maxConstantValues, depth <= limits.maxDepth else {
            throw SchemaError(
                pointer: pointer, keyword: keyword,
                message: "the enum and const values hold more than \(limits.maxConstantValues) JSON values "
                    + "or nest more than \(limits.maxDepth) levels deep")
        }
        switch value {
        case .array(let elements):
            for element in elements { try countConstant(element, at: pointer, keyword: keyword, depth: depth + 1) }
        case .object(let object):
            for (_, member) in object { try countConstant(member, at: pointer, keyword: keyword, depth: depth + 1) }
        default: break
        }
    }
}

/// Reads the simple keywords of one schema object, each of its type or a `SchemaError`.
private struct KeywordReader {
    /// The schema object.
    let object: JSONObject
    /// Its JSON Pointer in the whole schema.
    let pointer: String

    /// The error for `keyword` when its value is not `what`.
    func wrong(_ keyword: String, _ what: String) -> SchemaError {
        SchemaError(
            pointer: pointer + "/" + keyword, keyword: keyword,
            message: "\(keyword) must be \(what), not \(object[keyword]!.typeNameWithArticle)")
    }

    /// `type`: a name or a non-empty array of distinct names; and the names joined, for violations.
    func types() throws(SchemaError) -> (TypeSet?, String) {
        guard let value = object["type"] else { return (nil, "") }
        let names: [JSON]
        switch value {
        case .string: names = [value]
        case .array(let list) where !list.isEmpty: names = list
        default: throw wrong("type", "a type name or a non-empty array of them")
        }
        var types: TypeSet = []
        var listed: [String] = []
        for name in names {
            guard let text = name.stringValue, let type = TypeSet.names[text] else {
                throw SchemaError(
                    pointer: pointer + "/type", keyword: "type",
                    message: "type names must be among null, boolean, object, array, number, string, integer; "
                        + "found \(Rendering.value(name))")
            }
            guard !listed.contains(text) else {
                throw SchemaError(pointer: pointer + "/type", keyword: "type", message: "type lists \(text) twice")
            }
            types.insert(type)
            listed.append(text)
        }
        return (types, listed.joined(separator: " or "))
    }

    /// `required`: an array of at most `maxNames` distinct strings.
    func required(maxNames: Int) throws(SchemaError) -> [String] {
        guard let value = object["required"] else { return [] }
        guard case .array(let list) = value else { throw wrong("required", "an array of member names") }
        guard list.count <= maxNames else {
            throw SchemaError(
                pointer: pointer + "/required", keyword: "required",
                message: "required has \(list.count) names; the limit is \(maxNames)")
        }
        var names: [String] = []
        var seen = Set<String>()
        for element in list {
            guard let name = element.stringValue else {
                throw SchemaError(
                    pointer: pointer + "/required", keyword: "required",
                    message: "required must hold member names (strings), not \(element.typeNameWithArticle)")
            }
            guard seen.insert(name).inserted else {
                throw SchemaError(
                    pointer: pointer + "/required", keyword: "required",
                    message: "required lists \(Rendering.string(name)) twice")
            }
            names.append(name)
        }
        return names
    }

    /// The value of `keyword` as `convert` reads it (nil when absent); a value it cannot read is refused as not
    /// being `what`.
    func read<T>(_ keyword: String, _ what: String, _ convert: (JSON) -> T?) throws(SchemaError) -> T? {
        guard let value = object[keyword] else { return nil }
        guard let converted = convert(value) else { throw wrong(keyword, what) }
        return converted
    }

    /// An object-valued keyword (`properties`).
    func object(_ keyword: String) throws(SchemaError) -> JSONObject? {
        try read(keyword, "an object of schemas") { $0.objectValue }
    }

    /// A string-valued keyword (`pattern`).
    func string(_ keyword: String) throws(SchemaError) -> String? { try read(keyword, "a string") { $0.stringValue } }

    /// A boolean-valued keyword (`additionalProperties`, where a schema is not supported).
    func bool(_ keyword: String) throws(SchemaError) -> Bool? {
        try read(keyword, "a boolean (a schema there is not supported)") { $0.boolValue }
    }

    /// A number-valued keyword (`minimum`, ...).
    func number(_ keyword: String) throws(SchemaError) -> SchemaNumber? {
        try read(keyword, "a number") { SchemaNumber($0) }
    }

    /// A count (`minLength`, `maxItems`, ...): a non-negative integer (`2.0` is one).
    func count(_ keyword: String) throws(SchemaError) -> Int? {
        guard let value = object[keyword] else { return nil }
        if let count = value.intValue, count >= 0, count <= Int32.max { return Int(count) }
        guard SchemaNumber(value) == nil else {
            throw SchemaError(
                pointer: pointer + "/" + keyword, keyword: keyword,
                message: "\(keyword) must be a non-negative integer of at most \(Int32.max), "
                    + "not \(Rendering.value(value))")
        }
        throw wrong(keyword, "a non-negative integer")
    }

    /// `format`: `uuid` or `date-time`.
    func format() throws(SchemaError) -> SchemaFormat? {
        guard let name = try string("format") else { return nil }
        guard let format = SchemaFormat(rawValue: name) else {
            throw SchemaError(
                pointer: pointer + "/format", keyword: "format",
                message: "the format \(Rendering.string(name)) is not supported (supported: uuid, date-time)")
        }
        return format
    }
}
