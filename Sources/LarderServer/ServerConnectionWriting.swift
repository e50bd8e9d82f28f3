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

// Writing a connection's output: on the loop, or by a sender on the work pool for large output, or over TLS.
extension ServerConnection {
    func writable() {
        if lingerUntil != nil { return lingerWrite(now: shard.loop.now) }
        flush()
    }

    func endOfTurn() {
        flushPending = false
        flush()
    }

    func flush() {
        guard !sending else { return }  // the sender's completion flushes what queued meanwhile
        if machine.unsentBytes >= ServerConnection.offloadBytes && !closing && tls == nil && websocket == nil
            && offload() { return }
        var actions: [ConnectionStateMachine.Action] = []
        writeNow(&actions)
        if machine.unsentBytes == 0 && tls?.hasOutput != true && websocket?.hasOutput != true { setWriting(false) }
        perform(actions)
        reportTraffic()
        // Output drained: subscriptions replaying the log may read their next page.
        continueCatchUps()
    }

    /// Writes what the socket takes now; the machine's resulting actions are appended to `actions`, not performed.
    func writeNow(_ actions: inout [ConnectionStateMachine.Action]) {
        // The answers about to leave are counted first (`Shard.flushStats`).
        shard.flushStats(answersOnly: true)
        if let tls { return writeEncrypted(tls, &actions) }
        if let websocket { return writeFramed(websocket, &actions) }
        while !closing && !sending && machine.unsentBytes > 0 {
            let result: Result<IOResult, IOError>
            if machine.unsentIsContiguous {
                // The usual case: no blob queued on its own, one `write` without building the array `writev` takes.
                result = machine.withUnsentOutput { bytes in
                    do throws(IOError) {
                        return .success(try Socket.write(fd, bytes))
                    } catch {
                        return .failure(error)
                    }
                }
            } else {
                // A blob queued on its own: its buffer with `writev`, or its file's range with sendfile.
                let (items, offset) = machine.unsentSnapshot()
                result = Result { () throws(IOError) in try OutputQueue.write(fd, items, offsetBy: offset) }
            }
            switch result {
            case .failure(let error):
                actions += machine.forceClose(.ioError(error.description))
                return
            case .success(.wouldBlock):
                setWriting(true)
                return
            case .success(.done(let count)):
                wireOut += count
                actions += machine.writeCompleted(count, now: shard.loop.now)
            }
        }
    }

    /// `writeNow` through TLS: the ciphertext waiting goes first, then the next batch of output is encrypted.
    private func writeEncrypted(_ tls: TLSTransport, _ actions: inout [ConnectionStateMachine.Action]) {
        writeThrough(tls, ready: { tls.isEstablished }, &actions) { plaintext in
            tls.encrypt(plaintext).mapError { LayerFailure(message: $0.message) }
        }
    }

    /// `writeNow` through the WebSocket: the framed bytes waiting go first, then the next batch of output is framed.
    private func writeFramed(_ websocket: WebSocketTransport, _ actions: inout [ConnectionStateMachine.Action]) {
        writeThrough(websocket, ready: { true }, &actions) { .success(websocket.frame($0)) }
    }

    /// Writes through a layer that turns the machine's output into bytes of its own (TLS records, WebSocket frames):
    /// what the layer holds goes first; once it is all written and the layer is `ready`, `take` hands it the next
    /// batch, which the machine then counts as sent.
    private func writeThrough(
        _ layer: some OutputLayer, ready: () -> Bool, _ actions: inout [ConnectionStateMachine.Action],
        take: (UnsafeRawBufferPointer) -> Result<Int, LayerFailure>
    ) {
        while !closing && (layer.hasOutput || (machine.unsentBytes > 0 && ready())) {
            if layer.hasOutput {
                let written: Int?
                do throws(IOError) {
                    written = try layer.flush(fd)
                } catch {
                    actions += machine.forceClose(.ioError(error.description))
                    return
                }
                wireOut += written ?? 0
                if layer.hasOutput {
                    setWriting(true)
                    return
                }
            }
            guard machine.unsentBytes > 0 else { return }
            switch machine.withUnsentOutput({ take($0) }) {
            case .failure(let failure):
                actions += machine.forceClose(.ioError(failure.message))
                return
            case .success(0):
                return
            case .success(let count):
                actions += machine.writeCompleted(count, now: shard.loop.now)
            }
        }
    }

