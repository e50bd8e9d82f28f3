import Foundation
import LarderClient

/// A failure of the CLI itself (a file it cannot read, bad JSON): `Error: <message>`, exit 1.
struct CommandFailure: Error {
    var message: String
}


/// The command table: shapes, help and implementations.
enum Commands {
    static let queryOptions = [
        OptionSpec("where", value: "EXPR", help: "a comparison such as price<50 (repeatable; see below)"),
        OptionSpec("filter", value: "JSON", help: "a filter in wire form, e.g. {\"or\":[...]}"),
        OptionSpec("contains", value: "TEXT", help: "text search, case-insensitive, any length"),
        OptionSpec("in", value: "FIELD,...", help: "fields --contains searches (default: all string fields)"),
    ]
    static let pageOptions = [
        OptionSpec("limit", value: "N", help: "records per page, 1 to 1000 (default 50)"),
        OptionSpec("cursor", value: "C", help: "continue after a previous page"),
        OptionSpec("all", help: "every page: follow the cursors to the end, printing each page as it comes"),
    ]

    static let searchExamples = """
        Examples:
          larder search items --where 'price<50' --where discount=true      # cheap and discounted
          larder search students --contains 北京 --in address                # students living in Beijing
          larder search students --contains 张                               # any field (All scope)
          larder search pokemon_items --where category=Ball --sort name
          larder search items --sort price:desc --limit 3
          larder search recipes --sort title@en
        """

    static let watchExamples = """
        Each event is a line: its sequence number, kind, collection/id, revision and the document (JSON lines with
        --json or when stdout is not a terminal). Without COLLECTION every collection is followed. A document that a
        write takes out of the --where filter shows as "left". If the watcher falls behind it resumes where it was;
        if --since is older than the server's change log, a resync line says so (reload, then follow).
        When the server goes away, watch says so in one line on stderr and reconnects (after 0.1 s, doubling to 5 s
        between tries), then goes on after the last change it printed: nothing is lost or shown twice.

        Examples:
          larder watch todos                               # every change to the todo list
          larder watch items --where 'price<50' --json     # cheap purchases, as JSON lines
          larder watch --since 1200                        # everything after change 1200, then live
        """

