#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderTestSupport
import LarderTestThreads
import Testing

/// What `larder` prints for people: full ids, tables that fit the terminal (vertical when a record cannot), a page
/// cut short that says so, `--all` that streams, and a `stats` summary.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIOutputTests {
    /// `larder ARGUMENTS` on a terminal `columns` wide; its whole output once it exits 0.
    static func onTerminal(_ arguments: [String], columns: Int, stderrToNull: Bool = false) throws -> String {
        let home = CLIPromptTests.temporaryHome()
        defer { try? FileManager.default.removeItem(atPath: home) }
        let environment = CLIPromptTests.environment(home: home)
        let terminal: PseudoTerminal
        if stderrToNull {
            // Only stdout on the terminal: what shows there was written to stdout.
            let command = ([CLITests.binary.path] + arguments).map { "'" + $0 + "'" }.joined(separator: " ")
            terminal = try PseudoTerminal(
                "/bin/sh", ["-c", "exec \(command) 2>/dev/null"], columns: columns, environment: environment)
        } else {
            terminal = try PseudoTerminal(CLITests.binary.path, arguments, columns: columns, environment: environment)
        }
        let status = try terminal.waitForExit()
        let text = terminal.pending
        #expect(status == 0, "\(text)")
        return text
    }

    /// Columns a line takes on a terminal (East Asian wide characters take two).
    static func columns(_ line: Substring) -> Int {
        line.unicodeScalars.reduce(0) { total, scalar in
            let v = scalar.value
            let wide = (0x1100...0x115F).contains(v) || (0x2E80...0xA4CF).contains(v) || (0xAC00...0xD7A3).contains(v)
                || (0xF900...0xFAFF).contains(v) || (0xFF00...0xFF60).contains(v) || (0x1F300...0x1FAFF).contains(v)
            return total + (wide ? 2 : 1)
        }
    }

    @Test func tablesShowFullIDsAndFitTheTerminal() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let port = ["--port", String(server.port)]
        var todos: [UUID] = []
        let long = "Finish the SwiftUI chapter and then write the summary for the study group"
        for title in ["Buy milk 買牛奶", "預約牙醫", long] {
            todos.append(try await client.create("todos", ["title": .string(title), "isFinish": false]).id)
        }
        var profiles: [UUID] = []
        for name in ["王小明", "林怡君", "Emily Chen"] {
            profiles.append(
                try await client.create(
                    "profiles",
                    [
                        "name": .string(name), "phone": "0912-345-678", "height": 172.5, "weight": 64.2,
                        "birthday": "1995-02-14T00:00:00Z", "zodiacSign": "Aquarius 水瓶座", "isMale": true,
                    ]
                ).id)
        }

        // A narrow record: a table, every id whole, the long title cut to fit 80 columns.
        let table = try Self.onTerminal(["list", "todos"] + port, columns: 80)
        let tableLines = table.split(separator: "\n")
        #expect(tableLines.first?.hasPrefix("id ") == true, "\(table)")
        #expect(tableLines.first?.contains("title") == true && tableLines.first?.contains("isFinish") == true)
        for id in todos { #expect(table.contains(id.wireString), "\(id) is not shown whole:\n\(table)") }
        #expect(table.contains("…"), "the long title was not cut to fit:\n\(table)")
        for line in tableLines { #expect(Self.columns(line) <= 80, "too wide for 80 columns: \(line)") }

        // Seven fields do not fit 80 columns beside a whole id: each record is shown vertically, and still fits.
        let vertical = try Self.onTerminal(["list", "profiles"] + port, columns: 80)
        #expect(vertical.contains("-[ 1 ]") && vertical.contains("-[ 3 ]"), "\(vertical)")
        #expect(vertical.contains("zodiacSign  Aquarius 水瓶座"), "\(vertical)")
        for id in profiles { #expect(vertical.contains(id.wireString)) }
        for line in vertical.split(separator: "\n") { #expect(Self.columns(line) <= 80, "too wide: \(line)") }

        // On a wide terminal the same records make a table.
        let wide = try Self.onTerminal(["list", "profiles"] + port, columns: 200)
        let header = try #require(wide.split(separator: "\n").first)
        #expect(header.contains("zodiacSign") && header.contains("birthday") && !wide.contains("-[ 1 ]"), "\(wide)")
        for id in profiles { #expect(wide.contains(id.wireString)) }

        // `get` shows one record vertically, with its full id.
        let one = try Self.onTerminal(["get", "profiles", profiles[0].wireString] + port, columns: 80)
        let idLine = one.split(separator: "\n").first { $0.hasPrefix("id ") }
        #expect(idLine?.hasSuffix(" \(profiles[0].wireString)") == true, "\(one)")
    }

    @Test func aPageCutShortSaysHowManyWereShownAndHowToGetTheRest() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let port = ["--port", String(server.port)]
        for n in 0..<12 { _ = try await client.create("big", ["n": .int(Int64(n)), "price": .int(Int64(n * 10))]) }

        // On a terminal: after the table, on stdout (stderr goes nowhere here).
        let page = try Self.onTerminal(["search", "big", "--where", "price<100", "--limit", "5"] + port, columns: 100,
            stderrToNull: true)
        let lines = page.split(separator: "\n")
        #expect(lines.count == 7, "\(page)")  // header, 5 rows, the line
        let last = String(lines.last ?? "")
        #expect(last.hasPrefix("5 records shown, more remain: --cursor ") && last.hasSuffix("--all for all"), "\(last)")

        // The cursor it names gives the next page.
        let cursor = String(last.dropFirst("5 records shown, more remain: --cursor ".count).prefix { $0 != " " })
            .trimmingCharacters(in: CharacterSet(charactersIn: "'"))
        var r = try CLITests.run(["search", "big", "--where", "price<100", "--limit", "5", "--cursor", cursor] + port)
        let next = try r.json.map { $0["data"]?["n"] }
        #expect(r.status == 0 && next == [5, 6, 7, 8, 9])
        #expect(r.stderr.isEmpty, "the last page says nothing more: \(r.stderr)")

        // In JSON mode (a pipe, as in `| wc -l`): stdout is JSON lines only, the line goes to stderr.
        r = try CLITests.run(["search", "big", "--where", "price<100", "--limit", "5"] + port)
        #expect(try r.json.count == 5)
        #expect(r.stderr.contains("5 records shown, more remain: --cursor") && r.stderr.contains("--all"))

        // The last page, and --all, say nothing more.
        r = try CLITests.run(["search", "big", "--where", "price<100", "--limit", "5", "--all"] + port)
        #expect(try r.json.map { $0["data"]?["n"] } == (0..<10).map { .int(Int64($0)) })
        #expect(r.stderr.isEmpty, "\(r.stderr)")
        r = try CLITests.run(["list", "big", "--limit", "4", "--all"] + port)
        #expect(try r.json.count == 12)
        let all = try Self.onTerminal(["list", "big", "--limit", "5", "--all"] + port, columns: 100)
        #expect(all.contains("12 records") && !all.contains("more remain"), "\(all)")
        let headers = all.split(separator: "\n").filter { $0.hasPrefix("id ") }
        #expect(headers.count == 1, "one header for every page: \(all)")
    }

    /// `--all` prints each page as it comes: the first page is on stdout while the second has not been answered.
    /// A relay between larder and the server holds larder's requests after the first LIST until the test has seen
    /// the first page.
    @Test func allStreamsPageByPage() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        for n in 0..<9 { _ = try await client.create("big", ["n": .int(Int64(n))]) }
        let relay = try HoldingRelay(to: server.port, passFrames: 2)  // HELLO, then the first LIST
        defer { relay.close() }
        let watch = try WatchClientTests.Background(
            ["list", "big", "--limit", "3", "--all", "--port", String(relay.port)])
        let first = try watch.lines(3)
        #expect(first.map { $0["data"]?["n"] } == [0, 1, 2])
        #expect(watch.process.isRunning, "larder ended before its second page was answered")
        relay.release()
        let rest = try watch.lines(6)
        #expect(rest.map { $0["data"]?["n"] } == (3..<9).map { .int(Int64($0)) })
        watch.process.waitUntilExit()
        #expect(watch.process.terminationStatus == 0)
    }

    @Test func statsOnATerminalIsAShortSummary() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        for n in 0..<5 { _ = try await client.create("items", ["n": .int(Int64(n))]) }
        _ = try await client.get("items", id: try await client.create("items", ["n": 9]).id)
        let port = ["--port", String(server.port)]
        let summary = try Self.onTerminal(["stats", "--interval", "0.2"] + port, columns: 80)
        let lines = summary.split(separator: "\n")
        #expect(lines.count < 30, "\(summary)")
        for line in lines { #expect(Self.columns(line) <= 80, "too wide: \(line)") }
        for label in ["server", "connections", "requests", "store", "change log"] {
            #expect(lines.contains { $0.hasPrefix(label) }, "no \(label) line:\n\(summary)")
        }
        #expect(summary.contains("larder-server") && summary.contains(", up "))
        // Measured over the interval (the machine decides how long that really took).
        #expect(summary.contains("/s over the last "), "\(summary)")
        #expect(summary.contains("6 documents") && summary.contains("on disk"))
        let header = try #require(lines.first { $0.hasPrefix("operation") })
        #expect(header.contains("p50") && header.contains("p99"))
        #expect(lines.contains { $0.hasPrefix("CREATE ") } && lines.contains { $0.hasPrefix("GET ") })
        // --json: everything the server says, as one object.
        let r = try CLITests.run(["stats", "--json"] + port)
        let stats = try #require(try r.json.first)
        #expect(stats["requests"]?["byOpcode"]?["CREATE"]?["latencyMicros"]?["p99"] != nil)
        #expect(stats["store"]?["documents"] == 6)
    }
}

/// A TCP relay in front of a server that passes the client's first `passFrames` frames and holds the rest until
/// `release`; the server's answers always pass. Frames are found by their 4-byte length prefix.
final class HoldingRelay: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let gate = DispatchSemaphore(value: 0)
    private let target: Int

    init(to target: Int, passFrames: Int) throws {
        self.target = target
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 4) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else { throw ServerTestError("the relay cannot listen: errno \(errno)") }
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in
            let client = accept(listener, nil, nil)
            guard client >= 0, let server = try? RawClient.tcp(port: target) else { return }
            let upstream = server.fd
            // The server's answers: copied as they come.
            Thread.detachNewThread { HoldingRelay.copy(from: upstream, to: client, frames: nil, then: nil) }
            HoldingRelay.copy(from: client, to: upstream, frames: passFrames, then: gate)
            withExtendedLifetime(server) {}
            Glibc.close(client)
        }
    }

    /// Lets the held frames through.
    func release() { gate.signal() }

    func close() {
        gate.signal()
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
    }

    /// Copies `from` to `to` until either closes. With `frames`, passes that many whole frames, then holds what
    /// follows until `gate` is signalled, then passes everything.
    private static func copy(from: Int32, to: Int32, frames: Int?, then gate: DispatchSemaphore?) {
        var remaining = frames
        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        func send(_ count: Int) -> Bool {
            let sent = pending.withUnsafeBytes { write(to, $0.baseAddress!, count) }
            pending.removeFirst(max(0, sent))
            return sent == count
        }
        while true {
            let n = read(from, &chunk, chunk.count)
            guard n > 0 else { return }
            pending += chunk[0..<n]
            if var left = remaining {
                var end = 0
                while left > 0 && pending.count - end >= 4 {
                    let length = pending[end..<end + 4].reduce(0) { $0 << 8 | Int($1) }
                    guard pending.count - end >= 4 + length else { break }
                    end += 4 + length
                    left -= 1
                }
                if end > 0 && !send(end) { return }
                remaining = left
                if left > 0 { continue }
                gate?.wait()
                remaining = nil
            }
            if !pending.isEmpty && !send(pending.count) { return }
        }
    }
}
