import Dispatch
import Foundation
import LarderTestProcess
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// A child process writes in a loop and is killed with SIGKILL; every write it acknowledged must be there on reopen.
///
/// The child is this same test binary, started with `--filter durabilityChild` and an environment variable naming the
/// data directory; without that variable `durabilityChild` is skipped (it is no test of its own).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DurabilityTests {
    static let childDirectoryKey = "LARDER_DURABILITY_CHILD_DIR"
    static var childDirectory: String? { ProcessInfo.processInfo.environment[childDirectoryKey] }

    /// The child's body (skipped in a normal test run): four threads create documents and print `ACK <id>` only
    /// after `create` returned, that is after the COMMIT.
    @Test(.enabled(if: childDirectory != nil, "the child process of acknowledgedWritesSurviveSIGKILL"))
    func durabilityChild() throws {
        let directory = try #require(DurabilityTests.childDirectory)
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        let deadline = DispatchTime.now() + .seconds(60)  // never outlive a parent that died
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            var n: Int64 = 0
            while DispatchTime.now() < deadline {
                let id = UUID()
                let data: JSONObject = ["thread": .int(Int64(thread)), "n": .int(n), "pad": .string(String(repeating: "x", count: 200))]
                guard (try? store.create("durable", id: id, data: data)) != nil else { continue }
                let line = Array("ACK \(id.wireString)\n".utf8)
                _ = line.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
                n += 1
            }
        }
        exit(0)
    }

    @Test func acknowledgedWritesSurviveSIGKILL() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-durable-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var acknowledged: [UUID] = []
        for round in 0..<2 {
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = ["--testing-library", "swift-testing", "--filter", "durabilityChild"]
            var environment = ProcessInfo.processInfo.environment
            environment[DurabilityTests.childDirectoryKey] = directory
            process.environment = environment
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            try process.run()
            let fd = pipe.fileHandleForReading.fileDescriptor
            var output: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            let want = 200 * (round + 1)
            var killed = false
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                output += buffer[0..<n]
                if !killed && output.count / 41 >= want + Int.random(in: 0..<50) {
                    kill(process.processIdentifier, SIGKILL)
                    killed = true
                }
            }
            process.waitUntilExit()
            #expect(killed, "the child stopped before it was killed")
            #expect(process.terminationReason == .uncaughtSignal)
            for line in String(decoding: output, as: UTF8.self).split(separator: "\n") where line.hasPrefix("ACK ") {
                if let id = UUID(uuidString: String(line.dropFirst(4))) { acknowledged.append(id) }
            }
            #expect(acknowledged.count >= want)

            let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
            // Before integrityCheck brings the trigram index's backlog in: text search counts the crashed writer's
            // backlog as it found it.
            #expect(try store.count("durable", filter: nil, text: TextQuery(query: "xxx")) >= acknowledged.count)
            #expect(try store.integrityCheck() == "ok")
            var missing = 0
            for chunk in stride(from: 0, to: acknowledged.count, by: 1000) {
                let ids = Array(acknowledged[chunk..<min(acknowledged.count, chunk + 1000)])
                missing += try store.getMany("durable", ids: ids).missing.count
            }
            #expect(missing == 0, "\(missing) acknowledged writes were lost")
            #expect(try store.count("durable", filter: nil, text: nil) >= acknowledged.count)
            // The trigram index still agrees with the table after the crash.
            #expect(try store.count("durable", filter: nil, text: TextQuery(query: "xxx")) >= acknowledged.count)
            store.close()
        }
    }
}
