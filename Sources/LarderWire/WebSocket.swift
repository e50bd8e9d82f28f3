/// Why a WebSocket stream cannot go on: the close code sent to the peer (RFC 6455 section 7.4.1) and what was wrong.
package struct WebSocketError: Error, Sendable, Equatable {
    /// 1002: a framing rule was broken.
    package static let protocolError: UInt16 = 1002
    /// 1003: a text message (the Larder transport carries binary messages only).
    package static let unsupportedData: UInt16 = 1003
    /// 1007: a close frame's reason is not UTF-8.
    package static let invalidPayload: UInt16 = 1007
    /// 1009: a message larger than the connection's limit.
    package static let messageTooBig: UInt16 = 1009

    package var code: UInt16
    package var message: String

    package init(_ code: UInt16, _ message: String) {
        self.code = code
        self.message = message
    }
}

/// The server's side of RFC 6455 framing, as a pure value: fed the bytes a client sent, in any split, it hands out
/// the unmasked payload of binary messages as it arrives, and the control frames whole.
///
/// Strict: every client frame is masked; RSV bits are 0 (no extension is ever agreed); lengths use their shortest
/// encoding; a control frame is final and at most 125 bytes; a continuation follows a fragment and a new message does
/// not; a text message is refused. A message's length is checked against `maxMessageBytes` the moment each frame
/// header is complete, before any of its payload is taken, so a declared 2^63-byte frame costs nothing.
///
/// ```swift
/// var decoder = WebSocketDecoder(maxMessageBytes: 1 << 20)
/// var frame = WebSocketEncoder.frame(.binary, payload: [1, 2, 3], mask: (1, 2, 3, 4))
/// try frame.withUnsafeMutableBytes { bytes in
///     try decoder.feed(bytes) { event in /* .payload([1, 2, 3]), then .messageEnd */ }
/// }
/// ```
package struct WebSocketDecoder {
    /// Frame opcodes (RFC 6455 section 5.2).
    package enum Opcode: UInt8, Sendable {
        case continuation = 0x0
        case text = 0x1
        case binary = 0x2
        case close = 0x8
        case ping = 0x9
        case pong = 0xA
    }

    /// What a fed stream contained, in order.
    package enum Event {
        /// Unmasked bytes of the current binary message (valid only during the call).
        case payload(UnsafeRawBufferPointer)
        /// The current binary message is complete.
        case messageEnd
        /// A ping's application data, to echo in a pong.
        case ping([UInt8])
        /// A pong (unsolicited ones are allowed and ignored).
        case pong
        /// The peer closes, with its code (nil: none given) and reason.
        case close(code: UInt16?, reason: String)
    }

    /// The largest binary message accepted, all its fragments together.
    package var maxMessageBytes: Int

    /// The header of the frame being read, up to 14 bytes.
    private var header: [UInt8] = []
    /// Payload bytes of the current frame still to come.
    private var remaining = 0
    private var mask: (UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0)
    /// Payload bytes of the current frame already unmasked (the mask key's phase).
    private var maskOffset = 0
    private var frameOpcode = Opcode.binary
    private var frameIsFinal = false
    /// A binary message has begun and its final fragment has not come yet.
    private var inMessage = false
    /// Bytes of the current message so far, the current frame's declared length included.
    private var messageBytes = 0
    /// A control frame's payload, gathered until complete (at most 125 bytes).
    private var control: [UInt8] = []
    /// The peer sent a close frame: nothing after it is read.
    package private(set) var closed = false

    package init(maxMessageBytes: Int) {
        self.maxMessageBytes = maxMessageBytes
    }

    /// Decodes `bytes`, unmasking payload in place, and calls `sink` with each event in order. A throw means the
    /// connection cannot go on (send a close frame with the error's code); bytes after a close frame are ignored.
    package mutating func feed(
        _ bytes: UnsafeMutableRawBufferPointer, _ sink: (Event) throws(WebSocketError) -> Void
    ) throws(WebSocketError) {
        var index = 0
        while index < bytes.count && !closed {
            if !headerComplete {
                header.append(bytes[index])
                index += 1
                // The first two bytes say enough to refuse a frame without waiting for its length and mask.
                if header.count == 2 { try checkOpening() }
                if headerComplete {
                    try startFrame()
                    if remaining == 0 { try endFrame(sink) }
                }
                continue
            }
            let take = min(remaining, bytes.count - index)
            let chunk = UnsafeMutableRawBufferPointer(rebasing: bytes[index..<(index + take)])
            unmask(chunk)
            index += take
            remaining -= take
            if frameOpcode == .binary || frameOpcode == .continuation {
                try sink(.payload(UnsafeRawBufferPointer(chunk)))
            } else {
                control += chunk
            }
            if remaining == 0 { try endFrame(sink) }
        }
    }

    /// The header has all its bytes: 2, plus the extended length's 2 or 8, plus the 4-byte mask.
    private var headerComplete: Bool {
        guard header.count >= 2 else { return false }
        let code = header[1] & 0x7F
        let lengthBytes = code == 126 ? 2 : code == 127 ? 8 : 0
        return header.count == 2 + lengthBytes + 4
    }

    /// The rules the first two bytes decide: no RSV bit, a known opcode, a mask.
    private func checkOpening() throws(WebSocketError) {
        guard header[0] & 0x70 == 0 else {
            throw WebSocketError(WebSocketError.protocolError, "RSV bits set, but no extension was agreed")
        }
        guard Opcode(rawValue: header[0] & 0x0F) != nil else {
            throw WebSocketError(WebSocketError.protocolError, "unknown WebSocket opcode \(header[0] & 0x0F)")
        }
        guard header[1] & 0x80 != 0 else {
            throw WebSocketError(WebSocketError.protocolError, "a client frame must be masked")
        }
    }

    private mutating func startFrame() throws(WebSocketError) {
        let first = header[0]
        let second = header[1]
        let opcode = Opcode(rawValue: first & 0x0F) ?? .binary  // checked by `checkOpening`
        var length: UInt64
        let code = second & 0x7F
        switch code {
        case 126:
            length = UInt64(header[2]) << 8 | UInt64(header[3])
            guard length >= 126 else {
                throw WebSocketError(WebSocketError.protocolError, "a length under 126 must use the 7-bit form")
            }
        case 127:
            length = 0
            for byte in header[2..<10] { length = length << 8 | UInt64(byte) }
            guard length >> 63 == 0 else {
                throw WebSocketError(WebSocketError.protocolError, "a 64-bit length must have its top bit clear")
            }
            guard length > 0xFFFF else {
                throw WebSocketError(WebSocketError.protocolError, "a length under 65536 must use the 16-bit form")
            }
        default:
            length = UInt64(code)
        }
        let m = header.count - 4
        mask = (header[m], header[m + 1], header[m + 2], header[m + 3])
        maskOffset = 0
        frameIsFinal = first & 0x80 != 0
        frameOpcode = opcode
        switch opcode {
        case .close, .ping, .pong:
            guard frameIsFinal else {
                throw WebSocketError(WebSocketError.protocolError, "a control frame must not be fragmented")
            }
            guard length <= 125 else {
                throw WebSocketError(WebSocketError.protocolError, "a control frame carries at most 125 bytes")
            }
            control = []
        case .text:
            throw WebSocketError(
                WebSocketError.unsupportedData, "text messages are not accepted: send each Larder frame as one binary "
                    + "message")
        case .binary:
            guard !inMessage else {
                throw WebSocketError(WebSocketError.protocolError, "a new message began before the last one ended")
            }
            inMessage = true
            messageBytes = 0
            try count(length)
        case .continuation:
            guard inMessage else {
                throw WebSocketError(WebSocketError.protocolError, "a continuation frame with no message to continue")
            }
            try count(length)
        }
        remaining = Int(length)
    }

    /// Adds a data frame's declared length to its message's and checks the limit before any payload is read.
    private mutating func count(_ length: UInt64) throws(WebSocketError) {
        guard length <= UInt64(maxMessageBytes - messageBytes) else {
            throw WebSocketError(
                WebSocketError.messageTooBig, "a message of more than \(maxMessageBytes) bytes exceeds the limit")
        }
        messageBytes += Int(length)
    }

    private mutating func endFrame(_ sink: (Event) throws(WebSocketError) -> Void) throws(WebSocketError) {
        header.removeAll(keepingCapacity: true)
        switch frameOpcode {
        case .binary, .continuation:
            if frameIsFinal {
                inMessage = false
                try sink(.messageEnd)
            }
        case .ping:
            try sink(.ping(control))
        case .pong:
            try sink(.pong)
        case .close:
            closed = true
            try sink(try Self.closeEvent(control))
        case .text:
            break  // refused at its header
        }
    }

    /// A close frame's body: nothing, or a valid code and a UTF-8 reason.
    private static func closeEvent(_ body: [UInt8]) throws(WebSocketError) -> Event {
        if body.isEmpty { return .close(code: nil, reason: "") }
        guard body.count >= 2 else {
            throw WebSocketError(WebSocketError.protocolError, "a close frame's body is a 2-byte code, then a reason")
        }
        let code = UInt16(body[0]) << 8 | UInt16(body[1])
        let valid = (1000...1003).contains(code) || (1007...1011).contains(code) || (3000...4999).contains(code)
        guard valid else { throw WebSocketError(WebSocketError.protocolError, "close code \(code) is not allowed") }
        guard let reason = String(validating: body[2...], as: UTF8.self) else {
            throw WebSocketError(WebSocketError.invalidPayload, "a close frame's reason is not UTF-8")
        }
        return .close(code: code, reason: reason)
    }

    /// XORs `bytes` with the mask key, from where the frame's payload got to (no allocation: this runs per read).
    private mutating func unmask(_ bytes: UnsafeMutableRawBufferPointer) {
        let key = UInt32(mask.0) << 24 | UInt32(mask.1) << 16 | UInt32(mask.2) << 8 | UInt32(mask.3)
        var phase = maskOffset & 3
        for i in 0..<bytes.count {
            bytes[i] ^= UInt8(truncatingIfNeeded: key >> (24 - 8 * UInt32(phase)))
            phase = (phase + 1) & 3
        }
        maskOffset += bytes.count
    }
}

