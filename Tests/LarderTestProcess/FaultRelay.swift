#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderSync

/// A TCP relay on 127.0.0.1 between clients and a real server, for tests of what a client does when the network
/// fails: it cuts connections, blackholes them, drops the server's answers and delays bytes, on real sockets. Each
/// accepted connection gets one to the server and two threads, one per direction. Answers are recognised by the
/// frame header (Protocol.md section 2: a 4-byte length, then magic, version, flags and opcode), so the relay needs no
/// codec and passes compressed frames through untouched.
///
/// ```swift
/// let relay = try FaultRelay(upstreamPort: serverPort)
/// relay.dropEveryOtherWriteAnswer()  // the client's writes reach the server; half their answers never come back
/// let client = LarderClient(host: "127.0.0.1", port: relay.port)
/// ```
public final class FaultRelay: @unchecked Sendable {
    /// What happens to the server's answers.
    public enum AnswerDrop: Sendable {
        /// Every answer goes through.
        case none
        /// The next `count` frames from the server (any frame: answers, events) are dropped.
        case next(Int)
        /// The answer of every other write (the first, the third...) is dropped; other frames go through.
        case everyOtherWrite
        /// The answers to writes whose ordinal (1 for the first write answer the relay sees, retries counted) passes
        /// the test are dropped; other frames go through.
        case writeAnswers(@Sendable (Int) -> Bool)
    }

    /// The port clients connect to.
    public let port: Int
    private let upstreamPort: Int
    private let listener: Int32
    private let lock = Lock()
    private let changed = Condition()
    // Under `lock`:
    private var drop = AnswerDrop.none
    private var cutAfterDrop = true
    private var blackholed = false
    private var delay: Duration = .zero
    private var stopped = false
    private var open: [(client: Int32, server: Int32)] = []
    private var writeAnswersSeen = 0
    private var droppedFrames = 0
    private var acceptedConnections = 0

    /// The opcodes of the writes whose answers `everyOtherWrite` counts (CREATE, REPLACE, PATCH, DELETE, BLOB_PUT,
    /// BLOB_DELETE, BLOB_UPLOAD_FINISH).
    public static let writeOpcodes: Set<UInt16> = [0x10, 0x13, 0x14, 0x15, 0x30, 0x33, 0x38]

