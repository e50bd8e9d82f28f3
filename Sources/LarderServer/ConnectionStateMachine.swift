import LarderWire

/// A reply ready to be framed: what a request handler produces.
package struct Reply: Sendable {
    package var opcode: Opcode
    package var requestID: UInt32
    package var status: Status
    package var json: [UInt8]
    package var binary: [UInt8]

    package init(opcode: Opcode, requestID: UInt32, status: Status = .ok, json: [UInt8], binary: [UInt8] = []) {
        self.opcode = opcode
        self.requestID = requestID
        self.status = status
        self.json = json
        self.binary = binary
    }

    /// An error reply: the status in the header and the error object as the JSON part.
    package init(opcode: Opcode, requestID: UInt32, error: LarderError) {
        self.init(opcode: opcode, requestID: requestID, status: error.status, json: error.json.bytes)
    }
}

/// Why a connection closed; logged, and counted in STATS.
package enum CloseReason: Sendable, Equatable, CustomStringConvertible {
    /// The peer closed its side and every reply was sent.
    case peerClosed
    /// The byte stream broke the framing rules (or a request came before HELLO); an error frame was sent first.
    case protocolError(Status)
    case idleTimeout
    case frameTimeout
    /// A read or write failed (e.g. connection reset).
    case ioError(String)
    case shutdown

    package var description: String {
        switch self {
        case .peerClosed: "peer closed"
        case .protocolError(.unauthenticated): "UNAUTHENTICATED: no token, or a wrong one"
        case .protocolError(let status): "protocol error (\(status.name))"
        case .idleTimeout: "idle timeout"
        case .frameTimeout: "frame deadline exceeded"
        case .ioError(let message): "I/O error: \(message)"
        case .shutdown: "server shutdown"
        }
    }
}

