#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Synchronization
import LarderWire

/// Monotonic milliseconds for the state machines.
@inline(__always)
func monotonicMs() -> UInt64 { DispatchTime.now().uptimeNanoseconds / 1_000_000 }

/// A serial queue that owns a set of connections, their read buffer and their timer tick.
final class IOShard: @unchecked Sendable {
    let queue: DispatchQueue
    /// Only touched on `queue`.
    var connections: [ObjectIdentifier: Connection] = [:]
    /// One read buffer for every connection of the shard: connections never read at the same time on one queue, and
    /// 10,000 idle connections then cost no buffer memory.
    let readBuffer: UnsafeMutableRawBufferPointer
    private var timer: (any DispatchSourceTimer)?
    /// Only used on `queue`.
    let encoders: SharedEncoders

    init(index: Int, configuration: ConnectionStateMachine.Configuration) {
        encoders = SharedEncoders(configuration: configuration)
        queue = DispatchQueue(label: "larder.io.\(index)")
        readBuffer = .allocate(byteCount: 64 << 10, alignment: 16)
    }

    deinit { readBuffer.deallocate() }

    func startTimer(intervalMs: Int) {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .milliseconds(intervalMs), repeating: .milliseconds(intervalMs))
        timer.setEventHandler { [unowned self] in
            let now = monotonicMs()
            for connection in connections.values { connection.tick(now: now) }
        }
        timer.activate()
        self.timer = timer
    }

    func stopTimer() {
        timer?.cancel()
        timer = nil
    }
}

/// What connections share: the router, the counters, the log and the in-flight total.
final class ServerContext: Sendable {
    let router: Router
    let stats: ServerStats
    let logger: Logger
    let machineConfiguration: ConnectionStateMachine.Configuration
    /// Requests in flight on every connection (for shutdown).
    let inFlight = AtomicCounter()

    init(router: Router, stats: ServerStats, logger: Logger, machineConfiguration: ConnectionStateMachine.Configuration) {
        self.router = router
        self.stats = stats
        self.logger = logger
        self.machineConfiguration = machineConfiguration
    }
}

/// The side-effect shell around one `ConnectionStateMachine`: a non-blocking socket with dispatch read and write
/// sources on its shard's serial queue. Every member is touched only on that queue.
final class Connection: @unchecked Sendable {
    private enum SourceState { case inactive, running, suspended }

    let fd: Int32
    let id: Int
    let peer: String
    private let shard: IOShard
    private let context: ServerContext
    private var machine: ConnectionStateMachine
    private let readSource: any DispatchSourceRead
    private let writeSource: any DispatchSourceWrite
    private var readState = SourceState.inactive
    private var writeState = SourceState.inactive
    private var closing = false
    private var cancelsPending = 2
    private var reportedOut = 0
    private var reportedIn = 0
    private var wireIn = 0
    private var wireOut = 0
    private var reportedPeak = 0

