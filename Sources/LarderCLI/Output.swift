#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderSync

/// Where results and diagnostics go, and in which form: JSON lines for machines, tables for people.
final class Output: @unchecked Sendable {
    /// JSON lines instead of tables (`--json`, or stdout is not a terminal).
    let json: Bool
    /// ANSI colour on stdout (a terminal, `NO_COLOR` unset, not JSON).
    let color: Bool
    let stdoutIsTerminal: Bool
    let stderrIsTerminal: Bool
    /// The terminal's width in columns, which tables fit: TIOCGWINSZ on stdout, else `COLUMNS`, else 80.
    let columns: Int
    private let lock = Lock()
    private var buffer: [UInt8] = []

    init(forceJSON: Bool) {
        stdoutIsTerminal = isatty(1) == 1
        stderrIsTerminal = isatty(2) == 1
        json = forceJSON || !stdoutIsTerminal
        let noColor = ProcessInfo.processInfo.environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        color = stdoutIsTerminal && !json && !noColor
        columns = Output.terminalColumns()
    }

    /// The width of the terminal on stdout (or stderr), else `COLUMNS`, else 80; at least 20.
    static func terminalColumns() -> Int {
        for fd: Int32 in [1, 2] {
            var size = winsize()
            if ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return max(20, Int(size.ws_col)) }
        }
        if let text = ProcessInfo.processInfo.environment["COLUMNS"], let value = Int(text), value > 0 {
            return max(20, value)
        }
        return 80
    }

    /// Writes a line to stdout (buffered until `flush`).
    func line(_ text: String) {
        lock.withLock {
            buffer.append(contentsOf: text.utf8)
            buffer.append(0x0A)
            if buffer.count >= 1 << 16 { flushLocked() }
        }
    }

    /// Writes text as it is (its own line breaks) to stdout.
    func text(_ text: String) {
        lock.withLock { buffer.append(contentsOf: text.utf8) }
    }

    /// Writes raw bytes to stdout.
    func bytes(_ data: [UInt8]) {
        lock.withLock {
            flushLocked()
            Output.writeAll(1, data)
        }
    }

    /// Writes a JSON value as one line.
    func json(_ value: JSON) {
        line(String(decoding: value.bytes, as: UTF8.self))
    }

    /// Writes a line to stderr now.
    func error(_ text: String) {
        flush()
        Output.writeAll(2, Array((text + "\n").utf8))
    }

    func flush() {
        lock.withLock { flushLocked() }
    }

    private func flushLocked() {
        Output.writeAll(1, buffer)
        buffer.removeAll(keepingCapacity: true)
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        bytes.withUnsafeBytes { raw in
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }

    func bold(_ text: String) -> String { color ? "\u{1B}[1m\(text)\u{1B}[0m" : text }
    func dim(_ text: String) -> String { color ? "\u{1B}[2m\(text)\u{1B}[0m" : text }

    // MARK: - Records

    /// One record, vertically: the envelope, then each field of the data, long values wrapped to the terminal.
    func record(_ record: Record) {
        if json { return self.json(.object(record.json)) }
        var rows = [
            ("id", record.id.wireString, true), ("rev", String(record.rev), true),
            ("createdAt", Timestamp.string(record.createdAtMs), true),
            ("updatedAt", Timestamp.string(record.updatedAtMs), true),
        ]
        for (key, value) in record.data { rows.append((key, Output.cell(value, limit: 4000), false)) }
        let keyWidth = min(max(9, rows.map { Output.width($0.0) }.max() ?? 0), max(8, columns / 3))
        for (key, value, envelope) in rows {
            let label = Output.pad(Output.truncate(key, keyWidth), keyWidth)
            vertical(envelope ? dim(label) : bold(label), keyWidth: keyWidth, value: value, maxLines: 40)
        }
    }

    /// `label  value`, the value wrapped under itself to the terminal's width, on at most `maxLines` lines.
    func vertical(_ label: String, keyWidth: Int, value: String, maxLines: Int) {
        let room = max(10, columns - keyWidth - 2)
        let lines = Output.wrap(value, width: room, maxLines: maxLines)
        for (n, text) in lines.enumerated() {
            line((n == 0 ? label : String(repeating: " ", count: keyWidth)) + "  " + text)
        }
    }

    /// Records as a table of the id and the data's top-level fields; JSON lines in JSON mode. `RecordTable` streams
    /// several pages as one.
    func records(_ records: [Record]) {
        let table = RecordTable(self)
        table.add(records)
        table.finish()
    }

    /// The line for a page cut short: how many were shown and how to get the rest. On a terminal it follows the table
    /// on stdout; in JSON mode it goes to stderr, so that stdout stays JSON lines.
    func more(shown: Int, noun: String, cursor: String) {
        let text = "\(shown) \(noun)\(shown == 1 ? "" : "s") shown, more remain: --cursor \(shellQuoted(cursor))"
            + " for the next page, --all for all"
        if json { error(text) } else { line(dim(text)) }
    }

    /// A table with a bold header that fits the terminal: columns narrowed (cells cut with …) down to a minimum,
    /// and when even that is too wide, each row shown vertically. Columns in `fixed` are never narrowed (ids).
    func table(_ header: [String], _ rows: [[String]], fixed: Set<Int> = []) {
        let natural = header.indices.map { n in
            rows.reduce(Output.width(header[n])) { max($0, n < $1.count ? Output.width($1[n]) : 0) }
        }
        let minimum = natural.indices.map { fixed.contains($0) ? natural[$0] : min(natural[$0], TableLayout.narrowest) }
        guard let widths = TableLayout.fit(natural: natural, minimum: minimum, width: columns) else {
            for (n, row) in rows.enumerated() { verticalRow(number: n + 1, header: header, cells: row) }
            return
        }
        line(bold(TableLayout.render(header, widths)))
        for row in rows { line(TableLayout.render(row, widths)) }
    }

    /// One row of a table too wide for the terminal, psql's expanded form: `-[ N ]----` then `column  value` lines.
    func verticalRow(number: Int, header: [String], cells: [String], maxLines: Int = 3) {
        let keyWidth = min(header.map { Output.width($0) }.max() ?? 0, max(8, columns / 3))
        let rule = "-[ \(number) ]"
        line(dim(rule + String(repeating: "-", count: max(0, min(columns, 40) - rule.count))))
        for (n, key) in header.enumerated() where n < cells.count && !cells[n].isEmpty {
            let label = bold(Output.pad(Output.truncate(key, keyWidth), keyWidth))
            vertical(label, keyWidth: keyWidth, value: cells[n], maxLines: maxLines)
        }
    }

    /// A value as a table cell: strings bare, other values as compact JSON, shortened to `limit` columns.
    static func cell(_ value: JSON, limit: Int = 32) -> String {
        var text: String
        switch value {
        case .string(let string): text = string
        default: text = String(decoding: value.bytes, as: UTF8.self)
        }
        text = text.replacingOccurrences(of: "\n", with: " ")
        return truncate(text, limit)
    }

    /// `text` cut to `limit` columns, with … as its last column when cut.
    static func truncate(_ text: String, _ limit: Int) -> String {
        guard width(text) > limit else { return text }
        var out = ""
        var used = 0
        for character in text {
            let w = width(String(character))
            if used + w > limit - 1 { break }
            out.append(character)
            used += w
        }
        return out + "…"
    }

    /// `text` in lines of at most `width` columns, at most `maxLines` of them, the last ending in … when the text
    /// goes on. Lines break after a space when there is one in the second half of the line, else anywhere (a wide
    /// character is never split).
    static func wrap(_ text: String, width: Int, maxLines: Int) -> [String] {
        var lines: [String] = []
        var current: [Character] = []
        var used = 0
        for character in text {
            let w = Output.width(String(character))
            if used + w > width {
                guard lines.count + 1 < maxLines else {
                    lines.append(truncate(String(current) + String(character), width))
                    return lines
                }
                var carried: [Character] = []
                if let space = current.lastIndex(of: " "), Output.width(String(current[..<space])) >= width / 2 {
                    carried = Array(current[(space + 1)...])
                    current.removeSubrange(space...)
                }
                lines.append(String(current))
                current = carried
                used = Output.width(String(carried))
            }
            current.append(character)
            used += w
        }
        lines.append(String(current))
        return lines
    }

    /// Terminal columns a string takes: East Asian wide characters and emoji count two.
    static func width(_ text: String) -> Int {
        var total = 0
        for scalar in text.unicodeScalars {
            let v = scalar.value
            if v < 0x20 || (0x300...0x36F).contains(v) || v == 0x200D || (0xFE00...0xFE0F).contains(v) { continue }
            let wide =
                (0x1100...0x115F).contains(v) || (0x2E80...0xA4CF).contains(v) || (0xAC00...0xD7A3).contains(v)
                || (0xF900...0xFAFF).contains(v) || (0xFE30...0xFE4F).contains(v) || (0xFF00...0xFF60).contains(v)
                || (0xFFE0...0xFFE6).contains(v) || (0x1F300...0x1FAFF).contains(v) || (0x20000...0x3FFFD).contains(v)
            total += wide ? 2 : 1
        }
        return total
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text + String(repeating: " ", count: max(0, width - self.width(text)))
    }

    // MARK: - Progress

    /// A progress bar on stderr, drawn only when stderr is a terminal; it counts bytes, or `items` (an import's
    /// records).
    final class Progress: @unchecked Sendable {
        private let label: String
        private let enabled: Bool
        private let items: String?
        private let lock = Lock()
        private var lastDrawn = -1
        private var lastTotal = 0

        init(label: String, enabled: Bool, items: String? = nil) {
            self.label = label
            self.items = items
            self.enabled = enabled
        }

        func update(_ done: Int, _ total: Int) {
            guard enabled, total > 0 else { return }
            let percent = min(100, done * 100 / total)
            let text: String? = lock.withLock {
                lastTotal = total
                guard percent != lastDrawn else { return nil }
                lastDrawn = percent
                let filled = percent * 30 / 100
                let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 30 - filled)
                let amount = items.map { "\(done) of \(total) \($0)" } ?? Progress.amount(done, total)
                return "\r\(label) [\(bar)] \(percent)% \(amount)"
            }
            if let text { Output.writeAll(2, Array(text.utf8)) }
        }

        /// The transfer is complete: the bar is drawn full (the last report may have come just before the last
        /// bytes, at 99%), and the line ended.
        func finish() {
            guard enabled else { return }
            let total = lock.withLock { lastDrawn >= 0 ? lastTotal : 0 }
            guard total > 0 else { return }
            update(total, total)
            Output.writeAll(2, Array("\n".utf8))
        }

        /// `1.5 MiB of 2 MiB`.
        static func amount(_ done: Int, _ total: Int) -> String {
            "\(ByteSize.format(done)) of \(ByteSize.format(total))"
        }
    }
}
