#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// `larder watch` across server restarts: one line on stderr each time, a reconnection, and the events after the last
/// one printed, none lost and none twice.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIWatchReconnectTests {
    /// `larder` in the background, stdout and stderr each read line by line.
    final class Watcher: @unchecked Sendable {
        let process = ChildProcess()
        private let out = Pipe()
        private let err = Pipe()
        private var buffers: [Int32: Data] = [:]

        init(_ arguments: [String]) throws {
            process.executableURL = CLITests.binary
            process.arguments = arguments
            process.environment = CLIPromptTests.environment()
            process.standardOutput = out
            process.standardError = err
            try process.run()
        }

        /// The next `count` lines of stdout (as JSON) or stderr; throws after `seconds`.
        func lines(_ count: Int, stderr: Bool = false, seconds: Double = 120) throws -> [String] {
            let fd = (stderr ? err : out).fileHandleForReading.fileDescriptor
            let deadline = Date().addingTimeInterval(seconds)
            var lines: [String] = []
            while lines.count < count {
                if let newline = buffers[fd, default: Data()].firstIndex(of: 0x0A) {
                    let buffer = buffers[fd]!
                    lines.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                    buffers[fd] = Data(buffer[(newline + 1)...])
                    continue
                }
                guard Date() < deadline else {
                    let stream = stderr ? "stderr" : "stdout"
                    throw ServerTestError("larder printed \(lines.count) of \(count) lines on \(stream): \(lines)")
                }
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, 100) > 0 else { continue }
                var chunk = [UInt8](repeating: 0, count: 65536)
                let n = read(fd, &chunk, chunk.count)
                guard n > 0 else { throw ServerTestError("larder closed its output after \(lines)") }
                buffers[fd, default: Data()].append(contentsOf: chunk[0..<n])
            }
            return lines
        }

        func events(_ count: Int) throws -> [JSON] {
            try lines(count).map { try JSONParser.parse(Array($0.utf8)) }
        }

        /// Ctrl-C, then the exit status; stdout and stderr must hold nothing more.
        func interrupt() throws -> (status: Int32, rest: String) {
            kill(process.processIdentifier, SIGINT)
            process.waitUntilExit()
            let rest = [out, err].map { pipe in
                String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            }
            let fds = [out, err].map { $0.fileHandleForReading.fileDescriptor }
            let buffered = fds.map { String(decoding: buffers[$0] ?? Data(), as: UTF8.self) }
            return (process.terminationStatus, (buffered + rest).joined())
        }
    }

    @Test func watchReconnectsAndResumesAfterTheLastChangeItPrinted() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        var client = server.client()
        _ = try await client.create("items", ["n": 1])
        // Without --since: from now on (change 1 is not shown), and what happens while it is away is replayed.
        let watcher = try Watcher(["watch", "items", "--json"] + port)
        try await CLIPromptTests.waitForSubscriptions(1, client)
        _ = try await client.create("items", ["n": 2])
        #expect(try watcher.events(1).map { $0["seq"] } == [2])

        for restart in 1...2 {
            // Changes so far: 2, then 3 per round (two followed, one not); the last printed is the last followed.
            let lastPrinted = Int64(2 + 3 * (restart - 1))
            let n = Int64(2 + 2 * (restart - 1))
            client.close()
            try server.restart()
            // One line each time the server goes away, naming where the watch goes on from.
            let line = try #require(try watcher.lines(1, stderr: true).first)
            #expect(line.hasPrefix("lost the server ("), "\(line)")
            #expect(line.hasSuffix("reconnecting, to resume after change \(lastPrinted)"), "\(line)")
            // Written while the watch may or may not be back: either way each shows once, in order.
            client = server.client()
            _ = try await client.create("items", ["n": .int(n + 1)])
            _ = try await client.create("todos", ["not": "followed"])
            _ = try await client.create("items", ["n": .int(n + 2)])
            let events = try watcher.events(2)
            #expect(events.map { $0["seq"] } == [.int(lastPrinted + 1), .int(lastPrinted + 3)])
            #expect(events.map { $0["record"]?["data"]?["n"] } == [.int(n + 1), .int(n + 2)])
        }
        let (status, rest) = try watcher.interrupt()
        #expect(status == 0)
        #expect(rest.isEmpty, "more than one line per restart, or an event twice: \(rest)")
        client.close()
    }

    @Test func sinceStillReplaysFirst() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        for n in 1...4 { _ = try await client.create("items", ["n": .int(Int64(n))]) }
        let watcher = try Watcher(["watch", "items", "--json", "--since", "2", "--port", String(server.port)])
        #expect(try watcher.events(2).map { $0["seq"] } == [3, 4])
        _ = try await client.create("items", ["n": 5])
        #expect(try watcher.events(1).map { $0["seq"] } == [5])
        #expect(try watcher.interrupt().status == 0)
    }

    @Test func aServerAbsentAtTheStartIsAnError() throws {
        let r = try CLITests.run(["watch", "items", "--port", "1"])
        #expect(r.status == 2 && r.stderr.contains("cannot connect"))
    }
}
