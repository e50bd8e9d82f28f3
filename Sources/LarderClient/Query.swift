import Foundation
import LarderWire

/// A field of the stored records, named by its dot path, to build search filters and sort orders from Swift
/// expressions.
///
/// Comparing a field with a value gives a `FilterExpression`, the Swift form of a Protocol.md §5.2 filter; `&&`, `||`
/// and `!` join them. The path is checked when the expression is built: an invalid one (`Field("")`,
/// `Field("a..b")`, `Field("$nope")`) does not trap but makes the expression carry the error, which `filter()` throws
/// and a search throws when it is sent.
///
/// ```swift
/// let cheapBalls = Field("price") < 50 && Field("category") == "Ball"
/// let withZip = Field("address.zip").exists
/// let beijing = Field("address").contains("北京")
/// for try await item in items.search(cheapBalls, sortedBy: [Field("price").descending]) { print(item.value) }
/// ```
///
/// The envelope is addressed as `Field("$id")`, `Field("$rev")`, `Field("$createdAt")` and `Field("$updatedAt")`.
public struct Field: Sendable, CustomStringConvertible {
    /// The dot path as written, e.g. `address.city`.
    public let path: String

    /// The field at `path`: a dot path into a record's data (`address.city`) or an envelope field (`$createdAt`).
    public init(_ path: String) {
        self.path = path
    }

    /// The path as written.
    public var description: String { path }

    /// The validated wire path; the error names the field as a Swift expression and `request` as the member at fault.
    func fieldPath(request: String = "filter") throws(LarderError) -> FieldPath {
        do throws(LarderError) {
            return try FieldPath(path)
        } catch {
            throw LarderError(.invalidArgument, "\(self.quoted) is not a field path: \(error.message)", field: request)
        }
    }

    /// `Field("…")` with the path escaped and cut to a readable length, for error messages.
    var quoted: String {
        let shown = path.count > 80 ? String(path.prefix(80)) + "…" : path
        return "Field(\(String(reflecting: shown)))"
    }

    // MARK: - Comparisons

    /// Matches records whose field equals `value` (`eq`); `Field("nickname") == nil` matches a field holding null and
    /// a missing field alike.
    public static func == (field: Field, value: (any FilterValue)?) -> FilterExpression {
        FilterExpression { () throws(LarderError) in
            .compare(try field.fieldPath(), .eq, try field.json(value, for: "=="))
        }
    }

    /// Matches records whose field does not equal `value` (`ne`, exactly `!(field == value)`): a record without the
    /// field matches `!=` of any value but nil.
    public static func != (field: Field, value: (any FilterValue)?) -> FilterExpression {
        FilterExpression { () throws(LarderError) in
            .compare(try field.fieldPath(), .ne, try field.json(value, for: "!="))
        }
    }

    /// Matches records whose field is less than `value` (`lt`): numbers by value, strings by UTF-8 bytes; a field of
    /// another kind never matches.
    public static func < (field: Field, value: any ComparableFilterValue) -> FilterExpression {
        field.ordered(.lt, value, "<")
    }

    /// Matches records whose field is at most `value` (`lte`).
    public static func <= (field: Field, value: any ComparableFilterValue) -> FilterExpression {
        field.ordered(.lte, value, "<=")
    }

    /// Matches records whose field is greater than `value` (`gt`).
    public static func > (field: Field, value: any ComparableFilterValue) -> FilterExpression {
        field.ordered(.gt, value, ">")
    }

    /// Matches records whose field is at least `value` (`gte`).
    public static func >= (field: Field, value: any ComparableFilterValue) -> FilterExpression {
        field.ordered(.gte, value, ">=")
    }

    private func ordered(_ op: Filter.Comparison, _ value: any ComparableFilterValue, _ symbol: String)
        -> FilterExpression
    {
        FilterExpression { () throws(LarderError) in
            let json = try json(value, for: symbol)
            switch json {
            case .int, .double, .string: return .compare(try fieldPath(), op, json)
            default:
                throw LarderError(
                    .invalidArgument,
                    "\(quoted) \(symbol) compares with a number or a string; \(type(of: value)) encodes as "
                        + "\(json.typeNameWithArticle)", field: "filter")
            }
        }
    }

    /// Matches records whose field equals one of `values` (`in`, at most 1,000 of them); nil among them matches a
    /// null or missing field.
    ///
    /// ```swift
    /// Field("category").in(["Ball", "Medicine"])
    /// ```
    public func `in`(_ values: [(any FilterValue)?]) -> FilterExpression {
        FilterExpression { () throws(LarderError) in
            var items: [JSON] = []
            items.reserveCapacity(values.count)
            for value in values { items.append(try json(value, for: ".in")) }
            return .isIn(try fieldPath(), items)
        }
    }

    /// Matches records that have the field, even holding null (`exists true`); `isMissing` is its opposite.
    public var exists: FilterExpression {
        FilterExpression { () throws(LarderError) in .exists(try fieldPath(), true) }
    }

    /// Matches records that do not have the field at all (`exists false`); a field holding null is present.
    public var isMissing: FilterExpression {
        FilterExpression { () throws(LarderError) in .exists(try fieldPath(), false) }
    }

