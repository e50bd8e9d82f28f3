import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// A hostile client over the console's WebSocket. Each whole Larder frame of a case goes as one binary message, as a
/// browser sends it; the bytes after the last whole frame go as a message begun and never finished, so the server's
/// Larder decoder sees exactly the bytes a TCP client would send. The stream's end is the WebSocket's: a close frame.
final class HostileWebSocket: HostileConnection {
    let socket: WebSocketTestClient
    /// The code of the server's close frame, once it came.
    private(set) var closeCode: UInt16?
    private var nextID: UInt32 = 1000
    static let mask: (UInt8, UInt8, UInt8, UInt8) = (0x37, 0xFA, 0x21, 0x3D)

    init(port: Int) throws {
        socket = try WebSocketTestClient(port: port)
        let handshake = try socket.handshake()
        guard handshake.status == 101 else { throw ServerTestError("the upgrade was answered \(handshake.status)") }
    }

    func hello(zlib: Bool) throws {
        let request = HelloRequest(compression: zlib ? ["zlib"] : [], client: "hostile-websocket")
        let hello = try socket.call(.hello, request.json, id: 1)
        guard hello.status == .ok else { throw ServerTestError("HELLO failed: \(hello.replyText)") }
    }

    /// `bytes` as masked WebSocket frames: a message per whole Larder frame, then the rest as an unfinished message,
    /// then a close frame when the stream ends there.
    static func messages(_ bytes: [UInt8], endStream: Bool) -> [UInt8] {
        var framed: [UInt8] = []
        var start = 0
        while bytes.count - start >= 4 {
            let length = bytes[start..<(start + 4)].reduce(0) { $0 << 8 | Int($1) }
            guard bytes.count - start >= 4 + length else { break }
            framed += WebSocketEncoder.frame(.binary, payload: Array(bytes[start..<(start + 4 + length)]), mask: mask)
            start += 4 + length
        }
        if start < bytes.count {
            framed += WebSocketEncoder.frame(.binary, payload: Array(bytes[start...]), mask: mask, final: false)
        }
        if endStream { framed += WebSocketEncoder.frame(.close, payload: [0x03, 0xE8], mask: mask) }
        return framed
    }

    func sendCase(_ bytes: [UInt8], endStream: Bool) throws {
        try socket.send(Self.messages(bytes, endStream: endStream))
    }

    /// The next Larder frame; nil once the server's close frame came or the stream ended.
    func nextFrame() throws -> Frame? {
        guard closeCode == nil, let message = try socket.receive() else { return nil }
        switch message.opcode {
        case 0x2:
            return try WebSocketTestClient.decodeOne(message.payload)
        case 0x8:
            let payload = message.payload
            closeCode = payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : 1005
            return nil
        default:
            throw ServerTestError("an unexpected WebSocket frame, opcode \(message.opcode)")
        }
    }

    func ping() throws -> Frame {
        nextID += 1
        return try socket.call(.ping, id: nextID)
    }

    /// The Larder frames until the server's close frame, which must come (the server drains what the case left
    /// unread rather than resetting the connection on it), then the end of the stream.
    func framesUntilEnd() throws -> [Frame] {
        var frames: [Frame] = []
        while let frame = try nextFrame() { frames.append(frame) }
        guard closeCode != nil else { throw ServerTestError("the stream ended without the server's close frame") }
        guard try socket.receive() == nil else { throw ServerTestError("a frame came after the close frame") }
        return frames
    }

    func call(_ opcode: Opcode, _ json: JSONObject) throws -> Frame {
        nextID += 1
        return try socket.call(opcode, json, id: nextID)
    }
}

/// The hostile table over the console's WebSocket, `/ws`: every case gets the status or the close it gets over TCP,
/// since the same decoder and state machine judge the frames a message carries; a healthy TCP client and a healthy
/// WebSocket client are served after each one, and nothing stored changes.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct HostileClientWebSocketTests {
    static func run(_ cases: [HostileCase]) throws {
        try ConsoleTests.withConsole { _, port, consolePort in
            let browser = try HostileWebSocket(port: consolePort)
            try browser.hello(zlib: true)
            let existing: JSONObject = ["collection": "items", "id": .string(HostileClientTests.existing.wireString)]
            try HostileClientTests.check(
                cases, healthy: try RawClient.tcp(port: port),
                alsoHealthy: { name in
                    #expect(try browser.ping().status == .ok, "\(name): the healthy WebSocket lost its ping")
                    let record = try browser.call(.get, existing)
                    #expect(record.status == .ok, "\(name): the healthy WebSocket lost its GET")
                }
            ) { try HostileWebSocket(port: consolePort) }
        }
    }

    @Test func messagesSplitAtLarderFrames() {
        let ping = HostileFrames.request(.ping, "")
        let mask = HostileWebSocket.mask
        let whole = WebSocketEncoder.frame(.binary, payload: ping, mask: mask)
        #expect(HostileWebSocket.messages(ping + ping, endStream: false) == whole + whole)
        let unfinished = WebSocketEncoder.frame(.binary, payload: [1, 2, 3], mask: mask, final: false)
        let close = WebSocketEncoder.frame(.close, payload: [0x03, 0xE8], mask: mask)
        #expect(HostileWebSocket.messages(ping + [1, 2, 3], endStream: true) == whole + unfinished + close)
    }

    @Test func framing() throws { try Self.run(HostileClientTests.framing) }
    @Test func compression() throws { try Self.run(HostileClientTests.compression) }
    @Test func json() throws { try Self.run(HostileClientTests.json) }
    @Test func fieldsOpcodesAndHandshake() throws { try Self.run(HostileClientTests.fields) }
    @Test func idsNamesAndSQL() throws { try Self.run(HostileClientTests.idsAndNames) }
    @Test func blobs() throws { try Self.run(HostileClientTests.blobs) }
}
