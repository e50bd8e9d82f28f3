import LarderWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A JSON number as a schema compares it: exactly, an integer against a double included.
enum SchemaNumber: Sendable, Hashable, CustomStringConvertible {
    /// An integer that fits in 64 bits.
    case int(Int64)
    /// Any other finite number.
    case double(Double)

    /// The number of a JSON value, or nil when it is not a number.
    init?(_ value: JSON) {
        switch value {
        case .int(let i): self = .int(i)
        case .double(let d): self = .double(d)
        default: return nil
        }
    }

    /// Whether the number is an integer (`1.0` is, as JSON Schema says).
    var isInteger: Bool {
        switch self {
        case .int: true
        case .double(let d): d.isFinite && d.rounded(.towardZero) == d
        }
    }

    /// The number as the schema wrote it: `0`, `0.5`, `1e+20`.
    var description: String {
        switch self {
        case .int(let i): String(i)
        case .double(let d): d.description
        }
    }

    /// -1, 0 or 1 as `self` is less than, equal to or greater than `other`, exactly (no rounding of a large integer to
    /// a double).
    func compare(_ other: SchemaNumber) -> Int {
        switch (self, other) {
        case (.int(let a), .int(let b)): a < b ? -1 : (a == b ? 0 : 1)
        case (.double(let a), .double(let b)): a < b ? -1 : (a == b ? 0 : 1)
        case (.int(let a), .double(let b)): Self.compare(a, b)
        case (.double(let a), .int(let b)): -Self.compare(b, a)
        }
    }

    /// `compare` of an integer with a double.
    private static func compare(_ a: Int64, _ b: Double) -> Int {
        if b >= 9_223_372_036_854_775_808.0 { return -1 }
        if b < -9_223_372_036_854_775_808.0 { return 1 }
        let floor = b.rounded(.down)
        let whole = Int64(floor)
        if a != whole { return a < whole ? -1 : 1 }
        return b > floor ? -1 : 0
    }
}

