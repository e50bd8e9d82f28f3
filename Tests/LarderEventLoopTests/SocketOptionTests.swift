import Foundation
import Glibc
import LarderEventLoop
import LarderIO
import LarderTestThreads
import Testing

/// Accepted TCP connections carry the keepalive `--tcp-keepalive-s` asks for, so a peer that vanished without closing
/// (its subscriptions are never closed by the idle timeout) is found out by the kernel.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct SocketOptionTests {
    static func option(_ fd: Int32, _ level: Int32, _ name: Int32) -> Int32 {
        var value: Int32 = -1
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = getsockopt(fd, level, name, &value, &length)
        return value
    }

    @Test(arguments: [0, 30])
    func acceptedConnectionsGetTheKeepaliveAskedFor(seconds: Int) throws {
        let (listener, port) = try Socket.listenTCP(host: "127.0.0.1", port: 0, backlog: 4)
        defer { Socket.close(listener) }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { Glibc.close(client) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        _ = inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        #expect(connected == 0)
        var accepted: Int32?
        for _ in 0..<1_000 where accepted == nil {
            accepted = try Socket.accept(listener, keepaliveSeconds: seconds)
            if accepted == nil { usleep(1_000) }
        }
        let fd = try #require(accepted)
        defer { Socket.close(fd) }
        #expect(Self.option(fd, SOL_SOCKET, SO_KEEPALIVE) == (seconds > 0 ? 1 : 0))
        if seconds > 0 {
            #expect(Self.option(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE) == 30)
            #expect(Self.option(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL) == 5)
            #expect(Self.option(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT) == 6)
        }
        #expect(Self.option(fd, Int32(IPPROTO_TCP), TCP_NODELAY) == 1)
    }
}
