import LarderWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension CollectionSchema {
    /// The record's violations of the schema, at most `maxViolations` (validation stops at the last): empty when it
    /// is valid.
    ///
    /// `document` is the record's JSON as the write path already has it: the compact bytes a CREATE's `data` is read
    /// into (`CompactDocument.bytes`) or any PATCH result is written to (`JSONObject.bytes`), so validating adds no
    /// parse and builds no tree. Any well-formed JSON is read (whitespace, every escape); the bytes must be well-formed
    /// (the parser's output): on bytes that are not, validation stops with a violation of keyword `type` that expects
    /// `well-formed JSON` at the place it stopped.
    ///
    /// Violations come in document order: a value's own keywords in the order `type`, `enum`, `const`, then those of
    /// its type; an object's `required` members after its members; an array's `minItems` and `maxItems` after its
    /// elements. Nothing is allocated per value: only for violations, a string with escapes that a keyword reads
    /// (on the stack), an object or array an `enum` or `const` compares (parsed), and one PCRE2 match data per call
    /// that matches a `pattern`.
    public func validate(_ document: UnsafeBufferPointer<UInt8>) -> [SchemaViolation] {
        if root.acceptsAll { return [] }
        guard let base = document.baseAddress else {
            return [SchemaViolation(pointer: "", keyword: "type", expected: "well-formed JSON")]
        }
        var validator = Validator(base: base, end: document.count)
        validator.value(root)
        if validator.malformed {
            validator.violations.append(
                SchemaViolation(pointer: validator.pointer(), keyword: "type", expected: "well-formed JSON"))
        }
        return validator.violations
    }

    /// `validate` over a record's JSON bytes (a `PreparedDocument`'s `data`).
    public func validate(_ document: [UInt8]) -> [SchemaViolation] {
        document.withUnsafeBufferPointer { validate($0) }
    }

    /// `validate` over a tree, which it writes out first (`JSON.bytes`): for tests and callers that hold nothing
    /// else; the write path passes its bytes.
    public func validate(_ value: JSON) -> [SchemaViolation] { validate(value.bytes) }
}

/// One walk of a record's JSON bytes against a compiled schema, collecting violations.
private struct Validator {
    /// One step of the path from the record to the value being read.
    enum Step {
        /// A member, by where its name lies between its quotes (and whether it holds escapes).
        case member(Range<Int>, escaped: Bool)
        /// An array element, by its index.
        case index(Int)
    }

    /// The record's bytes, `end` of them.
    let base: UnsafePointer<UInt8>
    /// How many bytes the record has.
    let end: Int
    /// Where reading is.
    var index = 0
    /// What was found so far.
    var violations: [SchemaViolation] = []
    /// The path from the record to the value being read.
    var path: [Step] = []
    /// Made at the first `pattern` matched.
    var matchData: SchemaPattern.MatchData?
    /// Set at `maxViolations` violations, or on bytes that are not JSON: every loop returns at once.
    var stopped = false
    /// Set on bytes that are not JSON.
    var malformed = false

    /// A walk of the `end` bytes at `base`, from the start.
    init(base: UnsafePointer<UInt8>, end: Int) {
        self.base = base
        self.end = end
        path.reserveCapacity(CollectionSchema.maxDepth + 1)
    }

    // MARK: Values

    /// Validates the value at `index` against `node` and moves past it.
    mutating func value(_ node: SchemaNode) {
        skipWhitespace()
        guard index < end else { return fail() }
        if node.refusesAll {
            let start = index
            skipValue()
            return report("false", "nothing (the schema here is false)", found(start))
        }
        switch base[index] {
        case UInt8(ascii: "{"): container(node, isObject: true)
        case UInt8(ascii: "["): container(node, isObject: false)
        case UInt8(ascii: "\""): string(node)
        case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"): literal(node)
        default: number(node)
        }
    }

