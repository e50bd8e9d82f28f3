import LarderIO
import LarderWire

/// The WebSocket layer of one console connection, between its socket and its `ConnectionStateMachine`, a sibling of
/// `TLSTransport`: each binary message a browser sends holds one Larder frame, whose bytes go to the machine exactly
/// as TCP bytes do (the same decoder, limits and state machine judge them); each frame the machine sends leaves as one
/// binary message. The socket came from the console's HTTP server after the upgrade handshake (`ConsoleServer`).
/// Everything runs on the connection's event loop, without blocking.
final class WebSocketTransport {
    private var decoder: WebSocketDecoder
    private var check = LarderMessageCheck()
    /// Framed bytes not yet written, from `outputStart`.
    private var output: [UInt8] = []
    private var outputStart = 0
    /// Bytes of the Larder frame being framed that are still to come from the machine (0: the next byte starts one).
    private var frameRemaining = 0
    /// The start of a Larder frame's 4-byte length, when the machine's output split it.
    private var lengthPrefix: [UInt8] = []
    /// The code of the peer's close frame, echoed in the answer.
    private var peerCode: UInt16 = 1000
    /// A close frame was queued: nothing is framed after it.
    private(set) var closeQueued = false
    /// Bytes libmicrohttpd read after the upgrade request, which belong to this stream: fed before the socket's.
    var early: [UInt8]
    /// Hands the socket back to libmicrohttpd, which closes it (called once, instead of `close(2)`).
    let release: @Sendable () -> Void
    /// Machine output framed per turn: with the output buffer empty before each batch, a connection holds at most
    /// about this much framed output, however large the answer it is sending.
    static let frameBatchBytes = 64 << 10

    init(maxFrameBytes: Int, early: [UInt8], release: @escaping @Sendable () -> Void) {
        // A message is a Larder frame: its 4-byte length, then at most `maxFrameBytes`.
        decoder = WebSocketDecoder(maxMessageBytes: 4 + maxFrameBytes)
        self.early = early
        self.release = release
    }

    /// Whether framed bytes wait to be written.
    var hasOutput: Bool { outputStart < output.count }

    /// Framed bytes not yet written.
    var unwrittenBytes: Int { output.count - outputStart }

    /// What the peer's bytes asked for, beyond the payload handed to `deliver`.
    enum Received {
        case proceed
        /// The peer closed the WebSocket (`finish` answers it once the machine is done).
        case peerClosed
        /// The stream broke a framing rule: a close frame with its code was queued.
        case failed(String)
    }

    /// Bytes from the socket (unmasked in place): each binary message's payload goes to `deliver`, pings are answered.
    func received(_ bytes: UnsafeMutableRawBufferPointer, deliver: (UnsafeRawBufferPointer) -> Void) -> Received {
        var outcome = Received.proceed
        do throws(WebSocketError) {
            try decoder.feed(bytes) { (event) throws(WebSocketError) in
                switch event {
                case .payload(let chunk):
                    try check.payload(chunk)
                    deliver(chunk)
                case .messageEnd:
                    try check.messageEnd()
                case .ping(let data):
                    // A pong goes between whole frames, never inside a framed Larder frame.
                    if frameRemaining == 0 && lengthPrefix.isEmpty && !closeQueued {
                        WebSocketEncoder.header(.pong, length: data.count, into: &output)
                        output += data
                    }
                case .pong:
                    break
                case .close(let code, _):
                    // Answered by `finish` once the answers to what came before it are sent, echoing its code.
                    peerCode = code ?? 1000
                    outcome = .peerClosed
                }
            }
        } catch {
            queueClose(code: error.code, reason: error.message)
            return .failed("WebSocket: \(error.message)")
        }
        return outcome
    }

    /// Frames the start of `plaintext` (the machine's output, whole Larder frames in order; at most
    /// `frameBatchBytes`) once the framed bytes before it are written; returns how many plaintext bytes it took.
    func frame(_ plaintext: UnsafeRawBufferPointer) -> Int {
        guard !hasOutput, !closeQueued else { return 0 }
        output.removeAll(keepingCapacity: output.capacity <= 4 * Self.frameBatchBytes)
        outputStart = 0
        var taken = 0
        while taken < plaintext.count && taken < Self.frameBatchBytes {
            if frameRemaining == 0 {
                // The next Larder frame's length decides its message's length.
                let need = 4 - lengthPrefix.count
                let have = min(need, plaintext.count - taken)
                lengthPrefix += plaintext[taken..<(taken + have)]
                taken += have
                guard lengthPrefix.count == 4 else { break }
                let length = Int(lengthPrefix[0]) << 24 | Int(lengthPrefix[1]) << 16 | Int(lengthPrefix[2]) << 8
                    | Int(lengthPrefix[3])
                WebSocketEncoder.header(.binary, length: 4 + length, into: &output)
                output += lengthPrefix
                lengthPrefix = []
                frameRemaining = length
                continue
            }
            let count = min(frameRemaining, plaintext.count - taken, Self.frameBatchBytes - taken)
            output += plaintext[taken..<(taken + count)]
            taken += count
            frameRemaining -= count
        }
        return taken
    }

    /// Writes pending framed bytes to `fd`; returns the bytes written, or nil when the socket is full.
    func flush(_ fd: Int32) throws(IOError) -> Int? {
        var written = 0
        while hasOutput {
            let start = outputStart
            let attempt = output.withUnsafeBytes { all in
                Result { () throws(IOError) in try Socket.write(fd, UnsafeRawBufferPointer(rebasing: all[start...])) }
            }
            switch try attempt.get() {
            case .wouldBlock:
                return written > 0 ? written : nil
            case .done(let count):
                written += count
                outputStart += count
            }
        }
        return written
    }

    /// Queues the closing handshake's frame (after the last whole Larder frame) and writes what the socket takes now;
    /// the rest is pending (`hasOutput`).
    func finish(_ fd: Int32) {
        queueClose(code: peerCode, reason: "")
        _ = try? flush(fd)
    }

    private func queueClose(code: UInt16, reason: String) {
        guard !closeQueued else { return }
        closeQueued = true
        if outputStart == output.count {
            output.removeAll(keepingCapacity: true)
            outputStart = 0
        }
        // A Larder frame cut short by a failure is not finished: the close frame cannot go inside it, so the peer
        // sees the stream end instead.
        guard frameRemaining == 0 && lengthPrefix.isEmpty else { return }
        output += WebSocketEncoder.close(code: code, reason: reason)
    }
}
