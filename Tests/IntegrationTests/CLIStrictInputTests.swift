import Foundation
import LarderClient
import LarderServer
import LarderTestThreads
import Testing
@testable import larder_server

/// Input that does not parse is refused (exit 64) with the offending text shown and a caret under the mistake, the
/// way a compiler points at an error, instead of quietly matching nothing.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIStrictInputTests {
    /// The lines of stderr after `Error: ...`: the excerpt and its caret.
    static func caret(_ stderr: String) -> [String] {
        Array(stderr.split(separator: "\n", omittingEmptySubsequences: false).dropFirst().prefix(2).map(String.init))
    }

    /// A caret line: `^` under column `column` of the excerpt (after its two-space indent), `~` under the rest.
    static func under(_ column: Int, _ length: Int = 1) -> String {
        "  " + String(repeating: " ", count: column) + "^" + String(repeating: "~", count: length - 1)
    }

    @Test func mistakesExit64WithACaretUnderTheOffendingText() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        _ = try CLITests.run(["create", "items", #"{"price":30}"#] + port)

        var r = try CLITests.run(["search", "items", "--where", "price<<50"] + port)
        #expect(r.status == 64 && r.stdout.isEmpty)
        #expect(r.stderr.hasPrefix("Error: --where: expected a value after '<', found '<'"), "\(r.stderr)")
        #expect(Self.caret(r.stderr) == ["  price<<50", Self.under(6)], "\(r.stderr)")
        #expect(r.stderr.contains("Usage: larder search"))

        r = try CLITests.run(["search", "items", "--sort", "nope:up"] + port)
        #expect(r.status == 64 && r.stderr.hasPrefix("Error: --sort: expected asc or desc after ':', found 'up'"))
        #expect(Self.caret(r.stderr) == ["  nope:up", Self.under(5, 2)], "\(r.stderr)")

        r = try CLITests.run(["count", "items", "--where", "price>"] + port)
        #expect(r.status == 64 && r.stderr.contains("expected a value after '>'"))
        #expect(Self.caret(r.stderr) == ["  price>", Self.under(6)], "\(r.stderr)")

        r = try CLITests.run(["count", "items", "--where", "price"] + port)
        #expect(r.status == 64 && r.stderr.contains("expected an operator"))

        r = try CLITests.run(["count", "items", "--where", "category=[\"Ball\",]"] + port)
        #expect(r.status == 64 && r.stderr.contains("not valid JSON"), "\(r.stderr)")
        #expect(Self.caret(r.stderr) == [#"  category=["Ball",]"#, Self.under(17)], "\(r.stderr)")

        r = try CLITests.run(["count", "items", "--where", "price!50"] + port)
        #expect(r.status == 64 && Self.caret(r.stderr) == ["  price!50", Self.under(6)], "\(r.stderr)")

        r = try CLITests.run(["count", "items", "--where", "a..b=1"] + port)
        #expect(r.status == 64 && Self.caret(r.stderr) == ["  a..b=1", Self.under(0, 4)], "\(r.stderr)")

        r = try CLITests.run(["list", "items", "--limit", "10x"] + port)
        #expect(r.status == 64 && r.stderr.hasPrefix("Error: --limit must be an integer from 1 to 1000"))
        #expect(Self.caret(r.stderr) == ["  --limit 10x", Self.under(8, 3)], "\(r.stderr)")

        r = try CLITests.run(["create", "items", #"{"price": 30,}"#] + port)
        #expect(r.status == 64 && r.stderr.contains("does not parse"), "\(r.stderr)")
        #expect(Self.caret(r.stderr) == [#"  {"price": 30,}"#, Self.under(13)], "\(r.stderr)")

        r = try CLITests.run(["search", "items", "--filter", #"{"field":"price","op":"lt"}"#] + port)
        #expect(r.status == 64 && r.stderr.contains("needs 'value'"), "\(r.stderr)")

        r = try CLITests.run(["search", "items", "--contains", "x", "--in", "name,,address"] + port)
        #expect(r.status == 64 && Self.caret(r.stderr) == ["  --in name,,address", Self.under(10)], "\(r.stderr)")

        r = try CLITests.run(["get", "items", "12345678-nope"] + port)
        #expect(r.status == 64 && Self.caret(r.stderr) == ["  12345678-nope", Self.under(0, 13)], "\(r.stderr)")

        r = try CLITests.run(["list", "items", "--bogus"] + port)
        #expect(r.status == 64 && r.stderr.hasPrefix("Error: unknown option --bogus"))
        #expect(Self.caret(r.stderr) == ["  --bogus", Self.under(0, 7)], "\(r.stderr)")

        r = try CLITests.run(["import", "items", "-", "--mode", "merge"] + port, stdin: Array("[]".utf8))
        #expect(r.status == 64 && r.stderr.hasPrefix("Error: --mode must be insert, upsert or skip-existing"))

        // What does parse still works, and nothing above reached the server as a query that matches nothing.
        r = try CLITests.run(["count", "items", "--where", "price<50"] + port)
        #expect(r.status == 0)
        #expect(try r.json == [["count": 1]])
        r = try CLITests.run(["search", "items", "--sort", "price:desc", "--sort", "$id:asc"] + port)
        #expect(r.status == 0)
        #expect(try r.json.count == 1)
        r = try CLITests.run(["count", "items", "--where", #"note="<b>""#] + port)
        #expect(r.status == 0, "text that starts with an operator is written as JSON: \(r.stderr)")
    }

    /// Byte sizes take units everywhere: larder-server's limits (here, started as a process and read back from
    /// HELLO) and larder-bench's sizes.
    @Test func byteSizeOptionsTakeUnits() async throws {
        let directory = ServerProcessTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try ServerProcessTests.launch([
            "--port", "0", "--data-dir", directory.path, "--max-frame-bytes", "64MiB", "--max-blob-bytes", "40MiB",
            "--max-json-bytes", "4 MiB",
            "--read-cache-bytes", "1.5GiB",
        ])
        let line = try ServerProcessTests.firstLine(run.stdout, of: run.process)
        let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber) ?? ""
        let port = try #require(Int(portText), "\(line)")
        let client = LarderClient(port: port)
        let hello = try await client.connect()
        #expect(hello.limits.maxBlobBytes == 40 << 20 && hello.limits.maxFrameBytes == 64 << 20)
        #expect(hello.limits.maxJSONBytes == 4 << 20)
        client.close()
        kill(run.process.processIdentifier, SIGTERM)
        run.process.waitUntilExit()

        let refused = try ServerProcessTests.launch(["--port", "0", "--max-blob-bytes", "40MB"])
        refused.process.waitUntilExit()
        #expect(refused.process.terminationStatus == 64)
        let (_, configuration) = try ServerOptions.parse(
            ["--max-frame-bytes", "64MiB", "--compression-threshold", "1KiB"])
        #expect(configuration.limits.maxFrameBytes == 64 << 20 && configuration.compressionThreshold == 1024)
        #expect(ServerOptions.helpText.contains("largest blob (default 256 MiB)"))
    }
}
