#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import LarderWire

/// The POSIX socket calls the client makes (on its I/O threads), each retrying `EINTR` and reporting errno as a `LarderError`.
enum Socket {
    #if os(Linux)
    static let streamType = Int32(SOCK_STREAM.rawValue)
    static let sendFlags = Int32(MSG_NOSIGNAL)
    #else
    static let streamType = SOCK_STREAM
    static let sendFlags: Int32 = 0
    #endif

    static func errnoText(_ code: Int32) -> String { String(cString: strerror(code)) }

    /// An error for a connection that could not be made; the CLI maps `details.reason == "connect"` to exit 2.
    static func connectError(_ endpoint: String, _ why: String, errno code: Int32? = nil) -> LarderError {
        var details: JSONObject = ["reason": "connect", "endpoint": .string(endpoint)]
        if let code { details["errno"] = .int(Int64(code)) }
        return LarderError(.unavailable, "cannot connect to \(endpoint): \(why)", details: details)
    }

    /// Connects a blocking stream socket to `endpoint`, giving up after `timeoutMs`.
    static func connect(_ endpoint: LarderClient.Endpoint, timeoutMs: Int) throws(LarderError) -> Int32 {
        switch endpoint {
        case .unix(let path):
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let capacity = MemoryLayout.size(ofValue: address.sun_path)
            let bytes = Array(path.utf8)
            guard !bytes.isEmpty, bytes.count < capacity else {
                throw connectError(endpoint.description, "a Unix socket path must be 1 to \(capacity - 1) bytes")
            }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
            let fd = socket(AF_UNIX, streamType, 0)
            guard fd >= 0 else { throw connectError(endpoint.description, errnoText(errno), errno: errno) }
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connectWithTimeout(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size), timeoutMs)
                }
            }
            if result != 0 {
                close(fd)
                throw connectError(endpoint.description, errnoText(result), errno: result)
            }
            configure(fd, tcp: false)
            return fd
        case .tcp(let host, let port):
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            hints.ai_socktype = streamType
            var list: UnsafeMutablePointer<addrinfo>?
            let status = getaddrinfo(host, String(port), &hints, &list)
            guard status == 0, let first = list else {
                throw connectError(endpoint.description, "cannot resolve host: " + String(cString: gai_strerror(status)))
            }
            defer { freeaddrinfo(list) }
            var lastError: Int32 = ECONNREFUSED
            var cursor: UnsafeMutablePointer<addrinfo>? = first
            while let info = cursor {
                cursor = info.pointee.ai_next
                let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
                guard fd >= 0 else {
                    lastError = errno
                    continue
                }
                let result = connectWithTimeout(fd, info.pointee.ai_addr, info.pointee.ai_addrlen, timeoutMs)
                if result == 0 {
                    configure(fd, tcp: true)
                    return fd
                }
                lastError = result
                close(fd)
            }
            throw connectError(endpoint.description, errnoText(lastError), errno: lastError)
        }
    }

    /// Non-blocking connect plus `poll`, so that an unreachable host fails after the timeout; 0 or an errno.
    private static func connectWithTimeout(
        _ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t, _ timeoutMs: Int
    ) -> Int32 {
        let flags = fcntl(fd, F_GETFL, 0)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(fd, F_SETFL, flags) }
        if systemConnect(fd, address, length) == 0 { return 0 }
        guard errno == EINPROGRESS || errno == EINTR else { return errno }
        var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        var ready: Int32
        repeat { ready = poll(&descriptor, 1, Int32(clamping: timeoutMs)) } while ready < 0 && errno == EINTR
        if ready == 0 { return ETIMEDOUT }
        if ready < 0 { return errno }
        var error: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 else { return errno }
        return error
    }

    private static func configure(_ fd: Int32, tcp: Bool) {
        var one: Int32 = 1
        if tcp { _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        #if !os(Linux)
        _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        #endif
    }

    /// Writes what the socket takes now: the count, or -errno (EAGAIN on a full non-blocking socket).
    static func sendSome(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard bytes.count > 0 else { return 0 }
        while true {
            let n = send(fd, bytes.baseAddress!, bytes.count, sendFlags)
            if n < 0 && errno == EINTR { continue }
            return n < 0 ? -Int(errno) : n
        }
    }

    /// Reads up to `capacity` bytes: the count, 0 at end of stream, or -errno.
    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ capacity: Int) -> Int {
        while true {
            let n = recv(fd, buffer, capacity, 0)
            if n < 0 && errno == EINTR { continue }
            return n < 0 ? -Int(errno) : n
        }
    }
}

#if canImport(Glibc) || canImport(Musl)
private func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    connect(fd, address, length)
}
#else
private func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    Darwin.connect(fd, address, length)
}
#endif