    init(fd: Int32, id: Int, peer: String, shard: IOShard, context: ServerContext) {
        self.fd = fd
        self.id = id
        self.peer = peer
        self.shard = shard
        self.context = context
        machine = ConnectionStateMachine(
            configuration: context.machineConfiguration, now: monotonicMs(), encoders: shard.encoders)
        readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: shard.queue)
        writeSource = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: shard.queue)
    }

    /// Starts reading; call on the shard queue.
    func start() {
        shard.connections[ObjectIdentifier(self)] = self
        readSource.setEventHandler { [unowned self] in readable() }
        writeSource.setEventHandler { [unowned self] in flush() }
        // The descriptor is closed only after both sources are cancelled (never under a live source).
        let cancelled: @Sendable () -> Void = { [self] in
            cancelsPending -= 1
            if cancelsPending == 0 { finish() }
        }
        readSource.setCancelHandler(handler: cancelled)
        writeSource.setCancelHandler(handler: cancelled)
        readSource.activate()
        readState = .running
    }

    var unsentBytes: Int { machine.unsentBytes }

    func tick(now: UInt64) {
        perform(machine.timerFired(now: now))
    }

    func beginShutdown() {
        machine.beginShutdown()
    }

    func forceClose(_ reason: CloseReason) {
        perform(machine.forceClose(reason))
    }

    private func readable() {
        guard !closing else { return }
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
            perform(machine.readEOF(now: monotonicMs()))
        case .done(let count):
            wireIn += count
            perform(machine.bytesReceived(UnsafeRawBufferPointer(rebasing: shard.readBuffer[0..<count]), now: monotonicMs()))
        }
    }

    private func flush() {
        while !closing && machine.unsentBytes > 0 {
            let result: Result<IOResult, IOError> = machine.withUnsentOutput { bytes in
                do throws(IOError) {
                    return .success(try Socket.write(fd, bytes))
                } catch {
                    return .failure(error)
                }
            }
            switch result {
            case .failure(let error):
                return perform(machine.forceClose(.ioError(error.description)))
            case .success(.wouldBlock):
                setWriting(true)
                return
            case .success(.done(let count)):
                wireOut += count
                perform(machine.writeCompleted(count, now: monotonicMs()))
            }
        }
        if machine.unsentBytes == 0 { setWriting(false) }
    }

    private func setWriting(_ on: Bool) {
        guard !closing else { return }
        switch (writeState, on) {
        case (.inactive, true):
            writeSource.activate()
            writeState = .running
        case (.suspended, true):
            writeSource.resume()
            writeState = .running
        case (.running, false):
            writeSource.suspend()
            writeState = .suspended
        default:
            break
        }
    }

    private func execute(_ frame: Frame) {
        let started = DispatchTime.now().uptimeNanoseconds
        context.inFlight.add(1)
        let logger = context.logger
        logger.debug("conn \(id) request \(frame.requestID) \(frame.opcode.name)")
        context.router.handle(frame) { [self] reply in
            shard.queue.async { [self] in
                let micros = (DispatchTime.now().uptimeNanoseconds &- started) / 1000
                context.stats.request(reply.opcode, reply.status, latencyMicros: micros)
                context.inFlight.add(-1)
                if reply.status != .ok {
                    logger.debug("conn \(id) request \(reply.requestID) \(reply.opcode.name) -> \(reply.status.name)")
                }
                perform(machine.requestCompleted(reply, now: monotonicMs()))
            }
        }
    }

    /// The one place where the state machine's actions become side effects.
    private func perform(_ actions: [ConnectionStateMachine.Action]) {
        for action in actions {
            switch action {
            case .execute(let frame):
                execute(frame)
            case .flush:
                flush()
            case .pauseReading:
                // After close() the source is cancelled; suspending it then would stop its cancel handler.
                if readState == .running && !closing {
                    readSource.suspend()
                    readState = .suspended
                }
            case .resumeReading:
                if readState == .suspended && !closing {
                    readSource.resume()
                    readState = .running
                }
            case .record(let opcode, let status):
                context.stats.request(opcode, status, latencyMicros: nil)
            case .close(let reason):
                close(reason)
            }
        }
        reportTraffic()
    }

    private func reportTraffic() {
        let peak = machine.peakUnsentBytes > reportedPeak ? machine.peakUnsentBytes : 0
        context.stats.traffic(
            wireIn: wireIn, wireOut: wireOut, uncompressedIn: machine.uncompressedBytesIn - reportedIn,
            uncompressedOut: machine.uncompressedBytesOut - reportedOut, peakUnsent: peak)
        wireIn = 0
        wireOut = 0
        reportedIn = machine.uncompressedBytesIn
        reportedOut = machine.uncompressedBytesOut
        reportedPeak = max(reportedPeak, machine.peakUnsentBytes)
    }

    private func close(_ reason: CloseReason) {
        guard !closing else { return }
        closing = true
        let level: LogLevel
        switch reason {
        case .peerClosed, .shutdown: level = .debug
        default: level = .info
        }
        context.logger.log(level, "conn \(id) from \(peer) closed: \(reason)")
        readSource.cancel()
        writeSource.cancel()
        // A suspended or never-activated source runs its cancel handler only once resumed.
        switch readState {
        case .inactive: readSource.activate()
        case .suspended: readSource.resume()
        case .running: break
        }
        switch writeState {
        case .inactive: writeSource.activate()
        case .suspended: writeSource.resume()
        case .running: break
        }
    }

    private func finish() {
        Socket.close(fd)
        shard.connections[ObjectIdentifier(self)] = nil
        context.stats.connectionClosed()
    }
}

/// A tiny lock-protected counter.
final class AtomicCounter: Sendable {
    private let value = Synchronization.Atomic<Int>(0)
    func add(_ delta: Int) { value.add(delta, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}