/// Checks that each binary message holds exactly one Larder frame: the frame's 4-byte length, read from the message's
/// first bytes, must end where the message ends. A pure value beside `WebSocketDecoder`; the frame itself is then
/// judged by the same `FrameDecoder` rules as on TCP.
package struct LarderMessageCheck {
    /// Bytes of the current message so far.
    private var seen = 0
    /// The message's first 4 bytes, until all are in.
    private var prefix: [UInt8] = []
    /// `4 + length` once the prefix is in.
    private var expected: Int?

    package init() {}

    /// More of the current message's payload.
    package mutating func payload(_ bytes: UnsafeRawBufferPointer) throws(WebSocketError) {
        if expected == nil {
            prefix += bytes.prefix(4 - prefix.count)
            if prefix.count == 4 {
                let length = Int(prefix[0]) << 24 | Int(prefix[1]) << 16 | Int(prefix[2]) << 8 | Int(prefix[3])
                expected = 4 + length
            }
        }
        seen += bytes.count
        if let expected, seen > expected {
            throw WebSocketError(
                WebSocketError.protocolError, "a message holds more than one Larder frame: send one frame per message")
        }
    }

    /// The current message ended.
    package mutating func messageEnd() throws(WebSocketError) {
        defer {
            seen = 0
            prefix = []
            expected = nil
        }
        guard let expected, seen == expected else {
            throw WebSocketError(
                WebSocketError.protocolError, "a message ended inside a Larder frame: send one whole frame per message")
        }
    }
}

