#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderWire
import Synchronization
import Testing

/// Knobs the reliability scripts turn: `scripts/crash-test 50` runs the crash test with `LARDER_CRASH_ROUNDS=50`.
/// Without them each test runs its small in-suite version.
enum ReliabilityKnobs {
    static func int(_ name: String, default value: Int) -> Int {
        ProcessInfo.processInfo.environment[name].flatMap { Int($0) } ?? value
    }

    static func isSet(_ name: String) -> Bool { ProcessInfo.processInfo.environment[name] != nil }

    /// Under scripts/sanitize the sanitizer's symbolizer runs as a child process talking through pipes.
    static var sanitized: Bool { SanitizerBuild.current != .none }

    /// A reliability test's time limit: twenty minutes for the suite's short run, `extra` more for a script's longer.
    static func timeLimit(plus extra: Int) -> TimeLimitTrait { .timeLimit(.minutes(20 + max(0, extra))) }
}

/// `larder-server` as a child process in a data directory: started on port 0, its port read from its first line.
final class ServerChild: @unchecked Sendable {
    let process: ChildProcess
    let port: Int
    let dataDirectory: String
    let logPath: String

    /// Starts the built binary (next to the test bundle) and waits for its "listening on" line.
    /// With `gates` (`TestGateVariable`), it starts the test-only build with them in its environment.
    init(dataDirectory: String, arguments: [String] = [], gates: [String: String] = [:]) throws {
        self.dataDirectory = dataDirectory
        logPath = dataDirectory + ".server.log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let process = ChildProcess()
        process.executableURL = try ServerProcessTests.binary(gates.isEmpty ? "larder-server" : "larder-server-test")
        process.arguments = ["--port", "0", "--data-dir", dataDirectory, "--log-level", "warn"] + arguments
        if !gates.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(gates) { $1 }
        }
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle(forWritingAtPath: logPath) ?? FileHandle.nullDevice
        try process.run()
        self.process = process
        let line = try ServerProcessTests.firstLine(out, of: process)
        guard let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber),
            let port = Int(portText)
        else {
            process.terminate()
            process.waitUntilExit()
            throw ServerTestError("larder-server did not start: '\(line)'; log: \(Self.tail(logPath))")
        }
        self.port = port
    }

    var pid: pid_t { process.processIdentifier }

    /// SIGKILL: no shutdown, no checkpoint, no flush.
    func kill() {
        Glibc.kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM and wait for the clean exit.
    func stop() -> Int32 {
        process.terminate()
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Resident set size from /proc, in bytes.
    var residentBytes: Int? { status("VmRSS:") }

    /// The largest resident set size so far ("high water mark"), in bytes.
    var peakResidentBytes: Int? { status("VmHWM:") }

    private func status(_ key: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(key) }),
            let kb = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { return nil }
        return kb * 1024
    }

    /// Open file descriptors, from /proc.
    var openDescriptors: Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
    }

    /// What each open descriptor is (`socket:[123]`, a file path), for telling a leak from a file opened late.
    var descriptorTargets: [String] {
        let directory = "/proc/\(pid)/fd"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\($0)") }
            .map { $0.hasPrefix("socket:") ? "socket" : $0 }.sorted()
    }

    static func tail(_ path: String) -> String {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(5).joined(separator: " | ")
    }
}

/// A JPEG the validator accepts whose bytes are unique: SOI, comment segments holding `commentBytes` random bytes (a
/// segment holds 65,533 at most), a 3x2 frame header, EOI. The SHA-256 of each one is then a real check of which bytes
/// came back.
func uniqueJPEG(commentBytes: Int) -> [UInt8] {
    var left = max(1, commentBytes)
    var bytes: [UInt8] = [0xFF, 0xD8]
    bytes.reserveCapacity(left + left / 65_533 * 4 + 24)
    var generator = SystemRandomNumberGenerator()
    while left > 0 {
        let count = min(left, 65_533)
        bytes += [0xFF, 0xFE, UInt8((count + 2) >> 8), UInt8((count + 2) & 0xFF)]
        for _ in 0..<count { bytes.append(UInt8.random(in: 0...255, using: &generator)) }
        left -= count
    }
    bytes += [0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x02, 0x00, 0x03, 0x01, 0x01, 0x11, 0x00, 0xFF, 0xD9]
    return bytes
}

/// Latencies in microseconds and their percentiles.
struct LatencySample {
    private(set) var micros: [Double] = []

    mutating func add(_ value: Double) { micros.append(value) }
    mutating func add(_ other: LatencySample) { micros += other.micros }

    var count: Int { micros.count }

    func percentile(_ p: Double) -> Double {
        guard !micros.isEmpty else { return 0 }
        let sorted = micros.sorted()
        let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
        return sorted[max(0, min(sorted.count - 1, rank))]
    }
}

/// Monotonic seconds.
func monotonicSeconds() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

/// A flag several tasks read and one sets.
final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func stop() { value.store(true, ordering: .relaxed) }
    var isStopped: Bool { value.load(ordering: .relaxed) }
}

/// A count several tasks add to.
final class SharedCounter: Sendable {
    private let atomic = Atomic<Int>(0)
    func add(_ delta: Int) { atomic.add(delta, ordering: .relaxed) }
    var value: Int { atomic.load(ordering: .relaxed) }
}

/// Prints a line at once (test output is otherwise buffered), so a long script run shows its progress.
func report(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
