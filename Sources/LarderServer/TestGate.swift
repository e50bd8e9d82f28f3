#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
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
