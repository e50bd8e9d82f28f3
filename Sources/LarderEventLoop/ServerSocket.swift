#if os(Linux)
import CEpoll
import Glibc
import LarderIO

/// The socket calls only a server makes (Linux only, like the event loop): listening on TCP and Unix domain sockets,
/// accepting connections, and sending a file's bytes with sendfile(2).
/// An address a server listens on, as bind(2) takes it: an IPv4 address, `localhost` (127.0.0.1) or an IPv6 address
/// (`::1`, or `::` for every interface, IPv4 included as mapped addresses), and a port.
package struct ListenAddress {
    /// The address itself (a `sockaddr_in` or `sockaddr_in6`).
    var storage = sockaddr_storage()
    /// The length of the address in `storage`.
    let length: socklen_t
    /// `AF_INET` or `AF_INET6`.
    let family: Int32

    /// The address of `host` and `port`, or nil when `host` is not an IPv4 or IPv6 address (nor `localhost`).
    package init?(host: String, port: Int) {
        let hostName = host == "localhost" ? "127.0.0.1" : host
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET, hostName, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { out in withUnsafeBytes(of: &v4) { out.copyMemory(from: $0) } }
            (family, length) = (AF_INET, socklen_t(MemoryLayout<sockaddr_in>.size))
        } else if inet_pton(AF_INET6, hostName, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { out in withUnsafeBytes(of: &v6) { out.copyMemory(from: $0) } }
            (family, length) = (AF_INET6, socklen_t(MemoryLayout<sockaddr_in6>.size))
        } else {
            return nil
        }
    }
}

extension Socket {
    /// A listening TCP socket on `host:port` (IPv4 dotted quad, "localhost" or "0.0.0.0"); returns fd and real port.
    package static func listenTCP(host: String, port: Int, backlog: Int32) throws(IOError) -> (fd: Int32, port: Int) {
        guard var address = ListenAddress(host: host, port: port) else {
            throw IOError("inet_pton(\(host)): not an IPv4 or IPv6 address", errno: EINVAL)
        }
        let (family, length) = (address.family, address.length)
        let fd = try blockingCall("socket") { socket(family, streamType, 0) }
        do throws(IOError) {
            try setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR")
            try blockingCall("bind(\(host):\(port))") {
                withUnsafePointer(to: &address.storage) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
                }
            }
            try blockingCall("listen") { listen(fd, backlog) }
            var bound = sockaddr_storage()
            var boundLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            try blockingCall("getsockname") {
                withUnsafeMutablePointer(to: &bound) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &boundLength) }
                }
            }
            try setNonBlocking(fd)
            // The bound port (port 0 asks the kernel for one).
            let boundPort = withUnsafeBytes(of: &bound) { raw in
                family == AF_INET
                    ? raw.load(fromByteOffset: MemoryLayout<sockaddr_in>.offset(of: \.sin_port)!, as: in_port_t.self)
                    : raw.load(fromByteOffset: MemoryLayout<sockaddr_in6>.offset(of: \.sin6_port)!, as: in_port_t.self)
            }
            return (fd, Int(UInt16(bigEndian: boundPort)))
        } catch {
            Socket.close(fd)
            throw error
        }
    }


    /// A listening Unix domain socket at `path`; a stale socket file left by a dead server is removed first.
    package static func listenUnix(path: String, backlog: Int32) throws(IOError) -> Int32 {
        var address = try unixAddress(path, for: "bind")
        var info = stat()
        if lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFSOCK { _ = unlink(path) }
        let fd = try blockingCall("socket(AF_UNIX)") { socket(AF_UNIX, streamType, 0) }
        do throws(IOError) {
            try blockingCall("bind(\(path))") {
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                    }
                }
            }
            try blockingCall("listen") { listen(fd, backlog) }
            try setNonBlocking(fd)
            return fd
        } catch {
            Socket.close(fd)
            throw error
        }
    }

    /// Accepts one pending connection, non-blocking, or nil when none is waiting.
    package static func accept(_ listener: Int32, keepaliveSeconds: Int = 0) throws(IOError) -> Int32? {
        let accepted = try systemCall("accept4", { Int(larder_accept_nonblocking(listener)) })
        switch accepted {
        case .wouldBlock: return nil
        case .done(let fd):
            let fd = Int32(fd)
            // These fail harmlessly (EOPNOTSUPP) on Unix sockets.
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if keepaliveSeconds > 0 {
                let size = socklen_t(MemoryLayout<Int32>.size)
                var idle = Int32(keepaliveSeconds)
                var interval = Int32(max(1, keepaliveSeconds / 6))
                var probes: Int32 = 6
                _ = setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, size)
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE, &idle, size)
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL, &interval, size)
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT, &probes, size)
            }
            return fd
        }
    }

    /// Sends up to `count` bytes of `file` from `offset` to the socket `fd` with sendfile(2): the kernel copies them
    /// from the page cache, never through this process's memory. `.done(0)` means the file ends before `offset`.
    package static func sendfile(_ fd: Int32, from file: Int32, offset: Int64, count: Int) throws(IOError) -> IOResult {
        try systemCall("sendfile") { larder_sendfile(fd, file, offset, UInt(count)) }
    }
}
#endif
