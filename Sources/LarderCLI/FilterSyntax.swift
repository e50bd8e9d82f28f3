import Foundation
import LarderClient

/// The command line's filter language: one comparison per `--where`, all of them joined with AND.
///
/// `FIELD OP VALUE` with OP one of `=  !=  <  <=  >  >=  ~` (contains, case-insensitive) `^=` (starts with), or
/// `FIELD?` (exists) and `!FIELD?` (missing). VALUE is JSON when it parses as JSON (`50`, `true`, `null`,
/// `"92"`, `["Ball","Medicine"]`) and a plain string otherwise (`北京`); `=` with an array means "any of".
public enum FilterSyntax {
    /// The `--where` help text, with examples from the apps.
    public static let help = """
        Filters (--where EXPR, repeatable; all must hold):
          FIELD=VALUE     equal            category=Ball   discount=true   score='"92"' (a string)
          FIELD!=VALUE    not equal        store!=7-Eleven
          FIELD<VALUE     less than        price<50        (also <=, >, >=; numbers or strings)
          FIELD~TEXT      contains (any case)              address~北京
          FIELD^=TEXT     starts with      name^=poke
          FIELD=[A,B]     any of (JSON array)              category='["Ball","Medicine"]'
          FIELD?          has the field    photoName?      !FIELD?  lacks it
        VALUE is read as JSON when it is JSON (50, true, null, "quoted"), else as plain text; text that starts
        with an operator character (= < > ! ~ ^) or with " [ { must be written as JSON: note='"<b>"'.
        A filter that does not parse is an error (exit 64) that points at the mistake.
        FIELD is a dot path into the data (address.city) or $id, $rev, $createdAt, $updatedAt.
        --filter JSON takes a full wire filter ({"or":[...]}) for anything else.
        Text search: --contains TEXT searches every string field, --in FIELD,... only those.
        """

    /// Parses one `--where` expression. A mistake names what was expected and points at the character where it went
    /// wrong: `price<<50` is refused with a caret under the second `<`, not read as "less than the text <50".
    public static func parse(_ expression: String) throws(UsageError) -> Filter {
        let characters = Array(expression)
        func fail(_ message: String, at offset: Int, length: Int = 1) -> UsageError {
            UsageError("--where: \(message)", excerpt: UsageError.Excerpt(expression, offset: offset, length: length))
        }
        var start = 0
        var end = characters.count
        while start < end, characters[start] == " " { start += 1 }
        while end > start, characters[end - 1] == " " { end -= 1 }
        guard start < end else { throw fail("empty filter; write FIELD=VALUE, FIELD<VALUE, FIELD~TEXT ...", at: 0) }
        let operators: Set<Character> = ["=", "<", ">", "~", "!", "^"]
        let text = characters[start..<end]
        if text.last == "?", !text.contains(where: { "=<>~".contains($0) }) {
            let negated = text.first == "!"
            let nameStart = start + (negated ? 1 : 0)
            let name = String(characters[nameStart..<(end - 1)])
            return .exists(try path(name, expression, offset: nameStart), !negated)
        }
        // The field runs to the first operator character; `!` starts `!=` only after a name.
        var index = start
        while index < end, !operators.contains(characters[index]) { index += 1 }
        guard index < end else {
            throw fail(
                "expected an operator after the field name: = != < <= > >= ~ ^= (or ? for has the field)", at: end,
                length: 0)
        }
        guard index > start else {
            throw fail("expected a field name before '\(characters[index])'", at: index)
        }
        var nameEnd = index
        while nameEnd > start, characters[nameEnd - 1] == " " { nameEnd -= 1 }
        let field = try path(String(characters[start..<nameEnd]), expression, offset: start)
        let next = index + 1 < end ? characters[index + 1] : nil
        let op: String
        switch (characters[index], next) {
        case ("!", "="): op = "!="
        case ("<", "="): op = "<="
        case (">", "="): op = ">="
        case ("^", "="): op = "^="
        case ("=", "="): op = "=="
        case ("!", _), ("^", _):
            throw fail("'\(characters[index])' must be followed by '=' (\(characters[index])=)", at: index + 1)
        default: op = String(characters[index])
        }
        var valueStart = index + op.count
        while valueStart < end, characters[valueStart] == " " { valueStart += 1 }
        guard valueStart < end else {
            throw fail("expected a value after '\(op)' (write '\"\"' for the empty string)", at: valueStart, length: 0)
        }
        let first = characters[valueStart]
        if operators.contains(first) {
            throw fail("expected a value after '\(op)', found '\(first)'", at: valueStart)
        }
        let raw = String(characters[valueStart..<end])
        let value: JSON
        if "\"[{".contains(first) {
            // Meant as JSON: it must be JSON, not quietly become the text it was meant to quote.
            do throws(LarderError) {
                value = try JSONParser.parse(Array(raw.utf8))
            } catch {
                let (message, byte) = FilterSyntax.jsonMistake(error)
                let offset = byte.map { valueStart + FilterSyntax.characterOffset(raw, byte: $0) } ?? valueStart
                throw fail("the value is not valid JSON: \(message)", at: offset)
            }
        } else {
            value = jsonValue(raw)
        }
        switch op {
        case "=", "==":
            if case .array(let items) = value {
                for item in items where !item.isScalar {
                    throw fail(
                        "'=' with a list takes null, booleans, numbers or strings", at: valueStart, length: raw.count)
                }
                return .isIn(field, items)
            }
            guard value.isScalar else {
                throw fail(
                    "'\(op)' compares with null, a boolean, a number or a string", at: valueStart, length: raw.count)
            }
            return .compare(field, .eq, value)
        case "!=":
            guard value.isScalar else {
                throw fail(
                    "'!=' compares with null, a boolean, a number or a string", at: valueStart, length: raw.count)
            }
            return .compare(field, .ne, value)
        case "<", "<=", ">", ">=":
            switch value {
            case .int, .double, .string: break
            default:
                throw fail(
                    "'\(op)' compares with a number or a string, not \(value.typeNameWithArticle)", at: valueStart,
                    length: raw.count)
            }
            let comparison: Filter.Comparison = op == "<" ? .lt : op == "<=" ? .lte : op == ">" ? .gt : .gte
            return .compare(field, comparison, value)
        case "~": return .contains(field, stringValue(raw, value))
        default: return .prefix(field, stringValue(raw, value))
        }
    }

