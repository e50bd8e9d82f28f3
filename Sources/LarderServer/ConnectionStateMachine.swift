import LarderWire

/// The protocol logic of one connection, without sockets: events in, actions out.
///
/// It owns the inbound buffer, the decoder, the encoder and the unsent output. The `ServerConnection` shell feeds it
/// bytes and timer ticks, runs the requests it hands out, writes what it buffered, and performs the actions it
/// returns. Times are milliseconds on a monotonic clock.
package struct ConnectionStateMachine {
    let configuration: Configuration
    private(set) var phase: Phase = .handshake
    private var decoder: FrameDecoder
    /// Shared by every connection of an event loop: a zlib deflater costs ~100 KB, far too much per idle connection.
    private let encoders: SharedEncoders
    private var inbound = ByteBuffer()
    private var output = OutputQueue()
    /// Binary parts at least this large are sent from their own buffer.
    static let separateBinaryBytes = OutputQueue.separateBinaryBytes
    /// The requests admitted and not yet answered.
    private var requests = InFlightRequests()
    var inFlight: Int { requests.count }
    /// Requests admitted but waiting for the requests before them (counted in `inFlight`).
    package var heldRequests: Int { requests.heldCount }
    /// Reading stopped because the unsent output passed the high-water mark.
    private(set) var readingPaused = false
    private(set) var shuttingDown = false
    /// When the frame at the head of the inbound buffer started arriving.
    private var frameStartedAt: UInt64?
    private var lastActivity: UInt64
    /// The largest unsent output this connection ever held (for tests and STATS).
    var peakUnsentBytes: Int { output.peakUnsentBytes }
    /// The connection holds a subscription: waiting for events is not idleness (set by the shell).
    package var isWatching = false
    /// Frame bytes received and sent as if nothing were compressed (for the compression ratio in STATS).
    package private(set) var uncompressedBytesIn = 0
    package private(set) var uncompressedBytesOut = 0

    private var encoderEnabled = false
    /// A HELLO whose session the shell is looking up (`lookUpSession`): reading stops, and nothing after the HELLO is
    /// decoded until the answer (`sessionLookedUp`) finishes it.
    private var helloAwaitingSession: (negotiated: HelloNegotiation.Negotiated, requestID: UInt32)?

    private var identity = ConnectionIdentity()
    /// What the token presented in HELLO may do (nil: the server requires no token).
    package var grant: Grant? { identity.grant }
    /// The user a valid ID token signed this connection in as (`issuer|subject`); nil otherwise.
    package var user: String? { identity.user }
    /// The storage key of the session HELLO presented (`session`); nil otherwise.
    package var session: [UInt8]? { identity.session }
    /// Whether the collections' rules decide what this connection may do (a user, or an anonymous connection on a
    /// server that accepts ID tokens), rather than a role token's grant.
    package var followsRules: Bool { identity.followsRules }
    /// Who this connection's uploads count against (`ConnectionIdentity.uploader`).
    package var uploader: String { identity.uploader }
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

    /// Output queued and not yet written.
    package var unsentBytes: Int { output.unsentBytes }
    package var isClosed: Bool { phase == .closed }
    package var isHandshakeDone: Bool {
        switch phase {
        case .handshake: false
        default: true
        }
    }

    // MARK: Events

    package mutating func bytesReceived(_ bytes: UnsafeRawBufferPointer, now: UInt64) -> [Action] {
        var actions: [Action] = []
        bytesReceived(bytes, now: now, into: &actions)
        return actions
    }

    /// `bytesReceived`, appending its actions to `actions` (a buffer the shell reuses, so that a request costs no
    /// array of its own).
    package mutating func bytesReceived(_ bytes: UnsafeRawBufferPointer, now: UInt64, into actions: inout [Action]) {
        switch phase {
        case .handshake, .ready:
            lastActivity = now
            guard inbound.readableCount == 0 else {
                inbound.append(bytes)
                return processInbound(now: now, &actions)
            }
            // Nothing buffered (the usual case): whole frames are decoded straight from the bytes read, and only what
            // is left (a partial frame, or frames held back while reading is paused) is buffered.
            processInbound(now: now, direct: bytes, &actions)
        case .closing, .closed:
            return
        }
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
        var actions: [Action] = []
        requestCompleted(reply, now: now, into: &actions)
        return actions
    }

    /// `requestCompleted`, appending its actions to `actions`.
    package mutating func requestCompleted(_ reply: Reply, now: UInt64, into actions: inout [Action]) {
        let released = requests.answered(reply.requestID)
        guard phase != .closed else {
            // Closed: the requests this one held back never run, so they leave the books unanswered (and release
            // the ones behind them in turn), and `inFlight` counts only what is still out.
            var dropped = released
            while let frame = dropped.popLast() { dropped += requests.answered(frame.requestID) }
            return
        }
        send(reply, &actions)
        // After the reply: requests held behind this one are answered after it. Those of a revoked token never run:
        // each is answered UNAUTHENTICATED, and releases the ones behind it in turn.
        var pending = released[...]
        while let frame = pending.popFirst() {
            guard identity.revoked else {
                actions.append(.execute(frame))
                continue
            }
            pending += requests.answered(frame.requestID)
            self.reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: Self.revokedError), &actions)
        }
        resumeIfBelowLowWater(now: now, &actions)
        closeIfDone(&actions)
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
    package func withUnsentOutput<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R { output.withFirstRun(body) }

    /// Whether `withUnsentOutput` hands out all of the unsent output.
    package var unsentIsContiguous: Bool { output.isOneRun }

    /// Calls `body` with the output not yet written as up to `limit` buffers, in order (for `writev`); report what
    /// was written with `writeCompleted`.
    package func withUnsentBuffers<R>(limit: Int = 64, _ body: ([UnsafeRawBufferPointer]) -> R) -> R {
        output.withBuffers(limit: limit, body)
    }

    /// The output not yet written, as the buffers themselves (shared, not copied) and the offset into the first: what
    /// a sender on another thread writes while this machine keeps queueing after it. Report what was written with
    /// `writeCompleted`, as for `withUnsentBuffers`.
    func unsentSnapshot(limit: Int = 64) -> (items: [OutputQueue.Item], offset: Int) { output.snapshot(limit: limit) }

    package mutating func writeCompleted(_ count: Int, now: UInt64) -> [Action] {
        output.written(count)
        lastActivity = now
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
                && helloAwaitingSession == nil
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

    /// The token table was reloaded: the token is looked up again now, not only at the next request, so that a
    /// connection that only waits for events is held to the new table too. A removed token ends the connection with
    /// UNAUTHENTICATED (opcode 0, request id 0); a changed grant is in `grant` from now on.
    package mutating func tokensReloaded(now: UInt64, into actions: inout [Action]) {
        guard phase == .ready, !identity.renew(from: configuration.tokens) else { return }
        sendConnectionError(Self.revokedError, reason: .tokenRevoked, now: now, &actions)
    }

    /// The session this connection signed in with has ended (the shell checks it again while the connection
    /// watches, `AccountLimits.sessionCheckMs`): `error` (UNAUTHENTICATED, opcode 0, request id 0), then close.
    package mutating func sessionEnded(_ error: LarderError, now: UInt64, into actions: inout [Action]) {
        guard phase == .ready else { return }
        sendConnectionError(error, reason: .sessionEnded, now: now, &actions)
    }

    static let revokedError = LarderError(
        .unauthenticated, "the token of this connection was revoked; connect again with a valid token")

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

    /// Decodes and handles the frames in `inbound`, or in `direct` (bytes just read while `inbound` was empty: what
    /// is not decoded of them is left in `inbound`, as if they had been appended to it first).
    private mutating func processInbound(
        now: UInt64, direct: UnsafeRawBufferPointer? = nil, _ actions: inout [Action]
    ) {
        var decodedAny = false
        var used = 0
        defer {
            if let direct, used < direct.count { inbound.append(UnsafeRawBufferPointer(rebasing: direct[used...])) }
        }
        decoding: while !readingPaused && helloAwaitingSession == nil {
            switch phase {
            case .handshake, .ready: break
            default: return
            }
            let frame: Frame
            do throws(FrameError) {
                if let direct {
                    guard let (next, size) = try decoder.next(in: UnsafeRawBufferPointer(rebasing: direct[used...]))
                    else { break decoding }
                    frame = next
                    used += size
                } else {
                    guard let next = try decoder.next(&inbound) else { break decoding }
                    frame = next
                }
            } catch {
                fail(error.error, requestID: error.requestID, opcode: error.opcode, now: now, &actions)
                return
            }
            decodedAny = true
            uncompressedBytesIn += Frame.prefixSize + frame.json.count + frame.binary.count
            handle(frame, now: now, &actions)
        }
        if let direct, used < direct.count {
            inbound.append(UnsafeRawBufferPointer(rebasing: direct[used...]))
            used = direct.count  // buffered: the deferred append has nothing left to do
        }
        if inbound.readableCount == 0 {
            frameStartedAt = nil
        } else {
            if decodedAny || frameStartedAt == nil { frameStartedAt = now }
            // A frame under way (an upload chunk, 1 MiB): its whole length in one allocation, once an eighth of it is
            // in (a peer that only sends headers gets no more room reserved than 8x what it sent).
            if let header = try? decoder.peekHeader(inbound), Int(header.length) <= 8 * inbound.readableCount {
                inbound.reserveReadable(4 + Int(header.length))
            }
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
        if isHandshakeDone, !identity.renew(from: configuration.tokens) {
            fail(Self.revokedError, requestID: frame.requestID, opcode: frame.opcode, now: now, &actions)
            return
        }
        if let grant, grant != .unrestricted, let denied = grant.check(frame) {
            reply(Reply(opcode: frame.opcode, requestID: frame.requestID, error: denied), &actions)
            return
        }
        if identity.followsRules, let denied = UserAccess.precheck(frame, user: identity.user) {
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
            switch requests.admit(frame) {
            case .run:
                actions.append(.execute(frame))
            case .held:
                break
            case .duplicateID:
                // Two answers with one id could not be told apart. The first request is still answered; this one
                // is not run, and the connection ends.
                let error = LarderError(
                    .protocolError,
                    "request id \(frame.requestID) is already in flight on this connection; a client must not reuse an "
                        + "id before its answer has arrived")
                sendConnectionError(error, reason: .protocolError(.protocolError), now: now, &actions)
                return
            }
            pauseIfOverHighWater(&actions)
        }
    }

    /// Stops reading (and decoding) while the unsent output or the requests in flight are over their high-water
    /// marks; frames already buffered stay undecoded, so compressed ones stay small.
    private mutating func pauseIfOverHighWater(_ actions: inout [Action]) {
        guard !readingPaused,
            unsentBytes > configuration.outputHighWaterBytes || requests.bytes > configuration.inputHighWaterBytes
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
        guard readingPaused, helloAwaitingSession == nil, unsentBytes <= configuration.outputHighWaterBytes / 2,
            requests.bytes <= configuration.inputHighWaterBytes / 2
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
        let outcome = HelloNegotiation.negotiate(frame, configuration: configuration, tls: isTLS)
        helloNegotiated(outcome, requestID: frame.requestID, now: now, &actions)
    }

    /// The shell looked up the session a HELLO presented (`Action.lookUpSession`): the HELLO is answered, and what
    /// arrived after it is decoded. Nothing is answered if the connection closed meanwhile.
    package mutating func sessionLookedUp(
        _ result: Result<SessionSignIn.Found, LarderError>, now: UInt64, into actions: inout [Action]
    ) {
        guard let (negotiated, requestID) = helloAwaitingSession else { return }
        helloAwaitingSession = nil
        switch phase {
        case .handshake:
            let outcome = HelloNegotiation.negotiated(negotiated, session: result, configuration: configuration, tls: isTLS)
            helloNegotiated(outcome, requestID: requestID, now: now, &actions)
            resumeIfBelowLowWater(now: now, &actions)
        case .closing:
            closeIfDone(&actions)
        case .ready, .closed:
            break
        }
    }

    private mutating func helloNegotiated(
        _ outcome: HelloNegotiation.Outcome, requestID: UInt32, now: UInt64, _ actions: inout [Action]
    ) {
        switch outcome {
        case .lookUpSession(let session, let negotiated):
            helloAwaitingSession = (negotiated, requestID)
            if !readingPaused { actions.append(.pauseReading) }
            readingPaused = true
            actions.append(.lookUpSession(session))
        case .accepted(let response, let compression, let caller):
            phase = .ready
            if caller != nil { identity = ConnectionIdentity(caller) }
            let limits = configuration.limits
            decoder.maxFrameBytes = limits.maxFrameBytes
            decoder.maxJSONBytes = limits.maxJSONBytes
            decoder.maxBinaryBytes = limits.maxBlobBytes
            decoder.acceptsCompressed = compression
            reply(Reply(opcode: .hello, requestID: requestID, json: response.json.bytes), &actions)
            // Only replies after this one are compressed: the client learns the choice from this reply.
            encoderEnabled = compression
        case .rejected(let error, let close):
            if close {
                fail(error, requestID: requestID, opcode: .hello, now: now, &actions)
            } else {
                reply(Reply(opcode: .hello, requestID: requestID, error: error), &actions)
            }
        }
    }

    /// A reply the state machine made itself.
    private mutating func reply(_ reply: Reply, _ actions: inout [Action]) {
        // An error the server sends unprompted (opcode 0) answers no request.
        actions.append(.record(reply.opcode, reply.status, requestID: reply.opcode.rawValue == 0 ? nil : reply.requestID))
        send(reply, &actions)
    }

    private mutating func send(_ reply: Reply, flags: Frame.Flags = .response, _ actions: inout [Action]) {
        let wasEmpty = unsentBytes == 0
        uncompressedBytesOut += Frame.prefixSize + reply.json.count + reply.binaryCount
        output.append(reply, flags: flags, encoder: encoderEnabled ? encoders.compressing : encoders.plain)
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
        guard case .closing(let reason, _) = phase, inFlight == 0, unsentBytes == 0, helloAwaitingSession == nil
        else { return }
        phase = .closed
        actions.append(.close(reason))
    }
}
