#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderSync

/// An in-process stand-in for the server: a TCP listener on 127.0.0.1 port 0 that decodes frames and lets a test
/// decide every reply, so that the client's behaviour with out-of-order replies, slow answers and a peer that dies
/// mid-request can be checked without the real server.
final class FakeServer: @unchecked Sendable {
    /// What a handler may do with one request.
    enum Action {
        case reply(Frame)
        /// Keep the request; `flush` lets the handler answer held requests later (in any order).
        case hold
        /// Close the connection without answering.
        case die
    }

    typealias Handler = @Sendable (_ request: Frame, _ server: FakeServer) -> Action

    let port: Int
    let limits: Limits
    private let listener: Int32
    private let handler: Handler
    private let lock = Lock()
    /// Tests waiting for requests (`waitForRequests`), resumed as requests arrive.
    private typealias Waiter = (condition: @Sendable ([Frame]) -> Bool, continuation: CheckedContinuation<Bool, Never>)
    private var waiters: [UUID: Waiter] = [:]
    private var held: [(Frame, Int32)] = []
    private var clients: [Int32] = []
    private(set) var inFlight = 0
    private var maxInFlightSeen = 0
    /// The most requests held at once (read under the lock).
    var maxSeenInFlight: Int { lock.withLock { maxInFlightSeen } }
    private var received: [Frame] = []
    /// While set, a connection that has had its HELLO answered reads nothing more (a server that has stopped reading:
    /// the client's writes fill the socket's buffers); `resumeReading` lets it read again.
    private var readingPaused = false
    private let readingResumed = Condition()
    /// The requests received so far (read under the lock: the serving threads append).
    var requests: [Frame] { lock.withLock { received } }

    /// A server announcing `limits`; without `requestKeys` it announces no `requestKeyRetentionMs`, as a server that
    /// takes no request keys, so that its client sends none and never sends a write again.
    init(limits: Limits = Limits(maxInFlight: 128), requestKeys: Bool = false, handler: @escaping Handler) {
        var limits = limits
        if !requestKeys { limits.requestKeyRetentionMs = nil }
        self.limits = limits
        self.handler = handler
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        listen(listener, 16)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// A TCP port on 127.0.0.1 bound and never listened on: a connect there is refused, and the port stays taken
    /// until this is gone.
    final class ClosedPort {
        let port: Int
        private let fd: Int32

        init() throws {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let fd = fd
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
                }
            }
            port = Int(UInt16(bigEndian: address.sin_port))
            guard bound else { throw CocoaError(.fileWriteUnknown) }
        }

        deinit { close(fd) }
    }

    /// A HELLO answer announcing `limits`, no compression.
    func helloReply(_ request: Frame) -> Frame {
        let hello = HelloResponse(
            version: 1, compression: "none", compressionThreshold: 1024, limits: limits, server: "fake 0",
            authRequired: false)
        return FakeServer.reply(request, hello.json)
    }

    static func reply(_ request: Frame, _ json: JSONObject, status: Status = .ok, binary: [UInt8] = []) -> Frame {
        Frame(
            opcode: request.opcode, requestID: request.requestID, status: status, flags: .response, json: json.bytes,
            binary: binary)
    }

    /// Waits, without holding a thread, until the requests received so far (HELLOs included) satisfy `condition`;
    /// false if they still do not after `seconds` (generous: it runs out only when the client never sends them).
    func waitForRequests(seconds: Double = 120, until condition: @escaping @Sendable ([Frame]) -> Bool) async -> Bool {
        let key = UUID()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let satisfied = lock.withLock {
                if condition(received) { return true }
                waiters[key] = (condition, continuation)
                return false
            }
            if satisfied { return continuation.resume(returning: true) }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
                lock.withLock { waiters.removeValue(forKey: key) }?.continuation.resume(returning: false)
            }
        }
    }

    /// Requests held so far with their connections, in arrival order; the caller answers them with `send`.
    func takeHeld() -> [(Frame, Int32)] {
        lock.withLock {
            defer { held.removeAll() }
            return held
        }
    }

    /// Sends a reply on connection `fd`.
    func send(_ frame: Frame, to fd: Int32) {
        let bytes = FrameEncoder().encode(frame)
        lock.withLock { inFlight -= 1 }
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// From now on, every connection stops reading once its HELLO is answered.
    func pauseReading() { lock.withLock { readingPaused = true } }

    func resumeReading() {
        lock.withLock {
            readingPaused = false
            readingResumed.broadcast()
        }
    }

    /// Closes every client connection.
    func killClients() {
        let fds = lock.withLock {
            defer { clients.removeAll() }
            return clients
        }
        for fd in fds { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    func stop() {
        resumeReading()
        killClients()
        // The accept thread closes the descriptor when accept fails, so that its number cannot be reused by
        // another test's socket while that thread might still accept on it.
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else {
                close(listener)
                return
            }
            lock.withLock { clients.append(fd) }
            let thread = Thread { [self] in serve(fd) }
            thread.start()
        }
    }

    private func serve(_ fd: Int32) {
        var decoder = FrameDecoder()
        var buffer = ByteBuffer()
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer {
            lock.withLock { clients.removeAll { $0 == fd } }
            close(fd)
        }
        var greeted = false
        while true {
            if greeted {
                lock.withLock {
                    while readingPaused { _ = readingResumed.wait(on: lock, until: .now + .seconds(3600)) }
                }
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return }
            buffer.append(chunk[0..<n])
            while let frame = try? decoder.next(&buffer) {
                if frame.opcode == .hello { greeted = true }
                let action = frame.opcode == .hello ? .reply(helloReply(frame)) : handler(frame, self)
                // The request is recorded and, if held, held in one step before any waiter hears of it: a test that
                // waits for a count of requests then takes the held ones finds every one of them.
                let satisfied = lock.withLock {
                    received.append(frame)
                    inFlight += 1
                    maxInFlightSeen = max(maxInFlightSeen, inFlight)
                    if case .hold = action { held.append((frame, fd)) }
                    let keys = waiters.filter { $0.value.condition(received) }.map(\.key)
                    return keys.compactMap { waiters.removeValue(forKey: $0)?.continuation }
                }
                for continuation in satisfied { continuation.resume(returning: true) }
                switch action {
                case .reply(let reply): send(reply, to: fd)
                case .hold: break
                case .die:
                    shutdown(fd, Int32(SHUT_RDWR))
                    return
                }
            }
        }
    }
}