    static let all: [CommandSpec] = [
        CommandSpec(
            ["ping"], summary: "check the server answers; --count N prints a latency summary",
            options: [
                OptionSpec("count", short: "c", value: "N", help: "pings to send (default 1)"),
                OptionSpec("interval", value: "MS", help: "pause between pings (default 0)"),
            ]),
        CommandSpec(
            ["create"], arguments: "COLLECTION JSON", arity: 2...2, summary: "store a new document",
            details: "Example: larder create todos '{\"title\":\"Buy milk 買牛奶\",\"isFinish\":false}'",
            options: [OptionSpec("id", value: "UUID", help: "use this id instead of a server-made one")]),
        CommandSpec(
            ["get"], arguments: "COLLECTION ID [ID...]", arity: 2...1001, summary: "read documents by id"),
        CommandSpec(
            ["replace"], arguments: "COLLECTION ID JSON", arity: 3...3, summary: "replace a document's data",
            options: [OptionSpec("rev", value: "N", help: "only if the document is still at this revision")]),
        CommandSpec(
            ["patch"], arguments: "COLLECTION ID JSON", arity: 3...3,
            summary: "merge a JSON patch into a document (null removes a field)",
            details: "Example: larder patch todos ID '{\"isFinish\":true}'",
            options: [OptionSpec("rev", value: "N", help: "only if the document is still at this revision")]),
        CommandSpec(
            ["delete"], arguments: "COLLECTION ID", arity: 2...2, summary: "delete a document and its blobs",
            options: [OptionSpec("rev", value: "N", help: "only if the document is still at this revision")]),
        CommandSpec(
            ["list"], arguments: "COLLECTION", arity: 1...1, summary: "documents in creation order",
            options: pageOptions),
        CommandSpec(
            ["search"], arguments: "COLLECTION", arity: 1...1, summary: "documents matching filters and text",
            details: FilterSyntax.help + "\n" + searchExamples,
            options: queryOptions + [
                OptionSpec("sort", value: "FIELD[:asc|:desc]", help: "sort key (repeatable; id breaks ties)")
            ] + pageOptions),
        CommandSpec(
            ["count"], arguments: "COLLECTION", arity: 1...1, summary: "how many documents match",
            details: FilterSyntax.help, options: queryOptions),
        CommandSpec(
            ["group"], arguments: "COLLECTION FIELD", arity: 2...2,
            summary: "sections by a field's value, with counts",
            details: "Example: larder group pokemon_items category",
            options: queryOptions + [OptionSpec("per-group", value: "N", help: "records shown per section (default 10)")]),
        CommandSpec(["collections"], summary: "collections and their document counts"),
        CommandSpec(["drop"], arguments: "COLLECTION", arity: 1...1, summary: "delete a collection with its blobs"),
        CommandSpec(["index"], arguments: "COLLECTION FIELD", arity: 2...2, summary: "declare an index on a field"),
        CommandSpec(
            ["schema", "set"], arguments: "COLLECTION FILE", arity: 2...2,
            summary: "set a collection's schema from a JSON file (- for stdin)",
            details: """
                The schema is a JSON Schema 2020-12 subset (Protocol.md section 5.9). From then on every create,
                replace and patch of the collection must match it; a write that does not is refused with its
                violations, one per line. Prints how many stored records do not match, and the first ids.
                Example: larder schema set todos todo.schema.json
                """,
            options: [OptionSpec("warn", help: "store records that do not match; the server logs and counts them")]),
        CommandSpec(["schema", "get"], arguments: "COLLECTION", arity: 1...1, summary: "print a collection's schema"),
        CommandSpec(
            ["schema", "remove"], arguments: "COLLECTION", arity: 1...1, summary: "remove a collection's schema"),
        CommandSpec(
            ["rules", "set"], arguments: "COLLECTION", arity: 1...1,
            summary: "set who among signed-in users may use a collection (admin)",
            details: "Each of --read, --create, --update, --delete (all four required) is owner (each user their own "
                + "records), signedIn, public or admin.\nExample: larder rules set todos --read owner --create owner "
                + "--update owner --delete owner",
            options: ["read", "create", "update", "delete"].map {
                OptionSpec($0, value: "ACCESS", help: "who may \($0): owner, signedIn, public or admin")
            }),
        CommandSpec(["rules", "get"], arguments: "COLLECTION", arity: 1...1, summary: "a collection's rules for users"),
        CommandSpec(
            ["users", "list"], summary: "list the accounts the server keeps (admin, --users)",
            options: [
                OptionSpec("limit", value: "N", help: "accounts per page (default 100)"),
                OptionSpec("cursor", value: "CURSOR", help: "continue after the page that printed it"),
            ]),
        CommandSpec(
            ["users", "create"], arguments: "EMAIL", arity: 1...1, summary: "create an account (admin, --users)",
            details: "The password is read from stdin (its first line), never from the command line.\nExample: "
                + "printf '%s\\n' \"$PASSWORD\" | larder users create ann@example.com"),
        CommandSpec(
            ["users", "disable"], arguments: "USER", arity: 1...1,
            summary: "stop an account signing in and end its sessions (admin; USER is an email or larder|id)"),
        CommandSpec(
            ["users", "enable"], arguments: "USER", arity: 1...1, summary: "let a disabled account sign in again (admin)"),
        CommandSpec(
            ["users", "delete"], arguments: "USER", arity: 1...1, summary: "delete an account and its sessions (admin)"),
        CommandSpec(
            ["blob", "put"], arguments: "FILE", arity: 1...1, summary: "store a JPEG (FILE or - for stdin)",
            details: "A FILE larger than one chunk goes up in chunks and resumes where it stopped after a broken "
                + "connection. stdin (-) of any size up to the server's maxBlobBytes is read to its end first (an "
                + "upload declares its size), into a temporary file in TMPDIR when it passes a chunk, then sent the "
                + "same way.",
            options: [
                OptionSpec("attach", value: "COLLECTION/ID", help: "delete the blob with this document"),
                OptionSpec("id", value: "UUID", help: "use this id"),
                OptionSpec(
                    "resume-within", value: "SECONDS",
                    help: "keep resuming after a broken connection for this long (default 60)"),
            ]),
        CommandSpec(
            ["blob", "get"], arguments: "ID", arity: 1...1, summary: "write a blob's bytes to a file",
            details: "Without -o the bytes go to stdout, but never to a terminal. The blob is read in chunks, so any "
                + "size fits in a few chunks of memory; a file appears only once complete.",
            options: [
                OptionSpec("output", short: "o", value: "FILE", help: "where to write (- for stdout)"),
                OptionSpec("range", value: "START-END", help: "only bytes START to END, both included (as HTTP)"),
                OptionSpec(
                    "thumb", value: "N",
                    help: "a thumbnail whose longer side is N pixels instead (one of the server's sizes, e.g. 256)"),
            ]),
        CommandSpec(["blob", "info"], arguments: "ID", arity: 1...1, summary: "a blob's metadata"),
        CommandSpec(["blob", "delete"], arguments: "ID", arity: 1...1, summary: "delete a blob"),
        CommandSpec(
            ["blob", "list"], summary: "blobs in creation order",
            options: [
                OptionSpec("attached-to", value: "COLLECTION/ID", help: "only blobs attached to this document")
            ] + pageOptions),
        CommandSpec(
            ["stats"], summary: "server statistics: a summary on a terminal, everything with --json",
            details: """
                On a terminal: uptime, connections, requests per second (measured over --interval), p50 and p99
                latency for each operation, and the store's sizes. With --json (or when stdout is not a terminal):
                the server's whole STATS answer as one JSON object.
                """,
            options: [
                OptionSpec(
                    "interval", value: "SECONDS",
                    help: "measure requests/s over this long (default 1; 0: the average since start)")
            ]),
        CommandSpec(
            ["backup"], arguments: "FILE", arity: 1...1,
            summary: "write a consistent snapshot of the running server's store to FILE",
            details: """
                The server snapshots its store while writes go on, and the snapshot is streamed here (a progress
                bar on a terminal) and checked against the server's SHA-256; FILE appears only once complete. On
                the SQLite store FILE is a SQLite database. To restore, start a server on a new data directory
                holding it as larder.sqlite:
                  larder backup larder-2026-12-01.sqlite
                  mkdir restored && cp larder-2026-12-01.sqlite restored/larder.sqlite
                  larder-server --data-dir restored
                A server on PostgreSQL has no backup of its own: use pg_dump.
                """),
        CommandSpec(
            ["import"], arguments: "COLLECTION [FILE|-]", arity: 1...2,
            summary: "create documents from a JSON array or NDJSON (file or stdin)",
            details: """
                Each element is a document's data, or an exported record ({"id","data",...}) whose id is kept.
                Modes: insert (the default) creates every element; an id that already exists is an error.
                upsert creates each record under its own id, or replaces the document that has it; skip-existing
                creates the records whose id is new and leaves the others. Both need ids (the samples and
                larder export have them), so running the same import twice leaves the same documents.
                Requests are pipelined; ends with a count of each outcome ('created: N, errors: M') and exits 1 if
                any failed. A failed element does not stop the import unless --stop-on-error is given: its line
                number and error are printed (a record the collection's schema refuses, with its violations one per
                line). With --stop-on-error nothing more is sent after the first failure (the requests already in
                flight, up to --window, finish; --window 1 sends none past it) and the summary counts the elements
                not sent.
                Examples:
                  larder import students samples/students.json --mode upsert
                  larder export items | larder import items_copy --mode skip-existing
                """,
            options: [
                OptionSpec("mode", value: "MODE", help: "insert (default), upsert or skip-existing"),
                OptionSpec("window", value: "N", help: "requests in flight (default 64)"),
                OptionSpec("stop-on-error", help: "send nothing more after the first element that fails"),
            ]),
        CommandSpec(
            ["export"], arguments: "COLLECTION", arity: 1...1, summary: "every record as NDJSON",
            options: [OptionSpec("data", help: "only the data objects, not the envelopes")]),
        CommandSpec(
            ["watch"], arguments: "[COLLECTION]", arity: 0...1,
            summary: "print changes as they are committed, until Ctrl-C",
            details: FilterSyntax.help + "\n" + watchExamples,
            options: [
                OptionSpec("since", value: "SEQ", help: "first replay the changes after this sequence number"),
                OptionSpec("where", value: "EXPR", help: "only documents matching, e.g. price<50 (repeatable)"),
                OptionSpec("filter", value: "JSON", help: "a filter in wire form, e.g. {\"or\":[...]}"),
                OptionSpec("ids-only", help: "leave the documents out (ids, revisions, sequence numbers)"),
            ]),
        CommandSpec(
            ["completion"], arguments: "bash|zsh", arity: 1...1, summary: "print a shell completion script",
            details: """
                Completes commands, options and collection names (asked of the server the options name).
                bash: eval "$(larder completion bash)"   (or save it in /etc/bash_completion.d/larder)
                zsh:  eval "$(larder completion zsh)"    (after compinit; or save it as _larder in $fpath)
                """),
        CommandSpec(["help"], arguments: "[COMMAND]", arity: 0...2, summary: "show help for a command"),
    ]

