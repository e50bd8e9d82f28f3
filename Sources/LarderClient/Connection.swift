import Foundation
import LarderIO
import LarderSync
import LarderWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One connection to a server. Its socket belongs to a thread of its own (`IOThread`): that thread connects, writes
/// what callers queued and reads replies, which it hands by request id to the waiting tasks. A caller never makes a
/// system call that can block: a request is encoded on the caller's task and queued, so a slow network or a server
/// that stops reading never holds one of Swift concurrency's few cooperative threads.
///
/// Every request holds one of the server's `maxInFlight` slots from the moment it is written until its reply
/// arrives; a request that finds no free slot waits in a queue (still bound by its deadline). A request that times
/// out or is cancelled keeps its slot until the server answers, so the client never exceeds the announced limit.
final class Connection: @unchecked Sendable {
    /// Where this connection goes, for error messages.
    let endpoint: String

    private struct Waiter {
        let opcode: Opcode
        var continuation: CheckedContinuation<Result<Frame, LarderError>, Never>?
        /// Set when the deadline or a cancellation arrived before the continuation was registered.
        var aborted: LarderError?
        /// The request, kept until it is written (it may wait for a slot).
        var request: Frame?
        var holdsSlot = false
        /// Called on the I/O thread with (bytes received, frame size) while a large reply arrives.
        var progress: (@Sendable (Int, Int) -> Void)?
        /// Called on the I/O thread with the reply before the next frame is read (WATCH registers its events'
        /// destination there, so none can arrive first).
        var onReply: (@Sendable (Frame) -> Void)?
    }

    // Guarded by `lock`.
    let lock = Lock()
    private var waiters: [UInt32: Waiter] = [:]
    private var queue: [UInt32] = []
    private var freeSlots = 1
    private var nextID: UInt32 = 1
    var failure: LarderError?
    /// An error frame the server sent for no particular request (id 0) just before closing.
    private var serverError: LarderError?
    private var helloResponse: HelloResponse?
    /// Where each subscription's EVENT frames go, by subscription id.
    var subscriptions: [UInt32: EventSink] = [:]

    // Guarded by `encoderLock`: requests are encoded in the order their slots were granted.
    private let encoderLock = Lock()
    private var encoder = FrameEncoder()

    private let io: IOThread

    private init(endpoint: String, io: IOThread) {
        self.endpoint = endpoint
        self.io = io
    }