    /// An object or an array: its type, `enum` and `const`, then its members or elements.
    mutating func container(_ node: SchemaNode, isObject: Bool) {
        let start = index
        let foundText = isObject ? "an object" : "an array"
        if let types = node.types, !types.contains(isObject ? .object : .array) {
            report("type", node.typeExpected, foundText)
            if stopped { return }
        }
        let walks = isObject ? node.checksMembers : (node.items != nil || node.minItems != nil || node.maxItems != nil)
        if node.enumValues != nil || node.constValue != nil {
            skipValue()
            if stopped { return }
            // Parsed only when some value could equal it, and to a bounded depth (a record from the parser nests far
            // less; deeper bytes equal no value).
            let value: JSON? =
                node.enumValues?.containers.isEmpty == false || node.constValue?.containers.isEmpty == false
                ? try? JSONParser.parse(UnsafeBufferPointer(start: base + start, count: index - start), maxDepth: 1_000)
                : nil
            if let set = node.enumValues, !(value.map(set.contains(container:)) ?? false) {
                report("enum", set.expected, foundText)
                if stopped { return }
            }
            if let set = node.constValue, !(value.map(set.contains(container:)) ?? false) {
                report("const", set.expected, foundText)
            }
            guard walks, !stopped else { return }
            index = start
        }
        guard walks else { return skipValue() }
        if isObject { object(node) } else { array(node) }
    }

    /// An object's members against `properties` and `additionalProperties`, then the missing `required` ones.
    mutating func object(_ node: SchemaNode) {
        index += 1
        let words = max(1, (node.required.count + 63) / 64)
        withUnsafeTemporaryAllocation(of: UInt64.self, capacity: words) { seen in
            seen.initialize(repeating: 0)
            members(node, seen)
            guard !stopped else { return }
            for (n, name) in node.required.enumerated() where seen[n / 64] & (1 << UInt64(n % 64)) == 0 {
                report("required", "present", nil, member: name)
                if stopped { return }
            }
        }
    }

    /// The members of an object whose `{` has been read, marking in `seen` the required ones present.
    mutating func members(_ node: SchemaNode, _ seen: UnsafeMutableBufferPointer<UInt64>) {
        skipWhitespace()
        if take(UInt8(ascii: "}")) { return }
        while true {
            skipWhitespace()
            guard index < end, base[index] == UInt8(ascii: "\""), let (name, escaped) = scanString() else {
                return fail()
            }
            skipWhitespace()
            guard take(UInt8(ascii: ":")) else { return fail() }
            let member = withString(name, escaped) { node.member($0) }
            path.append(.member(name, escaped: escaped))
            if let member, member.requiredIndex >= 0 {
                seen[member.requiredIndex / 64] |= 1 << UInt64(member.requiredIndex % 64)
            }
            if let member, member.declared {
                if let schema = member.schema { value(schema) } else { skipValue() }
            } else if !node.additionalProperties {
                skipWhitespace()
                let start = index
                skipValue()
                if !stopped { report("additionalProperties", "only the members in properties", found(start)) }
            } else {
                skipValue()
            }
            path.removeLast()
            if stopped { return }
            skipWhitespace()
            if take(UInt8(ascii: ",")) { continue }
            if take(UInt8(ascii: "}")) { return }
            return fail()
        }
    }

    /// An array's elements against `items`, then `minItems` and `maxItems`.
    mutating func array(_ node: SchemaNode) {
        index += 1
        var count = 0
        skipWhitespace()
        if !take(UInt8(ascii: "]")) {
            while true {
                path.append(.index(count))
                if let items = node.items { value(items) } else { skipValue() }
                path.removeLast()
                count += 1
                if stopped { return }
                skipWhitespace()
                if take(UInt8(ascii: ",")) { continue }
                if take(UInt8(ascii: "]")) { break }
                return fail()
            }
        }
        if let minimum = node.minItems, count < minimum {
            report("minItems", "at least \(Rendering.count(minimum, "item"))", Rendering.count(count, "item"))
        }
        if let maximum = node.maxItems, count > maximum, !stopped {
            report("maxItems", "at most \(Rendering.count(maximum, "item"))", Rendering.count(count, "item"))
        }
    }

    /// The results of a string's keywords, computed while its UTF-8 is at hand.
    struct StringChecks {
        /// Whether the string passes `enum`, `const` and `format` (true when absent).
        var inEnum = true, isConst = true, formatted = true
        /// Its length in code points (counted only for `minLength` and `maxLength`).
        var length = 0
        /// How `pattern` matched (`match` when absent).
        var pattern = SchemaPattern.Outcome.match
    }

