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
    private let lock = Lock()
    private var buffer: [UInt8] = []

    init(forceJSON: Bool) {
        stdoutIsTerminal = isatty(1) == 1
        stderrIsTerminal = isatty(2) == 1
        json = forceJSON || !stdoutIsTerminal
        let noColor = ProcessInfo.processInfo.environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        color = stdoutIsTerminal && !json && !noColor
    }

    /// Writes a line to stdout (buffered until `flush`).
    func line(_ text: String) {
        lock.withLock {
            buffer.append(contentsOf: text.utf8)
            buffer.append(0x0A)
            if buffer.count >= 1 << 16 { flushLocked() }
        }
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

    /// One record: a JSON object (with its `id`) or a vertical listing.
    func record(_ record: Record) {
        if json { return self.json(.object(record.json)) }
        let keys = ["id", "rev", "createdAt", "updatedAt"]
        let values = [
            record.id.wireString, String(record.rev), Timestamp.string(record.createdAt),
            Timestamp.string(record.updatedAt),
        ]
        let width = max(9, record.data.keys.map { Output.width($0) }.max() ?? 0)
        for (key, value) in zip(keys, values) { line(dim(Output.pad(key, width)) + "  " + value) }
        for (key, value) in record.data { line(bold(Output.pad(key, width)) + "  " + Output.cell(value, limit: 200)) }
    }

    /// Many records: JSON lines or a table of the id and the data's top-level fields.
    func records(_ records: [Record], nextCursor: String? = nil) {
        if json {
            for record in records { self.json(.object(record.json)) }
        } else {
            var columns: [String] = []
            for record in records {
                for key in record.data.keys where !columns.contains(key) && columns.count < 8 { columns.append(key) }
            }
            let rows = records.map { record in
                [String(record.id.wireString.prefix(8))] + columns.map { record.data[$0].map { Output.cell($0) } ?? "" }
            }
            table(["id"] + columns, rows)
            line(dim("\(records.count) record\(records.count == 1 ? "" : "s")"))
        }
        if let nextCursor { error("more: --cursor \(nextCursor)") }
    }

    /// A table with a bold header; cells padded by display width (CJK counts double).
    func table(_ header: [String], _ rows: [[String]]) {
        var widths = header.map { Output.width($0) }
        for row in rows {
            for (n, cell) in row.enumerated() where n < widths.count { widths[n] = max(widths[n], Output.width(cell)) }
        }
        func render(_ cells: [String]) -> String {
            cells.enumerated().map { n, cell in n == cells.count - 1 ? cell : Output.pad(cell, widths[n]) }
                .joined(separator: "  ")
        }
        line(bold(render(header)))
        for row in rows { line(render(row)) }
    }

    /// A value as a table cell: strings bare, other values as compact JSON, shortened to `limit` columns.
    static func cell(_ value: JSON, limit: Int = 32) -> String {
        var text: String
        switch value {
        case .string(let string): text = string
        default: text = String(decoding: value.bytes, as: UTF8.self)
        }
        text = text.replacingOccurrences(of: "\n", with: " ")
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

    /// A progress bar on stderr, drawn only when stderr is a terminal.
    final class Progress: @unchecked Sendable {
        private let label: String
        private let enabled: Bool
        private let lock = Lock()
        private var lastDrawn = -1

        init(label: String, enabled: Bool) {
            self.label = label
            self.enabled = enabled
        }

        func update(_ done: Int, _ total: Int) {
            guard enabled, total > 0 else { return }
            let percent = min(100, done * 100 / total)
            let text: String? = lock.withLock {
                guard percent != lastDrawn else { return nil }
                lastDrawn = percent
                let filled = percent * 30 / 100
                let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 30 - filled)
                return "\r\(label) [\(bar)] \(percent)% \(Progress.amount(done, total))"
            }
            if let text { Output.writeAll(2, Array(text.utf8)) }
        }

        func finish() {
            guard enabled, lastDrawn >= 0 else { return }
            Output.writeAll(2, Array("\n".utf8))
        }

        static func amount(_ done: Int, _ total: Int) -> String {
            total >= 1 << 20
                ? String(format: "%.1f/%.1f MiB", Double(done) / 1_048_576, Double(total) / 1_048_576)
                : "\(done)/\(total)"
        }
    }
}