    /// Connects to `endpoint` (on the connection's own thread), starts reading and performs the HELLO handshake.
    /// `tls`: what the client's TLS connections share (nil for plain connections).
    static func open(
        _ configuration: LarderClient.Configuration, endpoint: LarderClient.Endpoint, tls shared: ClientTLSShared?
    ) async throws(LarderError) -> Connection {
        let timeoutMs = Int(configuration.connectTimeout.components.seconds * 1000)
            + Int(configuration.connectTimeout.components.attoseconds / 1_000_000_000_000_000)
        // Runs on the connection's thread.
        let plain = { () throws(LarderError) -> Int32 in
            try ClientSocket.connect(endpoint, timeoutMs: max(1, timeoutMs))
        }
        #if os(Linux) && !LARDER_PORTABLE
        var tls: (() throws(LarderError) -> ClientTLS)?
        switch (shared, endpoint) {
        case (nil, _):
            break
        case (let shared?, .tcp(let host, _)):
            let name = endpoint.description
            tls = { () throws(LarderError) in try ClientTLS(host: host, shared: shared, endpoint: name) }
        case (_?, .unix):
            throw ClientSocket.connectError(endpoint.description, "TLS is for TCP; a Unix socket is always plain")
        }
        let connect = plain
        let io = IOThread(tls: tls, handshakeTimeoutMs: max(1, timeoutMs))
        #else
        // TLS without GnuTLS: the plaintext end of a relay on Apple platforms; none in the portable configuration.
        let connect = try shared?.connector(to: endpoint, timeoutMs: max(1, timeoutMs)) ?? plain
        let io = IOThread()
        #endif
        let connection = Connection(endpoint: endpoint.description, io: io)
        let connected = await withCheckedContinuation { (continuation: CheckedContinuation<LarderError?, Never>) in
            connection.io.start(
                connect: connect,
                connected: { continuation.resume(returning: $0) },
                received: connection.readerStep(), ended: { connection.ended($0) })
        }
        if let connected { throw connected }
        var idToken: String?
        if let provider = configuration.idTokenProvider {
            do {
                idToken = try await provider()
            } catch {
                let failure = LarderError(
                    .unauthenticated, "the ID token provider failed: \(error.localizedDescription)", field: "idToken")
                connection.close(failure)
                throw failure
            }
        }
        let hello = HelloRequest(
            compression: configuration.compression ? [zlibCompression] : [], client: configuration.clientName,
            token: idToken == nil && configuration.session == nil ? configuration.token : nil, idToken: idToken,
            session: idToken == nil ? configuration.session : nil)
        let reply: Frame
        do {
            reply = try await connection.call(
                .hello, json: hello.json.bytes, binary: [], timeout: configuration.connectTimeout)
        } catch {
            connection.close(error)
            if error.status == .deadlineExceeded {
                throw ClientSocket.connectError(endpoint.description, "no answer to HELLO within the connect timeout")
            }
            // Never connected: a TLS session the server ended (a client certificate it wanted), or a plain client
            // on a TLS port (told so in clear).
            if error.status == .protocolError || (configuration.tls != nil && error.status == .unavailable) {
                throw ClientSocket.connectError(endpoint.description, error.message)
            }
            throw error
        }
        do throws(LarderError) {
            let response = try HelloResponse(json: try reply.jsonObject())
            guard ProtocolVersions.supported.contains(response.version) else {
                throw LarderError(.unsupportedVersion, "the server chose protocol version \(response.version)")
            }
            connection.negotiated(response)
            return connection
        } catch {
            connection.close(error)
            throw error
        }
    }

    private func negotiated(_ hello: HelloResponse) {
        encoderLock.withLock {
            encoder.compressionEnabled = hello.compression == zlibCompression
            encoder.threshold = hello.compressionThreshold
        }
        var writes: [UInt32] = []
        lock.withLock {
            helloResponse = hello
            // The HELLO slot was returned when its reply arrived; the rest of the server's budget opens now.
            freeSlots += max(1, hello.limits.maxInFlight) - 1
            writes = grantFreeSlots()
        }
        for id in writes { write(id) }
    }

    /// What the server announced in HELLO.
    var hello: HelloResponse? { lock.withLock { helloResponse } }

    /// True once the connection has failed or been closed; the client then opens a new one.
    var isClosed: Bool { lock.withLock { failure != nil } }

    /// Requests written or waiting on this connection.
    var load: Int { lock.withLock { waiters.count } }

    // MARK: - Requests

