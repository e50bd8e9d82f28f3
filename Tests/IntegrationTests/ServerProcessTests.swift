#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// The built `larder-server` binary as a subprocess: start-up line, exit codes, SIGTERM with requests in flight.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ServerProcessTests {
    /// The binary `name` sits next to the test bundle in the build products directory: `larder-server`, or
    /// `larder-server-test`, the same server with test hooks read from its environment.
    static func binary(_ name: String = "larder-server") throws -> URL {
        let url = Bundle.module.bundleURL.deletingLastPathComponent().appendingPathComponent(name)
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw ServerTestError("\(name) not built at \(url.path); run swift build first")
        }
        return url
    }

    struct Run {
        let process: ChildProcess
        let stdout: Pipe
        let stderr: Pipe
    }

    /// Starts `larder-server` with `arguments`, and `environment` added to the test's own; with `gates`
    /// (`TestGateVariable`), its test-only build with them in its environment too.
    static func launch(
        _ arguments: [String], environment: [String: String] = [:], gates: [String: String] = [:]
    ) throws -> Run {
        let process = ChildProcess()
        process.executableURL = try binary(gates.isEmpty ? "larder-server" : "larder-server-test")
        process.arguments = arguments
        let added = environment.merging(gates) { $1 }
        if !added.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(added) { $1 }
        }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        return Run(process: process, stdout: out, stderr: err)
    }

    /// What `process` wrote to `pipe` up to its first newline (`ChildProcess.firstLine`).
    static func firstLine(_ pipe: Pipe, of process: ChildProcess, silence: Double = 120) throws -> String {
        try process.firstLine(of: pipe, silence: silence)
    }

    static func temporaryDirectory() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("larder-proc-\(UUID().uuidString)")
    }

    @Test func sigtermWithRequestsInFlightAnswersThemAllAndExitsZero() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let data = directory.appendingPathComponent("data").path
        // The SEARCHes wait at the test's gate until the shutdown has begun and a late request was refused, so they
        // are surely in flight at the SIGTERM; the grace period is far longer than any test waits.
        let gate = try ServerGate()
        defer { gate.open() }
        // One I/O thread: the probe below shares the connections' loop, so what it sees of the shutdown, they see.
        let run = try Self.launch([
            "--port", "0", "--data-dir", data, "--shutdown-grace-ms", "600000", "--log-level", "error",
            "--io-threads", "1",
        ], gates: [TestGateVariable.search: gate.path])
        let line = try Self.firstLine(run.stdout, of: run.process)
        #expect(line.hasPrefix("larder-server \(LarderServer.version) listening on tcp://127.0.0.1:"))
        #expect(line.contains("data \(data)"))
        guard let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber),
            let port = Int(portText)
        else {
            run.process.terminate()
            throw ServerTestError("no port in \(line)")
        }

        let c = try RawClient.tcp(port: port)
        try c.hello()
        let probe = try RawClient.tcp(port: port)
        try probe.hello()
        var batch: [UInt8] = []
        var expected: Set<UInt32> = []
        // Creates, then searches: the searches wait for the creates (a connection's order), then run side by side.
        for id in UInt32(100)..<120 {
            batch += id < 110
                ? c.encode(.create, ["collection": "t", "data": ["n": .int(Int64(id))]], id: id)
                : c.encode(.search, ["collection": "t"], id: id)
            expected.insert(id)
        }
        // Last, a PING, answered on the loop with the searches' run: its answer means every request before it was read
        // and the creates are answered; the searches wait at the gate.
        batch += c.encode(.ping, id: 120)
        try c.writeAll(batch)
        var frames: [Frame] = []
        while frames.last?.requestID != 120 {
            guard let frame = try c.receive(timeout: 120) else { throw ServerTestError("closed before the PING") }
            frames.append(frame)
        }
        try gate.waitForHeld(1)
        kill(run.process.processIdentifier, SIGTERM)
        // Until the shutdown has begun on the loop: the probe's PING is refused, or the probe is closed.
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline, let reply = try? probe.call(.ping), reply.status == .ok { usleep(2_000) }
        try c.send(.ping, id: 500)  // arrives during shutdown, with the SEARCHes still held
        while !frames.contains(where: { $0.requestID == 500 }) {
            guard let frame = try c.receive(timeout: 120) else { throw ServerTestError("closed before PING 500") }
            frames.append(frame)
        }
        #expect(expected.filter { id in id >= 110 && frames.contains { $0.requestID == id } }.isEmpty)
        gate.open()

        frames += try c.framesUntilClosed()
        var answered: Set<UInt32> = []
        for frame in frames where expected.contains(frame.requestID) {
            #expect(frame.status == .ok, "\(frame.opcode.name) \(frame.requestID): \(frame.replyText)")
            answered.insert(frame.requestID)
        }
        #expect(answered == expected, "lost: \(expected.subtracting(answered).sorted())")
        #expect(frames.first { $0.requestID == 500 }?.status == .unavailable)
        run.process.waitUntilExit()
        #expect(run.process.terminationStatus == 0)

        // Every acknowledged write is there after a restart.
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = data
        configuration.logLevel = .error
        let server = try LarderServer(configuration: configuration)
        let again = try RawClient.tcp(port: try server.start())
        defer { server.shutdown() }
        try again.hello()
        #expect(try CountResponse(json: again.call(.count, ["collection": "t"]).jsonObject()).count == 10)
    }

    /// The server's sockets, its listeners and the connections it accepts, are close-on-exec: a process started
    /// beside it (a PostgreSQL a test starts, a helper a library runs) never inherits a port or a client's connection.
    @Test func theServersSocketsAreCloseOnExec() throws {
        let root = temporaryTestDirectory("larder-cloexec")
        defer { try? FileManager.default.removeItem(at: root) }
        let socketPath = root.appendingPathComponent("s").path
        let server = try ServerChild(
            dataDirectory: root.appendingPathComponent("data").path, arguments: ["--socket", socketPath])
        defer { _ = server.stop() }
        let tcp = try RawClient.tcp(port: server.port)
        try tcp.hello()
        let unix = try RawClient.unix(path: socketPath)
        try unix.hello()
        // The server makes every socket of its own non-blocking; a blocking one was handed down by the test process.
        let proc = "/proc/\(server.pid)"
        var own = 0
        for fd in try FileManager.default.contentsOfDirectory(atPath: "\(proc)/fd") {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(proc)/fd/\(fd)"),
                target.hasPrefix("socket:"),
                let info = try? String(contentsOfFile: "\(proc)/fdinfo/\(fd)", encoding: .utf8),
                let flagsLine = info.split(separator: "\n").first(where: { $0.hasPrefix("flags:") }),
                let flags = Int(flagsLine.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8),
                flags & Int(O_NONBLOCK) != 0
            else { continue }
            own += 1
            #expect(flags & Int(O_CLOEXEC) != 0, "descriptor \(fd) (flags \(String(flags, radix: 8))) is inherited")
        }
        #expect(own >= 4, "two listeners and two accepted connections")
    }

    @Test func badOptionsExit64() throws {
        let run = try Self.launch(["--port", "banana"])
        run.process.waitUntilExit()
        #expect(run.process.terminationStatus == 64)
        let message = String(decoding: run.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.hasPrefix("Error: --port needs an integer"))
        #expect(message.contains("Usage: larder-server"))
    }

    @Test func helpExitsZero() throws {
        let run = try Self.launch(["--help"])
        let text = String(decoding: run.stdout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        run.process.waitUntilExit()
        #expect(run.process.terminationStatus == 0)
        #expect(text.contains("--max-in-flight") && text.contains("LARDER_SERVER_TOKEN"))
    }

    @Test func portTakenExits1AndSaysSo() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try withServerOnPort0 { _, port in
            let run = try Self.launch(["--port", "\(port)", "--data-dir", directory.path])
            run.process.waitUntilExit()
            #expect(run.process.terminationStatus == 1)
            let message = String(decoding: run.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(message.contains("Error: cannot listen") && message.contains("\(port)"))
            #expect(message.contains("in use"))
        }
    }

    /// A second server on a data directory in use exits 1 naming the first one's pid; once that one is killed
    /// (SIGKILL: the kernel releases its lock), a new server starts on the directory.
    @Test func aSecondServerOnADataDirectoryInUseExits1() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = try Self.launch(["--port", "0", "--data-dir", directory.path, "--log-level", "error"])
        #expect(try Self.firstLine(first.stdout, of: first.process).contains("listening"))
        let second = try Self.launch(["--port", "0", "--data-dir", directory.path])
        second.process.waitUntilExit()
        #expect(second.process.terminationStatus == 1)
        let message = String(decoding: second.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.contains("in use by another Larder process (pid \(first.process.processIdentifier))"), "\(message)")
        kill(first.process.processIdentifier, SIGKILL)
        first.process.waitUntilExit()
        let third = try Self.launch(["--port", "0", "--data-dir", directory.path, "--log-level", "error"])
        #expect(try Self.firstLine(third.stdout, of: third.process).contains("listening"))
        #expect(Self.terminated(third.process) == 0)
    }

    /// Sends `signal` (SIGTERM; 0 for none: one was sent already) and waits up to 120 s for the exit; answers the exit
    /// status of a clean exit, or nil (and kills the server) when it is still running or died of a signal.
    static func terminated(_ process: ChildProcess, signal: Int32 = SIGTERM) -> Int32? {
        if signal != 0 { kill(process.processIdentifier, signal) }
        let deadline = Date().addingTimeInterval(120)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        guard !process.isRunning else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        return process.terminationReason == .exit ? process.terminationStatus : nil
    }

    /// SIGTERM and SIGINT are held from the start of `main` and taken once the server runs: one that comes while the
    /// server is still starting stops it cleanly once it has started (before, it ended the process at once, or was
    /// discarded and left the server running: the dispatch signal sources began listening a moment after the
    /// start-up line, and a supervisor that stopped the server on reading the line lost its SIGTERM about one time
    /// in eight, measured with a script); so does one sent the moment the line is read.
    @Test func aSIGTERMWhileStartingOrOnTheStartUpLineStopsTheServerCleanly() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // A child inherits its parent's blocked signals, and the test runner's threads may block SIGTERM: launch
        // with them unblocked, as a supervisor does, so that only the server's own hold can hold the signal.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGINT)
        var runnerMask = sigset_t()
        pthread_sigmask(SIG_UNBLOCK, &signals, &runnerMask)
        // The server waits at the test's gate before it opens the store, so it is surely still starting.
        let gate = try ServerGate()
        defer { gate.open() }
        let launched = Result {
            try Self.launch(
                ["--port", "0", "--data-dir", directory.path],
                gates: [TestGateVariable.start: gate.path])
        }
        pthread_sigmask(SIG_SETMASK, &runnerMask, nil)
        let starting = try launched.get()
        try gate.waitForHeld(1)
        // `main` holds the signals from its first line, before the gate: the kernel shows SIGTERM's bit in the main
        // thread's blocked mask (a process still loading would die of the signal instead).
        let status = "/proc/\(starting.process.processIdentifier)/status"
        let text = (try? String(contentsOfFile: status, encoding: .utf8)) ?? ""
        let mask = text.split(separator: "\n").first { $0.hasPrefix("SigBlk:") }.flatMap {
            UInt64($0.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        }
        let held = mask.map { $0 & (1 << (UInt64(SIGTERM) - 1)) != 0 } ?? false
        var pending = pollfd(fd: starting.stdout.fileHandleForReading.fileDescriptor, events: Int16(POLLIN), revents: 0)
        #expect(held && poll(&pending, 1, 0) == 0, "the server did not hold SIGTERM while it was starting")
        kill(starting.process.processIdentifier, SIGTERM)
        gate.open()
        #expect(try Self.firstLine(starting.stdout, of: starting.process).contains("listening"))
        #expect(Self.terminated(starting.process, signal: 0) == 0)
        for round in 0..<4 {
            let run = try Self.launch(["--port", "0", "--data-dir", directory.path])
            var byte: UInt8 = 0  // the line's first byte, straight from the pipe; then the signal at once
            #expect(read(run.stdout.fileHandleForReading.fileDescriptor, &byte, 1) == 1 && byte == UInt8(ascii: "l"))
            #expect(Self.terminated(run.process) == 0, "round \(round)")
        }
    }

    @Test func unwritableDataDirectoryExits1() throws {
        let run = try Self.launch(["--port", "0", "--data-dir", "/proc/larder-cannot-be-here"])
        run.process.waitUntilExit()
        #expect(run.process.terminationStatus == 1)
        let message = String(decoding: run.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.contains("data directory /proc/larder-cannot-be-here"))
    }
}
