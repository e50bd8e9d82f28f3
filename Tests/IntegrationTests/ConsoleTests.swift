#if canImport(Glibc)
import Glibc
#endif
import Foundation
@testable import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// A blocking WebSocket client over a raw socket, written from RFC 6455 alone: the handshake as a browser sends it,
/// masked frames out, the server's frames in.
final class WebSocketTestClient {
    let raw: RawClient
    var pending: [UInt8] = []

    /// The answer to the upgrade request: its status line and headers, lowercased names.
    struct Handshake {
        var status: Int
        var headers: [String: String]
    }

    init(port: Int) throws { raw = try RawClient.tcp(port: port) }

    /// Sends the upgrade request and reads the answer's head.
    func handshake(origin: String? = nil, key: String = "dGhlIHNhbXBsZSBub25jZQ==", path: String = "/ws") throws
        -> Handshake
    {
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n"
        if let origin { request += "Origin: \(origin)\r\n" }
        try raw.writeAll(Array((request + "\r\n").utf8))
        return try readHead()
    }

    /// Reads an HTTP answer's head.
    func readHead() throws -> Handshake {
        while true {
            if let end = find([13, 10, 13, 10]) {
                let head = String(decoding: pending[..<end], as: UTF8.self)
                pending.removeFirst(end + 4)
                let lines = head.components(separatedBy: "\r\n")
                let status = Int(lines[0].split(separator: " ")[1]) ?? 0
                var headers: [String: String] = [:]
                for line in lines.dropFirst() {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                        in: .whitespaces)
                }
                return Handshake(status: status, headers: headers)
            }
            guard try readMore() else { throw ServerTestError("closed during the handshake") }
        }
    }

    private func find(_ needle: [UInt8]) -> Int? {
        guard pending.count >= needle.count else { return nil }
        for i in 0...(pending.count - needle.count) where Array(pending[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }

    /// Reads what is there (waiting up to 120 s); false at the end of the stream.
    func readMore() throws -> Bool {
        var pfd = pollfd(fd: raw.fd, events: Int16(POLLIN), revents: 0)
        let deadline = Date().addingTimeInterval(120)
        while poll(&pfd, 1, 1000) == 0 {
            if Date() > deadline { throw ServerTestError("the server said nothing for 120 s") }
        }
        var chunk = [UInt8](repeating: 0, count: 256 << 10)
        let n = chunk.withUnsafeMutableBytes { Glibc.read(raw.fd, $0.baseAddress, $0.count) }
        if n <= 0 { return false }
        pending += chunk[0..<n]
        return true
    }

    func send(_ bytes: [UInt8]) throws { try raw.writeAll(bytes) }

    /// Sends `frame` as one masked binary message.
    func send(frame: [UInt8]) throws {
        try send(WebSocketEncoder.frame(.binary, payload: frame, mask: (1, 2, 3, 4)))
    }

    /// One frame from the server: its opcode and payload (nil when the stream ended).
    func receive() throws -> (opcode: UInt8, payload: [UInt8])? {
        while true {
            if pending.count >= 2 {
                #expect(pending[1] & 0x80 == 0, "a server frame is never masked")
                var length = Int(pending[1] & 0x7F)
                var start = 2
                if length == 126, pending.count >= 4 {
                    length = Int(pending[2]) << 8 | Int(pending[3])
                    start = 4
                } else if length == 127, pending.count >= 10 {
                    length = pending[2..<10].reduce(0) { $0 << 8 | Int($1) }
                    start = 10
                }
                if (pending[1] & 0x7F) < 126 || start > 2, pending.count >= start + length {
                    let frame = (pending[0] & 0x0F, Array(pending[start..<(start + length)]))
                    pending.removeFirst(start + length)
                    return frame
                }
            }
            guard try readMore() else { return nil }
        }
    }

    /// Sends a request as one message and decodes the one message that answers it.
    func call(_ opcode: Opcode, _ json: JSONObject = [:], id: UInt32 = 1) throws -> Frame {
        try send(frame: raw.encode(opcode, json, id: id))
        guard let message = try receive() else { throw ServerTestError("closed awaiting \(opcode.name)") }
        #expect(message.opcode == 2, "an answer is a binary message")
        return try Self.decodeOne(message.payload)
    }

    /// The one Larder frame a message holds (an error if it holds more or less).
    static func decodeOne(_ payload: [UInt8]) throws -> Frame {
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var buffer = ByteBuffer(payload)
        guard let frame = try decoder.next(&buffer), buffer.readableCount == 0 else {
            throw ServerTestError("a message that is not exactly one frame (\(payload.count) bytes)")
        }
        return frame
    }
}

/// `--console-port`: the console's files with their security headers, and Larder over a WebSocket at `/ws` through the
/// same connection code as TCP, refused to other origins and to hostile framing.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ConsoleTests {
    static let consoleDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("console").path

    static func withConsole(
        _ configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: (LarderServer, Int, Int) throws -> Void
    ) throws {
        try withServerOnPort0({
            $0.consolePort = 0
            $0.consoleDirectory = consoleDirectory
            configure(&$0)
        }) { server, port in
            try body(server, port, try #require(server.consolePort))
        }
    }

    /// An HTTP GET's status, headers and body.
    static func get(_ port: Int, _ path: String) throws -> (status: Int, headers: [String: String], body: String) {
        let client = try WebSocketTestClient(port: port)
        try client.raw.writeAll(Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8))
        let head = try client.readHead()
        while try client.readMore() {}
        let body = client.pending
        return (head.status, head.headers, String(decoding: body, as: UTF8.self))
    }

    @Test func thePageIsServedWithItsContentSecurityPolicy() throws {
        try Self.withConsole { _, _, consolePort in
            let page = try Self.get(consolePort, "/")
            #expect(page.status == 200)
            #expect(page.headers["content-type"] == "text/html; charset=utf-8")
            // The exact policy, as README's console section quotes it.
            let policy = page.headers["content-security-policy"] ?? ""
            #expect(
                policy == "default-src 'self'; img-src 'self' blob:; connect-src 'self'; object-src 'none'; "
                    + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'", "CSP: \(policy)")
            let readme = try String(
                contentsOf: ConsoleBrowserTests.root.appendingPathComponent("README.md"), encoding: .utf8)
            #expect(readme.contains("Content-Security-Policy: \(policy)\n"), "README quotes the header sent")
            #expect(page.body.contains("larder"))
            #expect(!page.body.contains("<script>"), "no inline script in the page")
            let script = try Self.get(consolePort, "/larder.js")
            #expect(script.status == 200)
            #expect(script.headers["content-type"] == "text/javascript; charset=utf-8")
            #expect(try Self.get(consolePort, "/../Package.swift").status == 404)
            #expect(try Self.get(consolePort, "/nothing.js").status == 404)
            // /ws without the upgrade is told what it needs.
            #expect(try Self.get(consolePort, "/ws").status == 426)
        }
    }

    @Test func theWebSocketSpeaksLarderThroughTheSameConnectionCode() throws {
        try Self.withConsole { _, port, consolePort in
            let ws = try WebSocketTestClient(port: consolePort)
            let handshake = try ws.handshake(origin: "http://127.0.0.1")
            #expect(handshake.status == 101)
            // RFC 6455 section 1.3's example key and answer.
            #expect(handshake.headers["sec-websocket-accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
            let hello = try ws.call(.hello, HelloRequest(compression: ["zlib"], client: "console-test").json)
            #expect(hello.status == .ok)
            #expect(hello.replyJSON["limits"]?["maxFrameBytes"] != nil, "HELLO announces the limits, as on TCP")
            let created = try ws.call(.create, ["collection": "notes", "data": ["text": "über the socket"]], id: 2)
            #expect(created.status == .ok)
            let id = created.replyJSON["id"] ?? .null
            let overWebSocket = try ws.call(.get, ["collection": "notes", "id": id], id: 3)
            // The same GET over TCP answers the same bytes.
            let tcp = try RawClient.tcp(port: port)
            _ = try tcp.hello(compression: ["zlib"])
            let overTCP = try tcp.call(.get, ["collection": "notes", "id": id])
            #expect(overWebSocket.status == .ok)
            #expect(overWebSocket.json == overTCP.json)
            // Pipelined requests are answered in order, one message each.
            for n in 0..<5 { try ws.send(frame: ws.raw.encode(.ping, id: UInt32(10 + n))) }
            for n in 0..<5 {
                let message = try #require(try ws.receive())
                #expect(try WebSocketTestClient.decodeOne(message.payload).requestID == UInt32(10 + n))
            }
            // A ping is answered with a pong carrying its data.
            try ws.send(WebSocketEncoder.frame(.ping, payload: [7, 7], mask: (9, 9, 9, 9)))
            let pong = try #require(try ws.receive())
            #expect(pong.opcode == 0xA && pong.payload == [7, 7])
            // A close is answered with a close echoing its code, then the stream ends.
            try ws.send(WebSocketEncoder.frame(.close, payload: [0x03, 0xE8], mask: (9, 9, 9, 9)))
            let close = try #require(try ws.receive())
            #expect(close.opcode == 0x8 && close.payload == [0x03, 0xE8])
            #expect(try ws.receive() == nil)
        }
    }

    @Test func anotherOriginIsRefusedAtTheUpgrade() throws {
        try Self.withConsole({ $0.consoleOrigins = ["https://admin.example.com"] }) { _, _, consolePort in
            let foreign = try WebSocketTestClient(port: consolePort)
            #expect(try foreign.handshake(origin: "https://evil.example.com").status == 403)
            let allowed = try WebSocketTestClient(port: consolePort)
            #expect(try allowed.handshake(origin: "https://admin.example.com").status == 101)
            #expect(try allowed.call(.ping).status == .ok)
            let badKey = try WebSocketTestClient(port: consolePort)
            #expect(try badKey.handshake(key: "c2hvcnQ=").status == 400, "a key that is not 16 bytes")
        }
    }

    /// Each hostile stream ends the connection with the close code RFC 6455 names (and nothing else is answered).
    @Test func hostileFramingClosesTheConnectionWithItsCode() throws {
        try Self.withConsole({
            $0.limits.maxFrameBytes = 64 << 10
            $0.limits.maxHandshakeFrameBytes = 1024
        }) { _, _, consolePort in
            let ping = RawClient.tcpless.encode(.ping, id: 1)
            let cases: [(String, [UInt8], UInt16)] = [
                ("an unmasked frame", WebSocketEncoder.frame(.binary, payload: ping), 1002),
                ("a text message", WebSocketEncoder.frame(.text, payload: Array("{}".utf8), mask: (1, 1, 1, 1)), 1003),
                ("two Larder frames in one message",
                 WebSocketEncoder.frame(.binary, payload: ping + ping, mask: (1, 1, 1, 1)), 1002),
                ("half a Larder frame",
                 WebSocketEncoder.frame(.binary, payload: Array(ping.prefix(10)), mask: (1, 1, 1, 1)), 1002),
                ("a message over maxFrameBytes, declared", [0x82, 0xFF, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4], 1009),
                // 4 + maxFrameBytes + 1 = 65,541 bytes: one over.
                ("a message one byte over 4 + maxFrameBytes", [0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 5, 1, 2, 3, 4], 1009),
                ("RSV bits", [0xF2, 0x80, 1, 2, 3, 4], 1002),
            ]
            for (name, stream, code) in cases {
                let ws = try WebSocketTestClient(port: consolePort)
                #expect(try ws.handshake().status == 101)
                try ws.send(stream)
                var frames: [(opcode: UInt8, payload: [UInt8])] = []
                while let frame = try ws.receive() { frames.append(frame) }
                let close = frames.last
                #expect(close?.opcode == 0x8, "\(name): a close frame ends the stream")
                let sent = close.map { UInt16($0.payload[0]) << 8 | UInt16($0.payload[1]) }
                #expect(sent == code, "\(name): close code \(String(describing: sent)), expected \(code)")
                #expect(frames.count == 1, "\(name): nothing is answered before the close")
            }
            // A Larder frame that breaks Larder's rules is refused as on TCP: PROTOCOL_ERROR, then the close.
            let ws = try WebSocketTestClient(port: consolePort)
            #expect(try ws.handshake().status == 101)
            var bad = ping
            bad[4] = 0x58  // the magic
            try ws.send(frame: bad)
            let refusal = try WebSocketTestClient.decodeOne(try #require(try ws.receive()).payload)
            #expect(refusal.status == .protocolError)
            #expect(try ws.receive()?.opcode == 0x8)
            // Before HELLO, maxHandshakeFrameBytes holds inside a well-formed message as on TCP.
            let big = try WebSocketTestClient(port: consolePort)
            #expect(try big.handshake().status == 101)
            let padded: JSONObject = ["pad": .string(String(repeating: "x", count: 2000))]
            try big.send(frame: RawClient.tcpless.encode(.ping, padded, id: 1))
            let tooLarge = try WebSocketTestClient.decodeOne(try #require(try big.receive()).payload)
            #expect(tooLarge.status == .payloadTooLarge)
            #expect(tooLarge.replyText.contains("\"limit\":1024"), "\(tooLarge.replyText)")
            #expect(try big.receive()?.opcode == 0x8)
        }
    }

    /// With TLS on, the console speaks HTTPS with the server's certificate, and Larder over `wss://` (checked with
    /// Python's ssl module: the page, then HELLO and PING through the upgraded socket, after a silent HTTPS client was
    /// cut at the HTTP deadline, which the WebSocket outlives).
    @Test func withTLSTheConsoleSpeaksHTTPSAndWSS() throws {
        try Self.withConsole({
            $0.useTestTLS()
            $0.consoleRequestTimeoutMs = 200
        }) { _, _, consolePort in
            let hello = FrameEncoder().encode(
                Frame(opcode: .hello, requestID: 1, json: HelloRequest(compression: [], client: "tls").json.bytes))
            let ping = FrameEncoder().encode(Frame(opcode: .ping, requestID: 2, json: []))
            let messages = [hello, ping].map { WebSocketEncoder.frame(.binary, payload: $0, mask: (5, 6, 7, 8)) }
            let script = """
                import socket, ssl, sys
                context = ssl.create_default_context(cafile=sys.argv[1])
                def connect():
                    return context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=120),
                                               server_hostname="127.0.0.1")
                s = connect()
                s.sendall(b"GET / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n")
                page = b""
                while chunk := s.recv(65536): page += chunk
                print(page.split(b"\\r\\n")[0].decode())
                s = connect()
                s.sendall(b"GET /ws HTTP/1.1\\r\\nHost: 127.0.0.1:" + sys.argv[2].encode()
                          + b"\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
                          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n"
                          b"Origin: https://127.0.0.1:" + sys.argv[2].encode() + b"\\r\\n\\r\\n")
                head = b""
                while b"\\r\\n\\r\\n" not in head: head += s.recv(1)
                print(head.split(b"\\r\\n")[0].decode())
                # A silent HTTPS client is cut at the 200 ms deadline; the WebSocket, upgraded, is not.
                silent = connect()
                try:
                    assert silent.recv(1) == b""
                except (ssl.SSLError, OSError):
                    pass
                s.sendall(bytes.fromhex(sys.argv[3]))
                def exactly(n):
                    got = b""
                    while len(got) < n: got += s.recv(n - len(got))
                    return got
                def message():
                    n = exactly(2)[1] & 0x7F
                    if n == 126: n = int.from_bytes(exactly(2), "big")
                    return exactly(n)
                for _ in range(2):
                    body = message()
                    print("status", int.from_bytes(body[10:12], "big"), "id", int.from_bytes(body[12:16], "big"))
                """
            let hex = messages.joined().map { String(format: "%02x", $0) }.joined()
            let run = try CLIShellTests.run(
                URL(fileURLWithPath: "/usr/bin/env"),
                ["python3", "-c", script, TestCertificates.shared.caFile, "\(consolePort)", hex])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout == "HTTP/1.1 200 OK\nHTTP/1.1 101 Switching Protocols\nstatus 0 id 1\nstatus 0 id 2\n")
        }
    }

    /// An upgraded connection leaves the HTTP side's deadline: a WebSocket answers after it has passed, while a
    /// plain HTTP client that says nothing is cut at it.
    @Test func aWebSocketOutlivesTheHTTPExchangeDeadline() throws {
        try Self.withConsole({ $0.consoleRequestTimeoutMs = 200 }) { _, _, consolePort in
            let ws = try WebSocketTestClient(port: consolePort)
            #expect(try ws.handshake().status == 101)
            #expect(try ws.call(.ping).status == .ok)
            let silent = try WebSocketTestClient(port: consolePort)
            // The silent HTTP client is cut: its stream ends with nothing answered.
            #expect(try silent.readMore() == false, "a silent HTTP client is cut at the deadline")
            // Well past the deadline (the watchdog has run several times), the WebSocket still answers.
            #expect(try ws.call(.ping, id: 2).status == .ok)
        }
    }

    /// A WebSocket is a Larder connection: over `maxConnections` it gets the same refusal as TCP, then a close frame.
    @Test func aWebSocketCountsAgainstMaxConnections() throws {
        try Self.withConsole({ $0.limits.maxConnections = 1 }) { _, port, consolePort in
            let tcp = try RawClient.tcp(port: port)
            _ = try tcp.hello(compression: [])
            let ws = try WebSocketTestClient(port: consolePort)
            #expect(try ws.handshake().status == 101)
            let refusal = try WebSocketTestClient.decodeOne(try #require(try ws.receive()).payload)
            #expect(refusal.status == .resourceExhausted, "\(refusal.replyText)")
            let close = try #require(try ws.receive())
            #expect(close.opcode == 0x8 && close.payload == [0x03, 0xF5], "close 1013, try again later")
            #expect(try ws.receive() == nil)
        }
    }

    @Test func aTokenIsRequiredOverTheWebSocketAsOverTCP() throws {
        try Self.withConsole({ $0.token = "s3cret-token" }) { _, _, consolePort in
            let ws = try WebSocketTestClient(port: consolePort)
            #expect(try ws.handshake().status == 101)
            let refused = try ws.call(.hello, HelloRequest(compression: [], client: "t", token: "wrong").json)
            #expect(refused.status == .unauthenticated)
            let ok = try WebSocketTestClient(port: consolePort)
            #expect(try ok.handshake().status == 101)
            let hello = HelloRequest(compression: [], client: "t", token: "s3cret-token")
            #expect(try ok.call(.hello, hello.json).status == .ok)
        }
    }
}

extension RawClient {
    /// An encoder of frames for tests that send them over another transport.
    static var tcpless: FrameEncoderBox { FrameEncoderBox() }
}

struct FrameEncoderBox {
    func encode(_ opcode: Opcode, _ json: JSONObject = [:], id: UInt32) -> [UInt8] {
        FrameEncoder().encode(Frame(opcode: opcode, requestID: id, json: json.bytes))
    }
}
