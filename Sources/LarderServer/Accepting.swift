#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderStore
import LarderSync
import LarderTLS
import LarderWire
import LarderEventLoop
import LarderIO

// Accepting connections: onto a shard, or refused with one error frame; and closing the listeners.
extension LarderServer {
    func acceptAll(_ listener: ListenerBox) {
        // Bounded so one busy listener cannot starve the other.
        for _ in 0..<256 {
            let fd: Int32
            do throws(IOError) {
                guard let accepted = try Socket.accept(listener.fd, keepaliveSeconds: configuration.tcpKeepaliveSeconds)
                else { return }
                fd = accepted
            } catch {
                // EMFILE and friends: log and let the next readiness event try again.
                context.logger.warn("accept: \(error)")
                if error.errno == EMFILE || error.errno == ENFILE { usleep(10_000) }
                return
            }
            let peer = listener.unixPath.map { "unix:\($0)" } ?? Socket.peerName(fd)
            admit(fd, peer: peer, tls: listener.tls)
        }
    }

    /// Serves `fd`, a connected non-blocking socket, on the next shard (or refuses it with one error frame when the
    /// server is stopping or at its connection limit), over TLS when `tls`, through `websocket` when given (a socket
    /// the console's HTTP server upgraded).
    func admit(_ fd: Int32, peer: String, tls: Bool, websocket: WebSocketTransport? = nil) {
        let stopping = state.withLock { $0.stopped }
        if stopping || context.stats.openConnections >= configuration.limits.maxConnections {
            return refuse(fd, peer: peer, stopping: stopping, websocket: websocket)
        }
        if websocket != nil {
            do throws(IOError) {
                try Socket.setNonBlocking(fd)
            } catch {
                context.logger.warn("console connection: \(error)")
                websocket?.release()
                return
            }
        }
        let (shard, id) = state.withLock { s -> (Shard, Int) in
            s.nextShard = (s.nextShard + 1) % shards.count
            s.nextConnectionID += 1
            return (shards[s.nextShard], s.nextConnectionID)
        }
        context.stats.connectionOpened()
        var transport: TLSTransport?
        if tls {
            guard
                let engine = try? tlsContexts.map({ (contexts) throws(TLSError) in
                    try TLSEngine(context: contexts.context)
                })
            else {
                context.logger.error("conn \(id): no TLS session could be made (see the TLS error at start-up)")
                context.stats.connectionClosed()
                Socket.close(fd)
                return
            }
            transport = TLSTransport(engine: engine, openedAt: monotonicMs())
        }
        context.logger.log(.info, "connection opened", Logger.Context(connection: id, peer: peer))
        let connection = ServerConnection(
            fd: fd, id: id, peer: peer, shard: shard, context: context, tls: transport, websocket: websocket)
        shard.loop.async { connection.start() }
    }

    /// Serves one end of a connected socket the caller made (a `socketpair`, say) as it serves an accepted
    /// connection: what a test harness drives the real connection code through without a listener. Call
    /// `startWithoutListening()` first.
    package func serve(connected fd: Int32, peer: String) throws(IOError) {
        try Socket.setNonBlocking(fd)
        admit(fd, peer: peer, tls: false)
    }

    /// Over the connection limit (or shutting down): one error frame, written best-effort, then close.
    private func refuse(_ fd: Int32, peer: String, stopping: Bool, websocket: WebSocketTransport? = nil) {
        context.stats.connectionRefused()
        let limit = configuration.limits.maxConnections
        let error =
            stopping
            ? LarderError(.unavailable, "the server is shutting down")
            : LarderError(
                .resourceExhausted, "the server has reached its limit of \(limit) connections; retry later",
                details: ["limit": .int(Int64(limit))])
        var bytes: [UInt8] = []
        FrameEncoder().encode(
            Frame(
                opcode: Opcode(rawValue: 0), requestID: 0, status: error.status, flags: .response,
                json: error.json.bytes),
            into: &bytes)
        if websocket != nil {
            // One binary message, then the close frame, before the socket goes back to libmicrohttpd.
            var framed: [UInt8] = []
            WebSocketEncoder.header(.binary, length: bytes.count, into: &framed)
            bytes = framed + bytes + WebSocketEncoder.close(code: 1013, reason: "")
        }
        _ = bytes.withUnsafeBytes { try? Socket.write(fd, $0) }
        context.logger.log(
            .info, "connection refused", Logger.Context(peer: peer, fields: [("reason", .string(error.message))]))
        if let websocket { websocket.release() } else { Socket.close(fd) }
    }

    /// Cancels the accept sources and returns once their descriptors are closed: a connect after `shutdown()` (or after
    /// the server is dropped) is refused rather than left in a backlog nobody accepts from. The cancel handler runs
    /// asynchronously on the accept queue, hence the wait.
    func closeListeners(_ listeners: [ListenerBox]) {
        guard !listeners.isEmpty else { return }
        acceptQueue.sync { for listener in listeners { listener.source.cancel() } }
        for listener in listeners { listener.closed.wait() }
    }
}