/// Frames the server sends: never masked (RFC 6455 section 5.1), always final.
package enum WebSocketEncoder {
    /// The header of a final, unmasked frame of `length` bytes.
    package static func header(_ opcode: WebSocketDecoder.Opcode, length: Int, into bytes: inout [UInt8]) {
        bytes.append(0x80 | opcode.rawValue)
        if length < 126 {
            bytes.append(UInt8(length))
        } else if length <= 0xFFFF {
            bytes += [126, UInt8(length >> 8), UInt8(length & 0xFF)]
        } else {
            bytes.append(127)
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8((length >> shift) & 0xFF)) }
        }
    }

    /// A whole frame; `mask` (a client's frame, for tests and clients) masks the payload.
    package static func frame(
        _ opcode: WebSocketDecoder.Opcode, payload: [UInt8], mask: (UInt8, UInt8, UInt8, UInt8)? = nil,
        final: Bool = true
    ) -> [UInt8] {
        var bytes: [UInt8] = []
        header(opcode, length: payload.count, into: &bytes)
        if !final { bytes[0] &= 0x7F }
        guard let mask else { return bytes + payload }
        bytes[1] |= 0x80
        let key = [mask.0, mask.1, mask.2, mask.3]
        bytes += key
        for (i, byte) in payload.enumerated() { bytes.append(byte ^ key[i & 3]) }
        return bytes
    }

    /// A close frame with `code` and a reason cut to fit a control frame's 125 bytes on a character boundary.
    package static func close(code: UInt16, reason: String) -> [UInt8] {
        var body: [UInt8] = [UInt8(code >> 8), UInt8(code & 0xFF)]
        var text = Substring(reason)
        while text.utf8.count > 123 { text = text.dropLast() }
        body += Array(text.utf8)
        return frame(.close, payload: body)
    }
}
