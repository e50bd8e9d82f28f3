#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderIO
import LarderServer
import LarderTestSupport
import LarderWire
import Testing

extension ServerConfiguration {
    /// Port 0, quiet logs, data under `directory`/data: what the tests' servers start from.
    static func forTests(in directory: URL) -> ServerConfiguration {
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory.appendingPathComponent("data").path
        configuration.logLevel = .error
        return configuration
    }
}

/// A fresh path in the temporary directory for one test (the test removes it).
func temporaryTestDirectory(_ prefix: String) -> URL {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
}

/// A server on port 0 in a fresh temporary data directory, with the test's `hooks`, shut down when `body` returns.
func withServerOnPort0(
    hooks: ServerHooks = ServerHooks(),
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (LarderServer, Int) throws -> Void
) throws {
    let directory = temporaryTestDirectory("larder-server")
    defer { try? FileManager.default.removeItem(at: directory) }
    var configuration = ServerConfiguration.forTests(in: directory)
    configuration.ioQueues = 2
    configure(&configuration)
    let server = try LarderServer(configuration: configuration, hooks: hooks)
    let port = try server.start()
    defer { server.shutdown() }
    try body(server, port)
}

/// The fixture photos and records of the integration tests.
enum ServerFixtures {
    static func data(_ name: String) throws -> [UInt8] {
        guard let url = Bundle.module.url(forResource: name, withExtension: nil, subdirectory: "Fixtures") else {
            throw ServerTestError("fixture \(name) missing")
        }
        return Array(try Data(contentsOf: url))
    }
}