/// The protocol logic of one connection, without sockets: events in, actions out (STYLE.md #6).
///
/// It owns the inbound buffer, the decoder, the encoder and the unsent output. The `Connection` shell feeds it bytes
/// and timer ticks, runs the requests it hands out, writes what it buffered, and performs the actions it returns.
/// Times are milliseconds on a monotonic clock.
package struct ConnectionStateMachine {
    package struct Configuration: Sendable {
        package var limits: Limits
        /// The tokens HELLO accepts and what each may do; nil: no token is required and every client is an admin.
        package var tokens: (any TokenSource)?
        package var compressionThreshold: Int
        package var zlibLevel: Int32
        /// Unsent output at which reading pauses; it resumes below half of it.
        package var outputHighWaterBytes: Int
        /// Bytes of requests read and not yet answered (JSON parts inflated, plus binary parts) at which reading
        /// pauses; it resumes below half of it. Without it, 128 pipelined frames of 4 KiB that each inflate to
        /// 4 MiB held half a gigabyte (hostile finding 4, RELIABILITY.md).
        package var inputHighWaterBytes: Int
        package var serverName: String

        package init(
            limits: Limits = .default, token: String? = nil, compressionThreshold: Int = FrameEncoder.defaultThreshold,
            zlibLevel: Int32 = FrameEncoder.defaultLevel, outputHighWaterBytes: Int = 4 << 20,
            inputHighWaterBytes: Int = 16 << 20, serverName: String = "larder-server", tokens: (any TokenSource)? = nil
        ) {
            self.limits = limits
            self.tokens = tokens ?? token.map { FixedTokens(TokenTable(adminToken: $0)) }
            self.compressionThreshold = compressionThreshold
            self.zlibLevel = zlibLevel
            self.outputHighWaterBytes = outputHighWaterBytes
            self.inputHighWaterBytes = inputHighWaterBytes
            self.serverName = serverName
        }
    }

    package enum Action: Equatable {
        /// Run this request (on the connection's event loop or off it), then report `requestCompleted`.
        case execute(Frame)
        /// Output is waiting: write it (`unsentOutput` / `writeCompleted`).
        case flush
        case pauseReading
        case resumeReading
        /// Take the descriptor off the event loop and close it; the state machine is finished.
        case close(CloseReason)
        /// A reply the state machine produced itself (HELLO, refusals), for STATS.
        case record(Opcode, Status)
    }

    enum Phase: Equatable {
        /// Before a successful HELLO: only HELLO and PING, small frames.
        case handshake
        case ready
        /// No more reading; close once every request in flight is answered and the output is sent.
        case closing(CloseReason, since: UInt64)
        case closed
    }

    let configuration: Configuration
    private(set) var phase: Phase = .handshake
    private var decoder: FrameDecoder
    /// Shared by every connection of an event loop: a zlib deflater costs ~100 KB, far too much per idle connection.
    private let encoders: SharedEncoders
    private var inbound = ByteBuffer()
    /// Unsent output, in order. Frames are encoded into the last buffer; a large binary part (a blob) is queued as a
    /// buffer of its own and written from there instead of being copied (the shell hands the buffers to `writev`).
    private var outputQueue: [[UInt8]] = [[]]
    /// The first buffer with unsent bytes, and how much of it is written.
    private var outputHead = 0
    private var outputOffset = 0
    /// Binary parts at least this large are sent from their own buffer.
    static let separateBinaryBytes = 64 << 10
    private(set) var inFlight = 0
    /// What the requests in flight hold (JSON inflated plus binary), in total.
    private(set) var inFlightRequestBytes = 0
    /// The size (JSON inflated plus binary) of every request admitted and not yet answered, by request id: unique
    /// among them, since a reused id is refused.
    private var requests: [UInt32: Int] = [:]
    /// Which requests run now and which wait for them.
    private var order = RequestOrder()
    /// Requests admitted but waiting for the requests before them (counted in `inFlight`).
    package var heldRequests: Int { order.heldCount }
    /// Reading stopped because the unsent output passed the high-water mark.
    private(set) var readingPaused = false
    private(set) var shuttingDown = false
    /// When the frame at the head of the inbound buffer started arriving.
    private var frameStartedAt: UInt64?
    private var lastActivity: UInt64
    /// The largest unsent output this connection ever held (for tests and STATS).
    private(set) var peakUnsentBytes = 0
    /// The connection holds a subscription: waiting for events is not idleness (set by the shell).
    package var isWatching = false
    /// Frame bytes received and sent as if nothing were compressed (for the compression ratio in STATS).
    package private(set) var uncompressedBytesIn = 0
    package private(set) var uncompressedBytesOut = 0

    private var encoderEnabled = false

    /// What the token presented in HELLO may do (nil: the server requires no token).
    package private(set) var grant: Grant?
    /// The token presented, kept to look it up again after the token table is reloaded.
    private var presentedToken: [UInt8] = []
    private var grantGeneration = 0
    /// The connection runs over TLS (set by the shell before any byte arrives); HELLO says so.
    package var isTLS = false

    /// `encoders` must be used only on the event loop that drives this machine (each loop has its own).
    package init(configuration: Configuration, now: UInt64, encoders: SharedEncoders? = nil) {
        self.configuration = configuration
        let cap = configuration.limits.maxHandshakeFrameBytes
        decoder = FrameDecoder(maxFrameBytes: cap, maxJSONBytes: cap, maxBinaryBytes: cap)
        decoder.acceptsCompressed = false  // until HELLO agrees to zlib
        self.encoders = encoders ?? SharedEncoders(configuration: configuration)
        lastActivity = now
    }

    /// Bytes written by the peer.
    package private(set) var unsentBytes = 0
    package var isClosed: Bool { phase == .closed }
    package var isHandshakeDone: Bool {
        switch phase {
        case .handshake: false
        default: true
        }
    }

    // MARK: Events

    package mutating func bytesReceived(_ bytes: UnsafeRawBufferPointer, now: UInt64) -> [Action] {
        switch phase {
        case .handshake, .ready: return receive(bytes, now: now)
        case .closing, .closed: return []
        }
    }

    private mutating func receive(_ bytes: UnsafeRawBufferPointer, now: UInt64) -> [Action] {
        lastActivity = now
        inbound.append(bytes)
        var actions: [Action] = []
        processInbound(now: now, &actions)
        return actions
    }

    /// The peer closed its sending side: answer what is in flight, then close.
    package mutating func readEOF(now: UInt64) -> [Action] {
        switch phase {
        case .handshake, .ready:
            var actions: [Action] = []
            if inbound.readableCount > 0 {
                // A frame cut short by the end of the stream.
                fail(LarderError(.protocolError, "the connection ended in the middle of a frame"), requestID: 0,
                    opcode: Opcode(rawValue: 0), now: now, &actions)
                return actions
            }
            // Stop reading: a socket at end of stream stays readable and would wake us forever.
            if !readingPaused { actions.append(.pauseReading) }
            readingPaused = true
            phase = .closing(.peerClosed, since: now)
            closeIfDone(&actions)
            return actions
        case .closing, .closed:
            return []
        }
    }

    /// A request handed out by `.execute` finished.
    package mutating func requestCompleted(_ reply: Reply, now: UInt64) -> [Action] {
        inFlight -= 1
        if let bytes = requests.removeValue(forKey: reply.requestID) { inFlightRequestBytes -= bytes }
        let released = order.answered()
        guard phase != .closed else { return [] }
        var actions: [Action] = []
        send(reply, &actions)
        // After the reply: requests held behind this one are answered after it.
        for frame in released { actions.append(.execute(frame)) }
        resumeIfBelowLowWater(now: now, &actions)
        closeIfDone(&actions)
        return actions
    }

    /// Whether pushed frames are accepted: after HELLO and before closing.
    package var canPush: Bool { phase == .ready }

    /// Queues a frame the server sends unasked (a change-feed event: push flag, no response flag). Nothing is queued
    /// before HELLO or once the connection is closing.
    package mutating func push(opcode: Opcode, requestID: UInt32, json: [UInt8]) -> [Action] {
        guard canPush else { return [] }
        var actions: [Action] = []
        send(Reply(opcode: opcode, requestID: requestID, json: json), flags: .push, &actions)
        return actions
    }

    /// Calls `body` with the first contiguous run of output not yet written (all of it unless a large binary part
    /// is queued); report what was written with `writeCompleted`.
    package func withUnsentOutput<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        outputQueue[outputHead].withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[outputOffset...])) }
    }

    /// Calls `body` with the output not yet written as up to `limit` buffers, in order (for `writev`); report what
    /// was written with `writeCompleted`.
    package func withUnsentBuffers<R>(limit: Int = 64, _ body: ([UnsafeRawBufferPointer]) -> R) -> R {
        var buffers: [UnsafeRawBufferPointer] = []
        buffers.reserveCapacity(min(limit, outputQueue.count - outputHead))
        return collect(outputHead, offset: outputOffset, limit: limit, &buffers, body)
    }

    private func collect<R>(
        _ index: Int, offset: Int, limit: Int, _ buffers: inout [UnsafeRawBufferPointer],
        _ body: ([UnsafeRawBufferPointer]) -> R
    ) -> R {
        guard index < outputQueue.count, buffers.count < limit else { return body(buffers) }
        return outputQueue[index].withUnsafeBytes { raw in
            if raw.count > offset { buffers.append(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
            return collect(index + 1, offset: 0, limit: limit, &buffers, body)
        }
    }

    /// The output not yet written, as the buffers themselves (shared, not copied) and the offset into the first: what
    /// a sender on another thread writes while this machine keeps queueing after it. Report what was written with
    /// `writeCompleted`, as for `withUnsentBuffers`.
    package func unsentSnapshot(limit: Int = 64) -> (buffers: [[UInt8]], offset: Int) {
        let end = min(outputQueue.count, outputHead + limit)
        return (Array(outputQueue[outputHead..<end]), outputOffset)
    }

    package mutating func writeCompleted(_ count: Int, now: UInt64) -> [Action] {
        unsentBytes -= count
        outputOffset += count
        lastActivity = now
        // Past the buffers written in full (a blob's buffer is released here).
        while outputHead < outputQueue.count - 1 && outputOffset >= outputQueue[outputHead].count {
            outputOffset -= outputQueue[outputHead].count
            outputQueue[outputHead] = []
            outputHead += 1
        }
        if unsentBytes == 0 {
            if outputQueue.count > 1 { outputQueue.removeFirst(outputQueue.count - 1) }
            outputQueue[0].removeAll(keepingCapacity: outputQueue[0].capacity <= 64 << 10)
            outputHead = 0
            outputOffset = 0
        } else if outputHead == outputQueue.count - 1 && outputOffset >= 1 << 20 {
            outputQueue[outputHead].removeFirst(outputOffset)
            outputOffset = 0
        } else if outputHead >= 64 {
            outputQueue.removeFirst(outputHead)
            outputHead = 0
        }
        var actions: [Action] = []
        resumeIfBelowLowWater(now: now, &actions)
        closeIfDone(&actions)
        return actions
    }

    /// The periodic tick: enforces the idle timeout, the frame deadline and the closing deadline.
    package mutating func timerFired(now: UInt64) -> [Action] {
        var actions: [Action] = []
        let limits = configuration.limits
        switch phase {
        case .closed:
            return []
        case .closing(_, let since):
            // A peer that stopped reading cannot hold a closing connection open forever.
            if now >= since + UInt64(limits.frameTimeoutMs) {
                phase = .closed
                actions.append(.close(.frameTimeout))
            }
        case .handshake, .ready:
            if let started = frameStartedAt, !readingPaused, now >= started + UInt64(limits.frameTimeoutMs) {
                let error = LarderError(
                    .deadlineExceeded, "a frame was not completed within \(limits.frameTimeoutMs) ms",
                    details: ["limit": .int(Int64(limits.frameTimeoutMs))])
                sendConnectionError(error, reason: .frameTimeout, now: now, &actions)
            } else if inFlight == 0 && unsentBytes == 0 && inbound.readableCount == 0 && !isWatching
                && now >= lastActivity + UInt64(limits.idleTimeoutMs)
            {
                let error = LarderError(
                    .deadlineExceeded, "the connection was idle for \(limits.idleTimeoutMs) ms",
                    details: ["limit": .int(Int64(limits.idleTimeoutMs))])
                sendConnectionError(error, reason: .idleTimeout, now: now, &actions)
            }
        }
        return actions
    }

    /// The server is shutting down: later requests are answered UNAVAILABLE; the server closes the connection once
    /// nothing is in flight.
    package mutating func beginShutdown() {
        shuttingDown = true
    }

    /// Closes at once (I/O error, end of the shutdown grace period).
    package mutating func forceClose(_ reason: CloseReason) -> [Action] {
        guard phase != .closed else { return [] }
        phase = .closed
        return [.close(reason)]
    }

    // MARK: Internals

    private mutating func processInbound(now: UInt64, _ actions: inout [Action]) {
        var decodedAny = false
        decoding: while !readingPaused {
            switch phase {
            case .handshake, .ready: break
            default: return
            }
            let frame: Frame
            do throws(FrameError) {
                guard let next = try decoder.next(&inbound) else { break decoding }
                frame = next
            } catch {
                fail(error.error, requestID: error.requestID, opcode: error.opcode, now: now, &actions)
                return
            }
            decodedAny = true
            uncompressedBytesIn += Frame.prefixSize + frame.json.count + frame.binary.count
            handle(frame, now: now, &actions)
        }
        if inbound.readableCount == 0 {
            frameStartedAt = nil
        } else if decodedAny || frameStartedAt == nil {
            frameStartedAt = now
        }
    }

    private mutating func handle(_ frame: Frame, now: UInt64, _ actions: inout [Action]) {
        if frame.isResponse || frame.isPush {
            let error = LarderError(.protocolError, "a client must not send response or push frames")
            fail(error, requestID: frame.requestID, opcode: frame.opcode, now: now, &actions)
            return
        }
        if frame.status != .ok {
            // Not run: a client that sends a status is likely echoing a frame it received.
            let error = LarderError(
                .invalidArgument, "a request carries status 0 (OK) in its header; this one carries \(frame.status.rawValue)")
            reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: error), &actions)
            return
        }
        switch phase {
        case .handshake:
            if frame.opcode == .hello && shuttingDown {
                let error = LarderError(.unavailable, "the server is shutting down; retry on another server or later")
                reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: error), &actions)
            } else if frame.opcode == .hello {
                hello(frame, now: now, &actions)
            } else if frame.opcode == .ping {
                admit(frame, now: now, &actions)
            } else {
                let error =
                    configuration.tokens == nil
                    ? LarderError(.protocolError, "send HELLO first: only HELLO and PING are accepted before it")
                    : LarderError(.unauthenticated, "send HELLO with the token first")
                fail(error, requestID: frame.requestID, opcode: frame.opcode, now: now, &actions)
            }
        case .ready:
            if frame.opcode == .hello {
                let error = LarderError(.invalidArgument, "HELLO was already accepted on this connection")
                reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: error), &actions)
            } else {
                admit(frame, now: now, &actions)
            }
        default:
            break
        }
    }

    /// Hands a request out to run, unless the server is shutting down or the in-flight limit is reached.
    private mutating func admit(_ frame: Frame, now: UInt64, _ actions: inout [Action]) {
        if let tokens = configuration.tokens, tokens.generation != grantGeneration, isHandshakeDone {
            // The token table was reloaded: this connection's token is looked up again.
            let current = tokens.current
            grantGeneration = current.generation
            guard let renewed = current.table.grant(for: presentedToken) else {
                grant = nil
                let error = LarderError(
                    .unauthenticated, "the token of this connection was revoked; connect again with a valid token")
                fail(error, requestID: frame.requestID, opcode: frame.opcode, now: now, &actions)
                return
            }
            grant = renewed
        }
        if let grant, grant != .unrestricted, let denied = grant.check(frame) {
            reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: denied), &actions)
            return
        }
        if shuttingDown {
            let error = LarderError(.unavailable, "the server is shutting down; retry on another server or later")
            reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: error), &actions)
        } else if inFlight >= configuration.limits.maxInFlight {
            let limit = configuration.limits.maxInFlight
            let error = LarderError(
                .resourceExhausted,
                "more than \(limit) requests in flight on this connection; wait for replies before sending more",
                details: ["limit": .int(Int64(limit))])
            reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: error), &actions)
        } else {
            let size = frame.json.count + frame.binary.count
            if let first = requests.updateValue(size, forKey: frame.requestID) {
                // Two answers with one id could not be told apart. The first request is still answered; this one
                // is not run, and the connection ends.
                requests[frame.requestID] = first
                let error = LarderError(
                    .protocolError,
                    "request id \(frame.requestID) is already in flight on this connection; a client must not reuse an "
                        + "id before its answer has arrived")
                sendConnectionError(error, reason: .protocolError(.protocolError), now: now, &actions)
                return
            }
            inFlight += 1
            inFlightRequestBytes += size
            if order.admit(frame) { actions.append(.execute(frame)) }
            pauseIfOverHighWater(&actions)
        }
    }

    /// Stops reading (and decoding) while the unsent output or the requests in flight are over their high-water
    /// marks; frames already buffered stay undecoded, so compressed ones stay small.
    private mutating func pauseIfOverHighWater(_ actions: inout [Action]) {
        guard !readingPaused,
            unsentBytes > configuration.outputHighWaterBytes || inFlightRequestBytes > configuration.inputHighWaterBytes
        else { return }
        switch phase {
        case .handshake, .ready:
            readingPaused = true
            actions.append(.pauseReading)
        default:
            break
        }
    }

    /// Reads again once both are below half their marks.
    private mutating func resumeIfBelowLowWater(now: UInt64, _ actions: inout [Action]) {
        guard readingPaused, unsentBytes <= configuration.outputHighWaterBytes / 2,
            inFlightRequestBytes <= configuration.inputHighWaterBytes / 2
        else { return }
        switch phase {
        case .handshake, .ready:
            readingPaused = false
            // The time spent paused was the server's, not the client's: a frame half read restarts its deadline.
            frameStartedAt = nil
            actions.append(.resumeReading)
            processInbound(now: now, &actions)
        default:
            break
        }
    }

    private mutating func hello(_ frame: Frame, now: UInt64, _ actions: inout [Action]) {
        switch Handshake.negotiate(frame, configuration: configuration, tls: isTLS) {
        case .accepted(let response, let compression, let granted):
            phase = .ready
            if let granted {
                grant = granted.grant
                presentedToken = granted.token
                grantGeneration = granted.generation
            }
            let limits = configuration.limits
            decoder.maxFrameBytes = limits.maxFrameBytes
            decoder.maxJSONBytes = limits.maxJSONBytes
            decoder.maxBinaryBytes = limits.maxBlobBytes
            decoder.acceptsCompressed = compression
            reply(Reply(opcode: .hello, requestID: frame.requestID, json: response.json.bytes), &actions)
            // Only replies after this one are compressed: the client learns the choice from this reply.
            encoderEnabled = compression
        case .rejected(let error, let close):
            if close {
                fail(error, requestID: frame.requestID, opcode: .hello, now: now, &actions)
            } else {
                reply(Reply(opcode: .hello, requestID: frame.requestID, error: error), &actions)
            }
        }
    }

    /// A reply the state machine made itself.
    private mutating func reply(_ reply: Reply, _ actions: inout [Action]) {
        actions.append(.record(reply.opcode, reply.status))
        send(reply, &actions)
    }

    private mutating func send(_ reply: Reply, flags: Frame.Flags = .response, _ actions: inout [Action]) {
        let wasEmpty = unsentBytes == 0
        uncompressedBytesOut += Frame.prefixSize + reply.json.count + reply.binary.count
        let separate = reply.binary.count >= ConnectionStateMachine.separateBinaryBytes
        let last = outputQueue.count - 1
        let before = outputQueue[last].count
        reply.json.withUnsafeBytes { json in
            reply.binary.withUnsafeBytes { binary in
                (encoderEnabled ? encoders.compressing : encoders.plain).encode(
                    opcode: reply.opcode, requestID: reply.requestID, status: reply.status, flags: flags,
                    json: json, binary: binary, appendBinary: !separate, into: &outputQueue[last])
            }
        }
        unsentBytes += outputQueue[last].count - before
        if separate {
            // The array is shared, not copied; the next frames go into a fresh buffer after it.
            outputQueue.append(reply.binary)
            outputQueue.append([])
            unsentBytes += reply.binary.count
        }
        peakUnsentBytes = max(peakUnsentBytes, unsentBytes)
        if wasEmpty { actions.append(.flush) }
        pauseIfOverHighWater(&actions)
    }

    /// A fatal error: an error frame, then close once it is sent.
    private mutating func fail(
        _ error: LarderError, requestID: UInt32, opcode: Opcode, now: UInt64, _ actions: inout [Action]
    ) {
        reply(Reply(opcode: opcode, requestID: requestID, error: error), &actions)
        enterClosing(.protocolError(error.status), now: now, &actions)
    }

    /// A connection-level error (deadlines) with request id 0, then close.
    private mutating func sendConnectionError(
        _ error: LarderError, reason: CloseReason, now: UInt64, _ actions: inout [Action]
    ) {
        reply(Reply(opcode: Opcode(rawValue: 0), requestID: 0, error: error), &actions)
        enterClosing(reason, now: now, &actions)
    }

    private mutating func enterClosing(_ reason: CloseReason, now: UInt64, _ actions: inout [Action]) {
        if !readingPaused { actions.append(.pauseReading) }
        readingPaused = true
        phase = .closing(reason, since: now)
        frameStartedAt = nil
        closeIfDone(&actions)
    }

    private mutating func closeIfDone(_ actions: inout [Action]) {
        guard case .closing(let reason, _) = phase, inFlight == 0, unsentBytes == 0 else { return }
        phase = .closed
        actions.append(.close(reason))
    }
}

