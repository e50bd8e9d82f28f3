#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Synchronization
import LarderStore
import LarderSync
import LarderWire
import LarderEventLoop
import LarderIO

/// The side-effect shell around one `ConnectionStateMachine`: a non-blocking socket watched by its shard's event
/// loop. Every member is touched only on that loop's thread.
///
/// The loop-only state is marked `@exclusivity(unchecked)`: Swift checks every access to a class's stored property at
/// run time (a call into the runtime and a thread-local lookup each), which cost about a tenth of a GET's instructions.
/// Nothing here holds an access across a call that could reach the same property again: a state machine's mutating
/// call returns its actions before `perform` runs them.
final class ServerConnection: EventLoopHandler, @unchecked Sendable {
    let fd: Int32
    let id: Int
    let peer: String
    let shard: Shard
    let context: ServerContext
    @exclusivity(unchecked) var machine: ConnectionStateMachine
    /// What the loop watches for.
    @exclusivity(unchecked) var wantsRead = true
    @exclusivity(unchecked) var wantsWrite = false
    @exclusivity(unchecked) var closing = false
    @exclusivity(unchecked) private var reportedOut = 0
    @exclusivity(unchecked) private var reportedIn = 0
    @exclusivity(unchecked) private var wireIn = 0
    @exclusivity(unchecked) var wireOut = 0
    @exclusivity(unchecked) private var reportedPeak = 0
    /// When the bytes being decoded now were read (0 outside `readable`): the start of the replies the state machine
    /// makes itself (HELLO, refusals), so that they are timed as every other request is.
    @exclusivity(unchecked) private var readStarted: UInt64 = 0
    /// A flush is asked for at the end of the loop's turn: the answers produced in one turn share a `write(2)`.
    @exclusivity(unchecked) var flushPending = false
    /// The machine's actions not yet performed, in the order it returned them. `perform` appends to it and runs it;
    /// what running an action makes the machine return (an inline request's answer, say) is appended and run after the
    /// actions before it, never re-entrantly, so each action is run in the order the machine returned it.
    @exclusivity(unchecked) private var pendingActions: [ConnectionStateMachine.Action] = []
    /// `perform` is running `pendingActions`.
    @exclusivity(unchecked) private var performingActions = false
    /// Where this connection's writes are parsed and handed to the store, in order (made at the first write).
    private var writeLaneStorage: WorkPool.Lane?
    private var writeLane: WorkPool.Lane {
        if let writeLaneStorage { return writeLaneStorage }
        let lane = context.router.makeWriteLane()
        writeLaneStorage = lane
        return lane
    }
    /// The session and rules verdicts this connection's last GET held to the rules was checked with (loop only).
    @exclusivity(unchecked) private var accessMemo = AccessMemo()
    /// This connection's writes on its lane and not yet answered (`LaneWrites`).
    @exclusivity(unchecked) private var laneWrites = LaneWrites()
    /// When a watching connection's session is next checked (`checkSessionWhileWatching`; 0: not scheduled), and
    /// whether a check is on the work pool.
    @exclusivity(unchecked) private var nextSessionCheck: UInt64 = 0
    @exclusivity(unchecked) private var sessionCheckOut = false
    /// The change feed's subscriptions (ServerConnectionWatch.swift performs what it decides).
    @exclusivity(unchecked) var watches: WatchStateMachine
    /// Output of at least this many bytes (a blob) is written by a sender (a job of the work pool) instead of the
    /// loop, which goes on serving its other connections: on loopback the writer of a large send also does most of
    /// the receiver's TCP work. When the pool is full the loop writes it itself.
    static let offloadBytes = 256 << 10
    /// Whether a sender is writing this connection's output (the loop neither writes nor closes the descriptor then),
    /// and how many of the unsent bytes it holds (not counted against a subscription's buffer).
    @exclusivity(unchecked) var sending = false
    @exclusivity(unchecked) var bytesWithSender = 0
    /// Who closes the descriptor: set (under its lock) when `close` ran while a sender was writing; the sender then
    /// closes it as it finishes, whether or not the loop still runs.
    let descriptor = Locked(DescriptorState())
    struct DescriptorState {
        var senderActive = false
        var closeWhenSenderEnds = false
    }

