#if canImport(Glibc)
import Glibc
#endif
import CChildProcess
import Foundation
import LarderSync

/// A child process started with posix_spawn(3), with the part of Foundation's `Process` interface the tests use.
///
/// The tests start servers, the CLI, openssl and strace hundreds of times in one run. Foundation's `Process.run()` on
/// Linux (swift-corelibs-foundation up to Swift 6.3) copies a fixed 256 bytes of every `/proc/self/fd` directory
/// entry, past the end of glibc's buffer, and now and then the copy reaches an unmapped page and the whole test
/// process dies with SIGSEGV. This launcher never reads `/proc/self/fd`: it closes every descriptor above the
/// standard three in the child with `posix_spawn_file_actions_addclosefrom_np`.
///
/// Standard streams take a `Pipe` (the parent closes the child's end after the start, as `Process` does), a
/// `FileHandle` (`FileHandle.nullDevice` opens /dev/null), or nil for the test process's own.
public final class ChildProcess: @unchecked Sendable {
    /// The program to run.
    public var executableURL: URL?
    /// Its arguments, without the program's name.
    public var arguments: [String]?
    /// Its whole environment; nil inherits the test process's.
    public var environment: [String: String]?
    /// Its working directory; nil inherits the test process's.
    public var currentDirectoryURL: URL?
    /// A `Pipe`, a `FileHandle` or nil, for standard input.
    public var standardInput: Any?
    /// A `Pipe`, a `FileHandle` or nil, for standard output.
    public var standardOutput: Any?
    /// A `Pipe`, a `FileHandle` or nil, for standard error.
    public var standardError: Any?

    private let lock = Lock()
    private var pid: pid_t = 0
    private var status: Int32?

    public init() {}

    /// The child's process id (0 before `run`).
    public var processIdentifier: Int32 { lock.withLock { pid } }

    /// Starts the child. Throws when the program cannot be started (it does not exist or is not executable).
    public func run() throws {
        guard let path = executableURL?.path else { throw ChildProcessError("no executable to run") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let streams = [(standardInput, STDIN_FILENO), (standardOutput, STDOUT_FILENO), (standardError, STDERR_FILENO)]
        for (stream, target) in streams {
            if let handle = stream as? FileHandle, handle === FileHandle.nullDevice {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_RDWR, 0)
            } else if let fd = Self.descriptor(stream, forInput: target == STDIN_FILENO) {
                posix_spawn_file_actions_adddup2(&actions, fd, target)
            }
        }
        posix_spawn_file_actions_addclosefrom_np(&actions, 3)
        if let directory = currentDirectoryURL?.path {
            posix_spawn_file_actions_addchdir_np(&actions, directory)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Default dispositions and an empty mask in the child, whatever the test process ignores or blocks.
        var all = sigset_t()
        sigfillset(&all)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv = [path] + (arguments ?? [])
        let environment = self.environment ?? ProcessInfo.processInfo.environment
        let envp = environment.map { "\($0.key)=\($0.value)" }
        var child: pid_t = 0
        let result = Self.withCStrings(argv) { argv in
            Self.withCStrings(envp) { envp in posix_spawn(&child, path, &actions, &attributes, argv, envp) }
        }
        guard result == 0 else {
            throw ChildProcessError("cannot start \(path): \(String(cString: strerror(result)))")
        }
        lock.withLock { pid = child }
        // The child's ends of the pipes belong to the child now: without closing them here, a read of its output
        // would never see the end of the file.
        for (stream, input) in [(standardInput, true), (standardOutput, false), (standardError, false)] {
            if let pipe = stream as? Pipe {
                try? (input ? pipe.fileHandleForReading : pipe.fileHandleForWriting).close()
            }
        }
    }

    /// Whether the child has not exited yet (it is reaped here if it has).
    public var isRunning: Bool {
        lock.withLock {
            guard pid > 0, status == nil else { return false }
            var raw: Int32 = 0
            if waitpid(pid, &raw, WNOHANG) == pid { status = raw }
            return status == nil
        }
    }

    /// Blocks until the child has exited.
    public func waitUntilExit() {
        let child = lock.withLock { status == nil ? pid : 0 }
        guard child > 0 else { return }
        var raw: Int32 = 0
        while true {
            let result = waitpid(child, &raw, 0)
            if result == child {
                lock.withLock { status = raw }
                return
            }
            // ECHILD: `isRunning` reaped it on another thread and kept its status.
            if result < 0 && errno != EINTR { return }
        }
    }

    /// Waits up to `seconds` for the child to exit; false when it is still running then.
    public func waitUntilExit(seconds: Double) -> Bool {
        let exited = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [self] in
            waitUntilExit()
            exited.signal()
        }
        return exited.wait(timeout: .now() + seconds) == .success
    }

    /// Sends SIGTERM.
    public func terminate() {
        let child = lock.withLock { status == nil ? pid : 0 }
        if child > 0 { kill(child, SIGTERM) }
    }

    /// The exit status, or the signal that ended the child; 0 before it ended.
    public var terminationStatus: Int32 {
        guard let raw = lock.withLock({ status }) else { return 0 }
        return raw & 0x7f == 0 ? (raw >> 8) & 0xff : raw & 0x7f
    }

    /// Whether the child exited or was ended by a signal.
    public var terminationReason: Process.TerminationReason {
        guard let raw = lock.withLock({ status }) else { return .exit }
        return raw & 0x7f == 0 ? .exit : .uncaughtSignal
    }

    /// What the child wrote to `pipe` up to its first newline (less if the pipe closed first). After `silence`
    /// seconds without one, the child is killed and this throws, so a program that never starts fails its test
    /// instead of hanging it.
    public func firstLine(of pipe: Pipe, silence: Double = 120) throws -> String {
        let fd = pipe.fileHandleForReading.fileDescriptor
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var deadline = Self.now() + silence
        while !bytes.contains(UInt8(ascii: "\n")) {
            let remaining = deadline - Self.now()
            guard remaining > 0 else {
                if isRunning { kill(processIdentifier, SIGKILL) }
                waitUntilExit()
                throw ChildProcessError(
                    "no line from \(executableURL?.lastPathComponent ?? "the child") within \(Int(silence)) s of "
                        + "silence: '\(String(decoding: bytes, as: UTF8.self))'")
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(min(remaining, 3600) * 1000))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            bytes += chunk[0..<n]
            deadline = Self.now() + silence
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Seconds on the monotonic clock.
    private static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private static func descriptor(_ stream: Any?, forInput: Bool) -> Int32? {
        switch stream {
        case let pipe as Pipe:
            return forInput ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor
        case let handle as FileHandle:
            return handle.fileDescriptor
        default:
            return nil
        }
    }

    private static func withCStrings<R>(
        _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R
    ) -> R {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { pointers.forEach { free($0) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// Why a child process could not be started.
public struct ChildProcessError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
