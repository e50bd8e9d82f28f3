#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The one socket layer of the tree: thin wrappers over the socket calls of the server, the client, the benchmark and
/// the tests. What only a server does (listening, accepting, sendfile) is in LarderEventLoop's ServerSocket.swift.
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