    /// The TLS layer between the socket and the machine, on a TLS port (TLSTransport.swift).
    let tls: TLSTransport?
    /// Until when a closed TLS connection keeps its descriptor to write its last ciphertext (the answers the machine
    /// counted as sent once encrypted, then close_notify); nil while open and once the descriptor is closed.
    var lingerUntil: UInt64?
    /// Whether a closed connection reads and drops what its peer still sends until the peer closes or `lingerUntil`
    /// (`ServerConnectionClosing.swift`), so that the kernel does not answer unread input with a reset that destroys
    /// the last answers in flight.
    var drainingInput = false
    /// Whether the connection's sending side was shut down (FIN sent after the last answers).
    var outputShutDown = false
    /// The WebSocket layer between the socket and the machine, on the console's port (WebSocketTransport.swift).
    let websocket: WebSocketTransport?

    init(
        fd: Int32, id: Int, peer: String, shard: Shard, context: ServerContext, tls: TLSTransport? = nil,
        websocket: WebSocketTransport? = nil
    ) {
        self.fd = fd
        self.id = id
        self.peer = peer
        self.shard = shard
        self.context = context
        self.tls = tls
        self.websocket = websocket
        machine = ConnectionStateMachine(
            configuration: context.machineConfiguration, now: monotonicMs(), encoders: shard.encoders)
        watches = WatchStateMachine(limits: context.machineConfiguration.limits)
        machine.isTLS = tls != nil
    }

    /// Starts reading; call on the shard's loop.
    func start() {
        shard.connections[ObjectIdentifier(self)] = self
        shard.loop.register(fd, handler: self)
        // What libmicrohttpd read past the upgrade request is the stream's start.
        if let websocket, !websocket.early.isEmpty {
            var early = websocket.early
            websocket.early = []
            early.withUnsafeMutableBytes { websocketReceived($0) }
        }
    }

    /// Output not yet written: the machine's, and over TLS the ciphertext it was encrypted to (shutdown waits for
    /// both).
    var unsentBytes: Int { machine.unsentBytes + (tls?.unwrittenBytes ?? 0) + (websocket?.unwrittenBytes ?? 0) }

    func tick(now: UInt64) {
        if lingerUntil != nil { return lingerWrite(now: now) }
        if let tls, !tls.isEstablished, !closing,
            now >= tls.openedAt + UInt64(context.machineConfiguration.limits.frameTimeoutMs)
        {
            return perform(machine.forceClose(.frameTimeout))  // the handshake is held to the frame deadline
        }
        perform(machine.timerFired(now: now))
        // A catch-up whose log read found the work pool full tries again.
        continueCatchUps()
        checkSessionWhileWatching(now: now)
    }

    /// A request checks the connection's session, but a subscription only receives: while the connection watches,
    /// its session is checked again every `sessionCheckMs` on the work pool, and one that ended ends the connection.
    private func checkSessionWhileWatching(now: UInt64) {
        guard let key = machine.session, machine.isWatching, !sessionCheckOut, let accounts = context.accounts else {
            return
        }
        let interval = UInt64(accounts.limits.sessionCheckMs)
        if nextSessionCheck == 0 { nextSessionCheck = now + interval }
        guard now >= nextSessionCheck else { return }
        let user = machine.user
        let store = accounts.store
        sessionCheckOut = true
        let accepted = context.router.pool.submit { [self] in
            let ended: LarderError?
            do throws(LarderError) {
                try PasswordAccounts.checkSession(key, of: user, in: store)
                ended = nil
            } catch {
                ended = error
            }
            shard.loop.async { [self] in
                sessionCheckOut = false
                nextSessionCheck = shard.loop.now + interval
                // A store that failed says nothing about the session: the next check decides.
                guard let ended, ended.status == .unauthenticated else { return }
                performing { machine.sessionEnded(ended, now: shard.loop.now, into: &$0) }
            }
        }
        // A full pool: the next tick tries again.
        if !accepted { sessionCheckOut = false }
    }

    func beginShutdown() {
        machine.beginShutdown()
    }

    func forceClose(_ reason: CloseReason) {
        perform(machine.forceClose(reason))
    }

    func readable() {
        guard !closing else {
            if drainingInput { drainInput() }
            return
        }
        let result: IOResult
        do throws(IOError) {
            result = try Socket.read(fd, into: shard.readBuffer)
        } catch {
            return perform(machine.forceClose(.ioError(error.description)))
        }
        switch result {
        case .wouldBlock:
            return
        case .done(0):
            perform(machine.readEOF(now: shard.loop.now))
        case .done(let count) where tls != nil:
            wireIn += count
            tlsReceived(count)
        case .done(let count) where websocket != nil:
            wireIn += count
            websocketReceived(UnsafeMutableRawBufferPointer(rebasing: shard.readBuffer[0..<count]))
        case .done(let count):
            wireIn += count
            readStarted = monotonicNanos()
            let bytes = UnsafeRawBufferPointer(rebasing: shard.readBuffer[0..<count])
            performing { machine.bytesReceived(bytes, now: shard.loop.now, into: &$0) }
            readStarted = 0
        }
        reportTraffic()
    }

