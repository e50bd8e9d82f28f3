#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderIO
import LarderTestProcess
import LarderTestThreads
import Testing

/// A failure of a test's set-up (a server that does not start), with what went wrong.
struct PortableTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// `larder-server` as a child process on port 0 over a temporary data directory, stopped by `stop`. The binary is the
/// Linux build's: `LARDER_SERVER_BINARY` when set, else the one beside this test binary, else the package's
/// `.build/debug` (the portable configuration builds no server of its own).
final class ServerProcess: @unchecked Sendable {  // `process` is only started, then terminated once
    let process: ChildProcess
    let port: Int
    let directory: URL

    static func binary() throws -> URL {
        var candidates: [URL] = []
        if let path = ProcessInfo.processInfo.environment["LARDER_SERVER_BINARY"] {
            candidates.append(URL(fileURLWithPath: path))
        } else {
            if let executable = Bundle.main.executableURL {
                candidates.append(executable.deletingLastPathComponent().appendingPathComponent("larder-server"))
            }
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent()
            candidates.append(root.appendingPathComponent(".build/debug/larder-server"))
        }
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else {
            throw PortableTestError(
                "larder-server is not built at \(candidates.map(\.path).joined(separator: " or ")): run swift build "
                    + "first, or set LARDER_SERVER_BINARY")
        }
        return found
    }

    /// Starts the server with `arguments` after the port and data directory, and waits (120 s of silence at most)
    /// for the line that names its port.
    init(arguments: [String] = []) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("larder-portable-\(UUID().uuidString)")
        let process = ChildProcess()
        process.executableURL = try Self.binary()
        process.arguments =
            ["--port", "0", "--data-dir", directory.appendingPathComponent("data").path, "--log-level", "warn"]
            + arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        let line = try process.firstLine(of: out)
        // "larder-server VERSION listening on tcp://127.0.0.1:PORT ..."
        guard let portText = line.split(separator: ":").dropFirst(2).first?.prefix(while: \.isNumber),
            let port = Int(portText)
        else {
            process.terminate()
            process.waitUntilExit()
            throw PortableTestError("larder-server did not start: '\(line)'")
        }
        self.port = port
    }

    /// SIGTERM, the clean exit, and the data directory removed.
    func stop() {
        process.terminate()
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// The client against a real `larder-server` process, as an app uses it, in whichever configuration this build is:
/// the Linux build, or the portable one (`scripts/test`), which takes the paths an Apple platform's build takes
/// (zlib's CRC-32, the SHA-256 that stands in for CommonCrypto's, poll(2) sockets, no GnuTLS).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PortableClientTests {
    /// Records over TCP with zlib compression negotiated: a document far over the compression threshold goes out
    /// and comes back whole, and a patch and a delete take effect.
    @Test func recordsOverTCPWithCompression() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        defer { client.close() }
        #expect(try await client.connect().compression == zlibCompression)
        let address = String(repeating: "北京市海淀区中关村大街 27 号", count: 400)
        let created = try await client.create("students", ["name": "张三", "address": .string(address), "age": 20])
        #expect(created.rev == 1)
        #expect(try await client.get("students", id: created.id).data["address"] == .string(address))
        let patched = try await client.patch("students", id: created.id, patch: ["age": 21])
        #expect(patched.rev == 2 && patched.data["age"] == 21 && patched.data["address"] == .string(address))
        _ = try await client.delete("students", id: created.id)
        let gone = await #expect(throws: LarderError.self) { _ = try await client.get("students", id: created.id) }
        #expect(gone?.status == .notFound)
    }

    /// A photo uploaded in four chunks, each with the CRC-32 the server checks, and the SHA-256 the upload finishes
    /// with, then read back in ranges into a file the client checks against that SHA-256: the same bytes, and the
    /// digest the server computed.
    @Test func photosStreamInCheckedChunks() async throws {
        let server = try ServerProcess(arguments: ["--blob-chunk-bytes", "16KiB"])
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        defer { client.close() }
        let photo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("IntegrationTests/Fixtures/grace_hopper.jpg")
        let bytes = Array(try Data(contentsOf: photo))
        #expect(bytes.count > 3 * 16_384)
        let info = try await client.putBlob(contentsOf: photo)
        #expect(info.size == Int64(bytes.count))
        #expect(info.sha256 == SHA256.hex(bytes))
        let copy = server.directory.appendingPathComponent("copy.jpg")
        try await client.writeBlob(info.id, to: copy)
        #expect(Array(try Data(contentsOf: copy)) == bytes)
    }

    /// A local replica in a SQLite file, as an Apple platform builds it: written before the server is reached,
    /// searched locally, then drained to the server, which holds what the replica holds.
    @Test func aReplicaInASQLiteFile() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        let client = LarderClient(port: server.port)
        defer { client.close() }
        struct Student: Codable, Sendable {
            var name: String
            var age: Int
        }
        try FileManager.default.createDirectory(at: server.directory, withIntermediateDirectories: true)
        let replica = try LarderReplica(path: server.directory.appendingPathComponent("replica.sqlite").path, client: client)
        let students = replica.collection("students", of: Student.self)
        let zhang = try students.create(Student(name: "张三", age: 20))
        try students.create(Student(name: "李四", age: 22))
        try students.update(zhang) { $0.age = 21 }
        let older = try students.search(Field("age") > 20, sortedBy: [Field("age").descending])
        #expect(older.values.map(\.name) == ["李四", "张三"])
        replica.start()
        // Generous: the whole suite beside it can hold the machine for minutes; the error says what was waiting.
        try await replica.synchronize(timeout: .seconds(300))
        #expect(try await client.count("students") == 2)
        #expect(try await client.get("students", id: zhang.id).data["age"] == 21)
        replica.close()
    }

    @Test func unixSocket() async throws {
        let path = NSTemporaryDirectory() + "larder-\(UUID().uuidString.prefix(8)).sock"
        let server = try ServerProcess(arguments: ["--socket", path])
        defer { server.stop() }
        let client = LarderClient(socketPath: path)
        defer { client.close() }
        let created = try await client.create("todos", ["title": "via unix socket", "isFinish": false])
        #expect(try await client.get("todos", id: created.id).data["title"] == "via unix socket")
    }

    /// TLS is asked for, and the server speaks plain Larder. The portable configuration has no TLS (GnuTLS is Linux's
    /// and Network.framework Apple's): it says so and never falls back to a plain connection. The Linux build tries
    /// TLS and reports the plain server as such.
    @Test func aTLSEndpoint() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        let client = LarderClient(
            configuration: LarderClient.Configuration(
                endpoint: .tcp(host: "127.0.0.1", port: server.port),
                tls: LarderClient.TLSSettings(skipVerification: true)))
        defer { client.close() }
        let error = await #expect(throws: LarderError.self) { _ = try await client.ping() }
        #if LARDER_PORTABLE
        #expect(error?.message.contains("TLS is not available in this build") == true, "\(String(describing: error))")
        #else
        #expect(error?.message.contains("plain Larder, not TLS") == true, "\(String(describing: error))")
        #endif
    }
}

