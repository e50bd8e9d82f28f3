#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a connection could not be made, for the caller to word in its own terms (the client's UNAVAILABLE with
/// `reason: connect`, the benchmark's exit status 2, a test's failure).
package enum ConnectFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// A Unix socket path that is empty or longer than `sun_path` holds.
    case badPath(capacity: Int)
    /// The host name did not resolve (getaddrinfo's text).
    case unresolved(String)
    /// socket, connect or the wait for it failed with this errno (ETIMEDOUT past the timeout).
    case failed(errno: Int32)

    package var description: String {
        switch self {
        case .badPath(let capacity): "a Unix socket path must be 1 to \(capacity - 1) bytes"
        case .unresolved(let text): "cannot resolve host: \(text)"
        case .failed(let code): String(cString: strerror(code))
        }
    }

    package var errno: Int32? {
        if case .failed(let code) = self { return code }
        return nil
    }
}

extension Socket {
    #if os(Linux)
    /// Flags for `send` on a connected socket: EPIPE instead of SIGPIPE when the peer has gone.
    package static let sendFlags = Int32(MSG_NOSIGNAL)
    #else
    package static let sendFlags: Int32 = 0  // SO_NOSIGPIPE is set on the socket instead
    #endif

    /// A stream socket connected to `host:port` (every address the name resolves to, in turn), giving up after
    /// `timeoutMs`; blocking, with TCP_NODELAY, close-on-exec.
    package static func connect(host: String, port: Int, timeoutMs: Int) throws(ConnectFailure) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if os(Linux)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)  // without streamType's SOCK_CLOEXEC, which getaddrinfo refuses
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else { throw .unresolved(String(cString: gai_strerror(status))) }
        defer { freeaddrinfo(list) }
        var lastError: Int32 = ECONNREFUSED
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            cursor = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, streamType, info.pointee.ai_protocol)
            guard fd >= 0 else {
                lastError = currentErrno()
                continue
            }
            let result = connectWithTimeout(fd, info.pointee.ai_addr, info.pointee.ai_addrlen, timeoutMs)
            if result == 0 {
                configureConnected(fd, tcp: true)
                return fd
            }
            lastError = result
            close(fd)
        }
        throw .failed(errno: lastError)
    }

    /// A stream socket connected to the Unix domain socket at `path`, giving up after `timeoutMs`; blocking,
    /// close-on-exec.
    package static func connect(unixPath path: String, timeoutMs: Int) throws(ConnectFailure) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < capacity else { throw .badPath(capacity: capacity) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let fd = socket(AF_UNIX, streamType, 0)
        guard fd >= 0 else { throw .failed(errno: currentErrno()) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connectWithTimeout(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size), timeoutMs)
            }
        }
        if result != 0 {
            close(fd)
            throw .failed(errno: result)
        }
        configureConnected(fd, tcp: false)
        return fd
    }

    /// Non-blocking connect plus `poll`, so that an unreachable host fails after the timeout; 0 or an errno.
    private static func connectWithTimeout(
        _ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t, _ timeoutMs: Int
    ) -> Int32 {
        let flags = fcntl(fd, F_GETFL, 0)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(fd, F_SETFL, flags) }
        if systemConnect(fd, address, length) == 0 { return 0 }
        let started = currentErrno()
        guard started == EINPROGRESS || started == EINTR else { return started }
        var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        var ready: Int32
        repeat { ready = poll(&descriptor, 1, Int32(clamping: timeoutMs)) } while ready < 0 && currentErrno() == EINTR
        if ready == 0 { return ETIMEDOUT }
        if ready < 0 { return currentErrno() }
        var error: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 else { return currentErrno() }
        return error
    }

    private static func configureConnected(_ fd: Int32, tcp: Bool) {
        var one: Int32 = 1
        if tcp { _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        #if !os(Linux)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        #endif
    }

    /// Sends what the socket takes now: the count, or -errno (EAGAIN on a full non-blocking socket).
    package static func sendSome(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard bytes.count > 0 else { return 0 }
        while true {
            let n = send(fd, bytes.baseAddress!, bytes.count, sendFlags)
            if n < 0 && currentErrno() == EINTR { continue }
            return n < 0 ? -Int(currentErrno()) : n
        }
    }

    /// Receives up to `capacity` bytes: the count, 0 at end of stream, or -errno.
    package static func receive(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ capacity: Int) -> Int {
        while true {
            let n = recv(fd, buffer, capacity, 0)
            if n < 0 && currentErrno() == EINTR { continue }
            return n < 0 ? -Int(currentErrno()) : n
        }
    }

    /// Sends every byte on a blocking socket; 0 or the errno that stopped it.
    package static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32 {
        var offset = 0
        while offset < bytes.count {
            let n = sendSome(fd, UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            if n < 0 { return Int32(-n) }
            offset += n
        }
        return 0
    }
}

/// errno, read through a function so that the name does not clash with `ConnectFailure.errno` and friends.
@inline(__always)
private func currentErrno() -> Int32 { errno }

#if canImport(Darwin)
private func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    Darwin.connect(fd, address, length)
}
#else
private func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    connect(fd, address, length)
}
#endif