    /// Runs `body`, which appends the state machine's actions to the connection's pending actions, then performs them
    /// (`perform`). A request costs no array of actions of its own.
    func performing(_ body: (inout [ConnectionStateMachine.Action]) -> Void) {
        body(&pendingActions)
        performPending()
    }

    /// `count` bytes of ciphertext in the read buffer: the handshake, then the plaintext to the machine.
    private func tlsReceived(_ count: Int) {
        guard let tls else { return }
        switch tls.received(UnsafeRawBufferPointer(rebasing: shard.readBuffer[0..<count])) {
        case .proceed:
            if tls.isEstablished { readPlaintext() }
            flush()
        case .plainLarderClient:
            _ = TLSTransport.plainClientRefusal.withUnsafeBytes { try? Socket.write(fd, $0) }
            perform(machine.forceClose(.protocolError(.protocolError)))
        case .notTLS:
            perform(machine.forceClose(.ioError("not a TLS client (no handshake record)")))
        case .failed(let message):
            _ = try? tls.flush(fd)  // the alert, so the client learns why
            perform(machine.forceClose(.ioError(message)))
        }
    }

    /// Bytes of WebSocket frames: the payload of binary messages to the machine, as TCP bytes are.
    private func websocketReceived(_ bytes: UnsafeMutableRawBufferPointer) {
        guard let websocket else { return }
        readStarted = monotonicNanos()
        let outcome = websocket.received(bytes) { payload in
            guard !closing else { return }
            performing { machine.bytesReceived(payload, now: shard.loop.now, into: &$0) }
        }
        readStarted = 0
        switch outcome {
        case .proceed:
            if websocket.hasOutput { flush() }
        case .peerClosed:
            perform(machine.readEOF(now: shard.loop.now))
        case .failed(let message):
            perform(machine.forceClose(.ioError(message)))
        }
    }

    /// Hands the machine the plaintext the TLS session holds, while it reads.
    private func readPlaintext() {
        guard let tls else { return }
        while !closing && !machine.readingPaused {
            switch tls.read(into: shard.readBuffer) {
            case .bytes(let count):
                readStarted = monotonicNanos()
                let bytes = UnsafeRawBufferPointer(rebasing: shard.readBuffer[0..<count])
                performing { machine.bytesReceived(bytes, now: shard.loop.now, into: &$0) }
                readStarted = 0
                // Nothing more to decrypt: another gnutls_record_recv would only say so.
                if tls.engine.pendingInput == 0 { return }
            case .needsInput:
                return
            case .closed:
                return perform(machine.readEOF(now: shard.loop.now))
            case .failed(let error):
                return perform(machine.forceClose(.ioError(error.message)))
            }
        }
    }

    private func setReading(_ on: Bool) {
        guard !closing, wantsRead != on else { return }
        wantsRead = on
        shard.loop.setInterest(fd, read: wantsRead, write: wantsWrite)
    }

    /// A request's answer, and when the connection began to run it (its latency is counted from then).
    struct Answer {
        var reply: Reply
        var started: UInt64
    }