/// One connection's order (Protocol.md section 2.3): its requests take effect as if run one at a time in the order
/// they arrived, while consecutive reads, or consecutive writes, still run side by side.
///
/// The requests handed out and not yet answered are all reads or all writes. A request of the same kind as them is
/// handed out at once (unless others wait before it); one of the other kind waits until they are all answered, and
/// then goes out with the run of same-kind requests queued behind it. Writes handed out together reach the store's
/// writer in arrival order (the shell submits them through one lane), which commits them in that order. So a read sees
/// every write sent before it and none sent after it, and a slow SEARCH holds back a later write but never a later GET.
struct RequestOrder {
    /// Whether the requests handed out and not yet answered are writes, and how many there are.
    private(set) var runningWrites = false
    private(set) var running = 0
    /// Requests waiting for the other kind's run to end, in arrival order.
    private var held: [Frame] = []
    private var heldHead = 0

    /// Requests waiting.
    var heldCount: Int { held.count - heldHead }

    /// Whether `frame` may run now; if not, it is held until the run before it ends (`answered`).
    mutating func admit(_ frame: Frame) -> Bool {
        let write = frame.opcode.isWrite
        guard heldCount == 0, running == 0 || runningWrites == write else {
            held.append(frame)
            return false
        }
        runningWrites = write
        running += 1
        return true
    }