    /// A string: its type, `enum`, `const`, `minLength`, `maxLength`, `pattern` and `format`.
    mutating func string(_ node: SchemaNode) {
        let start = index
        guard let (range, escaped) = scanString() else { return fail() }
        if let types = node.types, !types.contains(.string) {
            report("type", node.typeExpected, found(start))
            if stopped { return }
        }
        guard node.checksStrings || node.enumValues != nil || node.constValue != nil else { return }
        if node.pattern != nil && matchData == nil { matchData = SchemaPattern.MatchData() }
        let data = matchData
        let checks = withString(range, escaped) { utf8 -> StringChecks in
            var checks = StringChecks()
            if let set = node.enumValues { checks.inEnum = set.contains(string: utf8) }
            if let set = node.constValue { checks.isConst = set.contains(string: utf8) }
            if node.minLength != nil || node.maxLength != nil {
                for byte in utf8 where byte & 0xC0 != 0x80 { checks.length += 1 }
            }
            if let pattern = node.pattern { checks.pattern = data.map { pattern.match(utf8, $0) } ?? .gaveUp }
            switch node.format {
            case .uuid?: checks.formatted = FormatCheck.isUUID(utf8)
            case .dateTime?: checks.formatted = FormatCheck.isDateTime(utf8)
            case nil: break
            }
            return checks
        }
        if !checks.inEnum, let set = node.enumValues {
            report("enum", set.expected, found(start))
            if stopped { return }
        }
        if !checks.isConst, let set = node.constValue {
            report("const", set.expected, found(start))
            if stopped { return }
        }
        if let minimum = node.minLength, checks.length < minimum {
            report("minLength", "at least \(Rendering.count(minimum, "character"))", found(start))
            if stopped { return }
        }
        if let maximum = node.maxLength, checks.length > maximum {
            report("maxLength", "at most \(Rendering.count(maximum, "character"))", found(start))
            if stopped { return }
        }
        if let pattern = node.pattern, checks.pattern != .match {
            report("pattern", Self.patternExpected(pattern, checks.pattern), found(start))
            if stopped { return }
        }
        if !checks.formatted, let format = node.format { report("format", format.expected, found(start)) }
    }

    /// What a failed `pattern` expected: the pattern, and why when a limit stopped the match.
    static func patternExpected(_ pattern: SchemaPattern, _ outcome: SchemaPattern.Outcome) -> String {
        var source = pattern.source
        if source.unicodeScalars.count > 100 {
            var cut = String.UnicodeScalarView()
            cut.append(contentsOf: source.unicodeScalars.prefix(100))
            source = String(cut) + "…"
        }
        guard outcome == .gaveUp else { return "matching /\(source)/" }
        return "matching /\(source)/ within the match limit (matching this string took too many steps)"
    }

    /// A number: its type (`integer`), `enum`, `const` and bounds.
    mutating func number(_ node: SchemaNode) {
        let start = index
        while index < end, !Self.isDelimiter(base[index]) { index += 1 }
        guard index > start else { return fail() }
        let onlyIntegers = node.types.map { $0.contains(.integer) && !$0.contains(.number) } ?? false
        let typeFails = node.types.map { !$0.contains(.number) && !$0.contains(.integer) } ?? false
        guard typeFails || node.checksNumbers || node.enumValues != nil || node.constValue != nil else { return }
        guard let number = parseNumber(start..<index) else { return fail() }
        if typeFails || onlyIntegers && !number.isInteger {
            report("type", node.typeExpected, found(start))
            if stopped { return }
        }
        if let set = node.enumValues, !set.contains(number: number) {
            report("enum", set.expected, found(start))
            if stopped { return }
        }
        if let set = node.constValue, !set.contains(number: number) {
            report("const", set.expected, found(start))
            if stopped { return }
        }
        if let bound = node.minimum, number.compare(bound) < 0 {
            report("minimum", ">= \(bound)", found(start))
            if stopped { return }
        }
        if let bound = node.maximum, number.compare(bound) > 0 {
            report("maximum", "<= \(bound)", found(start))
            if stopped { return }
        }
        if let bound = node.exclusiveMinimum, number.compare(bound) <= 0 {
            report("exclusiveMinimum", "> \(bound)", found(start))
            if stopped { return }
        }
        if let bound = node.exclusiveMaximum, number.compare(bound) >= 0 {
            report("exclusiveMaximum", "< \(bound)", found(start))
        }
    }