    /// Runs a request the machine handed out, where its plan says; every way ends in `finish`, on the shard's loop.
    private func execute(_ frame: Frame) {
        // Every request is timed, point reads answered from the cache included (STATS and /metrics): an operator
        // reading a latency needs all of them. `monotonicNanos` is `clock_gettime` through the vDSO, tens of
        // nanoseconds.
        let started = monotonicNanos()
        context.inFlight.add(1)
        context.logger.debug("conn \(id) request \(frame.requestID) \(frame.opcode.name)")
        let router = context.router
        if PasswordAccounts.opcodes.contains(frame.opcode) {
            let caller = AccountCaller(
                user: machine.user, session: machine.session,
                isAdmin: !machine.followsRules && (machine.grant ?? .unrestricted) == .unrestricted, peer: peer)
            router.submitAccount(frame, accounts: context.accounts, caller: caller) { [self] reply in
                shard.loop.async { [self] in finish(Answer(reply: reply, started: started)) }
            }
            return
        }
        if machine.followsRules, RuledBlobGate.opcodes.contains(frame.opcode) {
            guard RuledBlobGate.checked.contains(frame.opcode) else { return run(frame, started: started) }
            // A photo follows its record's rules, checked on the work pool; then the request runs as any other.
            let caller = RuledCaller(user: machine.user, session: machine.session)
            router.submitRuledBlobGate(frame, caller: caller) { [self] outcome in
                shard.loop.async { [self] in
                    switch outcome {
                    case .proceed:
                        run(frame, started: started)
                    case .refused(let error):
                        let reply = Reply(opcode: frame.opcode, requestID: frame.requestID, error: error)
                        finish(Answer(reply: reply, started: started))
                    case .answered(let json):
                        let reply = Reply(opcode: frame.opcode, requestID: frame.requestID, json: json)
                        finish(Answer(reply: reply, started: started))
                    }
                }
            }
            return
        }
        if machine.followsRules, frame.opcode == .get,
            let reply = router.inlineRuledGet(
                frame, caller: RuledCaller(user: machine.user, session: machine.session), memo: &accessMemo,
                reads: shard.pointReads)
        {
            return finish(Answer(reply: reply, started: started))
        }
        if machine.followsRules, frame.opcode != .ping, frame.opcode != .watch, frame.opcode != .unwatch {
            // Held to the collections' rules, checked on the work pool when the session or the rules must be read.
            let caller = RuledCaller(user: machine.user, session: machine.session)
            if frame.opcode.isWrite {
                laneWrites.handedOut()
                router.submitRuledWrite(frame, caller: caller, on: writeLane) { [self] reply in
                    shard.loop.async { [self] in
                        laneWrites.answered()
                        finish(Answer(reply: reply, started: started))
                    }
                }
            } else {
                router.submitRuledRead(frame, caller: caller) { [self] reply in
                    shard.loop.async { [self] in finish(Answer(reply: reply, started: started)) }
                }
            }
            return
        }
        run(frame, started: started)
    }

    /// Runs `frame` where its plan says; every way ends in `finish`.
    private func run(_ frame: Frame, started: UInt64) {
        let router = context.router
        if frame.opcode == .get, router.store.isShared, frame.binary.isEmpty,
            let request = GetRequest.fast(frame.json) ?? (try? GetRequest(json: frame.jsonObject()))
        {
            // On a database other servers write too: the read cache when current, else a batched database read.
            shard.sharedGet(request) { [self] result in
                finish(Answer(reply: router.reply(to: frame, result.map { ($0, []) }), started: started))
            }
            return
        }
        switch RequestPlan(for: frame, pointReadsAreLocal: router.pointReadsAreLocal, laneIsBusy: laneWrites.isBusy) {
        case .inline:
            let reply = router.answerInline(frame, reads: shard.pointReads, collections: machine.grant?.collections)
            finish(Answer(reply: reply, started: started))
        case .refused:
            finish(Answer(reply: Router.refusal(frame), started: started))
        case .watch where frame.opcode == .watch && machine.followsRules:
            // The collection's rules are read from the store (a round trip on PostgreSQL): on the work pool.
            router.submitRuledWatch(frame, caller: RuledCaller(user: machine.user, session: machine.session)) { [self] ruled in
                shard.loop.async { [self] in
                    // A connection that began to close meanwhile takes no new subscription.
                    let reply =
                        closing
                        ? Reply(
                            opcode: .watch, requestID: frame.requestID,
                            error: LarderError(.unavailable, "the connection is closing; WATCH again on a new one"))
                        : answerWatch(frame, ruled: ruled)
                    finish(Answer(reply: reply, started: started))
                    continueCatchUps()
                }
            }
        case .watch:
            finish(Answer(reply: answerWatch(frame), started: started))
            continueCatchUps()
        case .writer:
            router.submitToWriter(frame) { [self] reply in
                shard.loop.async { [self] in finish(Answer(reply: reply, started: started)) }
            }
        case .writeLane:
            laneWrites.handedOut()
            router.submitWrite(
                frame, on: writeLane, collections: machine.grant?.collections, uploader: machine.uploader
            ) { [self] reply in
                shard.loop.async { [self] in
                    laneWrites.answered()
                    finish(Answer(reply: reply, started: started))
                }
            }
        case .workPool:
            router.submitRead(frame, collections: machine.grant?.collections, sendFiles: tls == nil && websocket == nil) { [self] reply in
                shard.loop.async { [self] in finish(Answer(reply: reply, started: started)) }
            }
        case .backup:
            context.backups.handle(frame, connection: id) { [self] reply in
                shard.loop.async { [self] in finish(Answer(reply: reply, started: started)) }
            }
        }
    }