/// JSON equality as JSON Schema defines it: numbers by value (`1` equals `1.0`), objects by members whatever their
/// order, arrays element by element.
func jsonEqual(_ a: JSON, _ b: JSON) -> Bool {
    switch (a, b) {
    case (.null, .null): return true
    case (.bool(let x), .bool(let y)): return x == y
    case (.string(let x), .string(let y)): return x.utf8.elementsEqual(y.utf8)
    case (.int, _), (.double, _):
        guard let x = SchemaNumber(a), let y = SchemaNumber(b) else { return false }
        return x.compare(y) == 0
    case (.array(let x), .array(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { jsonEqual($0, $1) }
    case (.object(let x), .object(let y)):
        guard x.count == y.count else { return false }
        for (key, value) in x {
            guard let other = y[key], jsonEqual(value, other) else { return false }
        }
        return true
    default: return false
    }
}

/// The values of an `enum` (or the one of a `const`), arranged to be found without building the record's value:
/// strings as sorted UTF-8, numbers, literals as flags; only an object or array value keeps its tree.
struct ConstantSet: Sendable {
    /// The string values' UTF-8, sorted bytewise.
    let strings: [[UInt8]]
    /// The number values.
    let numbers: [SchemaNumber]
    /// Whether `null`, `true` and `false` are among the values.
    let null: Bool, `true`: Bool, `false`: Bool
    /// The object and array values.
    let containers: [JSON]
    /// What a violation says was expected.
    let expected: String

    /// The set of `values`; `expected` as a violation words it.
    init(_ values: [JSON], expected: String) {
        var strings: [[UInt8]] = []
        var numbers: [SchemaNumber] = []
        var containers: [JSON] = []
        var flags = (null: false, true: false, false: false)
        for value in values {
            switch value {
            case .null: flags.null = true
            case .bool(let b): if b { flags.true = true } else { flags.false = true }
            case .int, .double: numbers.append(SchemaNumber(value)!)
            case .string(let s): strings.append(Array(s.utf8))
            case .array, .object: containers.append(value)
            }
        }
        self.strings = strings.sorted { $0.lexicographicallyPrecedes($1) }
        self.numbers = numbers
        self.containers = containers
        (self.null, self.true, self.false) = (flags.null, flags.true, flags.false)
        self.expected = expected
    }

    /// Whether the string whose UTF-8 is `bytes` is one of the values (binary search).
    func contains(string bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var low = 0
        var high = strings.count
        while low < high {
            let mid = (low + high) / 2
            let order = strings[mid].withUnsafeBufferPointer { compareBytes($0, bytes) }
            if order == 0 { return true }
            if order < 0 { low = mid + 1 } else { high = mid }
        }
        return false
    }

    /// Whether `number` equals one of the values.
    func contains(number: SchemaNumber) -> Bool { numbers.contains { $0.compare(number) == 0 } }

    /// Whether the object or array `value` equals one of the values.
    func contains(container value: JSON) -> Bool { containers.contains { jsonEqual($0, value) } }
}

/// -1, 0 or 1 as `a` sorts before, with or after `b`, bytewise (shorter first on a common prefix).
func compareBytes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
    let common = min(a.count, b.count)
    if common > 0, let pa = a.baseAddress, let pb = b.baseAddress {
        let order = memcmp(pa, pb, common)
        if order != 0 { return order < 0 ? -1 : 1 }
    }
    return a.count < b.count ? -1 : (a.count == b.count ? 0 : 1)
}

/// The JSON types a `type` keyword names, as bits.
struct TypeSet: OptionSet, Sendable {
    /// One bit per type.
    let rawValue: UInt8
    /// `null`.
    static let null = TypeSet(rawValue: 1)
    /// `true` or `false`.
    static let boolean = TypeSet(rawValue: 2)
    /// An object.
    static let object = TypeSet(rawValue: 4)
    /// An array.
    static let array = TypeSet(rawValue: 8)
    /// Any number.
    static let number = TypeSet(rawValue: 16)
    /// A string.
    static let string = TypeSet(rawValue: 32)
    /// A number with no fraction; `number` includes it.
    static let integer = TypeSet(rawValue: 64)

    /// The type of each name JSON Schema gives one.
    static let names: [String: TypeSet] = [
        "null": .null, "boolean": .boolean, "object": .object, "array": .array, "number": .number,
        "string": .string, "integer": .integer,
    ]
}

/// The formats a schema asserts.
enum SchemaFormat: String, Sendable {
    /// RFC 9562's text form: 8-4-4-4-12 hex digits, either case.
    case uuid
    /// RFC 3339's `date-time`: `2024-05-01T12:30:00Z`, `…:00.5+08:00`.
    case dateTime = "date-time"

    /// What a violation says was expected.
    var expected: String {
        switch self {
        case .uuid: "a uuid (RFC 9562)"
        case .dateTime: "a date-time (RFC 3339)"
        }
    }
}

/// One member name an object schema knows: a property's (with its subschema) or a required one's, or both.
struct NamedMember: Sendable {
    /// The name's UTF-8.
    let name: [UInt8]
    /// The property's subschema; nil when the name is only required.
    let schema: SchemaNode?
    /// Whether the name is in `properties` (so `additionalProperties: false` allows it).
    let declared: Bool
    /// Its position in `required`, or -1.
    let requiredIndex: Int
}

/// A compiled schema (or subschema): each keyword read once into the form validation uses.
final class SchemaNode: Sendable {
    /// `false` as a schema: nothing is valid here.
    let refusesAll: Bool
    /// Nothing to check (`true`, `{}`): the value is skipped.
    let acceptsAll: Bool
    /// `type`.
    let types: TypeSet?
    /// `type`'s names as the schema listed them, joined by "or": what a violation expected.
    let typeExpected: String
    /// `properties` and `required`, by name (sorted bytewise for binary search).
    let members: [NamedMember]
    /// `required`, in the schema's order.
    let required: [String]
    /// `additionalProperties`.
    let additionalProperties: Bool
    /// `enum`.
    let enumValues: ConstantSet?
    /// `const`.
    let constValue: ConstantSet?
    /// `minimum` and `maximum` (inclusive).
    let minimum: SchemaNumber?, maximum: SchemaNumber?
    /// `exclusiveMinimum` and `exclusiveMaximum`.
    let exclusiveMinimum: SchemaNumber?, exclusiveMaximum: SchemaNumber?
    /// `minLength` and `maxLength`, in code points.
    let minLength: Int?, maxLength: Int?
    /// `pattern`.
    let pattern: SchemaPattern?
    /// `format`.
    let format: SchemaFormat?
    /// `items` (nil when it accepts everything).
    let items: SchemaNode?
    /// `minItems` and `maxItems`.
    let minItems: Int?, maxItems: Int?
    /// Whether anything looks inside an object (`properties`, `required`, `additionalProperties: false`).
    let checksMembers: Bool
    /// Whether a number's value matters (`integer` in `type`, a bound).
    let checksNumbers: Bool
    /// Whether a string's content matters (`minLength`, `maxLength`, `pattern`, `format`).
    let checksStrings: Bool

    /// The node the compiler read; every argument is one keyword's value (nil: absent).
    init(
        refusesAll: Bool = false, types: TypeSet? = nil, typeExpected: String = "", members: [NamedMember] = [],
        required: [String] = [], additionalProperties: Bool = true, enumValues: ConstantSet? = nil,
        constValue: ConstantSet? = nil, minimum: SchemaNumber? = nil, maximum: SchemaNumber? = nil,
        exclusiveMinimum: SchemaNumber? = nil, exclusiveMaximum: SchemaNumber? = nil, minLength: Int? = nil,
        maxLength: Int? = nil, pattern: SchemaPattern? = nil, format: SchemaFormat? = nil, items: SchemaNode? = nil,
        minItems: Int? = nil, maxItems: Int? = nil
    ) {
        self.refusesAll = refusesAll
        self.types = types
        self.typeExpected = typeExpected
        self.members = members.sorted { $0.name.lexicographicallyPrecedes($1.name) }
        self.required = required
        self.additionalProperties = additionalProperties
        self.enumValues = enumValues
        self.constValue = constValue
        self.minimum = minimum
        self.maximum = maximum
        self.exclusiveMinimum = exclusiveMinimum
        self.exclusiveMaximum = exclusiveMaximum
        self.minLength = minLength
        self.maxLength = maxLength
        self.pattern = pattern
        self.format = format
        self.items = items
        self.minItems = minItems
        self.maxItems = maxItems
        checksMembers = !members.isEmpty || !additionalProperties
        checksNumbers = types?.contains(.integer) == true && types?.contains(.number) != true
            || minimum != nil || maximum != nil || exclusiveMinimum != nil || exclusiveMaximum != nil
        checksStrings = minLength != nil || maxLength != nil || pattern != nil || format != nil
        acceptsAll = !refusesAll && types == nil && !checksMembers && enumValues == nil && constValue == nil
            && !checksNumbers && !checksStrings && items == nil && minItems == nil && maxItems == nil
    }

    /// The member named by the UTF-8 `name`, or nil (binary search).
    func member(_ name: UnsafeBufferPointer<UInt8>) -> NamedMember? {
        var low = 0
        var high = members.count
        while low < high {
            let mid = (low + high) / 2
            let order = members[mid].name.withUnsafeBufferPointer { compareBytes($0, name) }
            if order == 0 { return members[mid] }
            if order < 0 { low = mid + 1 } else { high = mid }
        }
        return nil
    }
}