    /// `true`, `false` or `null`: its type, `enum` and `const`.
    mutating func literal(_ node: SchemaNode) {
        let start = index
        let byte = base[index]
        let length = byte == UInt8(ascii: "f") ? 5 : 4
        guard end - index >= length else { return fail() }
        index += length
        let type: TypeSet = byte == UInt8(ascii: "n") ? .null : .boolean
        func member(of set: ConstantSet) -> Bool {
            byte == UInt8(ascii: "n") ? set.null : (byte == UInt8(ascii: "t") ? set.true : set.false)
        }
        if let types = node.types, !types.contains(type) {
            report("type", node.typeExpected, found(start))
            if stopped { return }
        }
        if let set = node.enumValues, !member(of: set) {
            report("enum", set.expected, found(start))
            if stopped { return }
        }
        if let set = node.constValue, !member(of: set) { report("const", set.expected, found(start)) }
    }

    // MARK: Violations

    /// Records a violation of `keyword` at the current path (or its member `member`); stops at `maxViolations`.
    mutating func report(_ keyword: String, _ expected: String, _ found: String?, member: String? = nil) {
        var pointer = pointer()
        if let member { pointer += "/" + pointerToken(member) }
        violations.append(SchemaViolation(pointer: pointer, keyword: keyword, expected: expected, found: found))
        if violations.count >= CollectionSchema.maxViolations { stopped = true }
    }

    /// The JSON Pointer of the current path.
    func pointer() -> String {
        var pointer = ""
        for step in path {
            switch step {
            case .member(let range, let escaped):
                pointer += "/" + pointerToken(withString(range, escaped) { String(decoding: $0, as: UTF8.self) })
            case .index(let n): pointer += "/\(n)"
            }
        }
        return pointer
    }

    /// What a violation quotes of the value from `start` to `index`: the scalar, short; a container's type.
    func found(_ start: Int) -> String {
        switch base[start] {
        case UInt8(ascii: "{"): return "an object"
        case UInt8(ascii: "["): return "an array"
        case UInt8(ascii: "\""):
            let range = start + 1..<max(start + 1, index - 1)
            let escaped = UnsafeBufferPointer(start: base + range.lowerBound, count: range.count)
                .contains(UInt8(ascii: "\\"))
            return Rendering.string(withString(range, escaped) { String(decoding: $0, as: UTF8.self) })
        default:
            let text = String(decoding: UnsafeBufferPointer(start: base + start, count: index - start), as: UTF8.self)
            return text.utf8.count <= SchemaViolation.foundCharacters
                ? text : String(text.prefix(SchemaViolation.foundCharacters)) + "…"
        }
    }

    // MARK: Reading

    /// Marks the bytes as not JSON and stops.
    mutating func fail() {
        malformed = true
        stopped = true
    }

    /// Moves past any JSON whitespace.
    mutating func skipWhitespace() {
        while index < end {
            switch base[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// Takes `byte` at `index`, or nothing.
    mutating func take(_ byte: UInt8) -> Bool {
        guard index < end, base[index] == byte else { return false }
        index += 1
        return true
    }

    /// Whether `byte` ends a number or literal.
    static func isDelimiter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: ","), UInt8(ascii: "]"), UInt8(ascii: "}"), 0x20, 0x09, 0x0A, 0x0D: true
        default: false
        }
    }

    /// Reads the string whose `"` is at `index`: where its content lies and whether it holds escapes.
    mutating func scanString() -> (Range<Int>, Bool)? {
        var i = index + 1
        var escaped = false
        while i < end {
            switch base[i] {
            case UInt8(ascii: "\""):
                defer { index = i + 1 }
                return (index + 1..<i, escaped)
            case UInt8(ascii: "\\"):
                escaped = true
                i += 2
            default: i += 1
            }
        }
        return nil
    }

