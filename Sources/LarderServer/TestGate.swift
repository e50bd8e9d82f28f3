#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import LarderIO
import LarderIO

/// Testing only: a point where the server waits until a test lets it go on, so that a test acts while work is surely
/// in flight (kill the server during a SEARCH, signal it while it starts) instead of racing a delay.
///
/// The test listens on a Unix socket at `path`. Each time the server reaches the gate it connects there (the test
/// sees the arrival when it accepts) and waits until the test writes a byte or closes that connection. With nothing
/// listening at `path` (the test opened the gate for good) the server passes at once.
package struct TestGate: Sendable, Equatable {
    /// The Unix socket the test listens on.
    package let path: String

    /// The gate at the Unix socket `path`.
    package init(path: String) { self.path = path }

    /// Waits here until the test lets this pass go on.
    package func pass() {
        guard var address = try? Socket.unixAddress(path, for: "connect") else { return }
        let fd = socket(AF_UNIX, Socket.streamType, 0)
        guard fd >= 0 else { return }
        defer { Socket.close(fd) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { return }
        var byte: UInt8 = 0
        while read(fd, &byte, 1) < 0 && errno == EINTR {}
    }
}

extension ServerConfiguration {
    /// The variables a test sets to hold a `larder-server` process at its gates.
    package static let testGateVariables = (search: "LARDER_TEST_SEARCH_GATE", start: "LARDER_TEST_START_GATE")

    /// Sets `searchGate` and `startGate` from the environment of a process that a test started. A test of a server
    /// process cannot reach its configuration the way an in-process test does, and a command-line option would put
    /// test scaffolding in `--help`; so `larder-server`'s entry point, and nothing else, reads these two variables.
    /// They name a Unix socket path only: a gate whose socket nobody listens on is passed at once, so a stray
    /// variable can never hold a production server.
    package mutating func applyTestGates(environment: [String: String]) {
        if let path = environment[Self.testGateVariables.search], !path.isEmpty { searchGate = TestGate(path: path) }
        if let path = environment[Self.testGateVariables.start], !path.isEmpty { startGate = TestGate(path: path) }
    }
}
