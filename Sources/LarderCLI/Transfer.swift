import Foundation
import LarderClient

/// `import` and `export`, and reading input files.
enum Transfer {
    /// The bytes of a file, or of stdin for `-`.
    static func read(_ path: String) throws -> [UInt8] {
        if path == "-" { return Array(FileHandle.standardInput.readDataToEndOfFile()) }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CommandFailure(message: "cannot read \(path): no such file or not readable")
        }
        return Array(data)
    }

    /// One input document: data for a new record, with an id when the input was an exported record.
    struct Item: Sendable {
        var line: Int
        var id: UUID?
        var data: JSONObject
    }

    /// Splits a JSON array or NDJSON into items; lines that are not JSON objects are returned as errors.
    static func items(_ bytes: [UInt8]) throws -> ([Item], [(Int, String)]) {
        var items: [Item] = []
        var errors: [(Int, String)] = []
        func add(_ value: JSON, line: Int) {
            guard case .object(let object) = value else {
                errors.append((line, "not a JSON object"))
                return
            }
            if case .string(let idText)? = object["id"], case .object(let data)? = object["data"],
                let id = UUID(wireString: idText)
            {
                items.append(Item(line: line, id: id, data: data))
            } else {
                items.append(Item(line: line, id: nil, data: object))
            }
        }
        let first = bytes.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
        if first == UInt8(ascii: "[") {
            let value: JSON
            do throws(LarderError) {
                value = try JSONParser.parse(bytes)
            } catch {
                throw CommandFailure(message: "the input is not a valid JSON array: \(error.message)")
            }
            for (n, element) in (value.arrayValue ?? []).enumerated() { add(element, line: n + 1) }
        } else {
            for (n, line) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
                let trimmed = line.drop { [0x20, 0x09, 0x0D].contains($0) }
                if trimmed.allSatisfy({ [0x20, 0x09, 0x0D].contains($0) }) { continue }
                do throws(LarderError) {
                    add(try JSONParser.parse(Array(line)), line: n + 1)
                } catch {
                    errors.append((n + 1, "invalid JSON: \(error.message)"))
                }
            }
        }
        return (items, errors)
    }

    /// How `import` treats a record whose id may already exist.
    enum Mode: String, CaseIterable {
        /// Create every element; an existing id is an error (CONFLICT).
        case insert
        /// Create under the record's own id, or replace the document that has it.
        case upsert
        /// Create the records whose id is new; leave the others as they are.
        case skipExisting = "skip-existing"
    }

    /// What became of one element.
    enum Outcome {
        case created, replaced, skipped
        case failed(String)
    }

    /// One element written according to `mode`. Upsert creates first and replaces on CONFLICT (one request for a new
    /// record); a document deleted between the two is created again, so the record ends up stored either way.
    /// `enqueued` is called once the first create is queued on the connection (or failed before that), and may be
    /// called again.
    static func write(
        _ item: Item, _ collection: String, _ mode: Mode, _ client: LarderClient,
        enqueued: @escaping @Sendable () -> Void = {}
    ) async -> Outcome {
        defer { enqueued() }
        if mode != .insert && item.id == nil {
            return .failed(
                "--mode \(mode.rawValue) needs the record's id: give {\"id\": UUID, \"data\": {...}}"
                    + " (as export writes)")
        }
        do throws(LarderError) {
            for _ in 0..<3 {
                do throws(LarderError) {
                    _ = try await client.create(collection, item.data, id: item.id, enqueued: enqueued)
                    return .created
                } catch where error.status == .conflict && mode != .insert {
                    if mode == .skipExisting { return .skipped }
                }
                do throws(LarderError) {
                    _ = try await client.replace(collection, id: item.id!, data: item.data)
                    return .replaced
                } catch where error.status == .notFound {
                    continue
                }
            }
            return .failed("the record kept being created and deleted by someone else; try it again")
        } catch {
            // A schema's refusal lists its violations after the message, one per line.
            return .failed(
                ([error.status.name + ": " + error.message] + error.violations.map { "  \($0)" }).joined(separator: "\n"))
        }
    }

    static func importRecords(_ c: Context) async throws -> Int32 {
        let collection = c.collection()
        let modeText = c.invocation.value("mode") ?? Mode.insert.rawValue
        guard let mode = Mode(rawValue: modeText) else {
            throw UsageError(
                "--mode must be insert, upsert or skip-existing",
                excerpt: .option("mode", modeText))
        }
        let window = try c.int("window", range: 1...10_000) ?? 64
        let stopOnError = c.invocation.flag("stop-on-error")
        let (items, parseErrors) = try items(try read(c.arguments.count > 1 ? c.arguments[1] : "-"))
        let progress = Output.Progress(
            label: "import", enabled: c.output.stderrIsTerminal && items.count > 0, items: "records")
        var counts: [String: Int] = ["created": 0, "replaced": 0, "skipped": 0]
        var failures = parseErrors
        var notSent = 0
        let client = c.client
        await withTaskGroup(of: (Int, Outcome).self) { group in
            var next = 0
            // Up to `window` creates in flight, each queued on the connection before the next is sent: the server
            // commits one connection's writes in the order they were sent, so the records are created (and listed)
            // in the file's order.
            func add() async {
                let item = items[next]
                next += 1
                let (queued, signal) = AsyncStream<Void>.makeStream()
                group.addTask {
                    (item.line, await write(item, collection, mode, client, enqueued: { signal.finish() }))
                }
                for await _ in queued {}
            }
            // With --stop-on-error a line that is not a record stops the import before anything is sent.
            let stopped = { stopOnError && !failures.isEmpty }
            while next < min(window, items.count), !stopped() { await add() }
            var done = 0
            for await (line, outcome) in group {
                switch outcome {
                case .created: counts["created"]! += 1
                case .replaced: counts["replaced"]! += 1
                case .skipped: counts["skipped"]! += 1
                case .failed(let message): failures.append((line, message))
                }
                done += 1
                progress.update(done, items.count)
                if next < items.count, !stopped() { await add() }
            }
            notSent = items.count - next
        }
        progress.finish()
        for (line, message) in failures.sorted(by: { $0.0 < $1.0 }).prefix(20) {
            c.output.error("line \(line): \(message)")
        }
        if failures.count > 20 { c.output.error("... and \(failures.count - 20) more errors") }
        // The outcomes a mode can have, in this order: insert says created and errors, as it always has.
        let names = ["created"] + (mode == .upsert ? ["replaced"] : []) + (mode == .skipExisting ? ["skipped"] : [])
        let stoppedEarly = stopOnError ? ["not sent: \(notSent)"] : []
        let summary = (names.map { "\($0): \(counts[$0]!)" } + ["errors: \(failures.count)"] + stoppedEarly)
            .joined(separator: ", ")
        if c.output.json {
            var json = JSONObject()
            for name in names { json[name] = .int(Int64(counts[name]!)) }
            json["errors"] = .int(Int64(failures.count))
            if stopOnError { json["notSent"] = .int(Int64(notSent)) }
            c.output.json(.object(json))
            c.output.error(summary)
        } else {
            c.output.line(summary)
        }
        return failures.isEmpty ? 0 : 1
    }

    static func export(_ c: Context) async throws -> Int32 {
        var cursor: String?
        let dataOnly = c.invocation.flag("data")
        repeat {
            let page = try await c.client.list(c.collection(), limit: maxPageLimit, cursor: cursor)
            for record in page.records { c.output.json(dataOnly ? .object(record.data) : .object(record.json)) }
            cursor = page.nextCursor
        } while cursor != nil
        return 0
    }
}