    /// A request is done, on the shard's loop: its answer is screened for the token, counted and timed (STATS, the
    /// slow-request log), and handed to the machine to send.
    private func finish(_ answer: Answer) {
        // Only a token limited to some collections changes an answer; the rest go on as they are, uncopied.
        var reply = answer.reply
        if let grant = machine.grant, grant.collections != nil { reply = grant.screen(reply) }
        record(reply.opcode, reply.status, requestID: reply.requestID, started: answer.started)
        context.inFlight.add(-1)
        if reply.status != .ok {
            context.logger.debug("conn \(id) request \(reply.requestID) \(reply.opcode.name) -> \(reply.status.name)")
        }
        performing { machine.requestCompleted(reply, now: shard.loop.now, into: &$0) }
    }

    /// Looks up the session a HELLO presented on the work pool (a store read: a round trip on PostgreSQL) and hands
    /// the result to the machine on the shard's loop.
    private func lookUpSession(_ session: String) {
        guard let accounts = context.machineConfiguration.accounts else { return }
        let pool = context.router.pool
        let deliver: @Sendable (Result<SessionSignIn.Found, LarderError>) -> Void = { [self] result in
            shard.loop.async { [self] in
                performing { machine.sessionLookedUp(result, now: shard.loop.now, into: &$0) }
            }
        }
        let accepted = pool.submit {
            do throws(LarderError) {
                deliver(.success(try accounts.user(ofSession: session)))
            } catch {
                deliver(.failure(error))
            }
        }
        if !accepted { deliver(.failure(Router.poolFullError(pool))) }
    }

    /// Counts an answer in STATS, and logs it when slow; `started` is when its request began (nil: not timed).
    private func record(_ opcode: Opcode, _ status: Status, requestID: UInt32?, started: UInt64?) {
        let micros = started.map { (monotonicNanos() &- $0) / 1000 }
        shard.recordRequest(opcode, status, latencyMicros: micros)
        if let micros, micros >= context.logger.slowMicros {
            context.logger.slowRequest(connection: id, peer: peer, opcode, status, requestID: requestID, micros: micros)
        }
    }

    /// Performs the machine's actions, after any still pending, in order (`pendingActions`).
    func perform(_ actions: [ConnectionStateMachine.Action]) {
        if actions.isEmpty { return }
        pendingActions += actions
        performPending()
    }

    /// The one place where the state machine's actions become side effects: each in the order the machine returned
    /// it. An action that makes the machine return more appends them; they run after it, in this same loop.
    private func performPending() {
        guard !performingActions else { return }
        performingActions = true
        var index = 0
        while index < pendingActions.count {
            let action = pendingActions[index]
            index += 1
            switch action {
            case .execute(let frame):
                execute(frame)
            case .flush:
                if !flushPending && !closing {
                    flushPending = true
                    shard.loop.flushAtEndOfTurn(self)
                }
            case .pauseReading:
                setReading(false)
            case .resumeReading:
                setReading(true)
                // Plaintext the TLS session already holds wakes no epoll: read it now.
                if let tls, tls.engine.pendingInput > 0 {
                    shard.loop.async { [self] in readPlaintext() }
                }
            case .lookUpSession(let session):
                lookUpSession(session)
            case .record(let opcode, let status, let requestID):
                record(opcode, status, requestID: requestID, started: readStarted == 0 ? nil : readStarted)
            case .close(let reason):
                close(reason)
            }
        }
        // One or two actions: popping them costs a tenth of `removeAll(keepingCapacity:)`'s generic replaceSubrange.
        if pendingActions.capacity <= 256 {
            while pendingActions.popLast() != nil {}
        } else {
            pendingActions = []
        }
        performingActions = false
    }

    /// Adds this connection's traffic since the last report to its shard's count for STATS: once per read and per
    /// flush (and at close), not per request.
    func reportTraffic() {
        let peak = machine.peakUnsentBytes > reportedPeak ? machine.peakUnsentBytes : 0
        shard.addTraffic(
            wireIn: wireIn, wireOut: wireOut, uncompressedIn: machine.uncompressedBytesIn - reportedIn,
            uncompressedOut: machine.uncompressedBytesOut - reportedOut, peakUnsent: peak)
        wireIn = 0
        wireOut = 0
        reportedIn = machine.uncompressedBytesIn
        reportedOut = machine.uncompressedBytesOut
        reportedPeak = max(reportedPeak, machine.peakUnsentBytes)
    }
}
