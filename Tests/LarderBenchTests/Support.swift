#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderServer
import LarderTestProcess
import Testing

@testable import LarderBench
import LarderSync

/// Runs `body` with an in-process Larder server on a free port over a fresh data directory.
func withLarderServer<T>(
    socketPath: String? = nil, configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: (Int) throws -> T
) throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-bench-test-\(UUID())")
    defer { try? FileManager.default.removeItem(at: directory) }
    var configuration = ServerConfiguration()
    configuration.port = 0
    configuration.dataDirectory = directory.appendingPathComponent("data").path
    configuration.logLevel = .error
    configuration.socketPath = socketPath
    configure(&configuration)
    let server = try LarderServer(configuration: configuration)
    let port = try server.start()
    defer { server.shutdown() }
    return try body(port)
}

/// A fake Redis: enough RESP for the benchmark (PING, AUTH, GET, SET) with a dictionary behind it, on a thread per
/// connection. It counts the commands it saw.
final class FakeRedis: Sendable {
    struct Counts: Sendable, Equatable {
        var ping = 0, get = 0, set = 0, other = 0
    }

    let port: Int
    /// Microseconds each GET waits before it is answered: a slow server, for coordinated omission.
    let getDelayMicros: UInt32
    private let listener: Int32
    private let store = Locked([String: [UInt8]]())
    private let seen = Locked(Counts())

    init(getDelayMicros: UInt32 = 0) throws {
        self.getDelayMicros = getDelayMicros
        (listener, port) = try Sys.listenLoopback()
        let listener = listener
        let thread = Thread { [self] in
            while true {
                let fd = accept(listener, nil, nil)
                if fd < 0 {
                    if errno == EINTR { continue }
                    return
                }
                Thread { [self] in serve(fd) }.start()
            }
        }
        thread.start()
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    var counts: Counts { seen.withLock { $0 } }
    var keys: Int { store.withLock { $0.count } }
    func value(_ key: String) -> [UInt8]? { store.withLock { $0[key] } }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var input: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n <= 0 { return }
            input += chunk[0..<n]
            var output: [UInt8] = []
            while let (command, used) = FakeRedis.parseCommand(input) {
                input.removeFirst(used)
                output += answer(command)
            }
            var offset = 0
            while offset < output.count {
                let w = output.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
                if w <= 0 { return }
                offset += w
            }
        }
    }

    private func answer(_ command: [[UInt8]]) -> [UInt8] {
        let name = String(decoding: command.first ?? [], as: UTF8.self).uppercased()
        switch (name, command.count) {
        case ("PING", 1):
            seen.withLock { $0.ping += 1 }
            return Array("+PONG\r\n".utf8)
        case ("AUTH", 2):
            return Array("+OK\r\n".utf8)
        case ("SET", 3):
            seen.withLock { $0.set += 1 }
            store.withLock { $0[String(decoding: command[1], as: UTF8.self)] = command[2] }
            return Array("+OK\r\n".utf8)
        case ("GET", 2):
            seen.withLock { $0.get += 1 }
            if getDelayMicros > 0 { usleep(getDelayMicros) }
            guard let value = store.withLock({ $0[String(decoding: command[1], as: UTF8.self)] }) else {
                return Array("$-1\r\n".utf8)
            }
            return Array("$\(value.count)\r\n".utf8) + value + Array("\r\n".utf8)
        default:
            seen.withLock { $0.other += 1 }
            return Array("-ERR unknown command\r\n".utf8)
        }
    }

    /// One RESP array of bulk strings from the front of `bytes`, and how many bytes it took; nil if incomplete.
    static func parseCommand(_ bytes: [UInt8]) -> ([[UInt8]], Int)? {
        var i = 0
        func line() -> String? {
            var j = i
            while j + 1 < bytes.count {
                if bytes[j] == 0x0D && bytes[j + 1] == 0x0A {
                    let text = String(decoding: bytes[i..<j], as: UTF8.self)
                    i = j + 2
                    return text
                }
                j += 1
            }
            return nil
        }
        guard let header = line(), header.hasPrefix("*"), let count = Int(header.dropFirst()) else { return nil }
        var parts: [[UInt8]] = []
        for _ in 0..<count {
            guard let bulk = line(), bulk.hasPrefix("$"), let length = Int(bulk.dropFirst()),
                i + length + 2 <= bytes.count
            else { return nil }
            parts.append(Array(bytes[i..<(i + length)]))
            i += length + 2
        }
        return (parts, i)
    }
}

/// The built `larder-bench` executable, next to the test bundle.
func benchExecutable() throws -> URL {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = directory.appendingPathComponent("larder-bench")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        directory = directory.deletingLastPathComponent()
    }
    let fromBundle = Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("larder-bench")
    try #require(
        FileManager.default.isExecutableFile(atPath: fromBundle.path),
        "larder-bench was not built next to the tests (\(CommandLine.arguments[0]))")
    return fromBundle
}

/// Runs the executable; returns its exit status, stdout and stderr.
func runBench(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = ChildProcess()
    process.executableURL = try benchExecutable()
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    let stdoutData = out.fileHandleForReading.readDataToEndOfFile()
    let stderrData = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (
        process.terminationStatus, String(decoding: stdoutData, as: UTF8.self),
        String(decoding: stderrData, as: UTF8.self)
    )
}
