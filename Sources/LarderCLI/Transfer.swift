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

    static func importRecords(_ c: Context) async throws -> Int32 {
        let collection = c.collection()
        let (items, parseErrors) = try items(try read(c.arguments.count > 1 ? c.arguments[1] : "-"))
        let window = try c.int("window", range: 1...10_000) ?? 64
        let progress = Output.Progress(label: "import", enabled: c.output.stderrIsTerminal && items.count > 0)
        var created = 0
        var failures = parseErrors
        let client = c.client
        await withTaskGroup(of: (Int, LarderError?).self) { group in
            var next = 0
            func add() {
                let item = items[next]
                next += 1
                group.addTask {
                    do throws(LarderError) {
                        _ = try await client.create(collection, item.data, id: item.id)
                        return (item.line, nil)
                    } catch {
                        return (item.line, error)
                    }
                }
            }
            while next < min(window, items.count) { add() }
            for await (line, error) in group {
                if let error { failures.append((line, "\(error.status.name): \(error.message)")) } else { created += 1 }
                progress.update(created + failures.count - parseErrors.count, items.count)
                if next < items.count { add() }
            }
        }
        progress.finish()
        for (line, message) in failures.sorted(by: { $0.0 < $1.0 }).prefix(20) {
            c.output.error("line \(line): \(message)")
        }
        if failures.count > 20 { c.output.error("... and \(failures.count - 20) more errors") }
        let summary = "created: \(created), errors: \(failures.count)"
        if c.output.json {
            c.output.json(["created": .int(Int64(created)), "errors": .int(Int64(failures.count))])
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
