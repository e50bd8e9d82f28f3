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

#if os(Linux) && !LARDER_PORTABLE
import LarderTLS
#endif

/// The thread that owns one client connection's socket: it connects, then waits in `poll(2)` for the socket to be
/// readable (or writable while bytes are queued) and for callers to queue more. Callers never make a blocking call:
/// `send` queues (after one non-blocking attempt when nothing is queued, which saves a thread hop on an idle
/// connection), and the thread writes the rest as the peer reads it. Portable POSIX only (poll and a pipe, no epoll or
/// kqueue), so the client runs wherever Swift does. Over TLS on Linux the thread drives the GnuTLS session from the
/// same loop, as the server's event loops do: the handshake, decrypting what it reads and encrypting what is queued.
/// (On Apple platforms the socket it is given is a relay's plaintext end: NetworkTLS.swift.)
final class IOThread: @unchecked Sendable {
    /// Why the thread's loop ended.
    enum End {
        case peerClosed
        case readFailed(Int32)
        /// The errno of the failed write and the opcode of the request being written.
        case writeFailed(Int32, String)
        case invalid(LarderError)
        /// The TLS session failed after its handshake, in words.
        case tlsFailed(String)
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

    #if os(Linux) && !LARDER_PORTABLE
    /// Makes the TLS session on the thread (reading certificate files, the first time, there and not on a caller's
    /// thread), when the connection speaks TLS.
    private let makeTLS: (() throws(LarderError) -> ClientTLS)?
    /// The TLS session: made and touched only by the thread.
    private var tls: ClientTLS?
    /// How long the TLS handshake may take.
    private let handshakeTimeoutMs: Int
    // Thread-owned: ciphertext made by the session and not yet written, which request it carries, and the progress to
    // report once it is all written.
    private var ciphertext: [UInt8] = []
    private var ciphertextOffset = 0
    private var ciphertextName = ""
    private var ciphertextProgress: (() -> Void)?

    /// A thread for a connection over TLS when `makeTLS` is given (the handshake may take `handshakeTimeoutMs`).
    init(tls makeTLS: (() throws(LarderError) -> ClientTLS)? = nil, handshakeTimeoutMs: Int = 0) {
        self.makeTLS = makeTLS
        self.handshakeTimeoutMs = handshakeTimeoutMs
        (wakeRead, wakeWrite) = IOThread.wakePipe()
    }
    #else
    /// A thread for a plain connection (on Apple platforms, TLS is a relay's: the socket `connect` returns is
    /// plaintext).
    init() {
        (wakeRead, wakeWrite) = IOThread.wakePipe()
    }
    #endif

