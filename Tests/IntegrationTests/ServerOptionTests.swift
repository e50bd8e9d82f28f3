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

/// `larder-server` options, each given to a real server process and checked for what it does (ServerOptionsTests
/// checks that they parse).
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct ServerOptionTests {
    static func withDirectory<T>(_ body: (String) throws -> T) throws -> T {
        let root = NSTemporaryDirectory() + "larder-options-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        return try body(root)
    }

    /// The token comes from the file (`admin TOKEN`): HELLO without it or with another one is refused, and the token
    /// never reaches the log, even at debug level.
    @Test func tokenFileIsTheTokenHelloMustPresent() throws {
        try Self.withDirectory { root in
            let file = root + "/token"
            _ = FileManager.default.createFile(atPath: file, contents: Data("admin s3cret-token\n".utf8))
            let server = try ServerChild(
                dataDirectory: root + "/data", arguments: ["--token-file", file, "--log-level", "debug"])
            defer { _ = server.stop() }
            let anonymous = try RawClient.tcp(port: server.port)
            let refused = try anonymous.call(.hello, HelloRequest(client: "no token").json)
            #expect(refused.status == .unauthenticated)
            let wrong = try RawClient.tcp(port: server.port)
            let wrongToken = HelloRequest(client: "wrong", token: "s3cret-token\n").json
            #expect(try wrong.call(.hello, wrongToken).status == .unauthenticated)
            let c = try RawClient.tcp(port: server.port)
            let hello = try c.hello(token: "s3cret-token")
            #expect(hello.authRequired)
            #expect(try c.call(.create, ["collection": "t", "data": [:]]).status == .ok)
            #expect(server.stop() == 0)
            let log = try String(contentsOfFile: server.logPath, encoding: .utf8)
            #expect(log.contains("HELLO") || log.contains("conn"), "the debug log is empty: \(log.prefix(200))")
            #expect(!log.contains("s3cret"), "the token reached the log")
        }
    }

    /// The CLI's variables do not reach the server: started in a shell that exports LARDER_HOST as a list of servers
    /// (as OPERATING.md's scale-out section suggests), LARDER_PORT and LARDER_TOKEN for the CLI, it listens where its
    /// own options say and asks for no token.
    @Test func theCLIsVariablesDoNotReachTheServer() throws {
        try Self.withDirectory { root in
            let run = try ServerProcessTests.launch(
                ["--port", "0", "--data-dir", root + "/data", "--log-level", "error"],
                environment: ["LARDER_HOST": "a:7411,b:7412", "LARDER_PORT": "7412", "LARDER_TOKEN": "for-the-cli"])
            let line = try ServerProcessTests.firstLine(run.stdout, of: run.process)
            #expect(line.contains("listening on tcp://127.0.0.1:"), "\(line)")
            guard let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber),
                let port = Int(portText)
            else {
                run.process.terminate()
                throw ServerTestError("no port in \(line)")
            }
            #expect(port != 7412)
            let c = try RawClient.tcp(port: port)
            #expect(!(try c.hello().authRequired))
            #expect(ServerProcessTests.terminated(run.process) == 0)
        }
    }

    /// A `--host` (or LARDER_SERVER_HOST) that is no address to listen on is a usage error, found before anything is
    /// created: exit 64, a message naming the option (or the variable) and what it expects, and no data directory.
    @Test(arguments: [
        (["--host", "not-an-address"], [:], "--host"),
        ([], ["LARDER_SERVER_HOST": "a:7411,b:7412"], "LARDER_SERVER_HOST"),
    ] as [([String], [String: String], String)])
    func aHostThatIsNoAddressExits64AndCreatesNothing(
        arguments: [String], environment: [String: String], named: String
    ) throws {
        try Self.withDirectory { root in
            let data = root + "/data"
            let run = try ServerProcessTests.launch(
                ["--port", "0", "--data-dir", data] + arguments, environment: environment)
            run.process.waitUntilExit()
            let message = String(decoding: run.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(run.process.terminationStatus == 64, "\(message)")
            #expect(message.hasPrefix("Error: ") && message.contains(named), "\(message)")
            #expect(message.contains("needs an IPv4 or IPv6 address"), "\(message)")
            #expect(!FileManager.default.fileExists(atPath: data), "the data directory was created")
        }
    }

    /// `--synchronous full` makes every commit wait for the disk: with it, each acknowledged CREATE (one at a time, so
    /// each is its own group commit) flushed the write-ahead log; with `normal`, only checkpoints flush it. Seen from
    /// the system calls, with strace(1).
    @Test func synchronousFullFlushesEveryCommit() throws {
        let creates = 30
        let full = try Self.walFlushes(synchronous: "full", creates: creates)
        let normal = try Self.walFlushes(synchronous: "normal", creates: creates)
        report("synchronous: \(creates) commits flushed the WAL \(full) times with full, \(normal) with normal")
        #expect(full >= creates, "\(full) WAL flushes for \(creates) commits with --synchronous full")
        #expect(normal < creates / 3, "\(normal) WAL flushes for \(creates) commits with --synchronous normal")
    }

    /// Runs the server under strace, makes `creates` acknowledged CREATEs one after another, stops it, and counts the
    /// fsync/fdatasync calls on the write-ahead log.
    static func walFlushes(synchronous: String, creates: Int) throws -> Int {
        try withDirectory { root in
            let data = root + "/data"
            let trace = root + "/trace"
            _ = FileManager.default.createFile(atPath: trace, contents: nil)
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
            process.arguments = [
                "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", try ServerProcessTests.binary().path,
                "--port", "0", "--data-dir", data, "--synchronous", synchronous, "--log-level", "error",
            ]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle(forWritingAtPath: trace)
            try process.run()
            let line = try ServerProcessTests.firstLine(out, of: process)
            guard let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber),
                let port = Int(portText)
            else {
                process.terminate()
                throw ServerTestError("larder-server under strace did not start: '\(line)'; \(ServerChild.tail(trace))")
            }
            let c = try RawClient.tcp(port: port)
            try c.hello()
            for n in 0..<creates {
                #expect(try c.call(.create, ["collection": "t", "data": ["n": .int(Int64(n))]]).status == .ok)
            }
            // The server's pid is in its lock file; strace ends when it does.
            let pid = try String(contentsOfFile: data + "/larder.lock", encoding: .utf8)
            kill(try #require(pid_t(pid.trimmingCharacters(in: .whitespacesAndNewlines))), SIGTERM)
            process.waitUntilExit()
            let calls = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
            return calls.filter { ($0.contains("fsync(") || $0.contains("fdatasync(")) && $0.contains("-wal>") }.count
        }
    }

    // Promise: OPERATING.md "with --synchronous full the chunk is also synced first"
    /// With `--synchronous full` each acknowledged chunk of an upload was synced to its file in `blobs/` before its
    /// answer; with `normal` no chunk is (the file is synced once, at FINISH, which this test never sends). Seen
    /// from the system calls, with strace(1).
    @Test func synchronousFullSyncsEveryChunk() throws {
        let chunks = 12
        let full = try Self.chunkSyncs(synchronous: "full", chunks: chunks)
        let normal = try Self.chunkSyncs(synchronous: "normal", chunks: chunks)
        #expect(full >= chunks, "\(full) syncs of blob files for \(chunks) chunks with --synchronous full")
        #expect(normal == 0, "\(normal) syncs of blob files for \(chunks) chunks with --synchronous normal")
    }

    /// Runs the server under strace, sends `chunks` acknowledged chunks of one upload, stops it, and counts the
    /// fsync/fdatasync calls on files in `blobs/`.
    static func chunkSyncs(synchronous: String, chunks: Int) throws -> Int {
        try withDirectory { root in
            let data = root + "/data"
            let trace = root + "/trace"
            _ = FileManager.default.createFile(atPath: trace, contents: nil)
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
            process.arguments = [
                "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", try ServerProcessTests.binary().path,
                "--port", "0", "--data-dir", data, "--synchronous", synchronous, "--log-level", "error",
                "--blob-chunk-bytes", "4096",
            ]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle(forWritingAtPath: trace)
            try process.run()
            let line = try ServerProcessTests.firstLine(out, of: process)
            guard let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber),
                let port = Int(portText)
            else {
                process.terminate()
                throw ServerTestError("larder-server under strace did not start: '\(line)'; \(ServerChild.tail(trace))")
            }
            let c = try RawClient.tcp(port: port)
            try c.hello()
            let begin = try c.call(.blobUpload, BlobUploadRequest(size: Int64(4096 * (chunks + 1))).json)
            let upload = try BlobUploadInfo(json: try begin.jsonObject()).upload
            let part = [UInt8](repeating: 0xA5, count: 4096)
            for n in 0..<chunks {
                let request = BlobUploadChunkRequest(upload: upload, offset: Int64(n * 4096), crc32: CRC32.checksum(part))
                #expect(try c.call(.blobUploadChunk, request.json, binary: part).status == .ok)
            }
            let pid = try String(contentsOfFile: data + "/larder.lock", encoding: .utf8)
            kill(try #require(pid_t(pid.trimmingCharacters(in: .whitespacesAndNewlines))), SIGTERM)
            process.waitUntilExit()
            let calls = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
            return calls.filter { ($0.contains("fsync(") || $0.contains("fdatasync(")) && $0.contains("/blobs/") }.count
        }
    }

    /// A large SEARCH answer from three servers over the same records: level 9 packs it tighter than level 1, and
    /// level 0 (no compression) sends it as it is, since stored deflate would only add bytes.
    @Test func zlibLevelSetsHowHardRepliesAreCompressed() throws {
        try Self.withDirectory { root in
            var sizes: [Int: (wire: UInt32, flags: Frame.Flags)] = [:]
            for level in [0, 1, 9] {
                let server = try ServerChild(
                    dataDirectory: root + "/data\(level)", arguments: ["--zlib-level", "\(level)"])
                defer { _ = server.stop() }
                let c = try RawClient.tcp(port: server.port)
                try c.hello()
                for n in 0..<300 {
                    let data: JSONObject = ["n": .int(Int64(n)), "text": .string(proseSentence(n))]
                    #expect(try c.call(.create, ["collection": "t", "data": .object(data)]).status == .ok)
                }
                let search = try c.call(.search, ["collection": "t", "limit": 300])
                #expect(search.status == .ok && search.replyJSON["records"]?.arrayValue?.count == 300)
                let header = try #require(c.lastHeader)
                sizes[level] = (header.jsonLength, header.flags)
                #expect(level == 0 || header.uncompressedLength == UInt32(search.json.count))
            }
            let plain = try #require(sizes[0])
            let fast = try #require(sizes[1])
            let best = try #require(sizes[9])
            #expect(!plain.flags.contains(.compressed))
            #expect(fast.flags.contains(.compressed) && best.flags.contains(.compressed))
            #expect(best.wire < fast.wire && fast.wire < plain.wire, "\(best.wire), \(fast.wire), \(plain.wire)")
        }
    }

    /// Answers from the threshold up are compressed, smaller ones are not; HELLO announces it for the client's side.
    @Test func compressionThresholdDecidesWhichRepliesAreCompressed() throws {
        try Self.withDirectory { root in
            for threshold in [200, 100_000] {
                let server = try ServerChild(
                    dataDirectory: root + "/data\(threshold)", arguments: ["--compression-threshold", "\(threshold)"])
                defer { _ = server.stop() }
                let c = try RawClient.tcp(port: server.port)
                #expect(try c.hello().compressionThreshold == threshold)
                for n in 0..<20 {
                    _ = try c.call(.create, ["collection": "t", "data": ["item": .string("Iced latte 冰拿鐵 #\(n)")]])
                }
                let page = try c.call(.search, ["collection": "t", "limit": 20])
                #expect(page.json.count > 2_000 && page.json.count < 100_000)
                #expect(c.lastFlags.contains(.compressed) == (threshold == 200), "threshold \(threshold)")
                _ = try c.call(.ping)
                #expect(!c.lastFlags.contains(.compressed), "a PING's answer is under any threshold")
            }
        }
    }

    /// With `--read-cache-bytes 0` every GET reads the store; with the default, repeated GETs of one document come
    /// from the cache. STATS counts both.
    @Test func readCacheBytesZeroTurnsTheCacheOff() throws {
        try Self.withDirectory { root in
            for off in [true, false] {
                let server = try ServerChild(
                    dataDirectory: root + "/data\(off)", arguments: off ? ["--read-cache-bytes", "0"] : [])
                defer { _ = server.stop() }
                let c = try RawClient.tcp(port: server.port)
                try c.hello()
                let id = try Record(json: c.call(.create, ["collection": "t", "data": ["a": 1]]).jsonObject()).id
                for _ in 0..<10 {
                    #expect(try c.call(.get, ["collection": "t", "id": .string(id.wireString)]).status == .ok)
                }
                let cache = c.statsValue()["readCache"]
                if off {
                    #expect(cache?["hits"] == 0, "\(String(describing: cache))")
                } else {
                    #expect(cache?["hits"] == 9 && cache?["misses"] == 1, "\(String(describing: cache))")
                }
            }
        }
    }
}

/// Record `n`'s text: twelve words and numbers in an order of its own, which compresses like prose, the same on every
/// run.
func proseSentence(_ n: Int) -> String {
    let words = [
        "latte", "飯糰", "noodles", "茶葉蛋", "bento", "store", "discount", "北京", "海淀区", "morning", "receipt", "milk",
        "買牛奶", "Taipei", "coffee", "sweet", "staff", "kind", "rainy", "train",
    ]
    return (0..<12).map { i in words[(n * 7 + i * i * 13 + n / 3) % words.count] + String((n * 31 + i * 17) % 97) }
        .joined(separator: " ")
}
