#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
#if os(Linux) && !LARDER_PORTABLE
import CEpoll
#endif

/// A failed system call: its name and errno. `description` is what the operator reads.
public struct IOError: Error, Sendable, Equatable, CustomStringConvertible {
    public var call: String
    public var errno: Int32

    public init(_ call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    public var description: String { "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))" }
}

/// The outcome of a non-blocking call that did not fail.
package enum IOResult: Equatable {
    case done(Int)
    case wouldBlock
}

/// Every system call of the server goes through here: `EINTR` is retried, `EAGAIN`/`EWOULDBLOCK` become
/// `.wouldBlock`, anything else throws an `IOError` naming the call.
@inline(__always)
package func systemCall(_ name: String, _ body: () -> Int) throws(IOError) -> IOResult {
    while true {
        let result = body()
        if result >= 0 { return .done(result) }
        let error = errno
        if error == EINTR { continue }
        if error == EAGAIN || error == EWOULDBLOCK { return .wouldBlock }
        throw IOError(name, errno: error)
    }
}

/// `systemCall` for calls that never legitimately block (socket, bind, setsockopt...).
@discardableResult
package func blockingCall(_ name: String, _ body: () -> Int32) throws(IOError) -> Int32 {
    switch try systemCall(name, { Int(body()) }) {
    case .done(let value): return Int32(value)
    case .wouldBlock: throw IOError(name, errno: EAGAIN)
    }
}

/// The one socket layer of the tree: thin wrappers over the socket calls of the server, the client, the benchmark and
/// the tests.
package enum Socket {
    /// SIGPIPE would kill the process when a peer goes away mid-write; we get EPIPE instead.
    package static let ignoreSIGPIPE: Void = {
        signal(SIGPIPE, SIG_IGN)
    }()

    package static func setNonBlocking(_ fd: Int32) throws(IOError) {
        let flags = try blockingCall("fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        try blockingCall("fcntl(F_SETFL)") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
    }

    package static func setOption(_ fd: Int32, _ level: Int32, _ option: Int32, _ value: Int32, _ name: String) throws(IOError) {
        var value = value
        try blockingCall("setsockopt(\(name))") {
            setsockopt(fd, level, option, &value, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    /// Stream sockets the server opens are close-on-exec: a process it starts (or one started by a library it
    /// loads) must not inherit a listening port or a client's connection and hold it open.
    #if os(Linux)
    package static let streamType = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
    #else
    package static let streamType = SOCK_STREAM  // close-on-exec is set by `fcntl` after `socket` there
    #endif

    /// A listening TCP socket on `host:port` (IPv4 dotted quad, "localhost" or "0.0.0.0"); returns fd and real port.
    package static func listenTCP(host: String, port: Int, backlog: Int32) throws(IOError) -> (fd: Int32, port: Int) {
        // An IPv4 address, `localhost` (127.0.0.1) or an IPv6 address (`::1`, or `::` for every interface, IPv4
        // included as mapped addresses).
        var storage = sockaddr_storage()
        let length: socklen_t
        let family: Int32
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
            throw IOError("inet_pton(\(host)): not an IPv4 or IPv6 address", errno: EINVAL)
        }
        let fd = try blockingCall("socket") { socket(family, streamType, 0) }
        do throws(IOError) {
            try setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR")
            try blockingCall("bind(\(host):\(port))") {
                withUnsafePointer(to: &storage) {
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

    /// The address of the Unix domain socket at `path`, for `call` (`bind`, `connect`), which names a path too long.
    package static func unixAddress(_ path: String, for call: String) throws(IOError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        let pathBytes = Array(path.utf8)
        guard pathBytes.count < capacity else { throw IOError("\(call)(\(path)): path too long", errno: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: pathBytes)
            raw[pathBytes.count] = 0
        }
        return address
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
        #if os(Linux) && !LARDER_PORTABLE
        let accepted = try systemCall("accept4", { Int(larder_accept_nonblocking(listener)) })
        #else
        let accepted = try systemCall("accept", { Int(systemAccept(listener)) })
        #endif
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
                #if os(Linux)
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE, &idle, size)
                #else
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPALIVE, &idle, size)
                #endif
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL, &interval, size)
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT, &probes, size)
            }
            return fd
        }
    }

    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> IOResult {
        try systemCall("read") { systemRead(fd, buffer.baseAddress, buffer.count) }
    }

    package static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(IOError) -> IOResult {
        try systemCall("write") { systemWrite(fd, bytes.baseAddress, bytes.count) }
    }

    /// Writes several buffers in one call (a frame's header and JSON from the output buffer, its blob from its own).
    package static func writev(_ fd: Int32, _ buffers: [UnsafeRawBufferPointer]) throws(IOError) -> IOResult {
        if buffers.count == 1 { return try write(fd, buffers[0]) }
        var vectors = buffers.map { iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count) }
        let count = Int32(vectors.count)
        return try systemCall("writev") { systemWritev(fd, &vectors, count) }
    }

    /// `writev` of `buffers` from `offset` bytes into them (at most 64 of them).
    package static func writev(_ fd: Int32, _ buffers: [[UInt8]], offsetBy offset: Int) throws(IOError) -> IOResult {
        var index = 0
        var skip = offset
        while index < buffers.count && skip >= buffers[index].count {
            skip -= buffers[index].count
            index += 1
        }
        var pointers: [UnsafeRawBufferPointer] = []
        pointers.reserveCapacity(min(buffers.count - index, 64))
        return try withPointers(buffers, index, skip, &pointers) { (pointers) throws(IOError) in try writev(fd, pointers) }
    }

    private static func withPointers<R>(
        _ buffers: [[UInt8]], _ index: Int, _ offset: Int, _ pointers: inout [UnsafeRawBufferPointer],
        _ body: ([UnsafeRawBufferPointer]) throws(IOError) -> R
    ) throws(IOError) -> R {
        guard index < buffers.count, pointers.count < 64 else { return try body(pointers) }
        let result: Result<R, IOError> = buffers[index].withUnsafeBytes { raw in
            if raw.count > offset { pointers.append(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
            do throws(IOError) {
                return .success(try withPointers(buffers, index + 1, 0, &pointers, body))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    #if os(Linux) && !LARDER_PORTABLE
    /// Sends up to `count` bytes of `file` from `offset` to the socket `fd` with sendfile(2): the kernel copies them
    /// from the page cache, never through this process's memory. `.done(0)` means the file ends before `offset`.
    package static func sendfile(_ fd: Int32, from file: Int32, offset: Int64, count: Int) throws(IOError) -> IOResult {
        try systemCall("sendfile") { larder_sendfile(fd, file, offset, UInt(count)) }
    }
    #endif

    /// Closes a descriptor; EINTR is not retried (on Linux the descriptor is gone either way).
    package static func close(_ fd: Int32) {
        _ = systemClose(fd)
    }
}

// The same four wrappers once per C library (Glibc, Musl, Darwin).
// The C library's calls under names that do not collide with `Socket`'s own.
#if canImport(Glibc)
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { Glibc.read(fd, buffer, count) }
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { Glibc.write(fd, buffer, count) }
private func systemWritev(_ fd: Int32, _ vectors: UnsafePointer<iovec>, _ count: Int32) -> Int {
    Glibc.writev(fd, vectors, count)
}
private func systemClose(_ fd: Int32) -> Int32 { Glibc.close(fd) }
#elseif canImport(Musl)
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { Musl.read(fd, buffer, count) }
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { Musl.write(fd, buffer, count) }
private func systemWritev(_ fd: Int32, _ vectors: UnsafePointer<iovec>, _ count: Int32) -> Int {
    Musl.writev(fd, vectors, count)
}
private func systemClose(_ fd: Int32) -> Int32 { Musl.close(fd) }
#else
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { Darwin.read(fd, buffer, count) }
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { Darwin.write(fd, buffer, count) }
private func systemWritev(_ fd: Int32, _ vectors: UnsafePointer<iovec>, _ count: Int32) -> Int {
    Darwin.writev(fd, vectors, count)
}
private func systemClose(_ fd: Int32) -> Int32 { Darwin.close(fd) }
#endif

#if !os(Linux) || LARDER_PORTABLE
/// `accept` then non-blocking and close-on-exec, as Linux's accept4 does in one call.
private func systemAccept(_ listener: Int32) -> Int32 {
    let fd = accept(listener, nil, nil)
    if fd >= 0 {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }
    return fd
}
#endif