    /// Sends one request and waits for its reply; an error reply is thrown as the server's `LarderError`.
    func call(
        _ opcode: Opcode, json: [UInt8], binary: [UInt8], timeout: Duration?,
        progress: (@Sendable (Int, Int) -> Void)? = nil, onReply: (@Sendable (Frame) -> Void)? = nil,
        enqueued: (@Sendable () -> Void)? = nil
    ) async throws(LarderError) -> Frame {
        if let limits = hello?.limits {
            try Connection.checkSize(json: json.count, binary: binary.count, limits: limits)
        }
        let registered: Result<UInt32, LarderError> = lock.withLock {
            if let failure { return .failure(failure) }
            let id = nextID
            nextID = nextID == UInt32.max ? 1 : nextID + 1
            waiters[id] = Waiter(
                opcode: opcode, request: Frame(opcode: opcode, requestID: id, json: json, binary: binary),
                progress: progress,
                onReply: onReply)
            return .success(id)
        }
        let id = try registered.get()
        let timer: Task<Void, Never>? = timeout.map { timeout in
            Task { [weak self] in
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                self?.abandon(
                    id, LarderError(
                        .deadlineExceeded, "\(opcode.name) got no answer from \(self?.endpoint ?? "the server") "
                            + "within \(timeout); it may or may not have been applied"))
            }
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Frame, LarderError>, Never>) in
                register(id, continuation)
                // Written or queued to be, behind every request registered before it: the next may go.
                enqueued?()
            }
        } onCancel: {
            abandon(id, LarderError(.deadlineExceeded, "\(opcode.name) was cancelled before the server answered"))
        }
        timer?.cancel()
        let frame = try result.get()
        guard frame.status == .ok else {
            let json = (try? JSONParser.parse(frame.json)) ?? .null
            throw LarderError(status: frame.status, json: json)
        }
        return frame
    }

    /// Throws PAYLOAD_TOO_LARGE, without sending anything, for a request the server would refuse for its size.
    static func checkSize(json: Int, binary: Int, limits: Limits) throws(LarderError) {
        if json > limits.maxJSONBytes {
            throw LarderError(
                .payloadTooLarge, "the request's JSON is \(json) bytes; the server accepts at most \(limits.maxJSONBytes)",
                details: ["limit": .int(Int64(limits.maxJSONBytes))])
        }
        if binary > limits.maxBlobBytes {
            throw LarderError(
                .payloadTooLarge, "the blob is \(binary) bytes; the server accepts at most \(limits.maxBlobBytes)",
                details: ["limit": .int(Int64(limits.maxBlobBytes))])
        }
        if Frame.headerSize + json + binary > limits.maxFrameBytes {
            throw LarderError(
                .payloadTooLarge, "the request frame would be \(Frame.headerSize + json + binary) bytes; the server "
                    + "accepts at most \(limits.maxFrameBytes)", details: ["limit": .int(Int64(limits.maxFrameBytes))])
        }
    }

    private func register(_ id: UInt32, _ continuation: CheckedContinuation<Result<Frame, LarderError>, Never>) {
        enum Next { case fail(LarderError), write, wait }
        let next: Next = lock.withLock {
            guard var waiter = waiters[id] else {
                return .fail(failure ?? LarderError(.unavailable, "the connection to \(endpoint) was closed"))
            }
            if let aborted = waiter.aborted {
                waiters[id] = nil
                return .fail(aborted)
            }
            waiter.continuation = continuation
            if freeSlots > 0 {
                freeSlots -= 1
                waiter.holdsSlot = true
                waiters[id] = waiter
                return .write
            }
            waiters[id] = waiter
            queue.append(id)
            return .wait
        }
        switch next {
        case .fail(let error): continuation.resume(returning: .failure(error))
        case .write: write(id)
        case .wait: break
        }
    }

    /// Hands free in-flight slots to queued requests, oldest first; returns the ids to write. Call with `lock` held.
    private func grantFreeSlots() -> [UInt32] {
        var granted: [UInt32] = []
        while freeSlots > 0, !queue.isEmpty {
            let id = queue.removeFirst()
            guard waiters[id] != nil else { continue }
            waiters[id]!.holdsSlot = true
            freeSlots -= 1
            granted.append(id)
        }
        return granted
    }

    /// Tells the caller waiting for the reply that starts with `header` how many of its bytes have arrived (nil: all).
    func reportProgress(_ header: FrameHeader, received: Int?) {
        let progress = lock.withLock { waiters[header.requestID]?.progress }
        let size = 4 + Int(header.length)
        progress?(received ?? size, size)
    }

    /// Gives up waiting for request `id` (deadline or cancellation); a written request keeps its slot until the
    /// server's reply arrives and is dropped.
    private func abandon(_ id: UInt32, _ error: LarderError) {
        let continuation: CheckedContinuation<Result<Frame, LarderError>, Never>? = lock.withLock {
            guard var waiter = waiters[id] else { return nil }
            guard let continuation = waiter.continuation else {
                waiter.aborted = error
                waiters[id] = waiter
                return nil
            }
            if waiter.holdsSlot {
                waiter.continuation = nil
                waiter.progress = nil
                waiters[id] = waiter
            } else {
                waiters[id] = nil
                queue.removeAll { $0 == id }
            }
            return continuation
        }
        continuation?.resume(returning: .failure(error))
    }

    /// Queues request `id`, which holds a slot, for the I/O thread to write.
    private func write(_ id: UInt32) {
        guard
            let taken = lock.withLock({ () -> (Frame, (@Sendable (Int, Int) -> Void)?)? in
                guard let frame = waiters[id]?.request else { return nil }
                waiters[id]!.request = nil
                return (frame, waiters[id]!.progress)
            })
        else { return }
        let (frame, progress) = taken
        // Encoded and queued under one lock: the bytes of two requests never interleave, and requests go out in the
        // order they were granted slots.
        encoderLock.withLock { () -> Void in
            var bytes: [UInt8] = []
            encoder.encode(frame, into: &bytes)
            let total = bytes.count
            var report: (@Sendable (Int) -> Void)?
            if frame.binary.count >= 1 << 20, let progress {
                report = { @Sendable (sent: Int) -> Void in progress(sent, total) }
            }
            io.send(bytes, name: frame.opcode.name, progress: report)
        }
    }

    // MARK: - Delivering answers

    func deliver(_ frame: Frame) {
        if frame.isPush { return deliverEvent(frame) }
        var writes: [UInt32] = []
        let (continuation, onReply) = lock.withLock {
            () -> (CheckedContinuation<Result<Frame, LarderError>, Never>?, (@Sendable (Frame) -> Void)?) in
            guard let waiter = waiters.removeValue(forKey: frame.requestID) else {
                if frame.status != .ok {
                    serverError = LarderError(status: frame.status, json: (try? JSONParser.parse(frame.json)) ?? .null)
                }
                return (nil, nil)
            }
            if waiter.holdsSlot {
                freeSlots += 1
                writes += grantFreeSlots()
            }
            return (waiter.continuation, waiter.onReply)
        }
        onReply?(frame)
        continuation?.resume(returning: .success(frame))
        // Queued, not written: the I/O thread writes them once it is done reading.
        for id in writes { write(id) }
    }

    /// Fails every request in flight with `error` and shuts the socket; later calls fail at once. `lost`: the
    /// connection broke (rather than being closed by this client), and each request's error says whether it was sent.
    func close(
        _ error: LarderError = LarderError(.unavailable, "the client closed the connection"), lost: Bool = false
    ) {
        var sinks: [EventSink] = []
        defer {
            let failure = lock.withLock { self.failure } ?? error
            for sink in sinks { sink.fail(failure) }
        }
        let continuations: [(CheckedContinuation<Result<Frame, LarderError>, Never>, LarderError)] = lock.withLock {
            sinks = Array(subscriptions.values)
            subscriptions.removeAll()
            guard failure == nil else { return [] }
            var error = error
            if let serverError, error.status == .unavailable, error.details["reason"] == nil {
                error = LarderError(
                    serverError.status, serverError.message + " (the server then closed the connection)",
                    field: serverError.field, details: serverError.details)
            }
            failure = error
            // Each request learns whether it was handed to the socket's thread: one that never was (it waited for an
            // in-flight slot) was not applied anywhere; one that was may have reached the server.
            let continuations = waiters.values.compactMap { waiter in
                waiter.continuation.map {
                    ($0, lost ? Connection.lost(error, opcode: waiter.opcode, sent: waiter.request == nil) : error)
                }
            }
            waiters.removeAll()
            queue.removeAll()
            return continuations
        }
        for (continuation, error) in continuations { continuation.resume(returning: .failure(error)) }
        io.stop()
    }

    /// The error a request in flight gets when its connection ends with `error`: UNAVAILABLE (unless the server said
    /// otherwise) saying whether the request was sent, with details `sent`. A request that was sent may have been
    /// applied; one that was not was applied nowhere.
    static func lost(_ error: LarderError, opcode: Opcode, sent: Bool) -> LarderError {
        guard error.status == .unavailable else { return error }
        var details = error.details
        details["sent"] = .bool(sent)
        let what =
            sent
            ? "\(opcode.name) was sent and may or may not have been applied; read it back before retrying"
            : "\(opcode.name) was not sent, so it was not applied"
        return LarderError(.unavailable, "\(error.message) (\(what))", field: error.field, details: details)
    }
}
