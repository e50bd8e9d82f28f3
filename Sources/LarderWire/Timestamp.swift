import Foundation

/// Milliseconds since 1970 in UTC, written as ISO 8601 with milliseconds (`2026-11-30T00:26:28.123Z`).
///
/// Hand-written because it sits on the read path of every record; `ISO8601DateFormatter` is far slower.
package enum Timestamp {
    /// Now, in milliseconds since the epoch.
    package static func nowMs() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// Appends the quoted ISO 8601 form of `ms` to `out`.
    package static func writeQuoted(_ ms: Int64, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        write(ms, into: &out)
        out.append(UInt8(ascii: "\""))
    }

    /// Appends the ISO 8601 form of `ms` (no quotes) to `out`: 24 bytes, formatted on the stack and appended at once
    /// (every record read writes two of them).
    package static func write(_ ms: Int64, into out: inout [UInt8]) {
        let (days, msOfDay) = ms.floorDivided(by: 86_400_000)
        let (year, month, day) = civil(fromDays: days)
        let seconds = msOfDay / 1000
        let millis = msOfDay % 1000
        let y = max(0, min(9999, year))
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 24) { b in
            func two(_ v: Int64, _ at: Int) {
                b[at] = UInt8(ascii: "0") + UInt8(v / 10)
                b[at + 1] = UInt8(ascii: "0") + UInt8(v % 10)
            }
            two(y / 100, 0)
            two(y % 100, 2)
            b[4] = UInt8(ascii: "-")
            two(month, 5)
            b[7] = UInt8(ascii: "-")
            two(day, 8)
            b[10] = UInt8(ascii: "T")
            two(seconds / 3600, 11)
            b[13] = UInt8(ascii: ":")
            two(seconds / 60 % 60, 14)
            b[16] = UInt8(ascii: ":")
            two(seconds % 60, 17)
            b[19] = UInt8(ascii: ".")
            b[20] = UInt8(ascii: "0") + UInt8(millis / 100)
            two(millis % 100, 21)
            b[23] = UInt8(ascii: "Z")
            out.append(contentsOf: UnsafeBufferPointer(b))
        }
    }

    /// The ISO 8601 string for `ms`.
    package static func string(_ ms: Int64) -> String {
        var out: [UInt8] = []
        write(ms, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff]Z`; nil for anything else.
    package static func parse(_ text: String) -> Int64? {
        let b = Array(text.utf8)
        guard b.count == 20 || b.count == 24, b[4] == 0x2D, b[7] == 0x2D, b[10] == 0x54, b[13] == 0x3A,
            b[16] == 0x3A, b.last == 0x5A
        else { return nil }
        func num(_ from: Int, _ count: Int) -> Int64? {
            var v: Int64 = 0
            for i in from..<(from + count) {
                guard b[i] >= 0x30 && b[i] <= 0x39 else { return nil }
                v = v * 10 + Int64(b[i] - 0x30)
            }
            return v
        }
        // Only instants that exist: no February 30th, no leap second (Unix time has none). Otherwise a date past the
        // end of year 9999 would be read, and written back as another instant (found by the fuzzer).
        guard let year = num(0, 4), let month = num(5, 2), let day = num(8, 2), let hour = num(11, 2),
            let minute = num(14, 2), let second = num(17, 2), (1...12).contains(month),
            (1...daysIn(month: month, year: year)).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        var millis: Int64 = 0
        if b.count == 24 {
            guard b[19] == 0x2E, let m = num(20, 3) else { return nil }
            millis = m
        }
        let days = daysFromCivil(year, month, day)
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Converts to a `Date`.
    package static func date(_ ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }

    /// Converts a `Date` to milliseconds since 1970, rounded to the nearest (`date(_:)` of the result gives it back
    /// to the millisecond).
    package static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    // Howard Hinnant's days-from-civil algorithms (public domain), proleptic Gregorian calendar.
    static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }

    static func daysFromCivil(_ y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}

extension Int64 {
    fileprivate func floorDivided(by divisor: Int64) -> (Int64, Int64) {
        let q = self / divisor
        let r = self % divisor
        return r < 0 ? (q - 1, r + divisor) : (q, r)
    }
}
