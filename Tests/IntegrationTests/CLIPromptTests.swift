import Foundation
import LarderClient
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// The `larder` prompt on a real pseudo-terminal, typed at as a person types: editing keys, ↑ for history, Tab,
/// a command over several lines, Ctrl-C on a line, on a running command and on a watch, Ctrl-D to leave.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIPromptTests {
    /// `larder ARGUMENTS` on a terminal of `columns`, with a home directory of its own (for ~/.larder_history).
    static func larder(_ arguments: [String], columns: Int = 100, home: String? = nil) throws -> PseudoTerminal {
        try PseudoTerminal(
            CLITests.binary.path, arguments, columns: columns, environment: environment(home: home ?? temporaryHome()))
    }

    /// The test runner's environment without anything that would point larder elsewhere or size its tables, colour
    /// off, and `home` as HOME when given.
    static func environment(home: String? = nil) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for key in ["LARDER_HOST", "LARDER_PORT", "LARDER_SOCKET", "LARDER_TOKEN", "COLUMNS", "LINES"] {
            environment[key] = nil
        }
        if let home { environment["HOME"] = home }
        environment["NO_COLOR"] = "1"
        return environment
    }

    static func temporaryHome() -> String {
        let directory = NSTemporaryDirectory() + "larder-home-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test func editingHistoryCompletionAndSeveralLines() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        for name in ["王小明", "林怡君", "Emily Chen"] {
            _ = try await client.create("profiles", ["name": .string(name)])
        }
        for title in ["Buy milk 買牛奶", "預約牙醫"] {
            _ = try await client.create("todos", ["title": .string(title)])
        }
        let home = Self.temporaryHome()
        defer { try? FileManager.default.removeItem(atPath: home) }
        let terminal = try Self.larder(["--port", String(server.port)], home: home)
        try terminal.expect("larder> ")

        // Tab completes a command: "coll" becomes "collections".
        terminal.type("coll")
        terminal.press(.tab)
        try terminal.expect("collections ")
        terminal.press(.enter)
        var shown = try terminal.expect("larder> ")
        #expect(shown.contains("collection  documents") && shown.contains("profiles") && shown.contains("todos"))

        // Tab completes a collection name, asked of the server.
        terminal.type("count prof")
        terminal.press(.tab)
        try terminal.expect("count profiles ")
        terminal.press(.enter)
        shown = try terminal.expect("larder> ")
        #expect(shown.contains("\n3\n"), "\(shown)")

        // Tab completes an option.
        terminal.type("list profiles --li")
        terminal.press(.tab)
        try terminal.expect("--limit ")
        terminal.type("1")
        terminal.press(.enter)
        shown = try terminal.expect("larder> ")
        #expect(shown.contains("1 record shown, more remain: --cursor"), "\(shown)")

        // Ctrl-A goes to the start of the line: "ount todos", Ctrl-A, "c" runs "count todos".
        terminal.type("ount todos")
        terminal.press(.ctrlA)
        terminal.type("c")
        terminal.press(.enter)
        shown = try terminal.expect("larder> ")
        #expect(shown.hasSuffix("\n2\nlarder> "), "\(shown)")

        // ↑ brings the last command back.
        terminal.press(.up)
        try terminal.expect("count todos")
        terminal.press(.enter)
        shown = try terminal.expect("larder> ")
        #expect(shown.hasSuffix("\n2\nlarder> "), "\(shown)")

        // A command over several lines: it runs once its quotes and JSON close.
        terminal.type(#"create todos '{"title":"#)
        terminal.press(.enter)
        try terminal.expect("...> ")
        terminal.type(#""several lines", "tags": ["a","#)
        terminal.press(.enter)
        try terminal.expect("...> ")
        terminal.type(#""b"]}'"#)
        terminal.press(.enter)
        shown = try terminal.expect("larder> ")
        #expect(shown.contains("several lines"), "\(shown)")

        // Ctrl-C drops the line being typed: nothing runs, the prompt stays.
        terminal.type("drop todos")
        try terminal.waitForEditingMode()
        terminal.press(.ctrlC)
        try terminal.expect("^C")
        try terminal.expect("larder> ")
        terminal.type("count todos")
        terminal.press(.enter)
        shown = try terminal.expect("larder> ")
        #expect(shown.hasSuffix("\n3\nlarder> "), "the dropped line ran: \(shown)")

        // Ctrl-D leaves, exit status 0.
        terminal.press(.ctrlD)
        #expect(try terminal.waitForExit() == 0)

        let severalLines = try await client.search(
            "todos", SearchQuery(filter: .compare(try FieldPath("title"), .eq, "several lines")))
        #expect(severalLines.records.first?.data["tags"] == ["a", "b"])
        let history = try String(contentsOfFile: home + "/.larder_history", encoding: .utf8)
        let entries = history.split(separator: "\n").map(String.init)
        #expect(entries.contains("count todos"))
        #expect(entries.contains(#"create todos '{"title": "several lines", "tags": ["a", "b"]}'"#), "\(entries)")
        #expect(!entries.contains("drop todos"))

        // The history is there for the next session: ↑ recalls the last command.
        let next = try Self.larder(["--port", String(server.port)], home: home)
        try next.expect("larder> ")
        next.press(.up)
        try next.expect("count todos")
        try next.waitForEditingMode()
        next.press(.ctrlC)
        try next.expect("larder> ")
        next.press(.ctrlD)
        #expect(try next.waitForExit() == 0)
    }

    @Test func ctrlCStopsAWatchAndACommandButNotThePrompt() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        // Between larder and the server, a relay that passes the first four requests (HELLO, WATCH, UNWATCH, COUNT)
        // and holds the rest: the SEARCH typed last waits for its answer until Ctrl-C.
        let relay = try HoldingRelay(to: server.port, passFrames: 4)
        defer { relay.close() }
        let terminal = try Self.larder(["--port", String(relay.port)])
        try terminal.expect("larder> ")

        terminal.type("watch items")
        terminal.press(.enter)
        try terminal.expect("watching items")
        _ = try await client.create("items", ["item": "茶葉蛋", "price": 13])
        try terminal.expect("茶葉蛋")
        terminal.press(.ctrlC)
        try terminal.expect("larder> ")
        // The watch ended (UNWATCH), and the prompt works.
        try await Self.waitForSubscriptions(0, client)
        terminal.type("count items")
        terminal.press(.enter)
        var shown = try terminal.expect("larder> ")
        #expect(shown.hasSuffix("\n1\nlarder> "), "\(shown)")

        // A command still waiting for its answer (the relay holds the SEARCH) is cancelled.
        terminal.type("search items")
        terminal.press(.enter)
        try terminal.waitForCookedMode()
        terminal.press(.ctrlC)
        shown = try terminal.expect("larder> ")
        #expect(shown.contains("cancelled"), "\(shown)")

        terminal.type("quit")
        terminal.press(.enter)
        #expect(try terminal.waitForExit() == 0)
    }

    @Test func ctrlCEndsAWatchRunAlone() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let terminal = try Self.larder(["watch", "items", "--port", String(server.port)])
        try terminal.expect("watching items")
        _ = try await client.create("items", ["item": "泡麵", "price": 42])
        try terminal.expect("泡麵")
        terminal.press(.ctrlC)
        #expect(try terminal.waitForExit() == 0)
        try await Self.waitForSubscriptions(0, client)

        // Any other command run alone ends on Ctrl-C as programs do: killed by SIGINT (128 + 2 to a shell).
        let ping = try Self.larder(["ping", "--count", "1000", "--interval", "1000", "--port", String(server.port)])
        try ping.expect("PONG seq=1")
        ping.press(.ctrlC)
        #expect(try ping.waitForExit() == 130)
    }

    /// Waits until the server counts `count` open subscriptions.
    static func waitForSubscriptions(_ count: Int64, _ client: LarderClient) async throws {
        guard try await waitUntil(120, { try await client.stats()["watch"]?["subscriptions"]?.intValue == count }) else {
            throw ServerTestError("the server still has a subscription")
        }
    }
}
