import LarderTestThreads
import LarderWire
import Testing

/// RFC 6455 framing as the console's WebSocket reads it: valid streams decode the same however they are split, and
/// hostile ones are refused at the header with the close code the RFC names.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct WebSocketTests {
    enum Seen: Equatable {
        case message([UInt8])
        case ping([UInt8])
        case pong
        case close(UInt16?, String)
    }

    /// Feeds `stream` in pieces of the given sizes (the rest at the end); returns what was seen, or the error.
    static func decode(
        _ stream: [UInt8], splits: [Int] = [], max: Int = 1 << 20
    ) -> (seen: [Seen], error: WebSocketError?) {
        var decoder = WebSocketDecoder(maxMessageBytes: max)
        var seen: [Seen] = []
        var message: [UInt8] = []
        var offset = 0
        var pieces = splits.filter { $0 > 0 }
        do {
            while offset < stream.count {
                let size = pieces.isEmpty ? stream.count - offset : min(pieces.removeFirst(), stream.count - offset)
                var piece = Array(stream[offset..<(offset + size)])
                offset += size
                try piece.withUnsafeMutableBytes { bytes in
                    try decoder.feed(bytes) { event in
                        switch event {
                        case .payload(let chunk): message += chunk
                        case .messageEnd:
                            seen.append(.message(message))
                            message = []
                        case .ping(let data): seen.append(.ping(data))
                        case .pong: seen.append(.pong)
                        case .close(let code, let reason): seen.append(.close(code, reason))
                        }
                    }
                }
            }
        } catch {
            return (seen, error as? WebSocketError)
        }
        return (seen, nil)
    }

    static let key: (UInt8, UInt8, UInt8, UInt8) = (0x37, 0xFA, 0x21, 0x3D)

    static func masked(_ opcode: WebSocketDecoder.Opcode, _ payload: [UInt8], final: Bool = true) -> [UInt8] {
        WebSocketEncoder.frame(opcode, payload: payload, mask: key, final: final)
    }

    @Test func rfcExampleDecodes() {
        // RFC 6455 section 5.7: a single-frame masked text message "Hello" is refused (binary only)...
        let hello: [UInt8] = [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58]
        #expect(Self.decode(hello).error?.code == WebSocketError.unsupportedData, "a text message is refused with 1003")
        // ...and the same bytes as a binary message decode to "Hello".
        var binary = hello
        binary[0] = 0x82
        #expect(Self.decode(binary).seen == [.message(Array("Hello".utf8))])
        // The RFC's masked ping with "Hello".
        let ping: [UInt8] = [0x89, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58]
        #expect(Self.decode(ping).seen == [.ping(Array("Hello".utf8))])
    }

    @Test func everySplitDecodesTheSame() {
        let big = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let stream =
            Self.masked(.binary, [1, 2, 3], final: false) + Self.masked(.ping, [9]) + Self.masked(.continuation, [4])
            + Self.masked(.binary, Array(repeating: 5, count: 300)) + Self.masked(.binary, big)
            + Self.masked(.pong, []) + Self.masked(.close, [0x03, 0xE8] + Array("bye".utf8))
        let expected: [Seen] = [
            .ping([9]), .message([1, 2, 3, 4]), .message(Array(repeating: 5, count: 300)), .message(big), .pong,
            .close(1000, "bye"),
        ]
        #expect(Self.decode(stream).seen == expected)
        #expect(Self.decode(stream, splits: Array(repeating: 1, count: stream.count)).seen == expected)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20 {
            let splits = (0..<50).map { _ in Int.random(in: 1...2000, using: &generator) }
            #expect(Self.decode(stream, splits: splits).seen == expected)
        }
        // Bytes after the close frame are never read.
        #expect(Self.decode(stream + [0xFF, 0xFF, 0xFF]).error == nil)
    }

    @Test func hostileFramesAreRefusedWithTheirCode() {
        let p = WebSocketError.protocolError
        let cases: [(String, [UInt8], UInt16)] = [
            ("unmasked", WebSocketEncoder.frame(.binary, payload: [1]), p),
            ("RSV1 set", [0xC2, 0x81, 1, 2, 3, 4, 0], p),
            ("unknown opcode 3", [0x83, 0x80, 1, 2, 3, 4], p),
            ("fragmented ping", Self.masked(.ping, [1], final: false), p),
            ("126-byte ping", Self.masked(.ping, Array(repeating: 0, count: 126)), p),
            ("continuation first", Self.masked(.continuation, [1]), p),
            ("new message inside one", Self.masked(.binary, [1], final: false) + Self.masked(.binary, [2]), p),
            ("16-bit length under 126", [0x82, 0xFE, 0x00, 0x05, 1, 2, 3, 4], p),
            ("64-bit length under 65536", [0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 1, 2, 3, 4], p),
            ("64-bit length with the top bit", [0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4], p),
            ("1-byte close body", Self.masked(.close, [3]), p),
            ("close code 1005", Self.masked(.close, [0x03, 0xED]), p),
            ("close reason not UTF-8", Self.masked(.close, [0x03, 0xE8, 0xFF]), WebSocketError.invalidPayload),
            ("text", Self.masked(.text, Array("hi".utf8)), WebSocketError.unsupportedData),
        ]
        for (name, stream, code) in cases {
            #expect(Self.decode(stream).error?.code == code, "\(name)")
            #expect(
                Self.decode(stream, splits: Array(repeating: 1, count: stream.count)).error?.code == code,
                "\(name), one byte at a time")
        }
    }

    @Test func aMessageOverTheLimitIsRefusedAtItsHeader() {
        // 2^62 bytes declared: refused when the header is complete, with no payload sent.
        let huge: [UInt8] = [0x82, 0xFF, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]
        #expect(Self.decode(huge, max: 1000).error?.code == WebSocketError.messageTooBig)
        // Fragments count together: 600 + 600 > 1000 at the second header.
        let split = Self.masked(.binary, Array(repeating: 0, count: 600), final: false)
            + Array(Self.masked(.continuation, Array(repeating: 0, count: 600)).prefix(8))
        let outcome = Self.decode(split, max: 1000)
        #expect(outcome.error?.code == WebSocketError.messageTooBig)
        // Exactly the limit is accepted.
        #expect(Self.decode(Self.masked(.binary, Array(repeating: 0, count: 1000)), max: 1000).error == nil)
    }

    @Test func eachMessageIsExactlyOneLarderFrame() {
        func check(_ messages: [[UInt8]]) -> WebSocketError? {
            var check = LarderMessageCheck()
            do {
                for message in messages {
                    for byte in message { try [byte].withUnsafeBytes { try check.payload($0) } }
                    try check.messageEnd()
                }
            } catch {
                return error as? WebSocketError
            }
            return nil
        }
        let frame: [UInt8] = [0, 0, 0, 24] + Array(repeating: 0, count: 24)
        #expect(check([frame, frame]) == nil)
        #expect(check([frame + frame])?.code == WebSocketError.protocolError, "two frames in one message")
        #expect(check([Array(frame.prefix(10))])?.code == WebSocketError.protocolError, "half a frame")
        #expect(check([[0, 0]])?.code == WebSocketError.protocolError, "half a length")
        #expect(check([[]])?.code == WebSocketError.protocolError, "an empty message")
    }

    @Test func serverFramesUseTheShortestLength() {
        let expected = [(5, [0x82, 5]), (126, [0x82, 126, 0, 126]), (65536, [0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0])]
        for (length, header) in expected {
            var bytes: [UInt8] = []
            WebSocketEncoder.header(.binary, length: length, into: &bytes)
            #expect(bytes == header.map { UInt8($0) })
        }
        let close = WebSocketEncoder.close(code: 1002, reason: String(repeating: "é", count: 100))
        #expect(close.count <= 127 && close[1] <= 125, "a close frame's reason is cut to 123 bytes")
    }
}
