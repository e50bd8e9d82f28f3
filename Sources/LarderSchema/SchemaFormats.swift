/// The `format` checks, over a string's UTF-8. JSON Schema makes `format` an annotation unless asked; a collection
/// schema asserts it: a value that is not of its format is a violation.
enum FormatCheck {
    /// RFC 9562's text form: 32 hex digits (either case) in groups of 8-4-4-4-12 joined by hyphens; any version and
    /// variant, the nil and max UUIDs included.
    static func isUUID(_ s: UnsafeBufferPointer<UInt8>) -> Bool {
        guard s.count == 36 else { return false }
        for (i, byte) in s.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
            } else if !isHexDigit(byte) {
                return false
            }
        }
        return true
    }

    /// RFC 3339's `date-time` (§5.6): `YYYY-MM-DDTHH:MM:SS`, an optional fraction, then `Z` or `±HH:MM`; `T` and `Z`
    /// in either case. The day must exist in its month (29 February in leap years only), and a leap second (`:60`)
    /// is accepted only at 23:59 UTC, as RFC 3339 allows it.
    static func isDateTime(_ s: UnsafeBufferPointer<UInt8>) -> Bool {
        var i = 0
        func digits(_ n: Int) -> Int? {
            guard i + n <= s.count else { return nil }
            var value = 0
            for k in i..<i + n {
                guard s[k] >= UInt8(ascii: "0"), s[k] <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(s[k] - UInt8(ascii: "0"))
            }
            i += n
            return value
        }
        func take(_ byte: UInt8, or other: UInt8? = nil) -> Bool {
            guard i < s.count, s[i] == byte || s[i] == other else { return false }
            i += 1
            return true
        }
        guard let year = digits(4), take(UInt8(ascii: "-")), let month = digits(2), take(UInt8(ascii: "-")),
            let day = digits(2), take(UInt8(ascii: "T"), or: UInt8(ascii: "t")), let hour = digits(2),
            take(UInt8(ascii: ":")), let minute = digits(2), take(UInt8(ascii: ":")), let second = digits(2)
        else { return false }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month, year), hour <= 23, minute <= 59, second <= 60
        else { return false }
        if take(UInt8(ascii: ".")) {
            let first = i
            while i < s.count, s[i] >= UInt8(ascii: "0"), s[i] <= UInt8(ascii: "9") { i += 1 }
            guard i > first else { return false }
        }
        var offsetMinutes = 0
        if !take(UInt8(ascii: "Z"), or: UInt8(ascii: "z")) {
            guard i < s.count, s[i] == UInt8(ascii: "+") || s[i] == UInt8(ascii: "-") else { return false }
            let sign = s[i] == UInt8(ascii: "+") ? 1 : -1
            i += 1
            guard let offsetHour = digits(2), take(UInt8(ascii: ":")), let offsetMinute = digits(2),
                offsetHour <= 23, offsetMinute <= 59
            else { return false }
            offsetMinutes = sign * (offsetHour * 60 + offsetMinute)
        }
        guard i == s.count else { return false }
        if second == 60 {
            let utc = ((hour * 60 + minute - offsetMinutes) % 1440 + 1440) % 1440
            return utc == 23 * 60 + 59
        }
        return true
    }

    /// The days of `month` (1 to 12) in `year` of the proleptic Gregorian calendar.
    private static func daysIn(_ month: Int, _ year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Whether `byte` is an ASCII hex digit, either case.
    private static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            true
        default: false
        }
    }
}