    /// A request handed out was answered; returns the requests that may run now, in arrival order.
    mutating func answered() -> [Frame] {
        guard running > 0 else { return [] }
        running -= 1
        guard running == 0, heldCount > 0 else { return [] }
        runningWrites = held[heldHead].opcode.isWrite
        var released: [Frame] = []
        while heldHead < held.count, held[heldHead].opcode.isWrite == runningWrites {
            released.append(held[heldHead])
            heldHead += 1
        }
        running = released.count
        if heldHead == held.count {
            held.removeAll(keepingCapacity: held.capacity <= 256)
            heldHead = 0
        }
        return released
    }
}

/// HELLO negotiation: pure, so it is tested without sockets.
package enum Handshake {
    /// The token a HELLO presented, what it may do, and the token table's generation it was checked against.
    package struct Granted {
        package var token: [UInt8]
        package var grant: Grant
        package var generation: Int
    }

    package enum Outcome {
        /// `granted` is nil when the server requires no token.
        case accepted(HelloResponse, compression: Bool, granted: Granted?)
        /// `close`: the connection ends after the error (a wrong token).
        case rejected(LarderError, close: Bool)
    }

    package static func negotiate(
        _ frame: Frame, configuration: ConnectionStateMachine.Configuration, tls: Bool = false
    ) -> Outcome {
        let request: HelloRequest
        do throws(LarderError) {
            request = try HelloRequest(json: try frame.jsonObject())
        } catch {
            return .rejected(error, close: false)
        }
        guard let version = request.versions.filter({ ProtocolVersions.supported.contains($0) }).max() else {
            let offered = request.versions.map(String.init).joined(separator: ", ")
            return .rejected(
                LarderError(
                    .unsupportedVersion,
                    "none of the offered protocol versions (\(offered)) is supported; this server speaks "
                        + ProtocolVersions.supported.map(String.init).joined(separator: ", "),
                    field: "versions",
                    details: ["supported": .array(ProtocolVersions.supported.map { .int(Int64($0)) })]),
                close: false)
        }
        var granted: Granted?
        if let tokens = configuration.tokens {
            guard let presented = request.token else {
                return .rejected(
                    LarderError(.unauthenticated, "this server requires a token in HELLO", field: "token"), close: true)
            }
            let (table, generation) = tokens.current
            let token = Array(presented.utf8)
            guard let grant = table.grant(for: token) else {
                return .rejected(LarderError(.unauthenticated, "the token is not valid", field: "token"), close: true)
            }
            granted = Granted(token: token, grant: grant, generation: generation)
        }
        let compression = request.compression.contains(zlibCompression)
        var response = HelloResponse(
            version: version, compression: compression ? zlibCompression : "none",
            compressionThreshold: configuration.compressionThreshold, limits: configuration.limits,
            server: configuration.serverName, authRequired: configuration.tokens != nil)
        if let granted {
            response.role = granted.grant.role.description
            response.collections = granted.grant.collections?.sorted()
        }
        if tls { response.tls = true }
        return .accepted(response, compression: compression, granted: granted)
    }

    /// Compares without an early exit, so the time taken does not reveal how much of a guess was right.
    package static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(truncatingIfNeeded: a.count ^ b.count)
        let n = max(a.count, b.count)
        for i in 0..<n {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= x ^ y
        }
        return difference == 0 && a.count == b.count
    }
}

/// The frame encoders of one event loop, shared by its connections (never across loops).
package final class SharedEncoders {
    let plain: FrameEncoder
    let compressing: FrameEncoder

    package init(configuration: ConnectionStateMachine.Configuration) {
        plain = FrameEncoder(compressionEnabled: false)
        compressing = FrameEncoder(
            compressionEnabled: true, threshold: configuration.compressionThreshold, level: configuration.zlibLevel)
    }
}
