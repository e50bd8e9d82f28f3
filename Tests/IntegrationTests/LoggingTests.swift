#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderWire
import Testing

/// `larder-server --log-format json --slow-ms N`: a real server process's stderr, line by line.
@Suite(.timeLimit(.minutes(20))) struct LoggingTests {
    /// Runs a server with `arguments`, lets `body` use it, stops it with SIGTERM and answers its stderr's lines.
    static func serverLog(_ arguments: [String], _ body: (Int) async throws -> Void) async throws -> [String] {
        let directory = ServerProcessTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try ServerProcessTests.launch(
            ["--port", "0", "--data-dir", directory.appendingPathComponent("data").path] + arguments)
        let line = try await offThePool { try ServerProcessTests.firstLine(run.stdout, of: run.process) }
        let port = try #require(
            line.split(separator: " ").first { $0.hasPrefix("tcp://") }.flatMap { Int($0.split(separator: ":").last!) })
        try await body(port)
        let status = try await offThePool { ServerProcessTests.terminated(run.process) }
        #expect(status == 0)
        let err = try await offThePool { run.stderr.fileHandleForReading.readDataToEndOfFile() }
        return String(decoding: err, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    @Test func jsonLinesNameTheConnectionPeerAndSlowRequestsAndNeverTheTokenOrADocument() async throws {
        let lines = try await Self.serverLog(["--log-format", "json", "--slow-ms", "0", "--token", "s3cret-token"]) {
            port in
            let wrong = LarderClient(port: port, token: "not-the-token")
            await #expect(throws: LarderError.self) { try await wrong.ping() }
            wrong.close()
            let client = LarderClient(port: port, token: "s3cret-token")
            let record = try await client.create("diary", ["entry": "TOP-SECRET-ENTRY"])
            _ = try await client.get("diary", id: record.id)
            client.close()
            // The server must see that close before SIGTERM, or it logs the connection as closed by the shutdown.
            let observer = LarderClient(port: port, token: "s3cret-token")
            let alone = try await waitUntil(120) { try await observer.stats()["connections"]?["open"]?.intValue == 1 }
            #expect(alone, "the server still counts the closed connections open")
            observer.close()
        }
        let objects = try lines.map { try #require(try JSONParser.parse(Array($0.utf8)).objectValue, "\($0)") }
        for object in objects {
            #expect(object["time"]?.stringValue != nil && object["level"]?.stringValue != nil)
            #expect(object["message"]?.stringValue != nil)
        }
        for line in lines {
            #expect(!line.contains("s3cret-token") && !line.contains("not-the-token") && !line.contains("TOP-SECRET"))
        }
        let opened = objects.filter { $0["message"]?.stringValue == "connection opened" }
        #expect(opened.count >= 2)
        for object in opened {
            #expect(object["level"]?.stringValue == "info")
            #expect(object["conn"]?.intValue != nil)
            #expect(object["peer"]?.stringValue?.hasPrefix("127.0.0.1:") == true)
        }
        let closed = objects.filter { $0["message"]?.stringValue == "connection closed" }
        #expect(closed.contains { ($0["reason"]?.stringValue ?? "").hasPrefix("UNAUTHENTICATED") })
        #expect(closed.contains { $0["reason"]?.stringValue == "peer closed" })
        let slow = objects.filter { $0["message"]?.stringValue == "slow request" }
        for opcode in ["HELLO", "CREATE", "GET"] {
            let entry = slow.first { $0["opcode"]?.stringValue == opcode }
            #expect(entry?["status"]?.stringValue != nil)
            #expect(entry?["durationMs"]?.doubleValue != nil, "no slow-request line for \(opcode)")
            #expect(entry?["level"]?.stringValue == "warn")
        }
        #expect(slow.contains { $0["opcode"]?.stringValue == "HELLO" && $0["status"]?.stringValue == "UNAUTHENTICATED" })
    }

    /// Text is the default format. The threshold is far above any request's time however loaded the machine, so no
    /// request may be logged as slow.
    @Test func textLinesByDefaultAndNoSlowLinesUnderTheThreshold() async throws {
        let lines = try await Self.serverLog(["--slow-ms", "3600000"]) { port in
            let client = LarderClient(port: port)
            _ = try await client.ping()
            client.close()
            // As above: the server must see that close before SIGTERM, or the shutdown closes it first.
            let observer = LarderClient(port: port)
            let alone = try await waitUntil(120) { try await observer.stats()["connections"]?["open"]?.intValue == 1 }
            #expect(alone, "the server still counts the closed connections open")
            observer.close()
        }
        let opened = try #require(lines.first { $0.contains("connection opened") })
        #expect(opened.contains(" INFO conn 1 (127.0.0.1:"))
        #expect(lines.contains { $0.contains("connection opened") && $0.contains("conn 2 (127.0.0.1:") })
        #expect(lines.contains { $0.contains("connection closed reason=peer closed") })
        #expect(!lines.contains { $0.contains("slow request") })
    }
}