    /// Matches records whose field is a string containing `text`, in any case and any script (`contains`): `北`,
    /// `北京` and `北京市` all match `北京市海淀区`. To search every string of a record, pass `containing:` to
    /// `search` instead.
    public func contains(_ text: String) -> FilterExpression {
        FilterExpression { () throws(LarderError) in .contains(try fieldPath(), text) }
    }

    /// Matches records whose field is a string starting with `prefix`, case-sensitively (`prefix`).
    public func hasPrefix(_ prefix: String) -> FilterExpression {
        FilterExpression { () throws(LarderError) in .prefix(try fieldPath(), prefix) }
    }

    // MARK: - Sorting

    /// Sorts by this field, smallest first: missing and null, then numbers, then strings, then arrays and objects.
    public var ascending: Ordering { Ordering(field: self, descending: false) }

    /// Sorts by this field, largest first (missing and null last).
    public var descending: Ordering { Ordering(field: self, descending: true) }

    // MARK: - Values

    /// The JSON a value is compared as: what a model's encoder stores for it (a `Date` as the ISO 8601 text
    /// `ModelCoding` writes, a `UUID` as its text), but a `Date` compared with `$createdAt` or `$updatedAt` is the
    /// milliseconds since 1970 that the envelope holds.
    func json(_ value: (any FilterValue)?, for symbol: String) throws(LarderError) -> JSON {
        guard let value else { return .null }
        if let date = value as? Date {
            let ms = Int64((date.timeIntervalSince1970 * 1000).rounded())
            if path == FieldPath.Envelope.createdAt.rawValue || path == FieldPath.Envelope.updatedAt.rawValue {
                return .int(ms)
            }
            return .string(Timestamp.string(ms))
        }
        switch value {
        case let string as String: return .string(string)
        case let bool as Bool: return .bool(bool)
        case let int as Int: return .int(Int64(int))
        case let int as Int64: return .int(int)
        case let int as Int32: return .int(Int64(int))
        case let double as Double:
            guard double.isFinite else {
                throw LarderError(
                    .invalidArgument, "\(quoted) \(symbol) \(double): JSON has no \(double); use a finite number",
                    field: "filter")
            }
            return .double(double)
        case let uuid as UUID: return .string(uuid.uuidString)
        default: return try encoded(value, for: symbol)
        }
    }

    /// A value of another type, as `JSONEncoder` (with `ModelCoding`'s dates) writes it; it must come out a scalar.
    private func encoded(_ value: any FilterValue, for symbol: String) throws(LarderError) -> JSON {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.string(Int64((date.timeIntervalSince1970 * 1000).rounded())))
        }
        let json: JSON
        do {
            // Inside an array: a scalar alone is not a JSON text every encoder writes.
            let data = try encoder.encode([FilterValueBox(value: value)])
            json = try JSONParser.parse(Array(data)).arrayValue?.first ?? .null
        } catch {
            throw LarderError(
                .invalidArgument, "\(quoted) \(symbol): cannot encode \(type(of: value)) as JSON: \(error)",
                field: "filter")
        }
        guard json.isScalar else {
            throw LarderError(
                .invalidArgument,
                "\(quoted) \(symbol) compares with null, a boolean, a number or a string; \(type(of: value)) encodes "
                    + "as \(json.typeNameWithArticle)", field: "filter")
        }
        return json
    }
}

/// Wraps a value for `JSONEncoder`, which takes a concrete `Encodable`.
private struct FilterValueBox: Encodable {
    var value: any FilterValue

    func encode(to encoder: any Encoder) throws {
        try value.encode(to: encoder)
    }
}

/// A value a `Field` can be compared with by `==`, `!=` and `in`: a type whose `Encodable` form is one JSON scalar
/// (null, a boolean, a number or a string), compared as a model's encoder stores it.
///
/// `Bool`, `String`, the integer types, `Double`, `Float`, `Decimal`, `Date` (the ISO 8601 text `ModelCoding`
/// stores) and `UUID` conform. An app's own scalar types can, with no code:
///
/// ```swift
/// enum Category: String, Codable, FilterValue { case ball = "Ball", medicine = "Medicine" }
/// let balls = Field("category") == Category.ball
/// ```
///
/// A conforming type that encodes as an array or an object makes the expression throw `INVALID_ARGUMENT`.
public protocol FilterValue: Encodable, Sendable {}

/// A value a `Field` can be ordered against by `<`, `<=`, `>`, `>=`: one that encodes as a number or a string.
/// Booleans and nil only compare for equality, so they do not conform, and neither do arrays.
public protocol ComparableFilterValue: FilterValue {}

extension Bool: FilterValue {}
extension String: ComparableFilterValue {}
extension Int: ComparableFilterValue {}
extension Int8: ComparableFilterValue {}
extension Int16: ComparableFilterValue {}
extension Int32: ComparableFilterValue {}
extension Int64: ComparableFilterValue {}
extension UInt: ComparableFilterValue {}
extension UInt8: ComparableFilterValue {}
extension UInt16: ComparableFilterValue {}
extension UInt32: ComparableFilterValue {}
extension UInt64: ComparableFilterValue {}
extension Double: ComparableFilterValue {}
extension Float: ComparableFilterValue {}
extension Decimal: ComparableFilterValue {}
extension Date: ComparableFilterValue {}
extension UUID: ComparableFilterValue {}