    static func run(_ command: CommandSpec, _ context: Context) async throws -> Int32 {
        let c = context
        let out = c.output
        let client = c.client
        switch command.name {
        case "ping": return try await ping(c)
        case "create":
            let id = try c.invocation.value("id").map { (text) throws(UsageError) in try c.uuid(text) }
            out.record(try await client.create(c.collection(), try c.object(c.arguments[1]), id: id))
        case "get":
            let ids = try c.arguments.dropFirst().map { (text) throws(UsageError) in try c.uuid(text) }
            if ids.count == 1 {
                out.record(try await client.get(c.collection(), id: ids[0]))
            } else {
                let response = try await client.getMany(c.collection(), ids: ids)
                out.records(response.records)
                if !response.missing.isEmpty {
                    throw LarderError(
                        .notFound, "not found: " + response.missing.map(\.wireString).joined(separator: ", "))
                }
            }
        case "replace":
            out.record(
                try await client.replace(
                    c.collection(), id: try c.uuid(c.arguments[1]), data: try c.object(c.arguments[2]), rev: try c.rev()))
        case "patch":
            out.record(
                try await client.patch(
                    c.collection(), id: try c.uuid(c.arguments[1]), patch: try c.object(c.arguments[2]),
                    rev: try c.rev()))
        case "delete":
            let response = try await client.delete(c.collection(), id: try c.uuid(c.arguments[1]), rev: try c.rev())
            if out.json {
                out.json(.object(response.json))
            } else {
                out.line("deleted \(response.id.wireString) at rev \(response.rev), blobs deleted: \(response.blobsDeleted)")
            }
        case "list", "search":
            var cursor = c.invocation.value("cursor")
            let limit = try c.int("limit", range: 1...maxPageLimit) ?? defaultPageLimit
            let (filter, text) = try c.query()
            var sort: [SortKey] = []
            for key in c.invocation.values["sort"] ?? [] { sort.append(try FilterSyntax.sortKey(key)) }
            // Each page is shown as it comes, so --all holds one page at a time however long the collection.
            let table = RecordTable(out)
            repeat {
                let page =
                    command.name == "list"
                    ? try await client.list(c.collection(), limit: limit, cursor: cursor)
                    : try await client.search(
                        c.collection(),
                        SearchQuery(filter: filter, text: text, sort: sort, limit: limit, cursor: cursor))
                cursor = page.nextCursor
                table.add(page.records)
                out.flush()
            } while c.invocation.flag("all") && cursor != nil
            table.finish(cursor: cursor)
        case "count":
            let (filter, text) = try c.query()
            let count = try await client.count(c.collection(), filter: filter, text: text)
            if out.json { out.json(["count": .int(Int64(count))]) } else { out.line(String(count)) }
        case "group":
            let (filter, text) = try c.query()
            let perGroup = try c.int("per-group", range: 0...GroupRequest.maxPerGroup) ?? GroupRequest.defaultPerGroup
            let response = try await client.group(
                c.collection(), by: c.arguments[1], filter: filter, text: text, perGroup: perGroup)
            for section in response.groups {
                if out.json {
                    out.json([
                        "key": section.key, "count": .int(Int64(section.count)),
                        "records": .array(section.records.map { .object($0.json) }),
                    ])
                } else {
                    let key = section.key.isNull ? "(none)" : Output.cell(section.key, limit: 60)
                    out.line(out.bold("\(key) (\(section.count))"))
                    RecordTable(out).add(section.records)
                    if section.records.count < section.count {
                        out.line(out.dim("\(section.records.count) of \(section.count) shown (--per-group N for more)"))
                    }
                    out.line("")
                }
            }
        case "collections":
            let entries = try await client.collections()
            if out.json {
                for entry in entries { out.json(["name": .string(entry.name), "count": .int(Int64(entry.count))]) }
            } else {
                out.table(["collection", "documents"], entries.map { [$0.name, String($0.count)] })
            }
        case "drop":
            let response = try await client.dropCollection(c.collection())
            if out.json {
                out.json(.object(response.json))
            } else {
                out.line("dropped \(response.collection): \(response.documents) documents, \(response.blobs) blobs")
            }
        case "index":
            let response = try await client.index(c.collection(), field: c.arguments[1])
            if out.json {
                out.json(.object(response.json))
            } else {
                out.line("\(response.name) \(response.created ? "created" : "already existed")")
            }
        case "schema set":
            let schema = try c.object(
                String(decoding: try Transfer.read(c.arguments[1]), as: UTF8.self), "the schema file")
            let response = try await client.setSchema(
                c.collection(), schema, validationAction: c.invocation.flag("warn") ? .warn : .error)
            schemaSet(out, response)
        case "schema get":
            let response = try await client.schema(c.collection())
            if out.json {
                out.json(.object(response.json))
            } else if let schema = response.schema {
                out.line(String(decoding: JSON.object(schema).bytes, as: UTF8.self))
                out.line(out.dim("version \(response.version), \(response.validationAction.rawValue)"))
            } else {
                out.line("\(response.collection) has no schema")
            }
        case "schema remove": schemaSet(out, try await client.removeSchema(c.collection()))
        case "rules set":
            var accesses: [CollectionRules.Access] = []
            for name in ["read", "create", "update", "delete"] {
                guard let text = c.invocation.value(name) else {
                    throw UsageError("--\(name) is required: owner, signedIn, public or admin")
                }
                guard let access = CollectionRules.Access(rawValue: text) else {
                    throw UsageError(
                        "--\(name) must be owner, signedIn, public or admin", excerpt: .option(name, text))
                }
                accesses.append(access)
            }
            let rules = try await client.setRules(
                CollectionRules(read: accesses[0], create: accesses[1], update: accesses[2], delete: accesses[3]),
                for: c.collection())
            rulesOutput(out, c.collection(), rules)
        case "rules get":
            rulesOutput(out, c.collection(), try await client.rules(for: c.collection()))
        case "users list":
            let page = try await client.users(
                limit: try c.int("limit", range: 1...maxPageLimit) ?? defaultPageLimit,
                cursor: c.invocation.value("cursor"))
            usersOutput(out, page)
        case "users create":
            let password = String(decoding: try Transfer.read("-"), as: UTF8.self)
                .split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            userOutput(out, try await client.createUser(email: c.arguments[0], password: password), "created")
        case "users disable": userOutput(out, try await client.setUserDisabled(c.arguments[0], true), "disabled")
        case "users enable": userOutput(out, try await client.setUserDisabled(c.arguments[0], false), "enabled")
        case "users delete":
            let sessions = try await client.deleteUser(c.arguments[0])
            if out.json {
                out.json(.object(["user": .string(c.arguments[0]), "sessionsDeleted": .int(Int64(sessions))]))
            } else {
                out.line("deleted \(c.arguments[0]) and \(sessions) sessions")
            }
        case "blob put": return try await blobPut(c)
        case "blob get": return try await blobGet(c)
        case "blob info": blobInfo(out, try await client.blobHead(try c.uuid(c.arguments[0])))
        case "blob delete":
            let response = try await client.blobDelete(try c.uuid(c.arguments[0]))
            if out.json { out.json(.object(response.json)) } else { out.line("deleted blob \(response.id.wireString)") }
        case "blob list":
            var cursor = c.invocation.value("cursor")
            let limit = try c.int("limit", range: 1...maxPageLimit) ?? defaultPageLimit
            let attached = try c.attachment("attached-to")
            var shown = 0
            repeat {
                let page = try await client.blobList(limit: limit, cursor: cursor, attachedTo: attached)
                cursor = page.nextCursor
                shown += page.blobs.count
                if out.json {
                    for blob in page.blobs { out.json(.object(blob.json)) }
                } else if !page.blobs.isEmpty {
                    out.table(
                        ["id", "size", "pixels", "attached to", "created"],
                        page.blobs.map {
                            [
                                $0.id.wireString, ByteSize.format($0.size), "\($0.width)x\($0.height)",
                                $0.attachedTo.map { "\($0.collection)/\($0.id.wireString)" } ?? "",
                                Timestamp.string($0.createdAtMs),
                            ]
                        }, fixed: [0, 3])
                }
                out.flush()
            } while c.invocation.flag("all") && cursor != nil
            if let cursor {
                out.more(shown: shown, noun: "blob", cursor: cursor)
            } else if !out.json {
                out.line(out.dim("\(shown) blob\(shown == 1 ? "" : "s")"))
            }
        case "stats": return try await stats(c)
        case "backup": return try await backup(c)
        case "completion":
            guard let script = Completion.script(for: c.arguments[0]) else {
                throw UsageError(
                    "completion scripts are for bash and zsh", usage: command.usage,
                    excerpt: commandLineExcerpt(["completion"] + c.arguments, at: 1))
            }
            out.text(script)
        case "import": return try await Transfer.importRecords(c)
        case "export": return try await Transfer.export(c)
        case "watch": return try await watch(c)
        default:
            throw UsageError("'\(command.name)' is not implemented")
        }
        return 0
    }

