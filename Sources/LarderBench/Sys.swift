#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import LarderEventLoop
import LarderIO

/// The benchmark's words for LarderIO's socket layer: each failure a `BenchError` naming the call and errno.
enum Sys {
    typealias Outcome = IOResult

    @inline(__always)
    static func call(_ name: StaticString, _ body: () -> Int) throws(BenchError) -> Outcome {
        do throws(IOError) {
            return try systemCall("\(name)", body)
        } catch {
            throw BenchError(error.description)
        }
    }

    /// The monotonic clock in nanoseconds.
    @inline(__always)
    static func now() -> UInt64 { monotonicNanos() }

    /// Ignores SIGPIPE once, so a peer that closes makes `write` fail with EPIPE rather than kill the process.
    static var ignoreSIGPIPE: Void { Socket.ignoreSIGPIPE }

    static var streamType: Int32 { Socket.streamType }

    /// A connected, blocking TCP socket with TCP_NODELAY.
    static func connectTCP(host: String, port: Int) throws(BenchError) -> Int32 {
        _ = ignoreSIGPIPE
        do throws(ConnectFailure) {
            return try Socket.connect(host: host, port: port, timeoutMs: 30_000)
        } catch {
            throw BenchError("cannot connect to \(host):\(port): \(error)")
        }
    }

    /// A connected, blocking Unix domain socket.
    static func connectUnix(path: String) throws(BenchError) -> Int32 {
        _ = ignoreSIGPIPE
        do throws(ConnectFailure) {
            return try Socket.connect(unixPath: path, timeoutMs: 30_000)
        } catch {
            throw BenchError("cannot connect to \(path): \(error)")
        }
    }

    static func setNonBlocking(_ fd: Int32) { try? Socket.setNonBlocking(fd) }

    /// Writes all of `bytes` on a blocking socket.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(BenchError) {
        let code = Socket.sendAll(fd, bytes)
        if code != 0 { throw BenchError(IOError("write", errno: code).description) }
    }

    /// Writes all of `bytes` on a blocking socket.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws(BenchError) {
        let code = bytes.withUnsafeBytes { Socket.sendAll(fd, $0) }
        if code != 0 { throw BenchError(IOError("write", errno: code).description) }
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
        do throws(IOError) {
            let (fd, port) = try Socket.listenTCP(host: "127.0.0.1", port: 0, backlog: 128)
            // The sink accepts and reads with blocking calls.
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
            return (fd, port)
        } catch {
            throw BenchError("cannot listen on 127.0.0.1: \(error)")
        }
    }
}
