import Foundation
import LarderClient
import LarderTestProcess
import LarderTestThreads
import Testing

/// The `larder` binary on a real pseudo-terminal (through `script(1)`), where it must behave as a terminal program:
/// tables instead of JSON lines, and no JPEG bytes poured onto the screen.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLITerminalTests {
    /// Runs `larder ARGS` with its stdin, stdout and stderr on a pseudo-terminal; returns the terminal's text. `typed`
    /// is what the user types (nothing by default); `home` is where `~` is.
    static func onTerminal(_ arguments: [String], typed: String? = nil, home: String? = nil) throws -> String {
        let command = ([CLITests.binary.path] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        process.arguments = ["-qec", command.joined(separator: " "), "/dev/null"]
        var environment = ProcessInfo.processInfo.environment
        environment["NO_COLOR"] = "1"
        for key in ["LARDER_HOST", "LARDER_PORT", "LARDER_SOCKET", "LARDER_TOKEN"] { environment[key] = nil }
        if let home { environment["HOME"] = home }
        process.environment = environment
        let out = Pipe()
        process.standardOutput = out
        let input = Pipe()
        process.standardInput = typed == nil ? FileHandle.nullDevice : input
        try process.run()
        if let typed {
            input.fileHandleForWriting.write(Data(typed.utf8))
            try input.fileHandleForWriting.close()
        }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func refusesToWriteJPEGBytesToATerminalAndPrintsTables() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let photo = try await client.blobPut(Data(try ClientFixtures.bytes("rocket.jpg")))
        _ = try await client.create("students", ["name": "张三", "address": "北京市海淀区中关村大街1号"])
        let port = ["--port", String(server.port)]

        let refused = try Self.onTerminal(["blob", "get", photo.id.wireString] + port)
        #expect(refused.contains("refusing to write JPEG bytes to a terminal"), "\(refused)")
        #expect(!refused.contains("JFIF") && refused.utf8.count < 1000, "JPEG bytes reached the terminal")

        let table = try Self.onTerminal(["search", "students", "--contains", "北京"] + port)
        #expect(table.contains("address"), "\(table)")
        #expect(table.contains("北京市海淀区中关村大街1号"))
        #expect(!table.contains("{\"id\""), "a terminal gets a table, not JSON lines")
    }

    /// Photos of a megabyte or more, and imports, show a progress bar on a terminal (never in a pipe: CLITests reads
    /// the same commands' output as JSON lines).
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func progressBarsOnATerminal() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        let directory = NSTemporaryDirectory() + "larder-progress-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let photo = directory + "/big.jpg"
        let jpeg = uniqueJPEG(commentBytes: 3 << 20)
        _ = FileManager.default.createFile(atPath: photo, contents: Data(jpeg))

        let put = try Self.onTerminal(["blob", "put", photo] + port)
        #expect(put.contains("put [##############################] 100% 3 MiB of 3 MiB"), "\(put.suffix(300))")
        let id = try #require(put.split(whereSeparator: \.isWhitespace).first { UUID(wireString: String($0)) != nil })

        let copy = directory + "/copy.jpg"
        let get = try Self.onTerminal(["blob", "get", String(id), "-o", copy] + port)
        #expect(get.contains("get [##############################] 100%"), "\(get.suffix(300))")
        #expect(FileManager.default.contents(atPath: copy) == Data(jpeg))

        let records = directory + "/todos.ndjson"
        let lines = (0..<50).map { #"{"title":"todo \#($0)"}"# }.joined(separator: "\n")
        _ = FileManager.default.createFile(atPath: records, contents: Data(lines.utf8))
        let imported = try Self.onTerminal(["import", "todos", records] + port)
        // Records are counted as records, not as bytes.
        let full = "import [##############################] 100% 50 of 50 records"
        #expect(imported.contains(full), "\(imported.suffix(300))")
        #expect(imported.contains("created: 50, errors: 0"))

        // A small photo is sent at once: no bar.
        let small = directory + "/small.jpg"
        _ = FileManager.default.createFile(atPath: small, contents: Data(uniqueJPEG(commentBytes: 1000)))
        let quiet = try Self.onTerminal(["blob", "put", small] + port)
        #expect(!quiet.contains("put [") && quiet.contains("sha256"))
    }

    /// The prompt on a terminal keeps what was typed in ~/.larder_history (readable by the user alone), across runs,
    /// and `history` shows it.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func thePromptKeepsAHistoryFile() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let home = NSTemporaryDirectory() + "larder-home-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        let port = ["--port", String(server.port)]
        let first = try Self.onTerminal(
            port, typed: "create todos '{\"title\":\"Buy milk 買牛奶\"}'\n\n# not kept\ncount todos\nquit\n", home: home)
        #expect(first.contains("larder> ") && first.contains("Buy milk 買牛奶"), "\(first)")
        let path = home + "/.larder_history"
        let kept = try String(contentsOfFile: path, encoding: .utf8)
        #expect(kept == "create todos '{\"title\":\"Buy milk 買牛奶\"}'\ncount todos\nquit\n")
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)

        let second = try Self.onTerminal(port, typed: "history\nexit\n", home: home)
        // Only the history can show these two lines (this session typed neither). Where the terminal echoes what was
        // typed depends on when it came, so a line may follow the prompt or the echo on the screen.
        let shown = second.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        for line in ["create todos '{\"title\":\"Buy milk 買牛奶\"}'", "count todos"] {
            #expect(shown.contains { $0.hasSuffix(line) }, "\(line) not shown in: \(second)")
        }
        #expect(try String(contentsOfFile: path, encoding: .utf8) == kept + "history\nexit\n")
    }
}