#if os(Linux)
/// What this build links: the Linux build has libdeflate (CRC-32), OpenSSL's libcrypto (SHA-256) and GnuTLS (TLS); the
/// portable configuration, whose modules are the client's as an Apple platform builds them, has none of them.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct BuildConfigurationTests {
    /// The file names of the shared libraries mapped into this process, from /proc/self/maps (read to its end: the
    /// kernel gives its size as 0, and a reader that trusts the size stops after the first page).
    static func mappedLibraries() throws -> Set<String> {
        let fd = open("/proc/self/maps", O_RDONLY)
        guard fd >= 0 else { throw PortableTestError("cannot open /proc/self/maps: errno \(errno)") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes += chunk[0..<n]
        }
        let maps = String(decoding: bytes, as: UTF8.self)
        return Set(
            maps.split(separator: "\n").compactMap { line in
                line.split(separator: "/").last.map(String.init).flatMap { $0.contains(".so") ? $0 : nil }
            })
    }

    @Test func linuxOnlyLibrariesOnlyInTheLinuxBuild() throws {
        let libraries = try Self.mappedLibraries()
        for name in ["libdeflate", "libcrypto", "libgnutls"] {
            let mapped = libraries.filter { $0.hasPrefix(name + ".so") }
            #if LARDER_PORTABLE
            #expect(mapped.isEmpty, "the portable configuration links \(mapped.sorted())")
            #else
            #expect(!mapped.isEmpty, "the Linux build does not link \(name) (mapped: \(libraries.sorted()))")
            #endif
        }
        // What both builds link, so that an empty list cannot pass for the portable configuration's.
        #expect(libraries.contains { $0.hasPrefix("libz.so") }, "zlib is not mapped: \(libraries.sorted())")
    }
}
#endif