    /// A JSON parser error's message and the byte it points at (`invalid JSON at byte N: ...`).
    static func jsonMistake(_ error: LarderError) -> (String, Int?) {
        let prefix = "invalid JSON at byte "
        guard error.message.hasPrefix(prefix) else { return (error.message, nil) }
        let rest = error.message.dropFirst(prefix.count)
        let digits = rest.prefix { $0.isNumber }
        let message = rest.dropFirst(digits.count).drop { $0 == ":" || $0 == " " }
        return (String(message), Int(digits))
    }

    /// The character offset in `text` of UTF-8 byte `byte`.
    static func characterOffset(_ text: String, byte: Int) -> Int {
        var bytes = 0
        var characters = 0
        for character in text {
            if bytes >= byte { break }
            bytes += character.utf8.count
            characters += 1
        }
        return characters
    }

    /// All `--where` expressions joined with AND (nil for none), plus `--filter` JSON if given.
    public static func filter(wheres: [String], json: String?) throws(UsageError) -> Filter? {
        var clauses: [Filter] = []
        for expression in wheres { clauses.append(try parse(expression)) }
        if let json {
            let value: JSON
            do throws(LarderError) {
                value = try JSONParser.parse(Array(json.utf8))
            } catch {
                let (message, byte) = jsonMistake(error)
                throw UsageError(
                    "--filter is not valid JSON: \(message)",
                    excerpt: UsageError.Excerpt(json, offset: byte.map { characterOffset(json, byte: $0) } ?? 0))
            }
            do throws(LarderError) {
                clauses.append(try Filter(json: value))
            } catch {
                throw UsageError(
                    "--filter: \(error.message)", excerpt: UsageError.Excerpt(json, offset: 0, length: json.count))
            }
        }
        switch clauses.count {
        case 0: return nil
        case 1: return clauses[0]
        default: return .and(clauses)
        }
    }

    /// A value as JSON when it parses as JSON, else as a string.
    static func jsonValue(_ raw: String) -> JSON {
        if raw.isEmpty { return .string("") }
        if let value = try? JSONParser.parse(Array(raw.utf8)) { return value }
        return .string(raw)
    }

    private static func stringValue(_ raw: String, _ value: JSON) -> String {
        if case .string(let string) = value { return string }
        return raw
    }

    /// A field path that starts at `offset` in `expression`.
    private static func path(_ name: String, _ expression: String, offset: Int) throws(UsageError) -> FieldPath {
        do throws(LarderError) {
            return try FieldPath(name)
        } catch {
            let excerpt = UsageError.Excerpt(expression, offset: offset, length: name.count)
            throw UsageError("--where: \(error.message)", excerpt: excerpt)
        }
    }

    /// One `--sort` key: `FIELD`, `FIELD:asc` or `FIELD:desc`, then optionally `@LOCALE` or `@LOCALE/STRENGTH` for
    /// strings in a collation's order (`title@en`, `title:desc@de/2`). Anything after the last `:` must be a
    /// direction.
    public static func sortKey(_ text: String) throws(UsageError) -> SortKey {
        var collation: String?
        var strength: Int?
        var text = text
        if let at = text.lastIndex(of: "@") {
            let spec = text[text.index(after: at)...]
            let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
            let offset = text.distance(from: text.startIndex, to: at) + 1
            guard (1...2).contains(parts.count), !parts[0].isEmpty,
                parts.count == 1 || Int(parts[1]).map({ (1...5).contains($0) }) == true
            else {
                throw UsageError(
                    "--sort: expected a locale after '@', like title@en or title:desc@de/2 (strength 1 to 5)",
                    excerpt: UsageError.Excerpt(text, offset: offset, length: max(1, spec.count)))
            }
            collation = String(parts[0])
            strength = parts.count == 2 ? Int(parts[1]) : nil
            text = String(text[..<at])
        }
        var name = Substring(text)
        var descending = false
        if let colon = text.lastIndex(of: ":") {
            let direction = text[text.index(after: colon)...]
            guard direction == "asc" || direction == "desc" else {
                let offset = text.distance(from: text.startIndex, to: colon) + 1
                throw UsageError(
                    "--sort: expected asc or desc after ':', found '\(direction)'",
                    excerpt: UsageError.Excerpt(text, offset: offset, length: max(1, direction.count)))
            }
            descending = direction == "desc"
            name = text[..<colon]
        }
        do throws(LarderError) {
            let key = SortKey(
                field: try FieldPath(String(name)), descending: descending, collation: collation, strength: strength)
            // The wire form's own checks of the collation (its characters, a data field).
            return try SortKey(json: key.json, path: "sort")
        } catch {
            throw UsageError(
                "--sort: \(error.message)", excerpt: UsageError.Excerpt(text, offset: 0, length: max(1, name.count)))
        }
    }
}
