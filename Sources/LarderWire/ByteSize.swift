/// Byte counts as people write and read them: `40MiB`, `64 KiB`, `1.5GiB`, `512`.
///
/// Every executable's byte-size options read sizes with `parse`, and people are shown sizes with `format`, so that
/// what one program prints another accepts.
package enum ByteSize {
    /// The units, largest first: powers of 1024. `k`/`K`, `M` and `G` are accepted as short forms of the same.
    static let units: [(name: String, factor: Int)] = [
        ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10),
        ("k", 1 << 10), ("B", 1),
    ]

    /// What `parse` accepts, for error messages.
    package static let grammar = "a number of bytes, or with a unit: KiB, MiB or GiB (such as 64KiB or 40MiB)"

    /// Parses a size: digits (`_` allowed between them) with an optional unit `B`, `KiB`, `MiB` or `GiB`, a space
    /// between them allowed; with a unit the number may have a fraction that comes to whole bytes (`1.5KiB`). Nil for
    /// anything else, a negative size, or one past `Int.max`. Decimal units (`MB`) are refused rather than guessed.
    package static func parse(_ text: String) -> Int? {
        var number = Substring(text)
        while number.first == " " { number = number.dropFirst() }
        while number.last == " " { number = number.dropLast() }
        var factor = 1
        for unit in units where number.hasSuffix(unit.name) {
            number = number.dropLast(unit.name.count)
            while number.last == " " { number = number.dropLast() }
            factor = unit.factor
            break
        }
        let digits = number.filter { $0 != "_" }
        guard !digits.isEmpty, number.first != "_", number.last != "_",
            digits.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") })
        else { return nil }
        let parts = digits.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, !parts[0].isEmpty, let whole = Int(parts[0]) else { return nil }
        let (scaled, overflow) = whole.multipliedReportingOverflow(by: factor)
        guard !overflow else { return nil }
        guard parts.count == 2 else { return scaled }
        // A fraction: exact in binary only for whole bytes (1.5KiB = 1536; 1.1B is nothing).
        let fraction = parts[1]
        guard !fraction.isEmpty, fraction.count <= 9, factor > 1, let numerator = Int(fraction) else { return nil }
        var denominator = 1
        for _ in 0..<fraction.count { denominator *= 10 }
        let (part, partOverflow) = numerator.multipliedReportingOverflow(by: factor)
        guard !partOverflow, part % denominator == 0 else { return nil }
        let (total, totalOverflow) = scaled.addingReportingOverflow(part / denominator)
        return totalOverflow ? nil : total
    }

    /// A size for people: `512 B`, `1 KiB`, `1.5 KiB`, `40 MiB`, `2.25 GiB` (at most two decimals, trailing zeros
    /// dropped; exact when a whole number of the unit, otherwise rounded).
    package static func format<Count: BinaryInteger>(_ bytes: Count) -> String {
        let value = Double(bytes)
        let magnitude = abs(value)
        for (name, factor) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] where magnitude >= Double(factor) {
            return decimal(value / Double(factor)) + " " + name
        }
        return "\(bytes) B"
    }

    /// `40`, `1.5`, `2.25`: two decimals at most, without trailing zeros.
    static func decimal(_ value: Double) -> String {
        let hundredths = (value * 100).rounded()
        if hundredths.truncatingRemainder(dividingBy: 100) == 0 { return String(Int64(hundredths / 100)) }
        var text = String(Int64(hundredths / 100)) + "."
        let rest = Int64(abs(hundredths).truncatingRemainder(dividingBy: 100))
        text += rest < 10 ? "0\(rest)" : String(rest)
        while text.hasSuffix("0") { text.removeLast() }
        if value < 0 && !text.hasPrefix("-") { text = "-" + text }
        return text
    }
}

/// The version every Larder executable reports (`--version`) and puts in HELLO.
package enum LarderVersion {
    /// The software version, e.g. `0.1.0`.
    package static let string = "0.1.0"

    /// `--version`'s line for `program`: `larder 0.1.0 (protocol 1)`.
    package static func line(_ program: String) -> String {
        "\(program) \(string) (protocol \(ProtocolVersions.supported.map(String.init).joined(separator: ", ")))"
    }
}
