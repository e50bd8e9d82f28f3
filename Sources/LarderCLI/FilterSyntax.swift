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
        VALUE is read as JSON when it is JSON (50, true, null, "quoted"), else as plain text.
        FIELD is a dot path into the data (address.city) or $id, $rev, $createdAt, $updatedAt.
        --filter JSON takes a full wire filter ({"or":[...]}) for anything else.
        Text search: --contains TEXT searches every string field, --in FIELD,... only those.
        """

    /// Parses one `--where` expression.
    public static func parse(_ expression: String) throws(UsageError) -> Filter {
        let text = expression.trimmingCharacters(in: .whitespaces)
        if text.hasSuffix("?"), !text.contains(where: { "=<>~".contains($0) }) {
            let negated = text.hasPrefix("!")
            let name = String(text.dropFirst(negated ? 1 : 0).dropLast())
            return .exists(try path(name, expression), !negated)
        }
        let scalars = Array(text)
        var index = 0
        while index < scalars.count, !"=<>~!^".contains(scalars[index]) { index += 1 }
        guard index < scalars.count, index > 0 else {
            throw UsageError("cannot read filter '\(expression)'; write FIELD=VALUE, FIELD<VALUE, FIELD~TEXT ...")
        }
        let field = try path(String(scalars[..<index]).trimmingCharacters(in: .whitespaces), expression)
        let next = index + 1 < scalars.count ? scalars[index + 1] : nil
        var op: String
        switch (scalars[index], next) {
        case ("!", "="): op = "!="
        case ("<", "="): op = "<="
        case (">", "="): op = ">="
        case ("^", "="): op = "^="
        case ("=", "="): op = "=="
        case ("!", _), ("^", _):
            throw UsageError("cannot read filter '\(expression)'; '\(scalars[index])' must be followed by '='")
        default: op = String(scalars[index])
        }
        let raw = String(scalars[(index + op.count)...]).trimmingCharacters(in: .whitespaces)
        let value = jsonValue(raw)
        switch op {
        case "=", "==":
            if case .array(let items) = value { return .isIn(field, items) }
            return .compare(field, .eq, value)
        case "!=": return .compare(field, .ne, value)
        case "<", "<=", ">", ">=":
            switch value {
            case .int, .double, .string: break
            default: throw UsageError("'\(op)' compares with a number or a string, not '\(raw)'")
            }
            let comparison: Filter.Comparison = op == "<" ? .lt : op == "<=" ? .lte : op == ">" ? .gt : .gte
            return .compare(field, comparison, value)
        case "~": return .contains(field, stringValue(raw, value))
        default: return .prefix(field, stringValue(raw, value))
        }
    }

    /// All `--where` expressions joined with AND (nil for none), plus `--filter` JSON if given.
    public static func filter(wheres: [String], json: String?) throws(UsageError) -> Filter? {
        var clauses: [Filter] = []
        for expression in wheres { clauses.append(try parse(expression)) }
        if let json {
            do throws(LarderError) {
                clauses.append(try Filter(json: try JSONParser.parse(Array(json.utf8))))
            } catch {
                throw UsageError("--filter: \(error.message)")
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

    private static func path(_ name: String, _ expression: String) throws(UsageError) -> FieldPath {
        do throws(LarderError) {
            return try FieldPath(name)
        } catch {
            throw UsageError("filter '\(expression)': \(error.message)")
        }
    }
}
