#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderSync
import LarderTestSupport

/// The test's side of a server's `TestGate` (a hook of `ServerHooks`, or `TestGateVariable` for a process of
/// `larder-server-test`): a Unix socket the server connects to each time it reaches the gate, and then waits on until
/// the test lets it through.
/// The test knows when work is held (`waitForHeld`) and decides when it goes on (`release`, `open`), so nothing races
/// a delay: a slow machine makes the test slower, never wrong.
final class ServerGate: @unchecked Sendable {
    let path: String
    /// What the server is configured with.
    var gate: TestGate { TestGate(path: path) }
    private let lock = Lock()
    private var listener: Int32
    /// Passes accepted and not yet let through.
    private var held: [Int32] = []
    /// Passes that have reached the gate since it was made.
    private var arrivals = 0

    init() throws {
        path = NSTemporaryDirectory() + "larder-gate-\(UUID().uuidString.prefix(8)).sock"
        var address = try unixSocketAddress(path)
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0, listen(listener, 128) == 0 else {
            let error = errno
            Glibc.close(listener)
            throw ServerTestError("the test gate cannot listen at \(path): errno \(error)")
        }
    }

    deinit { open() }

    /// Passes that reached the gate so far.
    var arrived: Int { lock.withLock { arrivals } }

    /// Waits until `count` passes in all have reached the gate; throws after `timeout` seconds (generous: it only
    /// runs out when the server never gets there).
    func waitForHeld(_ count: Int, timeout: Double = 120) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while arrived < count {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else {
                throw ServerTestError("\(arrived) of \(count) passes reached the test gate within \(timeout) s")
            }
            let fd = lock.withLock { listener }
            guard fd >= 0 else { throw ServerTestError("the test gate is open") }
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, Int32(min(remaining, 3600) * 1000)) > 0 else { continue }
            let pass = accept(fd, nil, nil)
            guard pass >= 0 else { continue }
            lock.withLock {
                held.append(pass)
                arrivals += 1
            }
        }
    }

    /// Lets every pass held now go on; later ones are held again.
    func release() {
        let passes = lock.withLock {
            defer { held.removeAll() }
            return held
        }
        for fd in passes {
            var byte: UInt8 = 1
            _ = send(fd, &byte, 1, Int32(MSG_NOSIGNAL))  // the server may be gone (killed while held)
            Glibc.close(fd)
        }
    }

    /// Lets every pass held now go on, and every later one through without stopping.
    func open() {
        let fd = lock.withLock {
            defer { listener = -1 }
            return listener
        }
        if fd >= 0 {
            Glibc.close(fd)
            unlink(path)
        }
        release()
    }
}

/// The address of the Unix domain socket at `path`.
func unixSocketAddress(_ path: String) throws -> sockaddr_un {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
        throw ServerTestError("socket path too long: \(path)")
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    return address
}
