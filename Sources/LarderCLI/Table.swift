import LarderClient

/// How a table fits the terminal: column widths narrowed as evenly as possible, or no table at all.
enum TableLayout {
    /// A column is not narrowed below this many columns (or its own width, if smaller): narrower cells say too
    /// little to be worth a table, and the rows go vertical instead.
    static let narrowest = 10
    /// Spaces between columns.
    static let gap = 2

    /// Widths for columns whose content wants `natural` columns, each at least `minimum`, in `width` columns in all;
    /// nil when even the minimums do not fit. The widest columns give up room first (a water level: every column
    /// wider than it is cut down to it), so a long comment is narrowed before a short name is.
    static func fit(natural: [Int], minimum: [Int], width: Int) -> [Int]? {
        guard !natural.isEmpty else { return [] }
        let room = width - gap * (natural.count - 1)
        if natural.reduce(0, +) <= room { return natural }
        guard minimum.reduce(0, +) <= room else { return nil }
        func total(_ level: Int) -> Int { natural.indices.reduce(0) { $0 + max(minimum[$1], min(natural[$1], level)) } }
        var low = 0
        var high = natural.max()!
        while low < high {
            let middle = (low + high + 1) / 2
            if total(middle) <= room { low = middle } else { high = middle - 1 }
        }
        var widths = natural.indices.map { max(minimum[$0], min(natural[$0], low)) }
        // What the level leaves over goes one column at a time to those still cut, left first.
        var spare = room - widths.reduce(0, +)
        for n in widths.indices where spare > 0 && widths[n] < natural[n] {
            widths[n] += 1
            spare -= 1
        }
        return widths
    }

    /// One line of a table: each cell cut to its width (…), padded but the last, two spaces apart.
    static func render(_ cells: [String], _ widths: [Int]) -> String {
        widths.indices.map { n in
            let cell = Output.truncate(n < cells.count ? cells[n] : "", widths[n])
            return n == widths.count - 1 ? cell : Output.pad(cell, widths[n])
        }.joined(separator: String(repeating: " ", count: gap))
    }
}

/// Pages of records shown as they arrive, as one table (`--all` streams, holding one page at a time): the columns and
/// widths of the first page are kept while later pages fit in them; a page with other fields starts a new header.
/// Rows too wide for the terminal are shown vertically. In JSON mode, one JSON line per record.
final class RecordTable {
    private let out: Output
    /// The data fields shown as columns (after the id) and the widths of every column, while a table is open.
    private var layout: (fields: [String], widths: [Int])?
    /// Records shown so far.
    private(set) var count = 0

    /// Longest a cell's natural width may be: a long text is cut there even on a wide terminal.
    static let cellLimit = 60

    init(_ out: Output) { self.out = out }

    func add(_ records: [Record]) {
        defer { count += records.count }
        if out.json {
            for record in records { out.json(.object(record.json)) }
            return
        }
        guard !records.isEmpty else { return }
        var fields: [String] = []
        var seen: Set<String> = []
        for record in records {
            for key in record.data.keys where seen.insert(key).inserted { fields.append(key) }
        }
        if let layout, seen.isSubset(of: Set(layout.fields)) {
            for record in records { out.line(TableLayout.render(row(record, layout.fields), layout.widths)) }
            return
        }
        let header = ["id"] + fields
        let rows = records.map { row($0, fields) }
        let natural = header.indices.map { n in rows.reduce(Output.width(header[n])) { max($0, Output.width($1[n])) } }
        // The id is never cut: a cut id cannot be pasted into `get`.
        let minimum = natural.indices.map { $0 == 0 ? natural[0] : min(natural[$0], TableLayout.narrowest) }
        guard let widths = TableLayout.fit(natural: natural, minimum: minimum, width: out.columns) else {
            layout = nil
            for (n, cells) in rows.enumerated() { out.verticalRow(number: count + n + 1, header: header, cells: cells) }
            return
        }
        layout = (fields, widths)
        out.line(out.bold(TableLayout.render(header, widths)))
        for cells in rows { out.line(TableLayout.render(cells, widths)) }
    }

    /// The closing line: how many records, or, for a page cut short, how to get the rest.
    func finish(cursor: String? = nil) {
        if let cursor { return out.more(shown: count, noun: "record", cursor: cursor) }
        if !out.json { out.line(out.dim("\(count) record\(count == 1 ? "" : "s")")) }
    }

    private func row(_ record: Record, _ fields: [String]) -> [String] {
        [record.id.wireString]
            + fields.map { record.data[$0].map { Output.cell($0, limit: RecordTable.cellLimit) } ?? "" }
    }
}
