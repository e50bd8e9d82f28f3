import Foundation
import LarderClient
import Testing

/// The `larder` binary on a real pseudo-terminal (through `script(1)`), where it must behave as a terminal program:
/// tables instead of JSON lines, and no JPEG bytes poured onto the screen.
@Suite(.timeLimit(.minutes(10))) struct CLITerminalTests {
    /// Runs `larder ARGS` with its stdin, stdout and stderr on a pseudo-terminal; returns the terminal's text.
    static func onTerminal(_ arguments: [String]) throws -> String {
        let command = ([CLITests.binary.path] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        process.arguments = ["-qec", command.joined(separator: " "), "/dev/null"]
        var environment = ProcessInfo.processInfo.environment
        environment["NO_COLOR"] = "1"
        for key in ["LARDER_HOST", "LARDER_PORT", "LARDER_SOCKET", "LARDER_TOKEN"] { environment[key] = nil }
        process.environment = environment
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = FileHandle.nullDevice
        try process.run()
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
        let photo = try await client.blobPut(try ClientFixtures.bytes("rocket.jpg"))
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
}
