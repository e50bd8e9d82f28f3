import LarderWire

/// What a connection's state machine asks its shell to do, and the phases it goes through.
extension ConnectionStateMachine {
    package enum Action: Equatable {
        /// Run this request (on the connection's event loop or off it), then report `requestCompleted`.
        case execute(Frame)
        /// Output is waiting: write it (`unsentOutput` / `writeCompleted`).
        case flush
        case pauseReading
        case resumeReading
        /// Take the descriptor off the event loop and close it; the state machine is finished.
        case close(CloseReason)
        /// Look up the session a HELLO presented off the event loop (it is kept in the store), then report
        /// `sessionLookedUp`. Reading stays paused until then.
        case lookUpSession(String)
        /// A reply the state machine produced itself (HELLO, refusals), for STATS.
        case record(Opcode, Status, requestID: UInt32?)
    }

    enum Phase: Equatable {
        /// Before a successful HELLO: only HELLO and PING, small frames.
        case handshake
        case ready
        /// No more reading; close once every request in flight is answered and the output is sent.
        case closing(CloseReason, since: UInt64)
        case closed
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
    /// A reload of the token file removed the connection's token; UNAUTHENTICATED was sent first.
    case tokenRevoked
    /// The session the connection signed in with ended while it watched; UNAUTHENTICATED was sent first.
    case sessionEnded

    /// Whether the server closes the connection of its own accord, when the peer may still be sending. A frame
    /// deadline is not: the peer is too slow already, and draining would hold its slot as long again.
    var mayLeaveInputUnread: Bool {
        switch self {
        case .protocolError, .tokenRevoked, .sessionEnded: true
        case .peerClosed, .idleTimeout, .frameTimeout, .ioError, .shutdown: false
        }
    }

    package var description: String {
        switch self {
        case .peerClosed: "peer closed"
        case .protocolError(.unauthenticated): "UNAUTHENTICATED: no token, or a wrong one"
        case .protocolError(let status): "protocol error (\(status.name))"
        case .idleTimeout: "idle timeout"
        case .frameTimeout: "frame deadline exceeded"
        case .ioError(let message): "I/O error: \(message)"
        case .shutdown: "server shutdown"
        case .tokenRevoked: "UNAUTHENTICATED: the token was removed from the token file"
        case .sessionEnded: "UNAUTHENTICATED: the session ended"
        }
    }
}
