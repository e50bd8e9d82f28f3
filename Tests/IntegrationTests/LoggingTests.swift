#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderServer
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// `larder-server --log-format json --slow-ms N`: a real server process's stderr, line by line.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct LoggingTests {
    /// Runs a server with `arguments`, lets `body` use it, stops it with SIGTERM and answers its stderr's lines.
    static func serverLog(_ arguments: [String], _ body: (Int) async throws -> Void) async throws -> [String] {
        let directory = ServerProcessTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try ServerProcessTests.launch(
            ["--port", "0", "--data-dir", directory.appendingPathComponent("data").path] + arguments)
        let line = try await offThePool { try ServerProcessTests.firstLine(run.stdout, of: run.process) }
        // A server on a Unix socket alone names no TCP port: 0 then.
        let port =
            line.split(separator: " ").first { $0.hasPrefix("tcp://") }.flatMap { Int($0.split(separator: ":").last!) }
            ?? 0
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

    /// With `--log-format json` every line on stdout and stderr is a JSON object: the line saying the server is
    /// ready, warnings at start (a data directory others can read), connections, shutdown, and a failure to start.
    @Test func everyLineOfEitherStreamIsJSONInJSONMode() async throws {
        let directory = ServerProcessTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let data = directory.appendingPathComponent("data").path
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        #expect(chmod(data, 0o755) == 0)
        let run = try ServerProcessTests.launch([
            "--port", "0", "--data-dir", data, "--log-format", "json", "--slow-ms", "0", "--metrics-port", "0",
            "--log-level", "debug",
        ])
        let first = try await offThePool { try ServerProcessTests.firstLine(run.stdout, of: run.process) }
        let ready = try #require(try JSONParser.parse(Array(first.utf8)).objectValue, "\(first)")
        #expect(ready["level"]?.stringValue == "info" && ready["version"]?.stringValue == LarderServer.version)
        let listen = try #require(ready["listen"]?.arrayValue?.first?.stringValue, "\(first)")
        let port = try #require(Int(listen.split(separator: ":").last ?? ""), "\(first)")
        #expect(ready["metrics"]?.stringValue?.hasPrefix("http://") == true && ready["store"] != nil)

        let client = LarderClient(port: port)
        let record = try await client.create("notes", ["text": "hello"])
        _ = try await client.get("notes", id: record.id)
        await #expect(throws: LarderError.self) { try await client.get("notes", id: UUID()) }
        client.close()
        let status = try await offThePool { ServerProcessTests.terminated(run.process) }
        #expect(status == 0)
        let out = try await offThePool { run.stdout.fileHandleForReading.readDataToEndOfFile() }
        let err = try await offThePool { run.stderr.fileHandleForReading.readDataToEndOfFile() }
        let lines = (first + String(decoding: out + err, as: UTF8.self)).split(separator: "\n").map(String.init)
        for line in lines {
            let object = try JSONParser.parse(Array(line.utf8)).objectValue
            #expect(object?["time"]?.stringValue != nil && object?["message"]?.stringValue != nil, "\(line)")
        }
        #expect(lines.contains { $0.contains("can be read by other users") && $0.contains(#""level":"warn""#) })
        #expect(lines.contains { $0.contains("slow request") })

        // Options it cannot run with: the error is a JSON line too.
        let refused = try ServerProcessTests.launch(["--log-format", "json", "--port", "nope"])
        let refusedStatus = try await offThePool { ServerProcessTests.terminated(refused.process, signal: 0) }
        #expect(refusedStatus == 64)
        let refusedErr = try await offThePool { refused.stderr.fileHandleForReading.readDataToEndOfFile() }
        let refusedLines = String(decoding: refusedErr, as: UTF8.self).split(separator: "\n")
        #expect(refusedLines.count == 1)
        for line in refusedLines {
            let object = try #require(try JSONParser.parse(Array(line.utf8)).objectValue, "\(line)")
            #expect(object["level"]?.stringValue == "error" && object["message"]?.stringValue?.contains("--port") == true)
        }
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

    // Promise: OPERATING.md "Logs: peer unix:/path, a slow request's requestId, the idle timeout reason"
    /// A client on the Unix socket is logged with the peer `unix:PATH`; each of its requests (every one is slow at
    /// `--slow-ms 0`) with the request id it sent; and the connection's close, after it stayed silent past the idle
    /// deadline, with the reason `idle timeout`.
    @Test func aUnixClientsLinesNameItsPathItsRequestIdsAndTheIdleTimeout() async throws {
        let socket = NSTemporaryDirectory() + "larder-log-\(UUID().uuidString.prefix(8)).sock"
        defer { unlink(socket) }
        let lines = try await Self.serverLog(
            ["--log-format", "json", "--slow-ms", "0", "--socket", socket, "--idle-timeout-ms", "1000"]
        ) { _ in
            let c = try RawClient.unix(path: socket)
            try c.hello(compression: [])
            let ping = try c.send(.ping, id: 41)
            #expect(try c.receive(timeout: 120)?.requestID == ping)
            // Silent from here: the server closes the connection at its idle deadline, saying why.
            let last = try c.framesUntilClosed(timeout: 120)
            #expect(last.allSatisfy { $0.requestID == 0 }, "answers after the last request")
        }
        let objects = try lines.map { try #require(try JSONParser.parse(Array($0.utf8)).objectValue, "\($0)") }
        let opened = objects.filter { $0["message"]?.stringValue == "connection opened" }
        #expect(opened.contains { $0["peer"]?.stringValue == "unix:\(socket)" }, "\(lines)")
        let slow = objects.filter { $0["message"]?.stringValue == "slow request" }
        #expect(slow.contains { $0["opcode"] == "PING" && $0["requestId"] == 41 }, "\(lines)")
        #expect(slow.contains { $0["opcode"] == "HELLO" && $0["requestId"] == 1 }, "\(slow)")
        let closed = objects.filter { $0["message"]?.stringValue == "connection closed" }
        #expect(
            closed.contains { $0["reason"] == "idle timeout" && $0["peer"]?.stringValue == "unix:\(socket)" },
            "\(lines)")
    }
}