    /// The pipe callers wake the thread through, non-blocking at both ends; -1s when none could be made (the thread
    /// then polls every 10 ms).
    private static func wakePipe() -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) != 0 { ends = [-1, -1] }
        for fd in ends where fd >= 0 {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        return (ends[0], ends[1])
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
            if outgoing.isEmpty, fd >= 0, progress == nil, isPlain {
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

    /// Whether bytes go to the socket as they are (not through a TLS session of this thread's).
    private var isPlain: Bool {
        #if os(Linux) && !LARDER_PORTABLE
        makeTLS == nil
        #else
        true
        #endif
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
            #if os(Linux) && !LARDER_PORTABLE
            tls = try makeTLS?()
            #endif
            socket = try connect!()
        } catch {
            connected!(error)
            return
        }
        _ = fcntl(socket, F_SETFL, fcntl(socket, F_GETFL, 0) | O_NONBLOCK)
        lock.withLock { fd = socket }
        #if os(Linux) && !LARDER_PORTABLE
        if let tls, let failure = handshake(socket, tls) {
            lock.withLock {
                fd = -1
                _ = close(socket)
            }
            connected!(failure)
            return
        }
        #endif
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
            let (queued, stop) = lock.withLock { (!outgoing.isEmpty, stopping) }
            #if os(Linux) && !LARDER_PORTABLE
            let wantWrite = queued || hasCiphertext
            #else
            let wantWrite = queued
            #endif
            if stop { return .stopped }
            var descriptors = [
                pollfd(fd: socket, events: Int16(POLLIN) | (wantWrite ? Int16(POLLOUT) : 0), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&descriptors, nfds_t(wakeRead >= 0 ? 2 : 1), wakeRead >= 0 ? -1 : 10)
            if ready < 0 && errno != EINTR { return .readFailed(errno) }
            if descriptors[1].revents != 0 { drainWakes() }
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
                    #if os(Linux) && !LARDER_PORTABLE
                    let end = tls.map { decrypt($0, chunk, n, capacity) }
                        ?? received!(UnsafeRawBufferPointer(start: chunk, count: n)).map { .invalid($0) }
                    #else
                    let end = received!(UnsafeRawBufferPointer(start: chunk, count: n)).map { End.invalid($0) }
                    #endif
                    if let end { return end }
                    if n < capacity { break }
                }
            }
            #if os(Linux) && !LARDER_PORTABLE
            if let end = tls.map({ flushEncrypted(socket, $0) }) ?? flush(socket) { return end }
            #else
            if let end = flush(socket) { return end }
            #endif
        }
    }

    private func drainWakes() {
        var drain: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]
        lock.withLock {
            woken = false
            while read(wakeRead, &drain, drain.count) > 0 {}
        }
    }

    // MARK: TLS

    #if os(Linux) && !LARDER_PORTABLE
    private var hasCiphertext: Bool { ciphertextOffset < ciphertext.count }

    /// Moves the session's pending ciphertext behind what is still unwritten.
    private func takeCiphertext(_ tls: ClientTLS) {
        guard tls.engine.pendingOutput > 0 else { return }
        if ciphertextOffset == ciphertext.count {
            ciphertext.removeAll(keepingCapacity: ciphertext.capacity <= 1 << 20)
            ciphertextOffset = 0
        }
        tls.engine.takeOutput(appendingTo: &ciphertext)
    }

    /// Writes ciphertext until the socket would block: nil, or the errno that stopped it.
    private func sendCiphertext(_ socket: Int32) -> Int32? {
        while hasCiphertext {
            let n = ciphertext.withUnsafeBytes { raw in
                Socket.sendSome(socket, UnsafeRawBufferPointer(rebasing: raw[ciphertextOffset...]))
            }
            if n < 0 {
                let code = Int32(-n)
                return code == EAGAIN || code == EWOULDBLOCK ? nil : code
            }
            ciphertextOffset += n
        }
        return nil
    }

    /// Runs the handshake on the connected non-blocking socket within the connect timeout, waiting in poll(2) (and
    /// on the wake pipe, so `stop` ends it): nil once done, or why it failed.
    private func handshake(_ socket: Int32, _ tls: ClientTLS) -> LarderError? {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(1, handshakeTimeoutMs)) * 1_000_000
        let capacity = 16 << 10
        let chunk = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        defer { chunk.deallocate() }
        while true {
            let progress = tls.engine.handshake()
            takeCiphertext(tls)
            if let code = sendCiphertext(socket) {
                return tls.handshakeError("the TLS handshake broke while sending: \(ClientSocket.errnoText(code))")
            }
            switch progress {
            case .done where !hasCiphertext:
                tls.established()
                return nil
            case .failed(let error): return tls.handshakeError(tls.handshakeFailed(error))
            case .done, .needsInput: break
            }
            if lock.withLock({ stopping }) { return tls.handshakeError("the connection was closed during the TLS handshake") }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { return tls.handshakeError("no TLS handshake within the connect timeout") }
            var descriptors = [
                pollfd(fd: socket, events: Int16(POLLIN) | (hasCiphertext ? Int16(POLLOUT) : 0), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let waitMs = Int32(min(Int(Int32.max), Int((deadline - now) / 1_000_000) + 1))
            let ready = poll(&descriptors, nfds_t(wakeRead >= 0 ? 2 : 1), wakeRead >= 0 ? waitMs : min(10, waitMs))
            if ready < 0 && errno != EINTR {
                return tls.handshakeError("the TLS handshake broke: \(ClientSocket.errnoText(errno))")
            }
            if descriptors[1].revents != 0 { drainWakes() }
            guard descriptors[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 else { continue }
            let n = Socket.receive(socket, chunk, capacity)
            if n == 0 { return tls.handshakeError(tls.closedDuringHandshake) }
            if n < 0 {
                let code = Int32(-n)
                if code == EAGAIN || code == EWOULDBLOCK || code == EINTR { continue }
                return tls.handshakeError("the TLS handshake broke: \(ClientSocket.errnoText(code))")
            }
            let bytes = UnsafeRawBufferPointer(start: chunk, count: n)
            tls.sawDuringHandshake(bytes)
            tls.engine.feed(bytes)
        }
    }

    /// Feeds the session `count` bytes of ciphertext from `chunk` and hands `received` the plaintext they decrypt to
    /// (in `chunk` again: the session holds the ciphertext by then).
    private func decrypt(_ tls: ClientTLS, _ chunk: UnsafeMutableRawPointer, _ count: Int, _ capacity: Int) -> End? {
        tls.engine.feed(UnsafeRawBufferPointer(start: chunk, count: count))
        while true {
            switch tls.engine.read(into: UnsafeMutableRawBufferPointer(start: chunk, count: capacity)) {
            case .bytes(let count):
                if let error = received!(UnsafeRawBufferPointer(start: chunk, count: count)) { return .invalid(error) }
                // Nothing more buffered: another gnutls_record_recv could only say so.
                if tls.engine.pendingInput == 0 {
                    takeCiphertext(tls)
                    tls.rememberSession()
                    return nil
                }
            case .needsInput:
                // What the session answers by itself (a key update) goes out with the next write.
                takeCiphertext(tls)
                tls.rememberSession()
                return nil
            case .closed: return .peerClosed
            case .failed(let error): return .tlsFailed(ClientTLS.sessionFailed(error))
            }
        }
    }

    /// `flush` through TLS: the ciphertext waiting goes first, then the next queued bytes are encrypted, at most
    /// 256 KiB at a time so that a large blob's progress is reported as it goes.
    private func flushEncrypted(_ socket: Int32, _ tls: ClientTLS) -> End? {
        while true {
            if let code = sendCiphertext(socket) { return .writeFailed(code, ciphertextName) }
            if hasCiphertext { return nil }
            if let report = ciphertextProgress {
                ciphertextProgress = nil
                report()
            }
            guard let head = lock.withLock({ outgoing.first }) else { return nil }
            let end = min(head.bytes.count, head.offset + (256 << 10))
            let encrypted = head.bytes.withUnsafeBytes { raw in
                tls.engine.write(UnsafeRawBufferPointer(rebasing: raw[head.offset..<end]))
            }
            let offset: Int
            switch encrypted {
            case .failure(let error): return .tlsFailed(ClientTLS.sessionFailed(error))
            case .success(let count): offset = head.offset + count
            }
            takeCiphertext(tls)
            ciphertextName = head.name
            lock.withLock {
                if offset == head.bytes.count {
                    outgoing.removeFirst()
                } else {
                    outgoing[0].offset = offset
                }
            }
            if let progress = head.progress { ciphertextProgress = { progress(offset) } }
        }
    }
    #endif

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
