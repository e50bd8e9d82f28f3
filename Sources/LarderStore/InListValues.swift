import LarderWire

/// The values of an `in` filter as both dialects test them (`SQLiteQueryBuilder` and `PGBuilder`): the numbers as one
/// list, the strings as another, and the rest (null, booleans, arrays, objects) one by one, each once.
struct InListValues {
    private(set) var numbers: [JSON] = []
    private(set) var strings: [String] = []
    private(set) var others: [JSON] = []

    init(_ values: [JSON]) {
        for value in values {
            switch value {
            case .int, .double: numbers.append(value)
            case .string(let s): strings.append(s)
            default: if !others.contains(value) { others.append(value) }
            }
        }
    }

    /// The filter's test: any of the numbers' test, the strings' test (each made when there are any) and each other
    /// value's. Called in that order, so the dialects bind their parameters in it.
    func anyOf(numbers: ([JSON]) -> String, strings: ([String]) -> String, other: (JSON) -> String) -> String {
        var tests: [String] = []
        if !self.numbers.isEmpty { tests.append(numbers(self.numbers)) }
        if !self.strings.isEmpty { tests.append(strings(self.strings)) }
        for value in others { tests.append(other(value)) }
        return "(" + tests.joined(separator: " OR ") + ")"
    }
}
