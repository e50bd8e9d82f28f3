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
        if tls?.hasOutput == true || websocket?.hasOutput == true {
            lingerUntil = shard.loop.now + UInt64(context.machineConfiguration.limits.frameTimeoutMs)
            shard.loop.setInterest(fd, read: false, write: true)
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
        if !done {
            do throws(IOError) {
                if let layer: any OutputLayer = tls ?? websocket {
                    wireOut += try layer.flush(fd) ?? 0
                    done = !layer.hasOutput
                }
            } catch {
                done = true
            }
        }
        if done { endLinger() }
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
