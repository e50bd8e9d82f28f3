#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderIO
import LarderSync
import LarderWire

/// The thread that owns one client connection's socket: it connects, then waits in `poll(2)` for the socket to be
/// readable (or writable while bytes are queued) and for callers to queue more. Callers never make a blocking call:
/// `send` queues (after one non-blocking attempt when nothing is queued, which saves a thread hop on an idle
/// connection), and the thread writes the rest as the peer reads it. Portable POSIX only (poll and a pipe, no epoll or
/// kqueue), so the client runs wherever Swift does.
final class IOThread: @unchecked Sendable {
    /// Why the thread's loop ended.
    enum End {
        case peerClosed
        case readFailed(Int32)
        /// The errno of the failed write and the opcode of the request being written.
        case writeFailed(Int32, String)
        case invalid(LarderError)
        case stopped
    }

    private struct Outgoing {
        var bytes: [UInt8]
        var offset = 0
        var name: String
        var progress: (@Sendable (Int) -> Void)?
    }

    // Guarded by `lock`.
    private let lock = Lock()
    private var outgoing: [Outgoing] = []
    private var stopping = false
    /// The socket once connected, -1 before and after (the thread closes it with this reset, under the lock, so that a
    /// caller's direct send never reaches a descriptor number reused by someone else).
    private var fd: Int32 = -1
    /// Whether a byte waits in the wake pipe (one is enough).
    private var woken = false

    private let wakeRead: Int32
    private let wakeWrite: Int32
    // Set by `start`; touched only by the thread (and released by it when it ends).
    private var connect: (() throws(LarderError) -> Int32)?
    private var connected: ((LarderError?) -> Void)?
    private var received: ((UnsafeRawBufferPointer) -> LarderError?)?
    private var ended: ((End) -> Void)?

    init() {
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) != 0 { ends = [-1, -1] }
        for fd in ends where fd >= 0 {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        wakeRead = ends[0]
        wakeWrite = ends[1]
    }

    deinit {
        if wakeRead >= 0 { _ = close(wakeRead) }
        if wakeWrite >= 0 { _ = close(wakeWrite) }
    }

    /// Starts the thread: `connect` runs on it, `connected` is told how that went, then `received` gets every chunk
    /// read (an error it returns ends the connection) until the loop ends, which `ended` is told once.
    func start(
        connect: @escaping () throws(LarderError) -> Int32, connected: @escaping (LarderError?) -> Void,
        received: @escaping (UnsafeRawBufferPointer) -> LarderError?, ended: @escaping (End) -> Void
    ) {
        self.connect = connect
        self.connected = connected
        self.received = received
        self.ended = ended
        let thread = Thread { self.run() }
        thread.name = "larder-client-io"
        thread.stackSize = 256 << 10
        thread.start()
    }

    /// Queues `bytes` to be written after everything queued before; `progress` hears the bytes written so far. Never
    /// waits for the network.
    func send(_ bytes: [UInt8], name: String, progress: (@Sendable (Int) -> Void)?) {
        lock.withLock {
            guard !stopping else { return }
            var item = Outgoing(bytes: bytes, name: name, progress: progress)
            if outgoing.isEmpty, fd >= 0, progress == nil {
                // Nothing ahead of it: as much as the socket takes now, without waiting (the socket is non-blocking).
                let n = bytes.withUnsafeBytes { Socket.sendSome(fd, $0) }
                if n == bytes.count { return }
                item.offset = max(0, n)  // an error is found again, and reported, by the thread's own write
            }
            outgoing.append(item)
            wakeLocked()
        }
    }

    /// Ends the loop: queued bytes are dropped and the socket closed.
    func stop() {
        lock.withLock {
            stopping = true
            wakeLocked()
        }
    }

    private func wakeLocked() {
        guard !woken, wakeWrite >= 0 else { return }
        woken = true
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private func run() {
        defer {
            connect = nil
            connected = nil
            received = nil
            ended = nil
        }
        let socket: Int32
        do throws(LarderError) {
            socket = try connect!()
        } catch {
            connected!(error)
            return
        }
        _ = fcntl(socket, F_SETFL, fcntl(socket, F_GETFL, 0) | O_NONBLOCK)
        lock.withLock { fd = socket }
        connected!(nil)
        let end = loop(socket)
        lock.withLock {
            fd = -1
            outgoing = []
            _ = close(socket)
        }
        ended!(end)
    }

    private func loop(_ socket: Int32) -> End {
        let capacity = 64 << 10
        let chunk = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        defer { chunk.deallocate() }
        while true {
            let (wantWrite, stop) = lock.withLock { (!outgoing.isEmpty, stopping) }
            if stop { return .stopped }
            var descriptors = [
                pollfd(fd: socket, events: Int16(POLLIN) | (wantWrite ? Int16(POLLOUT) : 0), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&descriptors, nfds_t(wakeRead >= 0 ? 2 : 1), wakeRead >= 0 ? -1 : 10)
            if ready < 0 && errno != EINTR { return .readFailed(errno) }
            if descriptors[1].revents != 0 {
                var drain: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]
                lock.withLock {
                    woken = false
                    while read(wakeRead, &drain, drain.count) > 0 {}
                }
            }
            if descriptors[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                // A bounded number of reads per turn, so that queued writes are not starved by a chatty peer.
                for _ in 0..<16 {
                    let n = Socket.receive(socket, chunk, capacity)
                    if n == 0 { return .peerClosed }
                    if n < 0 {
                        let code = Int32(-n)
                        if code == EAGAIN || code == EWOULDBLOCK { break }
                        return .readFailed(code)
                    }
                    if let error = received!(UnsafeRawBufferPointer(start: chunk, count: n)) { return .invalid(error) }
                    if n < capacity { break }
                }
            }
            if let end = flush(socket) { return end }
        }
    }

    /// Writes queued bytes until the socket would block; nil while the connection can go on.
    private func flush(_ socket: Int32) -> End? {
        while true {
            guard let head = lock.withLock({ outgoing.first }) else { return nil }
            // At most 1 MiB a call, so that a large blob's progress is reported as it goes.
            let n = head.bytes.withUnsafeBytes { raw in
                Socket.sendSome(
                    socket, UnsafeRawBufferPointer(rebasing: raw[head.offset..<min(raw.count, head.offset + (1 << 20))]))
            }
            if n < 0 {
                let code = Int32(-n)
                if code == EAGAIN || code == EWOULDBLOCK { return nil }
                return .writeFailed(code, head.name)
            }
            let offset = head.offset + n
            lock.withLock {
                if offset == head.bytes.count {
                    outgoing.removeFirst()
                } else {
                    outgoing[0].offset = offset
                }
            }
            head.progress?(offset)
        }
    }
}
