#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderBench
import LarderClient
import LarderTestProcess
import LarderTestThreads
import Testing

/// `larder blob put -`: stdin through a real pipe into the `larder` process, against a real server. Input of any size
/// moves in chunks with bounded memory and resumes after a broken connection.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIBlobStdinTests {
    /// What a `larder` process did with its stdin: exit status, output, and its peak resident memory.
    struct Piped {
        var status: Int32
        var stdout: String
        var stderr: String
        /// VmHWM, read once `finished` held, while the process was still alive.
        var peakRSSBytes: Int
    }

    /// Runs `larder ARGUMENTS` with `input` written into a pipe as its stdin (so the CLI cannot learn its size).
    ///
    /// Its peak RSS is its VmHWM from /proc, read while it is surely still alive: its stdout is a pipe filled up
    /// beforehand, so the CLI blocks on writing its answer until the test, having seen `finished` hold (e.g. the blob
    /// exists), has read VmHWM and drains the pipe. (`wait4`'s `ru_maxrss` would not do: a child spawned with
    /// `posix_spawn` shares the test process's memory until its `exec`, and keeps that high-water mark.)
    static func pipe(
        _ input: [UInt8], _ arguments: [String], finished: () async throws -> Bool = { true }
    ) async throws -> Piped {
        signal(SIGPIPE, SIG_IGN)  // a CLI that exits early must fail the test, not kill it
        let directory = NSTemporaryDirectory() + "larder-stdin-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var stdin: [Int32] = [0, 0]
        var stdout: [Int32] = [0, 0]
        guard Glibc.pipe(&stdin) == 0, Glibc.pipe(&stdout) == 0 else { throw POSIXError(.EMFILE) }
        // Fill the stdout pipe, so that the CLI's first write of output waits for the test.
        let flags = fcntl(stdout[1], F_GETFL)
        _ = fcntl(stdout[1], F_SETFL, flags | O_NONBLOCK)
        var filler = 0
        let block = [UInt8](repeating: 0x2E, count: 4096)
        while true {
            let n = block.withUnsafeBytes { write(stdout[1], $0.baseAddress!, $0.count) }
            if n <= 0 { break }
            filler += n
        }
        _ = fcntl(stdout[1], F_SETFL, flags)
        let err = open(directory + "/err", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdin[0], 0)
        posix_spawn_file_actions_adddup2(&actions, stdout[1], 1)
        posix_spawn_file_actions_adddup2(&actions, err, 2)
        posix_spawn_file_actions_addclose(&actions, stdin[1])
        posix_spawn_file_actions_addclose(&actions, stdout[0])
        var environment = ProcessInfo.processInfo.environment
        for key in ["LARDER_HOST", "LARDER_PORT", "LARDER_SOCKET", "LARDER_TOKEN"] { environment[key] = nil }
        environment["HOME"] = directory
        let path = CLITests.binary.path
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, path, &actions, nil, argv, envp)
        close(stdin[0])
        close(stdout[1])
        close(err)
        defer { close(stdout[0]) }
        guard spawned == 0 else {
            close(stdin[1])
            throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .EIO)
        }
        var written = 0
        while written < input.count {
            let n = input.withUnsafeBytes {
                write(stdin[1], $0.baseAddress! + written, min(1 << 16, $0.count - written))
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }  // the CLI stopped reading: its exit status says why
            written += n
        }
        close(stdin[1])
        let done = try await waitUntil(300) { try await finished() }
        #expect(done, "the CLI's work did not finish within 300 s")
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let hwm = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
        let peak = hwm.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") }.map { $0 * 1024 }
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(stdout[0], $0.baseAddress!, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            output += buffer[0..<n]
        }
        var wait: Int32 = 0
        while waitpid(pid, &wait, 0) < 0 && errno == EINTR {}
        let exit = (wait & 0x7F) == 0 ? (wait >> 8) & 0xFF : 128 + (wait & 0x7F)
        return Piped(
            status: exit, stdout: String(decoding: output.dropFirst(filler), as: UTF8.self),
            stderr: (try? String(contentsOfFile: directory + "/err", encoding: .utf8)) ?? "",
            peakRSSBytes: peak ?? Int.max)
    }

    /// The blob id in `blob put --json` output.
    static func id(_ run: Piped) throws -> String {
        let json = try JSONParser.parse(Array(run.stdout.utf8))
        return try #require(json.objectValue?["id"]?.stringValue, "no id in \(run.stdout)")
    }

    /// The blob read back with `larder blob get -o`, byte for byte.
    static func download(_ id: String, port: Int) throws -> [UInt8] {
        let path = NSTemporaryDirectory() + "larder-stdin-copy-\(UUID().uuidString)"
        defer { unlink(path) }
        let run = try CLITests.run(["blob", "get", id, "-o", path, "--port", String(port)])
        #expect(run.status == 0, "\(run.stderr)")
        return Array(FileManager.default.contents(atPath: path) ?? Data())
    }

    /// 100 MB piped in, well over the 40 MiB frame limit: the blob is those bytes exactly, and the CLI's memory does
    /// not grow with the input (it holds a few chunks, the rest waits in a temporary file): its peak RSS is within a
    /// quarter of the input of its peak for a 1 MB photo, the same command's own baseline under any build.
    @Test func aLargePipedPhotoRoundTripsInBoundedMemory() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let small = Payloads.syntheticJPEG(size: 1_000_000, seed: UInt64.random(in: 1...1000))
        let baseline = try await Self.pipe(small, ["blob", "put", "-", "--json", "--port", String(server.port)]) {
            try await client.blobList().blobs.count == 1
        }
        #expect(baseline.status == 0, "\(baseline.stderr)")
        let size = 100_000_000
        let jpeg = Payloads.syntheticJPEG(size: size, seed: UInt64.random(in: 1...1000))
        let run = try await Self.pipe(jpeg, ["blob", "put", "-", "--json", "--port", String(server.port)]) {
            try await client.blobList().blobs.count == 2
        }
        #expect(run.status == 0, "\(run.stderr)")
        let id = try Self.id(run)
        var digest = SHA256()
        digest.update(jpeg)
        #expect(run.stdout.contains(digest.finalizeHex()) && run.stdout.contains("\"size\":\(size)"), "\(run.stdout)")
        let growth = run.peakRSSBytes - baseline.peakRSSBytes
        let peaks = "\(run.peakRSSBytes >> 20) MiB for the 100 MB input, \(baseline.peakRSSBytes >> 20) MiB for 1 MB"
        #expect(growth < SanitizerBuild.current.residentBound(size / 4), "the CLI's peak RSS was \(peaks)")
        #expect(try Self.download(id, port: server.port) == jpeg)
    }

    /// A photo that fits one frame still goes up whole, and stdin that is no JPEG gets the server's error.
    @Test func aSmallPipedPhotoAndAPipedNonPhoto() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let jpeg = Payloads.syntheticJPEG(size: 300_000)
        let run = try await Self.pipe(jpeg, ["blob", "put", "-", "--json", "--port", String(server.port)])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Self.download(try Self.id(run), port: server.port) == jpeg)
        // Larger than a chunk, so it goes through the temporary file and the upload, and is refused at FINISH.
        let text = [UInt8](repeating: UInt8(ascii: "x"), count: 3 << 20)
        let refused = try await Self.pipe(text, ["blob", "put", "-", "--port", String(server.port)])
        #expect(refused.status != 0 && refused.stderr.contains("UNSUPPORTED_MEDIA_TYPE"), "\(refused.stderr)")
    }

    /// On a terminal, stdin larger than a chunk shows the upload's progress bar up to 100%, as a file does.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func pipedPhotoShowsProgressOnATerminal() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let photo = NSTemporaryDirectory() + "larder-stdin-progress-\(UUID().uuidString).jpg"
        defer { unlink(photo) }
        _ = FileManager.default.createFile(atPath: photo, contents: Data(Payloads.syntheticJPEG(size: 3 << 20)))
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        let command = "cat '\(photo)' | '\(CLITests.binary.path)' blob put - --port \(server.port)"
        process.arguments = ["-qec", command, "/dev/null"]
        var environment = ProcessInfo.processInfo.environment
        environment["NO_COLOR"] = "1"
        for key in ["LARDER_HOST", "LARDER_PORT", "LARDER_SOCKET", "LARDER_TOKEN"] { environment[key] = nil }
        process.environment = environment
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let shown = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(shown.contains("put [##############################] 100% 3 MiB of 3 MiB"), "\(shown.suffix(300))")
        #expect(shown.contains("sha256"), "\(shown.suffix(300))")
    }

    /// More than the server's `maxBlobBytes` on stdin is refused as soon as it passes the limit, naming it.
    @Test func pipedInputOverTheBlobLimitIsRefused() async throws {
        let server = try ClientTestServer { $0.limits.maxBlobBytes = 4 << 20 }
        defer { server.stop() }
        let run = try await Self.pipe(
            Payloads.syntheticJPEG(size: 6 << 20), ["blob", "put", "-", "--port", String(server.port)])
        #expect(run.status == 1 && run.stderr.contains("maxBlobBytes, 4194304 bytes"), "\(run.stderr)")
        let client = server.client()
        defer { client.close() }
        #expect(try await client.blobList().blobs.isEmpty)
    }

    /// The CLI's connection cut in the middle of the upload (a relay closes it after 60% of the input went through):
    /// the CLI connects again, asks where the upload stands and sends only the rest. The blob is byte-exact, and the
    /// bytes sent in all are far less than the input and a half (which a restart from zero would take).
    @Test func aPipedUploadResumesAfterItsConnectionIsCut() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let size = 24 << 20
        let jpeg = Payloads.syntheticJPEG(size: size, seed: UInt64.random(in: 1...1000))
        let relay = try CuttingRelay(to: server.port, cutAfter: size * 6 / 10)
        defer { relay.stop() }
        let run = try await Self.pipe(jpeg, ["blob", "put", "-", "--json", "--port", String(relay.port)])
        #expect(run.status == 0, "\(run.stderr)")
        let (connections, cut, forwarded) = relay.counts
        #expect(cut && connections >= 2, "the relay cut nothing (\(connections) connections)")
        #expect(forwarded < size + size * 3 / 10, "\(forwarded) bytes went up for a \(size)-byte photo")
        #expect(try Self.download(try Self.id(run), port: server.port) == jpeg)
    }
}