    /// A relay to the server listening on 127.0.0.1 `upstreamPort`, itself on a free port of 127.0.0.1.
    public init(upstreamPort: Int) throws {
        self.upstreamPort = upstreamPort
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw FaultRelayError("socket failed: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = FaultRelay.loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 64) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else {
            close(listener)
            throw FaultRelayError("bind or listen failed: errno \(errno)")
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    // MARK: - Faults

    /// Drops server frames as `drop` says; with `thenCut` (the default) the connection of each dropped frame is cut
    /// right after it, as when the network fails with the answer on its way: the client learns of the loss at once
    /// instead of waiting out its timeout.
    public func dropAnswers(_ drop: AnswerDrop, thenCut: Bool = true) {
        lock.withLock {
            self.drop = drop
            cutAfterDrop = thenCut
        }
    }

    /// Drops the server's next `count` frames.
    public func dropNextAnswers(_ count: Int, thenCut: Bool = true) { dropAnswers(.next(count), thenCut: thenCut) }

    /// Drops the answer of every other write.
    public func dropEveryOtherWriteAnswer(thenCut: Bool = true) { dropAnswers(.everyOtherWrite, thenCut: thenCut) }

    /// While on, bytes in both directions are read and thrown away, and connections stay open: a peer that went
    /// silent. New connections are accepted and go silent too.
    public func blackhole(_ on: Bool) {
        lock.withLock {
            blackholed = on
            changed.broadcast()
        }
    }

    /// Holds each read, in either direction, this long before passing it on (zero: none).
    public func delay(_ duration: Duration) {
        lock.withLock {
            delay = duration
            changed.broadcast()
        }
    }

    /// Cuts every open connection (both ends see it closed); later connections go through.
    public func cutAll() {
        let pairs = lock.withLock {
            defer { open.removeAll() }
            return open
        }
        for pair in pairs { FaultRelay.cut(pair) }
    }

    /// Stops accepting and cuts every connection.
    public func stop() {
        let first = lock.withLock {
            defer { stopped = true }
            changed.broadcast()
            return !stopped
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        cutAll()
    }

    // MARK: - What happened

    /// Server frames dropped so far.
    public var dropped: Int { lock.withLock { droppedFrames } }
    /// Answers to writes seen so far (dropped or not).
    public var writeAnswers: Int { lock.withLock { writeAnswersSeen } }
    /// Connections accepted so far.
    public var connections: Int { lock.withLock { acceptedConnections } }

    // MARK: - Relaying

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        return address
    }

    private static func cut(_ pair: (client: Int32, server: Int32)) {
        shutdown(pair.client, Int32(SHUT_RDWR))
        shutdown(pair.server, Int32(SHUT_RDWR))
    }

    /// The next client's connection; nil once the listener is shut down.
    private func nextClient() -> Int32? {
        while true {
            let fd = accept(listener, nil, nil)
            if fd >= 0 { return fd }
            if errno != EINTR { return nil }
        }
    }

    private func acceptLoop() {
        defer { close(listener) }
        while let client = nextClient() {
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = FaultRelay.loopback(port: UInt16(upstreamPort))
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            var one: Int32 = 1
            setsockopt(server, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let accepted = lock.withLock { () -> Bool in
                guard !stopped, connected else { return false }
                acceptedConnections += 1
                open.append((client, server))
                return true
            }
            guard accepted else {
                close(client)
                close(server)
                if lock.withLock({ stopped }) { return }
                continue
            }
            let pair = (client: client, server: server)
            let done = DispatchGroup()
            done.enter()
            Thread.detachNewThread { [self] in
                forward(from: client, to: server)
                FaultRelay.cut(pair)
                done.leave()
            }
            done.enter()
            Thread.detachNewThread { [self] in
                answer(from: server, to: client, pair)
                FaultRelay.cut(pair)
                done.leave()
            }
            done.notify(queue: .global()) { [self] in
                lock.withLock { open.removeAll { $0.client == client } }
                close(client)
                close(server)
            }
        }
    }

    /// Waits out the delay, if any; answers whether the bytes read should be thrown away (blackholed).
    private func hold() -> Bool {
        lock.withLock {
            let until = ContinuousClock.now + delay
            while !stopped && ContinuousClock.now < until { _ = changed.wait(on: lock, until: until) }
            return blackholed
        }
    }

    private static func readSome(_ fd: Int32, into chunk: inout [UInt8]) -> Int {
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            return n
        }
    }

    private static func sendAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Bool {
        var sent = bytes.startIndex
        while sent < bytes.endIndex {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    /// Client to server: bytes as they come.
    private func forward(from client: Int32, to server: Int32) {
        var chunk = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = FaultRelay.readSome(client, into: &chunk)
            guard n > 0 else { return }
            if hold() { continue }
            guard FaultRelay.sendAll(server, chunk[0..<n]) else { return }
        }
    }

    /// Server to client: whole frames, each passed on or dropped.
    private func answer(from server: Int32, to client: Int32, _ pair: (client: Int32, server: Int32)) {
        var chunk = [UInt8](repeating: 0, count: 256 << 10)
        var pending: [UInt8] = []
        while true {
            let n = FaultRelay.readSome(server, into: &chunk)
            guard n > 0 else { return }
            if hold() { continue }
            pending.append(contentsOf: chunk[0..<n])
            var start = 0
            // A frame: its 4-byte big-endian length, then that many bytes (flags at 7, opcode at 8...9).
            while pending.count - start >= 10 {
                let length = pending[start..<start + 4].reduce(0) { $0 << 8 | Int($1) }
                let end = start + 4 + length
                guard pending.count >= end else { break }
                let flags = pending[start + 7]
                let opcode = UInt16(pending[start + 8]) << 8 | UInt16(pending[start + 9])
                let (dropIt, thenCut) = decide(isWriteAnswer: flags & 0x04 != 0 && FaultRelay.writeOpcodes.contains(opcode))
                if dropIt {
                    if thenCut {
                        FaultRelay.cut(pair)
                        return
                    }
                } else if !FaultRelay.sendAll(client, pending[start..<end]) {
                    return
                }
                start = end
            }
            pending.removeFirst(start)
        }
    }

    /// Whether to drop the next whole frame from the server, and whether to cut its connection after.
    private func decide(isWriteAnswer: Bool) -> (drop: Bool, cut: Bool) {
        lock.withLock {
            if isWriteAnswer { writeAnswersSeen += 1 }
            let dropIt: Bool
            switch drop {
            case .none: dropIt = false
            case .next(let count):
                dropIt = count > 0
                drop = count > 1 ? .next(count - 1) : .none
            case .everyOtherWrite: dropIt = isWriteAnswer && writeAnswersSeen % 2 == 1
            case .writeAnswers(let test): dropIt = isWriteAnswer && test(writeAnswersSeen)
            }
            if dropIt { droppedFrames += 1 }
            return (dropIt, cutAfterDrop)
        }
    }
}

/// A relay that could not start.
public struct FaultRelayError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
