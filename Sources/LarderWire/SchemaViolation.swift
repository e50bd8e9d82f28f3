/// One way a record fails its collection's schema: where the value is, the keyword it failed, what that keyword
/// expected and, for a scalar, what was there. Nothing else of the record is carried: a string is cut to its first
/// `SchemaViolation.foundCharacters` characters, and an object or array is named by its type only.
public struct SchemaViolation: Sendable, Hashable, CustomStringConvertible {
    /// The JSON Pointer (RFC 6901) of the value in the record: `/address/zip`, `/tags/0`, "" for the record itself.
    /// For `required`, the pointer the missing member would have (`/title`); for `additionalProperties`, the extra
    /// member's.
    public var pointer: String
    /// The schema keyword that failed: `type`, `required`, `pattern`, ...; `false` where the schema is `false`.
    public var keyword: String
    /// What the keyword expected, for a person: `string or null`, `at least 1 character`, `>= 0`.
    public var expected: String
    /// What was found: the scalar as JSON (a string cut short, with its length), or `an object` / `an array` /
    /// `N items`; nil where nothing was there (`required`).
    public var found: String?

    /// The most characters of a string value a violation quotes in `found`.
    public static let foundCharacters = 40

    /// A violation with these fields.
    public init(pointer: String, keyword: String, expected: String, found: String? = nil) {
        self.pointer = pointer
        self.keyword = keyword
        self.expected = expected
        self.found = found
    }

    /// `/address/zip: pattern: expected matching /^[0-9]{5}$/, found "1234"`, for logs and messages.
    public var description: String {
        let place = pointer.isEmpty ? "(the record)" : pointer
        return "\(place): \(keyword): expected \(expected)" + (found.map { ", found \($0)" } ?? "")
    }

    /// The violation as a member of a refusal's `violations` array:
    /// `{"pointer": …, "keyword": …, "expected": …, "found": …}` (`found` only when there is one).
    public var json: JSON {
        var object: JSONObject = [
            "pointer": .string(pointer), "keyword": .string(keyword), "expected": .string(expected),
        ]
        if let found { object["found"] = .string(found) }
        return .object(object)
    }

    /// Reads a member of a refusal's `violations` array; nil when it is not an object with string `pointer`,
    /// `keyword` and `expected` members.
    public init?(json: JSON) {
        guard let object = json.objectValue, let pointer = object["pointer"]?.stringValue,
            let keyword = object["keyword"]?.stringValue, let expected = object["expected"]?.stringValue
        else { return nil }
        self.init(pointer: pointer, keyword: keyword, expected: expected, found: object["found"]?.stringValue)
    }
}

extension LarderError {
    /// The ways a written record failed its collection's schema, when the write was refused for that
    /// (INVALID_ARGUMENT with a `violations` array, Protocol.md "Schemas"): at most 20, in the record's order. Empty for
    /// every other error.
    ///
    /// ```swift
    /// do { try await todos.create(["title": 3]) } catch let error as LarderError {
    ///     for v in error.violations { print(v.pointer, v.keyword, v.expected, v.found ?? "") }
    /// }
    /// ```
    public var violations: [SchemaViolation] {
        guard case .array(let list) = details["violations"] else { return [] }
        return list.compactMap { SchemaViolation(json: $0) }
    }
}

