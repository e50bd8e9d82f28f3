import Foundation
import LarderClient
import LarderServer
import LarderStore
import LarderSync
import LarderIO
import LarderTestSupport
import Synchronization
import Testing

/// Which store a test's server runs on: SQLite in a temporary directory, or a schema of its own on the tests'
/// PostgreSQL.
enum ServerStore: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }
}

/// A real in-process server on port 0 over a temporary data directory (or PostgreSQL schema), restartable on the same
/// port and data.
final class ClientTestServer: @unchecked Sendable {
    let directory: String
    private(set) var server: LarderServer
    let port: Int
    private let configure: @Sendable (inout ServerConfiguration) -> Void
    /// The test's hooks, given to every server it starts.
    private let hooks: ServerHooks
    /// The PostgreSQL schema when the server runs on PostgreSQL.
    let schema: TestSchema?

    init(
        _ store: ServerStore = .sqlite, hooks: ServerHooks = ServerHooks(),
        _ configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in }
    ) throws {
        self.hooks = hooks
        directory = NSTemporaryDirectory() + "larder-client-\(UUID().uuidString)"
        schema = store == .postgres ? try TestPostgres.newSchema() : nil
        let url = schema?.url
        self.configure = { configuration in
            configuration.postgresURL = url
            configure(&configuration)
        }
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory
        configuration.logLevel = .error
        configuration.ioQueues = 1
        self.configure(&configuration)
        server = try LarderServer(configuration: configuration, hooks: hooks)
        port = try server.start()
    }

    /// Stops the server and starts a new one on the same port and data directory. The port was free only while no
    /// one else took it: any connection on the machine may get it as its own local port meanwhile, so a bind that
    /// finds it in use is tried again until that connection has gone (30 s at most).
    func restart() throws {
        server.shutdown()
        var configuration = ServerConfiguration()
        configuration.port = port
        configuration.dataDirectory = directory
        configuration.logLevel = .error
        configuration.ioQueues = 1
        configure(&configuration)
        server = try LarderServer(configuration: configuration, hooks: hooks)
        let deadline = Date().addingTimeInterval(120)
        while true {
            // A bind that failed changed nothing: start can be called again.
            switch Result(catching: { () throws(IOError) -> Int in try server.start() }) {
            case .success: return
            case .failure(let error) where error.errno == EADDRINUSE && Date() < deadline: usleep(50_000)
            case .failure(let error): throw error
            }
        }
    }

    func stop() {
        server.shutdown()
        try? FileManager.default.removeItem(atPath: directory)
        schema?.drop()
    }

    func client(connections: Int = 1) -> LarderClient {
        LarderClient(port: port, connections: connections)
    }
}

enum ClientFixtures {
    static func bytes(_ name: String) throws -> [UInt8] {
        guard let url = Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil),
            let data = FileManager.default.contents(atPath: url.path)
        else { throw CocoaError(.fileNoSuchFile) }
        return Array(data)
    }

    static func sha256(_ bytes: [UInt8]) -> String { LarderWire.SHA256.hex(bytes) }
}

/// Runs `body` at once on a thread of its own. A task would need one of the cooperative pool's threads (two on a 2-core
/// machine), which the suites' blocking tests can hold for many seconds: a task that must act within a server's
/// delay (kill it while a SEARCH sleeps) can then come too late. `finished()` waits for the end and rethrows.
final class TestThread: Sendable {
    /// Whether the body has returned, and what it threw.
    private let state = Locked<(done: Bool, failure: String?)>((false, nil))

    init(_ body: @escaping @Sendable () throws -> Void) {
        Thread.detachNewThread { [self] in
            var failure: String?
            do { try body() } catch { failure = "\(error)" }
            state.withLock { $0 = (true, failure) }
        }
    }

    func finished() async throws {
        while !state.withLock({ $0.done }) { try await Task.sleep(for: .milliseconds(10)) }
        if let failure = state.withLock({ $0.failure }) { throw ServerTestError("the test thread failed: \(failure)") }
    }
}

/// A TCP socket listening on 127.0.0.1 at a port the kernel chose.
func listenOnLoopback(backlog: Int32 = 8) throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && listen(fd, backlog) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard bound else {
        close(fd)
        throw ServerTestError("cannot listen: errno \(errno)")
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}
