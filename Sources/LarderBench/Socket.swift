#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call or network exchange; the run cannot go on (exit status 2).
public struct BenchError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// System calls, each through one helper: EINTR is retried, EAGAIN is "would block", anything else is an error that
/// names the call and errno.
enum Sys {
    enum Outcome: Equatable {
        case done(Int)
        case wouldBlock
    }

    @inline(__always)
    static func call(_ name: StaticString, _ body: () -> Int) throws(BenchError) -> Outcome {
        while true {
            let result = body()
            if result >= 0 { return .done(result) }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            throw BenchError("\(name) failed: \(String(cString: strerror(code))) (errno \(code))")
        }
    }

    /// The monotonic clock in nanoseconds.
    @inline(__always)
    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    /// Ignores SIGPIPE once, so a peer that closes makes `write` fail with EPIPE rather than kill the process.
    static let ignoreSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    #if canImport(Glibc)
    static let streamType = Int32(SOCK_STREAM.rawValue)
    #else
    static let streamType = SOCK_STREAM
    #endif

    /// A connected, blocking TCP socket with TCP_NODELAY.
    static func connectTCP(host: String, port: Int) throws(BenchError) -> Int32 {
        _ = ignoreSIGPIPE
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = streamType
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            throw BenchError("cannot resolve \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        var lastError = "no address"
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let a = entry {
            entry = a.pointee.ai_next
            let fd = socket(a.pointee.ai_family, a.pointee.ai_socktype, a.pointee.ai_protocol)
            guard fd >= 0 else { continue }
            do throws(BenchError) {
                _ = try call("connect") { Int(connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen)) }
                var one: Int32 = 1
                _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                return fd
            } catch {
                lastError = error.message
                close(fd)
            }
        }
        throw BenchError("cannot connect to \(host):\(port): \(lastError)")
    }

    /// A connected, blocking Unix domain socket.
    static func connectUnix(path: String) throws(BenchError) -> Int32 {
        _ = ignoreSIGPIPE
        var address = sockaddr_un()
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw BenchError("the socket path \(path) is too long")
        }
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let fd = socket(AF_UNIX, streamType, 0)
        guard fd >= 0 else { throw BenchError("socket failed (errno \(errno))") }
        do throws(BenchError) {
            _ = try call("connect") {
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        Int(connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)))
                    }
                }
            }
        } catch {
            close(fd)
            throw BenchError("cannot connect to \(path): \(error.message)")
        }
        return fd
    }

    static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }

    /// Writes all of `bytes` on a blocking socket.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(BenchError) {
        var offset = 0
        while offset < bytes.count {
            let outcome = try call("write") { write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
            if case .done(let n) = outcome { offset += n }
        }
    }

    /// Writes all of `bytes` on a blocking socket.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws(BenchError) {
        var offset = 0
        while offset < bytes.count {
            let start = offset
            let outcome = try call("write") {
                bytes.withUnsafeBytes { write(fd, $0.baseAddress! + start, $0.count - start) }
            }
            if case .done(let n) = outcome { offset += n }
        }
    }

    /// Waits until `fd` is readable or `deadline` (monotonic ns) passes; false on timeout.
    static func waitReadable(_ fd: Int32, until deadline: UInt64) throws(BenchError) -> Bool {
        while true {
            let now = Sys.now()
            if now >= deadline { return false }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ms = Int32(min((deadline - now) / 1_000_000 + 1, 60_000))
            if case .done(let n) = try call("poll", { Int(poll(&p, 1, ms)) }), n > 0 { return true }
        }
    }

    /// The loopback address used for the raw TCP sink: a listening socket on 127.0.0.1 and its port.
    static func listenLoopback() throws(BenchError) -> (Int32, Int) {
        _ = ignoreSIGPIPE
        let fd = socket(AF_INET, streamType, 0)
        guard fd >= 0 else { throw BenchError("socket failed (errno \(errno))") }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                bind(fd, pointer, length) == 0 && listen(fd, 128) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw BenchError("cannot listen on 127.0.0.1 (errno \(errno))")
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }
}