    /// Hands the output queued so far to a sender on the work pool, which writes until it is all written or the
    /// socket is full, then reports back to the loop (`sent`). The machine keeps queueing answers after it meanwhile.
    /// False when the pool is full: the loop writes it.
    private func offload() -> Bool {
        // The items hold the blobs' buffers and open files until this sender is done with them.
        let (items, offset) = machine.unsentSnapshot()
        let total = items.reduce(0) { $0 + $1.count } - offset
        let fd = self.fd
        descriptor.withLock { $0.senderActive = true }
        let accepted = context.router.pool.submit { [self] in
            var written = 0
            var failure: IOError?
            var full = false
            // Stops early once the connection is closed: its descriptor is only waiting for this sender.
            while written < total && failure == nil && !full && !descriptor.withLock({ $0.closeWhenSenderEnds }) {
                do throws(IOError) {
                    switch try OutputQueue.write(fd, items, offsetBy: offset + written) {
                    case .wouldBlock: full = true
                    case .done(let count): written += count
                    }
                } catch {
                    failure = error
                }
            }
            let closeNow = descriptor.withLock { state -> Bool in
                state.senderActive = false
                return state.closeWhenSenderEnds
            }
            if closeNow { Socket.close(fd) }
            shard.loop.async { [self, written, failure, full] in sent(written, failure: failure, full: full) }
        }
        guard accepted else {
            descriptor.withLock { $0.senderActive = false }
            return false
        }
        sending = true
        bytesWithSender = total
        setWriting(false)
        return true
    }

    /// A sender's report, on the loop.
    private func sent(_ count: Int, failure: IOError?, full: Bool) {
        sending = false
        bytesWithSender = 0
        guard !closing else { return }
        wireOut += count
        var actions = count > 0 ? machine.writeCompleted(count, now: shard.loop.now) : []
        if let failure {
            actions += machine.forceClose(.ioError(failure.description))
        } else if full {
            setWriting(true)
        }
        perform(actions)
        if !full && failure == nil && !closing { flush() } else { reportTraffic() }
    }

    private func setWriting(_ on: Bool) {
        guard !closing, wantsWrite != on else { return }
        wantsWrite = on
        shard.loop.setInterest(fd, read: wantsRead, write: wantsWrite)
    }
}

extension OutputQueue {
    /// Writes once, from `offset` bytes into `items`: the bytes up to the next file's range with `writev`, or that
    /// range with sendfile. A file that ends before its range does is an error (the answer cannot be finished).
    static func write(_ fd: Int32, _ items: [Item], offsetBy offset: Int) throws(IOError) -> IOResult {
        var index = 0
        var skip = offset
        while index < items.count && skip >= items[index].count {
            skip -= items[index].count
            index += 1
        }
        guard index < items.count else { return .done(0) }
        guard case .file(let range) = items[index] else {
            var pointers: [UnsafeRawBufferPointer] = []
            pointers.reserveCapacity(min(items.count - index, 64))
            return try collect(items[index...], offset: skip, limit: 64, &pointers) { pointers in
                Result { () throws(IOError) in try Socket.writev(fd, pointers) }
            }.get()
        }
        #if os(Linux)
        let result = try Socket.sendfile(
            fd, from: range.fd, offset: range.offset + Int64(skip), count: range.count - skip)
        // Zero bytes sent of a range not done: the file ended early (the store checked its length: it was cut since).
        if result == .done(0) { throw IOError("sendfile", errno: EIO) }
        return result
        #else
        throw IOError("sendfile", errno: ENOSYS)
        #endif
    }
}

/// A layer between a connection's socket and its state machine that holds bytes of its own to write (`TLSTransport`,
/// `WebSocketTransport`).
protocol OutputLayer: AnyObject {
    /// Whether bytes wait to be written.
    var hasOutput: Bool { get }
    /// Writes what waits to `fd`; the bytes written, or nil when the socket is full.
    func flush(_ fd: Int32) throws(IOError) -> Int?
}

/// Why a layer could not take the machine's output (the connection closes with it).
struct LayerFailure: Error {
    var message: String
}

extension TLSTransport: OutputLayer {}
extension WebSocketTransport: OutputLayer {}