    /// Moves past the value at `index` without looking into it.
    mutating func skipValue() {
        skipWhitespace()
        guard index < end else { return fail() }
        switch base[index] {
        case UInt8(ascii: "\""):
            if scanString() == nil { fail() }
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            while index < end {
                let byte = base[index]
                if byte == UInt8(ascii: "\"") {
                    guard scanString() != nil else { return fail() }
                    continue
                }
                index += 1
                if byte == UInt8(ascii: "{") || byte == UInt8(ascii: "[") {
                    depth += 1
                } else if byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]") {
                    depth -= 1
                    if depth == 0 { return }
                }
            }
            fail()
        default:
            let start = index
            while index < end, !Self.isDelimiter(base[index]) { index += 1 }
            if index == start { fail() }
        }
    }

    /// The number written in `range`: an integer when it has no fraction or exponent and fits 64 bits.
    func parseNumber(_ range: Range<Int>) -> SchemaNumber? {
        var i = range.lowerBound
        let negative = base[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        var value: Int64 = 0
        var integral = i < range.upperBound
        while i < range.upperBound && integral {
            let digit = base[i] &- UInt8(ascii: "0")
            guard digit < 10 else {
                integral = false
                break
            }
            // Accumulated as a negative number, so Int64.min fits.
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) = times10.subtractingReportingOverflow(Int64(digit))
            if o1 || o2 { integral = false }
            value = next
            i += 1
        }
        if integral {
            if negative { return .int(value) }
            if value != .min { return .int(-value) }
        }
        let count = range.count
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: count + 1) { text -> SchemaNumber? in
            UnsafeMutableRawBufferPointer(text).copyMemory(
                from: UnsafeRawBufferPointer(start: base + range.lowerBound, count: count))
            text[count] = 0
            var stop: UnsafeMutablePointer<CChar>?
            let double = strtod(text.baseAddress!, &stop)
            guard stop == text.baseAddress! + count, double.isFinite else { return nil }
            return .double(double)
        }
    }

    /// Calls `body` with the decoded UTF-8 of the string content in `range`: the bytes themselves when it has no
    /// escapes, else a copy with them decoded (on the stack).
    func withString<R>(_ range: Range<Int>, _ escaped: Bool, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        let raw = UnsafeBufferPointer(start: base + range.lowerBound, count: range.count)
        guard escaped else { return body(raw) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: raw.count) { buffer in
            body(UnsafeBufferPointer(rebasing: buffer[..<Self.unescape(raw, into: buffer)]))
        }
    }

    /// Decodes a JSON string's escapes from `raw` into `out` (which has room for `raw.count` bytes, never exceeded:
    /// an escape is longer than what it stands for); returns the bytes written. A lone surrogate becomes U+FFFD.
    static func unescape(_ raw: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        var i = 0
        var n = 0
        func put(_ byte: UInt8) {
            out[n] = byte
            n += 1
        }
        func hex4(_ at: Int) -> UInt32? {
            guard at + 4 <= raw.count else { return nil }
            var value: UInt32 = 0
            for k in at..<at + 4 {
                let byte = raw[k]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
            }
            return value
        }
        while i < raw.count {
            let byte = raw[i]
            guard byte == UInt8(ascii: "\\"), i + 1 < raw.count else {
                put(byte)
                i += 1
                continue
            }
            let escape = raw[i + 1]
            i += 2
            switch escape {
            case UInt8(ascii: "b"): put(0x08)
            case UInt8(ascii: "f"): put(0x0C)
            case UInt8(ascii: "n"): put(0x0A)
            case UInt8(ascii: "r"): put(0x0D)
            case UInt8(ascii: "t"): put(0x09)
            case UInt8(ascii: "u"):
                guard let unit = hex4(i) else { continue }
                i += 4
                var scalar = unit
                if (0xD800...0xDBFF).contains(unit), i + 6 <= raw.count, raw[i] == UInt8(ascii: "\\"),
                    raw[i + 1] == UInt8(ascii: "u"), let low = hex4(i + 2), (0xDC00...0xDFFF).contains(low)
                {
                    scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                } else if (0xD800...0xDFFF).contains(unit) {
                    scalar = 0xFFFD
                }
                for byte in UTF8.encode(Unicode.Scalar(scalar)!)! { put(byte) }
            default: put(escape)
            }
        }
        return n
    }
}
