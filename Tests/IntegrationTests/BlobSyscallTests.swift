#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// What the server asks of the kernel for a blob kept in a file, seen in its system calls (strace(1)): a large range
/// leaves over plain TCP by sendfile, carrying the range's bytes; over TLS it never does (the kernel would send the
/// file's plaintext into the encrypted stream); and FINISH fdatasyncs the upload's file before it answers.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct BlobSyscallTests {
    /// One system call of a traced server: when it began and ended (seconds since 1970), its name, its arguments as
    /// strace shows them (descriptors with what they are: `12</path>`, `7<TCP:[127.0.0.1:a->127.0.0.1:b]>`), and the
    /// number it returned.
    struct Call {
        let start: Double
        let end: Double
        let name: String
        let arguments: String
        let result: Int64

        /// Whether the first argument is the server's end of the TCP connection from `clientPort` to `serverPort`.
        func onConnection(server serverPort: Int, client clientPort: Int) -> Bool {
            firstArgument.contains("127.0.0.1:\(serverPort)->127.0.0.1:\(clientPort)]")
        }

        var firstArgument: Substring { arguments.prefix { $0 != "," } }

        /// Parses one line of `strace -ttt -T -yy` (`1700000000.000001 name(args) = 12 <0.000010>`); nil for what is
        /// not a finished call (signals, exits, a call that failed).
        init?(_ line: Substring) {
            guard let space = line.firstIndex(of: " "), let start = Double(line[..<space]) else { return nil }
            let call = line[line.index(after: space)...]
            guard let open = call.firstIndex(of: "("), let equals = call.range(of: ") = ", options: .backwards),
                let durationStart = call.lastIndex(of: "<"), call.hasSuffix(">")
            else { return nil }
            let resultText = call[equals.upperBound...].prefix { $0 != " " }
            guard let result = Int64(resultText), result >= 0,
                let duration = Double(call[call.index(after: durationStart)..<call.index(before: call.endIndex)])
            else { return nil }
            self.start = start
            end = start + duration
            name = String(call[..<open])
            arguments = String(call[call.index(after: open)..<equals.lowerBound])
            self.result = result
        }
    }

    /// `larder-server` under `strace -f`, tracing `calls`; each thread's calls go to a file of their own, so that no
    /// call is split across lines by another thread's.
    final class TracedServer {
        let root: String
        let port: Int
        let process: ChildProcess
        var data: String { root + "/data" }
        var tracePrefix: String { root + "/trace" }

        init(root: String, calls: [String], arguments: [String] = []) throws {
            self.root = root
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
            let strace = ["-f", "-ff", "-qq", "-ttt", "-T", "-yy", "-e", "trace=" + calls.joined(separator: ",")]
            let server = [
                try ServerProcessTests.binary().path, "--port", "0", "--data-dir", root + "/data", "--log-level", "error",
            ]
            process.arguments = strace + ["-o", root + "/trace"] + server + arguments
            let out = Pipe()
            process.standardOutput = out
            _ = FileManager.default.createFile(atPath: root + "/stderr", contents: nil)
            process.standardError = FileHandle(forWritingAtPath: root + "/stderr")
            try process.run()
            self.process = process
            let line = try ServerProcessTests.firstLine(out, of: process)
            guard let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber),
                let port = Int(portText)
            else {
                process.terminate()
                process.waitUntilExit()
                throw ServerTestError(
                    "larder-server under strace did not start: '\(line)'; \(ServerChild.tail(root + "/stderr"))")
            }
            self.port = port
        }

        /// Stops the server (SIGTERM to it: its pid is in its lock file) and returns every call traced, in the order
        /// they began; strace ends with it, having written everything.
        /// Stops the server with SIGTERM and answers its system calls. A server still running 120 s later is killed
        /// and the test fails: a server that spins instead of answering must not hang the suite.
        func stop() throws -> [Call] {
            let text = try String(contentsOfFile: data + "/larder.lock", encoding: .utf8)
            let pid = try #require(pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)))
            kill(pid, SIGTERM)
            if !process.waitUntilExit(seconds: 120) {
                Issue.record("larder-server did not exit within 120 s of SIGTERM; killed")
                kill(pid, SIGKILL)
                process.waitUntilExit()
            }
            var calls: [Call] = []
            for name in try FileManager.default.contentsOfDirectory(atPath: root) where name.hasPrefix("trace.") {
                let text = try String(contentsOfFile: root + "/" + name, encoding: .utf8)
                calls += text.split(separator: "\n").compactMap(Call.init)
            }
            return calls.sorted { $0.start < $1.start }
        }
    }

    static func directory(_ name: String) throws -> String {
        let root = temporaryTestDirectory(name).path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        return root
    }

    /// The local port of a connected socket.
    static func localPort(_ fd: Int32) throws -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { throw ServerTestError("getsockname failed: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Uploads `bytes` in chunks of `chunk` bytes (so the blob is kept in a file); returns the upload's id (its file's
    /// name in `blobs/`) and the blob's.
    static func upload(_ c: RawClient, _ bytes: [UInt8], chunk: Int = 1 << 20) throws -> (upload: UUID, blob: UUID) {
        let begin = try c.call(.blobUpload, BlobUploadRequest(size: Int64(bytes.count)).json)
        let info = try BlobUploadInfo(json: try begin.jsonObject())
        var offset = 0
        while offset < bytes.count {
            let part = Array(bytes[offset..<min(offset + chunk, bytes.count)])
            let request = BlobUploadChunkRequest(upload: info.upload, offset: Int64(offset), crc32: CRC32.checksum(part))
            let answer = try c.call(.blobUploadChunk, request.json, binary: part)
            guard answer.status == .ok else { throw ServerTestError("chunk at \(offset): \(answer.replyText)") }
            offset += part.count
        }
        let finished = try c.call(.blobUploadFinish, BlobUploadFinishRequest(upload: info.upload).json)
        guard finished.status == .ok else { throw ServerTestError("FINISH: \(finished.replyText)") }
        return (info.upload, try BlobInfo(json: try finished.jsonObject()).id)
    }

    static let writeCalls = ["write", "writev", "sendto", "sendmsg"]

    /// A 4 MiB range of a chunk-uploaded photo, read over plain TCP, leaves by sendfile from the blob's file to that
    /// connection's socket: the sendfile calls carry exactly the range's bytes.
    @Test func aLargeRangeOverTCPIsSentWithSendfile() throws {
        let root = try Self.directory("larder-syscalls-sendfile")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let server = try TracedServer(root: root, calls: ["sendfile"] + Self.writeCalls)
        let bytes = uniqueJPEG(commentBytes: 6 << 20)
        let (offset, length) = (12_345, 4 << 20)
        let c = try RawClient.tcp(port: server.port)
        try c.hello(compression: [])
        let (upload, id) = try Self.upload(c, bytes)
        let answer = try c.call(
            .blobGet, BlobGetRequest(id: id, offset: Int64(offset), length: Int64(length)).json)
        #expect(answer.status == .ok && answer.binary == Array(bytes[offset..<(offset + length)]))
        let clientPort = try Self.localPort(c.fd)
        let calls = try server.stop()
        let sendfiles = calls.filter {
            $0.name == "sendfile" && $0.onConnection(server: server.port, client: clientPort)
                && $0.arguments.contains("/blobs/\(upload.wireString)>")
        }
        let sent = sendfiles.reduce(0) { $0 + $1.result }
        #expect(sent == Int64(length), "sendfile sent \(sent) bytes of the \(length)-byte range in \(sendfiles.count) calls")
        #expect(sendfiles.first?.arguments.contains("[\(offset)]") == true, "\(sendfiles.first?.arguments ?? "none")")
    }

    /// FINISH fdatasyncs the upload's file (default `--synchronous normal`: its chunks were not) after the last
    /// chunk's answer left and before FINISH's own answer is written.
    @Test func finishSyncsTheBlobFileBeforeItAnswers() throws {
        let root = try Self.directory("larder-syscalls-finish")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let server = try TracedServer(root: root, calls: ["fdatasync", "fsync"] + Self.writeCalls)
        let bytes = uniqueJPEG(commentBytes: 3 << 20)
        let c = try RawClient.tcp(port: server.port)
        try c.hello(compression: [])
        let (upload, _) = try Self.upload(c, bytes)
        let clientPort = try Self.localPort(c.fd)
        // Nothing more on this connection: FINISH's answer is the last thing written to it.
        Glibc.shutdown(c.fd, Int32(SHUT_RDWR))
        let calls = try server.stop()
        let answers = calls.filter {
            Self.writeCalls.contains($0.name) && $0.onConnection(server: server.port, client: clientPort)
        }
        #expect(answers.count >= 3, "\(answers.count) writes to the connection")
        guard answers.count >= 2 else { return }
        let finishAnswer = answers[answers.count - 1]
        let lastChunkAnswer = answers[answers.count - 2]
        let syncs = calls.filter {
            ($0.name == "fdatasync" || $0.name == "fsync") && $0.arguments.contains("/blobs/\(upload.wireString)>")
        }
        let synced = syncs.contains { $0.start >= lastChunkAnswer.start && $0.end <= finishAnswer.start }
        let seen = "syncs of the upload's file: \(syncs.map { ($0.start, $0.end) }); the last chunk's answer at "
            + "\(lastChunkAnswer.start), FINISH's at \(finishAnswer.start)"
        #expect(synced, "\(seen)")
    }

    /// Over TLS a 1 MiB range of a chunk-uploaded photo (kept in a file, the case sent by sendfile on plain TCP)
    /// arrives byte-exact, and the server made no sendfile call at all: its bytes went through the TLS session, written
    /// to the connections' sockets.
    @Test func aLargeRangeOverTLSIsEncryptedNotSentWithSendfile() async throws {
        let root = try Self.directory("larder-syscalls-tls")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let c = TestCertificates.shared
        let server = try TracedServer(
            root: root, calls: ["sendfile"] + Self.writeCalls,
            arguments: ["--tls-cert", c.serverCertificate, "--tls-key", c.serverKey])
        let source = root + "/photo.jpg"
        let bytes = uniqueJPEG(commentBytes: 3 << 20)
        try Data(bytes).write(to: URL(fileURLWithPath: source))
        let (offset, length) = (54_321, 1 << 20)
        var received: [UInt8] = []
        do {
            let client = LarderClient(
                configuration: .init(
                    endpoint: .tcp(host: "127.0.0.1", port: server.port), requestTimeout: .seconds(120),
                    connectTimeout: .seconds(120), tls: .init(caFile: c.caFile)))
            defer { client.close() }
            let id = try await client.putBlob(contentsOf: URL(fileURLWithPath: source)).id
            received = Array(try await client.blob(id, range: Int64(offset)..<Int64(offset + length)))
        } catch {
            Issue.record("over TLS: \(error)")
        }
        let calls = try server.stop()
        #expect(received.count == length && received == Array(bytes[offset..<(offset + length)]))
        let sendfiles = calls.filter { $0.name == "sendfile" }
        #expect(sendfiles.isEmpty, "sendfile over TLS: \(sendfiles.map(\.arguments))")
        // The trace saw the answer leave: the sockets of the TLS port took at least the range's bytes.
        let written = calls.filter {
            Self.writeCalls.contains($0.name) && $0.firstArgument.contains("127.0.0.1:\(server.port)->")
        }.reduce(0) { $0 + $1.result }
        #expect(written >= Int64(length), "\(written) bytes written to the TLS connections")
    }
}