/// A TCP relay on 127.0.0.1 to a server's port that cuts its first connection (both directions, at once) once
/// `cutAfter` bytes went from the client to the server, and relays every later connection whole.
final class CuttingRelay: @unchecked Sendable {  // the counters are behind `lock`; the descriptors are set once
    let port: Int
    private let listener: Int32
    private let lock = NSLock()
    private var connections = 0
    private var cut = false
    private var forwarded = 0
    /// The sockets of connections whose pumps still run (each pair closed by the second pump to end), and the
    /// listener while the accepting thread runs: `stop` only shuts them down, so that no descriptor is closed while
    /// another thread may still use its number.
    private var open: [Int32] = []

    init(to serverPort: Int, cutAfter: Int) throws {
        (listener, port) = try listenOnLoopback(backlog: 16)
        Thread.detachNewThread { [self] in
            defer { close(listener) }
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 {
                    if errno == EINTR { continue }
                    return
                }
                let upstream = Self.connect(serverPort)
                let first = lock.withLock { () -> Bool in
                    connections += 1
                    open += [client, upstream]
                    return connections == 1
                }
                let ended = Counter()
                Thread.detachNewThread {
                    self.pump(from: client, to: upstream, cutAfter: first ? cutAfter : nil, up: true)
                    self.ended(client, upstream, ended)
                }
                Thread.detachNewThread {
                    self.pump(from: upstream, to: client, cutAfter: nil, up: false)
                    self.ended(client, upstream, ended)
                }
            }
        }
    }

    /// Connections accepted, whether the cut happened, and the bytes relayed to the server in all.
    var counts: (connections: Int, cut: Bool, forwarded: Int) { lock.withLock { (connections, cut, forwarded) } }

    /// Ends every connection and the listening (each thread closes what it used as it ends).
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in lock.withLock({ open }) { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    private final class Counter: @unchecked Sendable {  // only touched under the relay's lock
        var value = 0
    }

    /// One pump of a connection ended; the second closes the pair.
    private func ended(_ client: Int32, _ upstream: Int32, _ counter: Counter) {
        let last = lock.withLock { () -> Bool in
            counter.value += 1
            guard counter.value == 2 else { return false }
            open.removeAll { $0 == client || $0 == upstream }
            return true
        }
        if last {
            close(client)
            close(upstream)
        }
    }

    private static func connect(_ port: Int) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        return fd
    }

    /// Copies `from` to `to` until either ends (then shuts both down); with `cutAfter`, ends once that many bytes
    /// went through. `up`: the client-to-server direction, whose bytes are counted.
    private func pump(from: Int32, to: Int32, cutAfter: Int?, up: Bool) {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var total = 0
        defer {
            shutdown(from, Int32(SHUT_RDWR))
            shutdown(to, Int32(SHUT_RDWR))
        }
        while true {
            let room = cutAfter.map { min(buffer.count, $0 - total) } ?? buffer.count
            if room == 0 {
                lock.withLock { cut = true }
                return
            }
            let n = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress!, room) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            var sent = 0
            while sent < n {
                let m = buffer.withUnsafeBytes { write(to, $0.baseAddress! + sent, n - sent) }
                if m < 0 && errno == EINTR { continue }
                guard m > 0 else { return }
                sent += m
            }
            total += n
            if up { lock.withLock { forwarded += n } }
        }
    }
}
