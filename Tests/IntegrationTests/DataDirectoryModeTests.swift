#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderTestProcess
import LarderTestThreads
import LarderWire
import Testing

/// The data directory holds every document and photo: a server started under the usual umask 022 makes it 0700 and
/// every file in it 0600 (SQLite's -wal and -shm, blob and upload files included), and warns at start when a data
/// directory it is given can be read by other users.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DataDirectoryModeTests {
    /// A `larder-server` started by `sh` under umask 022 with `arguments`: its process, its port, and its output.
    struct Server {
        var process: ChildProcess
        var port: Int
        var stdout: Pipe
        var stderr: Pipe

        init(_ arguments: [String]) async throws {
            process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "umask 022 && exec \"$0\" \"$@\"", try ServerProcessTests.binary().path]
                + ["--port", "0"] + arguments
            stdout = Pipe()
            stderr = Pipe()
            process.standardOutput = stdout
            process.standardError = stderr
            try process.run()
            let (pipe, child) = (stdout, process)
            let line = try await offThePool { try ServerProcessTests.firstLine(pipe, of: child) }
            port = try #require(
                line.split(separator: " ").first { $0.hasPrefix("tcp://") }
                    .flatMap { Int($0.split(separator: ":").last!) }, "no port in \(line)")
        }

        /// SIGTERM, then what the server wrote to stderr, a line each.
        func stop() async throws -> [String] {
            let process = process
            let status = try await offThePool { ServerProcessTests.terminated(process) }
            #expect(status == 0)
            let err = try await offThePool { stderr.fileHandleForReading.readDataToEndOfFile() }
            return String(decoding: err, as: UTF8.self).split(separator: "\n").map(String.init)
        }
    }

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0
    }

    /// Every path under `directory`, with its mode, that is not `expected` for its kind.
    static func wrongModes(_ directory: String) -> [String] {
        var wrong: [String] = []
        if mode(directory) != 0o700 { wrong.append("\(directory) \(String(mode(directory), radix: 8))") }
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let name = enumerator?.nextObject() as? String {
            let path = directory + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            let isDirectory = info.st_mode & S_IFMT == S_IFDIR
            let mode = info.st_mode & 0o777
            if mode != (isDirectory ? 0o700 : 0o600) { wrong.append("\(name) \(String(mode, radix: 8))") }
        }
        return wrong
    }

    @Test func filesAre0600AndDirectories0700UnderUmask022() async throws {
        let root = ServerProcessTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data").path
        let server = try await Server(["--data-dir", data, "--log-format", "json"])
        #expect(Self.wrongModes(data).isEmpty, "\(Self.wrongModes(data))")

        let client = LarderClient(port: server.port)
        _ = try await client.create("notes", ["text": "private"])
        let photo = try ServerFixtures.data("rocket.jpg")
        _ = try await client.blobPut(Data(photo))
        // A chunked upload: its bytes go to a file of its own under blobs/.
        let file = root.appendingPathComponent("photo.jpg")
        try Data(photo).write(to: file)
        let uploaded = try await client.putBlob(contentsOf: file)
        #expect(uploaded.size == Int64(photo.count))
        client.close()
        let wrong = Self.wrongModes(data)
        #expect(wrong.isEmpty, "\(wrong)")
        let names = (FileManager.default.enumerator(atPath: data)?.allObjects as? [String]) ?? []
        #expect(names.contains("larder.sqlite-wal") && names.contains { $0.hasPrefix("blobs/") }, "\(names)")

        let lines = try await server.stop()
        #expect(!lines.contains { $0.contains("can be read by other users") }, "\(lines)")
    }

    @Test func anExistingDirectoryOthersCanReadIsWarnedAbout() async throws {
        let root = ServerProcessTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data").path
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        #expect(chmod(data, 0o755) == 0)
        let server = try await Server(["--data-dir", data])
        let lines = try await server.stop()
        let warnings = lines.filter { $0.contains("can be read by other users") }
        #expect(warnings.count == 1, "\(lines)")
        // One line in the server's log format: time, level, then the message naming the directory and the fix.
        let warning = try #require(warnings.first)
        #expect(warning.contains(" WARN ") && warning.contains(data) && warning.contains("chmod 700"), "\(warning)")
        #expect(Self.mode(data) == 0o755, "the operator's directory is left as it is")
    }
}