/// A search filter written as a Swift expression: comparisons of `Field`s joined with `&&`, `||` and `!`.
///
/// It builds exactly a wire `Filter` (Protocol.md §5.2): `Field("price") < 50` is
/// `{"field":"price","op":"lt","value":50}`, `a && b` is `{"and":[a,b]}` (a chain `a && b && c` is one `and` of
/// three), `a || b` is `{"or":[a,b]}`, `!a` is `{"not":a}`. A mistake (an invalid field path, a value that does not
/// encode as a scalar, more than 1,000 values in `in`, nesting past the filter limits) is kept in the expression and
/// thrown as `INVALID_ARGUMENT` by `filter()` and by the search that sends it.
public struct FilterExpression: Sendable {
    private let built: Result<Filter, LarderError>

    private init(_ built: Result<Filter, LarderError>) {
        self.built = built
    }

    init(_ build: () throws(LarderError) -> Filter) {
        do throws(LarderError) {
            built = .success(try build())
        } catch {
            built = .failure(error)
        }
    }

    /// An expression for a filter already in its wire form (`Filter`), to join with Swift expressions.
    public init(_ filter: Filter) {
        built = .success(filter)
    }

    /// The wire filter this expression builds.
    ///
    /// - Throws: `INVALID_ARGUMENT` naming the mistake: an invalid field path, a value that is not a scalar, or a
    ///   filter beyond the limits of Protocol.md §5.2 (32 levels, 256 clauses, 1,000 values in `in`).
    public func filter() throws(LarderError) -> Filter {
        let filter = try built.get()
        // The parser of the JSON form holds the limits; its errors name the clause at fault (`filter.and.3.value`).
        _ = try Filter(json: filter.json)
        return filter
    }

    /// Matches records that match both; `a && b && c` makes one `and` of three.
    public static func && (lhs: FilterExpression, rhs: FilterExpression) -> FilterExpression {
        combine(lhs, rhs) { a, b in
            if case .and(let first) = a { return .and(first + [b]) }
            return .and([a, b])
        }
    }

    /// Matches records that match either; `a || b || c` makes one `or` of three.
    public static func || (lhs: FilterExpression, rhs: FilterExpression) -> FilterExpression {
        combine(lhs, rhs) { a, b in
            if case .or(let first) = a { return .or(first + [b]) }
            return .or([a, b])
        }
    }

    /// Matches records that do not match `expression` (`not`).
    public static prefix func ! (expression: FilterExpression) -> FilterExpression {
        FilterExpression(expression.built.map { .not($0) })
    }

    private static func combine(
        _ lhs: FilterExpression, _ rhs: FilterExpression, _ join: (Filter, Filter) -> Filter
    ) -> FilterExpression {
        switch (lhs.built, rhs.built) {
        case (.success(let a), .success(let b)): FilterExpression(.success(join(a, b)))
        case (.failure(let error), _), (_, .failure(let error)): FilterExpression(.failure(error))
        }
    }
}

/// One sort key of a search, made by `Field.ascending` or `Field.descending`, optionally under a collation
/// (`collated(_:strength:)`) so strings come in the order people of a language read them.
///
/// ```swift
/// items.search(Field("category") == "Ball", sortedBy: [Field("price").descending, Field("name").ascending])
/// recipes.search(sortedBy: [Field("title").ascending.collated("en")])  // "apple pie" before "Walk the dog"
/// ```
public struct Ordering: Sendable {
    /// The field sorted by.
    public let field: Field
    /// True for largest first.
    public let descending: Bool
    /// The ICU collation strings are ordered by, as a BCP 47 language tag (`"en"`, `"de"`, `"zh-u-co-pinyin"`,
    /// `"ja"`); nil orders them by their UTF-8 bytes.
    public var collation: String?
    /// The collation's strength, 1 (base letters only) to 5 (identical); nil is the locale's own (3: accents and
    /// case count).
    public var strength: Int?

    /// A sort key on `field`, largest first when `descending`, by bytes.
    public init(field: Field, descending: Bool) {
        self.field = field
        self.descending = descending
    }

    /// This key with strings ordered under the ICU collation of `locale` (a BCP 47 tag such as `"de"`), at
    /// `strength` (1 to 5) when given. A locale the server's ICU cannot collate by is `INVALID_ARGUMENT` naming
    /// `sort.N.collation` when the search runs.
    public func collated(_ locale: String, strength: Int? = nil) -> Ordering {
        var ordering = self
        ordering.collation = locale
        ordering.strength = strength
        return ordering
    }

    /// The wire sort key.
    ///
    /// - Throws: `INVALID_ARGUMENT` when the field's path is not valid.
    public func sortKey() throws(LarderError) -> SortKey {
        SortKey(
            field: try field.fieldPath(request: "sort"), descending: descending, collation: collation,
            strength: strength)
    }
}
