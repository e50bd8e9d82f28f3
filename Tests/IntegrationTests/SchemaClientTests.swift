import Foundation
import LarderClient
import LarderTestSupport
import LarderTestThreads
import Testing

/// Schemas through LarderClient (set, read, remove; violations as a typed error) and the `larder` command
/// (`schema set|get|remove`, refusals printed one violation a line, `import` naming a refused line).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SchemaClientTests {
    struct Todo: Codable, Sendable {
        var title: String
        var isFinish: Bool
    }

    /// The README's todo schema.
    static let todoSchema: JSONObject = [
        "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Todo",
        "type": "object", "required": ["title", "isFinish"], "additionalProperties": false,
        "properties": ["title": ["type": "string", "minLength": 1, "maxLength": 200], "isFinish": ["type": "boolean"]],
    ]

    @Test func setSchemaRoundTripsAndRefusalsCarryTypedViolations() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)
        _ = try await client.create("todos", ["title": "", "isFinish": false])
        let set = try await todos.setSchema(Self.todoSchema)
        #expect(set.version == 1 && set.validationAction == .error && set.nonMatchingCount == 1)
        let read = try await todos.schema()
        #expect(read.schema == Self.todoSchema && read.validationAction == .error && read.version == 1)

        let error = await #expect(throws: LarderError.self) { _ = try await todos.create(Todo(title: "", isFinish: false)) }
        #expect(error?.status == .invalidArgument)
        #expect(
            error?.violations == [
                SchemaViolation(pointer: "/title", keyword: "minLength", expected: "at least 1 character", found: #""""#)
            ])
        let stored = try await todos.create(Todo(title: "Buy milk", isFinish: false))
        let patched = await #expect(throws: LarderError.self) {
            _ = try await client.patch("todos", id: stored.id, patch: ["isFinish": "yes", "extra": 1])
        }
        #expect(patched?.violations.map(\.keyword) == ["type", "additionalProperties"])
        #expect(patched?.violations.map(\.pointer) == ["/isFinish", "/extra"])

        try await todos.setSchema(["required": ["due"]], validationAction: .warn)
        #expect(try await todos.schema().validationAction == .warn)
        _ = try await todos.create(Todo(title: "no due date", isFinish: false))
        let removed = try await todos.removeSchema()
        #expect(removed.version == 3)
        #expect(try await todos.schema().schema == nil)
    }

    /// Runs `body` with a server's `--port` arguments and a file holding the todo schema.
    static func withSchemaFile(_ body: (_ port: [String], _ file: String) throws -> Void) throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        let file = NSTemporaryDirectory() + "todo-schema-\(UUID().uuidString).json"
        defer { try? FileManager.default.removeItem(atPath: file) }
        try Data(JSON.object(Self.todoSchema).bytes).write(to: URL(fileURLWithPath: file))
        try body(port, file)
    }

    /// README's "Schemas" section: its todo schema (the JSON block) is the one these tests set, and the refusal it
    /// shows is what `larder create` prints (README's long line wrapped).
    @Test func theReadmesSchemaAndRefusalAreWhatLarderDoes() throws {
        let readme = try String(
            contentsOf: ReadmeUsersTests.repository.appendingPathComponent("README.md"), encoding: .utf8)
        let parts = readme.components(separatedBy: "\n## Schemas\n")
        try #require(parts.count == 2, "README.md has one Schemas section")
        let section = parts[1].components(separatedBy: "\n## ")[0]
        let json = section.components(separatedBy: "```json\n")[1].components(separatedBy: "```")[0]
        #expect(try JSONParser.parse(Array(json.utf8)).objectValue == Self.todoSchema)
        let commands = section.components(separatedBy: "```\nlarder schema set")[1].components(separatedBy: "```")[0]
        let create = #"larder create todos '{"title": ""}'"#
        let shown = commands.components(separatedBy: create + "\n")[1]
        // Lines that do not start a message or a violation continue the line before, wrapped to fit the page.
        var expected: [String] = []
        for line in shown.split(separator: "\n").map(String.init) {
            if line.hasPrefix("Error:") || line.hasPrefix("  /") || expected.isEmpty {
                expected.append(line)
            } else {
                expected[expected.count - 1] += " " + line
            }
        }
        try Self.withSchemaFile { port, file in
            #expect(try CLITests.run(["schema", "set", "todos", file] + port).status == 0)
            let refused = try CLITests.run(["create", "todos", #"{"title": ""}"#] + port)
            #expect(refused.status == 1)
            #expect(refused.stderr.split(separator: "\n").map(String.init) == expected, "\(refused.stderr)")
        }
    }

    @Test func theSchemaCommands() throws {
        try Self.withSchemaFile { port, file in try Self.schemaCommands(port, file) }
    }

    static func schemaCommands(_ port: [String], _ file: String) throws {
        #expect(try CLITests.run(["create", "todos", #"{"title":"x"}"#] + port).status == 0)

        // Stdout is not a terminal here: the answers come as JSON lines.
        let set = try CLITests.run(["schema", "set", "todos", file] + port)
        #expect(set.status == 0, "\(set.stderr)")
        let answer = try #require(try set.json.first)
        #expect(answer["version"] == 1 && answer["validationAction"] == "error")
        #expect(answer["nonMatching"]?["count"] == 1 && answer["nonMatching"]?["ids"]?.arrayValue?.count == 1)

        let get = try CLITests.run(["schema", "get", "todos"] + port)
        #expect(try get.json.first?["schema"] == .object(Self.todoSchema))

        let refused = try CLITests.run(["create", "todos", #"{"title":""}"#] + port)
        #expect(refused.status == 1)
        #expect(
            refused.stderr == """
                Error: INVALID_ARGUMENT: the record does not match the schema of 'todos': /title: minLength: expected at least 1 \
                character, found "" (and 1 more in violations); change the record, or the schema with SCHEMA_SET (field: data)
                  /title: minLength: expected at least 1 character, found ""
                  /isFinish: required: expected present

                """)

        let warn = try CLITests.run(
            ["schema", "set", "todos", "-", "--warn"] + port, stdin: Array(#"{"required":["title"]}"#.utf8))
        #expect(try warn.json.first?["validationAction"] == "warn", "\(warn.stderr)")
        #expect(try CLITests.run(["create", "todos", "{}"] + port).status == 0)
        let removed = try CLITests.run(["schema", "remove", "todos"] + port)
        #expect(try removed.json.first?["version"] == 3)
        #expect(try CLITests.run(["schema", "get", "todos"] + port).json.first?["schema"] == .null)
        // A bad schema file names the keyword and where it is.
        try Data(#"{"properties":{"a":{"oneOf":[]}}}"#.utf8).write(to: URL(fileURLWithPath: file))
        let bad = try CLITests.run(["schema", "set", "todos", file] + port)
        #expect(bad.status == 1 && bad.stderr.contains("/properties/a/oneOf"), "\(bad.stderr)")
    }

    @Test func importNamesARefusedLineWithItsViolationsAndGoesOn() throws {
        try Self.withSchemaFile { port, file in try Self.importRefusals(port, file) }
    }

    static func importRefusals(_ port: [String], _ file: String) throws {
        #expect(try CLITests.run(["schema", "set", "todos", file] + port).status == 0)
        let input = """
            {"title": "one", "isFinish": false}
            {"title": 2, "isFinish": false}
            {"title": "three", "isFinish": true}
            {"isFinish": "no"}

            """
        for mode in ["insert", "upsert"] {
            let lines = mode == "insert" ? input : input.split(separator: "\n").enumerated().map {
                #"{"id": "01900000-0000-7000-8000-00000000b00\#($0.offset)", "data": \#($0.element)}"#
            }.joined(separator: "\n")
            let r = try CLITests.run(["import", "todos", "-", "--mode", mode] + port, stdin: Array(lines.utf8))
            #expect(r.status == 1)
            #expect(try r.json.first?["created"] == 2 && r.json.first?["errors"] == 2, "\(mode)")
            // The refused lines with their violations, then the summary.
            let errors = r.stderr.split(separator: "\n").map(String.init).dropLast()
            #expect(errors.count == 5, "\(r.stderr)")
            #expect(errors.first?.hasPrefix("line 2: INVALID_ARGUMENT: the record does not match") == true)
            #expect(errors.dropFirst().first == #"  /title: type: expected string, found 2"#)
            #expect(errors.dropFirst(2).first?.hasPrefix("line 4: INVALID_ARGUMENT") == true)
            #expect(Array(errors.suffix(2)) == [
                #"  /isFinish: type: expected boolean, found "no""#, "  /title: required: expected present",
            ])
        }
        // --stop-on-error sends nothing after the first refusal (one in flight at a time: nothing past it).
        let stopped = try CLITests.run(
            ["import", "todos", "-", "--stop-on-error", "--window", "1"] + port, stdin: Array(input.utf8))
        #expect(stopped.status == 1)
        #expect(try stopped.json.first?["created"] == 1 && stopped.json.first?["errors"] == 1, "\(stopped.stdout)")
        #expect(try stopped.json.first?["notSent"] == 2, "\(stopped.stdout)")
        #expect(stopped.stderr.hasPrefix("line 2: INVALID_ARGUMENT"), "\(stopped.stderr)")
        #expect(stopped.stderr.contains("created: 1, errors: 1, not sent: 2"), "\(stopped.stderr)")
    }

    /// On a terminal, `schema set`, `schema get` and `schema remove` print lines for a person.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func theSchemaCommandsOnATerminal() throws {
        try Self.withSchemaFile { port, file in
            #expect(try CLITests.run(["create", "todos", #"{"title":"x"}"#] + port).status == 0)
            let set = try CLITerminalTests.onTerminal(["schema", "set", "todos", file] + port)
                .replacingOccurrences(of: "\r\n", with: "\n")
            let lines = set.split(separator: "\n").map(String.init)
            #expect(lines.prefix(2) == ["schema of todos: version 1, error", "1 stored record does not match:"], "\(set)")
            #expect(lines.count == 3 && lines.last?.hasPrefix("  ") == true && lines.last?.count == 38, "\(set)")
            let get = try CLITerminalTests.onTerminal(["schema", "get", "todos"] + port)
                .replacingOccurrences(of: "\r\n", with: "\n")
            #expect(get.hasSuffix("\nversion 1, error\n"), "\(get)")
            #expect(try JSONParser.parse(Array(get.split(separator: "\n")[0].utf8)) == .object(Self.todoSchema))
            let removed = try CLITerminalTests.onTerminal(["schema", "remove", "todos"] + port)
            #expect(removed.replacingOccurrences(of: "\r\n", with: "\n") == "schema of todos: version 2, error\n")
            let none = try CLITerminalTests.onTerminal(["schema", "get", "todos"] + port)
            #expect(none.replacingOccurrences(of: "\r\n", with: "\n") == "todos has no schema\n")
        }
    }

    /// A write accepted in warn mode logs one line: the collection, the id, the first violation's pointer and
    /// keyword, and nothing of the record.
    @Test(arguments: ServerStore.allCases) func aWarnModeWriteLogsOneLineWithoutTheRecord(_ store: ServerStore)
        async throws
    {
        let id = UUID()
        let schema = store == .postgres ? try TestPostgres.newSchema() : nil
        defer { schema?.drop() }
        let database = schema.map { ["--postgres", $0.url] } ?? []
        let lines = try await LoggingTests.serverLog(["--log-format", "json"] + database) { port in
            let client = LarderClient(port: port)
            defer { client.close() }
            try await client.setSchema("drafts", ["required": ["text"]], validationAction: .warn)
            _ = try await client.create("drafts", ["note": "SECRET-DRAFT-CONTENT"], id: id)
        }
        let warnings = lines.filter { $0.contains("schema warning") }
        #expect(warnings.count == 1, "\(lines)")
        let object = try #require(try JSONParser.parse(Array((warnings.first ?? "").utf8)).objectValue)
        #expect(object["level"] == "warn")
        #expect(
            object["message"]
                == .string("schema warning: drafts \(id.wireString) does not match its schema at /text (required)"))
        #expect(!lines.contains { $0.contains("SECRET-DRAFT-CONTENT") })
    }
}