    /// SCHEMA_SET's answer: the version and action, and the stored records that do not match.
    static func schemaSet(_ out: Output, _ response: SchemaSetResponse) {
        if out.json { return out.json(.object(response.json)) }
        out.line("schema of \(response.collection): version \(response.version), \(response.validationAction.rawValue)")
        let count = response.nonMatchingCount
        guard count > 0 else { return }
        out.line("\(count) stored record\(count == 1 ? " does" : "s do") not match:")
        for id in response.nonMatchingIDs { out.line("  \(id.wireString)") }
        if count > response.nonMatchingIDs.count { out.line("  ... and \(count - response.nonMatchingIDs.count) more") }
    }

    static func ping(_ c: Context) async throws -> Int32 {
        let count = try c.int("count", range: 1...1_000_000) ?? 1
        let interval = try c.int("interval", range: 0...3_600_000) ?? 0
        var times: [Double] = []
        for n in 1...count {
            let rtt = try await c.client.ping()
            let ms = Double(rtt.components.seconds) * 1000 + Double(rtt.components.attoseconds) / 1e15
            times.append(ms)
            if c.output.json {
                c.output.json(["seq": .int(Int64(n)), "ms": .double((ms * 1000).rounded() / 1000)])
            } else {
                c.output.line(String(format: "PONG seq=%d time=%.3f ms", n, ms))
            }
            // Each answer shows as it comes, not when the last one has.
            c.output.flush()
            if interval > 0 && n < count { try? await Task.sleep(for: .milliseconds(interval)) }
        }
        if count > 1 {
            let sorted = times.sorted()
            func pct(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)] }
            let avg = times.reduce(0, +) / Double(times.count)
            if c.output.json {
                func r(_ v: Double) -> JSON { .double((v * 1000).rounded() / 1000) }
                c.output.json([
                    "count": .int(Int64(count)), "minMs": r(sorted[0]), "avgMs": r(avg), "p50Ms": r(pct(0.5)),
                    "p99Ms": r(pct(0.99)), "maxMs": r(sorted[sorted.count - 1]),
                ])
            } else {
                c.output.line(
                    String(
                        format: "%d pings: min %.3f / avg %.3f / p50 %.3f / p99 %.3f / max %.3f ms", count, sorted[0],
                        avg, pct(0.5), pct(0.99), sorted[sorted.count - 1]))
            }
        }
        return 0
    }
}
