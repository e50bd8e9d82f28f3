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
import LarderIO

// Closing a connection: at once, after its sender finishes, or after a TLS linger for its last ciphertext.
extension ServerConnection {
    func close(_ reason: CloseReason) {
        guard !closing else { return }
        closing = true
        context.logger.log(
            .info, "connection closed",
            Logger.Context(connection: id, peer: peer, fields: [("reason", .string(reason.description))]))
        reportTraffic()
        // close_notify goes after the last answers. What the socket does not take now is written as it drains, with
        // the descriptor watched for writing only, until the frame deadline (a client that reads nothing for that
        // long is cut, as one that sends a frame that slowly); TLS connections never hand output to a sender.
        // A WebSocket's close frame likewise follows the last messages.
        tls?.finish(fd)
        websocket?.finish(fd)
        let hasOutput = tls?.hasOutput == true || websocket?.hasOutput == true
        // A close the server decides on (a protocol error, a token or session ended) may leave the peer's input
        // unread: closing the socket then makes the kernel send a reset, which can destroy the error frame on its
        // way. So the sending side is shut down after the last answers and what the peer still sends is read and
        // dropped, until it closes too or the frame deadline (as nginx's lingering close does). A sender on the work
        // pool holding the descriptor closes it as before.
        drainingInput = reason.mayLeaveInputUnread && !sending
        if hasOutput || drainingInput {
            lingerUntil = shard.loop.now + UInt64(context.machineConfiguration.limits.frameTimeoutMs)
            shard.loop.setInterest(fd, read: !hasOutput, write: hasOutput)
            if !hasOutput { shutDownOutput() }
        }
        if lingerUntil == nil {
            // Out of the loop before the number can be reused by the next accepted connection; nothing touches the
            // descriptor after this (every I/O path checks `closing`).
            shard.loop.deregister(fd)
            // A sender still writing keeps the descriptor; it closes it as it ends.
            let senderHasIt = descriptor.withLock { state -> Bool in
                if state.senderActive { state.closeWhenSenderEnds = true }
                return state.senderActive
            }
            if !senderHasIt { closeDescriptor() }
            shard.connections[ObjectIdentifier(self)] = nil
        }
        context.backups.connectionClosed(id)
        performWatch(watches.closed())
        if lingerUntil == nil { context.stats.connectionClosed() }
    }

    /// A closed TLS or WebSocket connection's remaining output, written as the socket takes it; the descriptor is
    /// closed once it is all written, on a write error, or at the deadline.
    func lingerWrite(now: UInt64) {
        guard let until = lingerUntil else { return }
        var done = now >= until
        if !done && !outputShutDown {
            do throws(IOError) {
                if let layer: any OutputLayer = tls ?? websocket {
                    wireOut += try layer.flush(fd) ?? 0
                    done = !layer.hasOutput
                }
            } catch {
                done = true
            }
            if done && drainingInput {
                // All written: now the peer's remaining input, until it closes.
                done = false
                shard.loop.setInterest(fd, read: true, write: false)
                shutDownOutput()
            }
        }
        if done { endLinger() }
    }

    /// Sends FIN after the last answers; what is already waiting is read in the loop's next turn (never inside
    /// `close`, which must not see the descriptor closed under it).
    private func shutDownOutput() {
        guard !outputShutDown else { return }
        outputShutDown = true
        _ = shutdown(fd, Int32(SHUT_WR))
        shard.loop.async { [self] in drainInput() }
    }

    /// Reads and drops a closed connection's input; the descriptor is closed at the peer's end or a read error.
    func drainInput() {
        guard lingerUntil != nil, outputShutDown else { return }
        // Bounded per turn, as reading an open connection is, so one peer cannot hold the loop.
        for _ in 0..<16 {
            let result: IOResult
            do throws(IOError) {
                result = try Socket.read(fd, into: shard.readBuffer)
            } catch {
                return endLinger()
            }
            switch result {
            case .wouldBlock: return
            case .done(0): return endLinger()
            case .done: continue  // dropped: nothing reads it
            }
        }
    }

    /// Closes a lingering connection's descriptor now, whatever it has left to write (the server is stopping).
    func endLinger() {
        guard lingerUntil != nil else { return }
        lingerUntil = nil
        reportTraffic()
        shard.loop.deregister(fd)
        closeDescriptor()
        shard.connections[ObjectIdentifier(self)] = nil
        context.stats.connectionClosed()
    }

    /// Closes the socket, or for a WebSocket hands it back to libmicrohttpd, which owns it since the upgrade.
    private func closeDescriptor() {
        if let websocket { websocket.release() } else { Socket.close(fd) }
    }
}
