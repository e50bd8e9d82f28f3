#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderIO
import LarderServer
import LarderWire

/// A failure of the raw test client.
package struct ServerTestError: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

/// A tiny blocking client over a raw socket: frames encoded with `FrameEncoder`, decoded with `FrameDecoder`.
/// Deliberately independent of LarderClient, so the server is tested against the wire format alone.
package final class RawClient {
    package let fd: Int32
    private var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
    private var buffer = ByteBuffer()
    package let encoder = FrameEncoder()
    private var nextID: UInt32 = 1
    /// The header of the last frame received (to see compression on the wire).
    package private(set) var lastHeader: FrameHeader?
    /// The header flags of the last frame received.
    package var lastFlags: Frame.Flags { lastHeader?.flags ?? [] }
    /// Whether the stream ended in a reset (ECONNRESET) rather than the server's orderly close.
    package private(set) var wasReset = false

    private init(fd: Int32) { self.fd = fd }
    deinit { Glibc.close(fd) }

    package static func tcp(port: Int) throws -> RawClient {
        do throws(ConnectFailure) {
            return RawClient(fd: try Socket.connect(host: "127.0.0.1", port: port, timeoutMs: 120_000))
        } catch {
            throw ServerTestError("connect to port \(port) failed: \(error)")
        }
    }

    package static func unix(path: String) throws -> RawClient {
        do throws(ConnectFailure) {
            return RawClient(fd: try Socket.connect(unixPath: path, timeoutMs: 120_000))
        } catch {
            throw ServerTestError("connect to \(path) failed: \(error)")
        }
    }

    package func writeAll(_ bytes: [UInt8]) throws {
        let code = bytes.withUnsafeBytes { Socket.sendAll(fd, $0) }
        if code != 0 { throw ServerTestError("write failed: errno \(code)") }
    }

    /// Sends a request and returns its id.
    @discardableResult
    package func send(_ opcode: Opcode, _ json: JSONObject = [:], binary: [UInt8] = [], id: UInt32? = nil) throws -> UInt32 {
        let requestID = id ?? nextID
        nextID = max(nextID, requestID) &+ 1
        try writeAll(encode(opcode, json, binary: binary, id: requestID))
        return requestID
    }

    /// Sends several requests in one write (the server reads them together); returns their ids.
    package func sendTogether(_ requests: [(Opcode, JSONObject)]) throws -> [UInt32] {
        var bytes: [UInt8] = []
        var ids: [UInt32] = []
        for (opcode, json) in requests {
            ids.append(nextID)
            bytes += encode(opcode, json, id: nextID)
            nextID &+= 1
        }
        try writeAll(bytes)
        return ids
    }

    package func encode(_ opcode: Opcode, _ json: JSONObject = [:], binary: [UInt8] = [], id: UInt32) -> [UInt8] {
        encoder.encode(Frame(opcode: opcode, requestID: id, json: json.bytes, binary: binary))
    }

    /// The next frame, or nil when the server closed the connection. Throws after `timeout` seconds of silence: the
    /// deadline starts again whenever bytes arrive, so a large answer that keeps coming is never cut short (generous:
    /// it runs out only when nothing is coming).
    package func receive(timeout: Double = 120) throws -> Frame? {
        var deadline = Date().addingTimeInterval(timeout)
        while true {
            do {
                if let header = try decoder.peekHeader(buffer) { lastHeader = header }
                if let frame = try decoder.next(&buffer) { return frame }
            } catch {
                throw ServerTestError("undecodable reply: \(error)")
            }
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw ServerTestError("no reply within \(timeout) s") }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(min(remaining, 3600) * 1000))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 256 << 10)
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n == 0 { return nil }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == ECONNRESET {
                    wasReset = true
                    return nil
                }
                throw ServerTestError("read failed: errno \(errno)")
            }
            buffer.append(chunk[0..<n])
            deadline = Date().addingTimeInterval(timeout)
        }
    }

    /// Sends and waits for the reply with the same id (other replies are an error here).
    package func call(_ opcode: Opcode, _ json: JSONObject = [:], binary: [UInt8] = []) throws -> Frame {
        let id = try send(opcode, json, binary: binary)
        guard let frame = try receive() else { throw ServerTestError("connection closed awaiting \(opcode.name)") }
        guard frame.requestID == id else { throw ServerTestError("reply to \(frame.requestID), expected \(id)") }
        return frame
    }

    /// The STATS answer (null when it fails).
    package func statsValue() -> JSON { (try? call(.stats))?.replyJSON ?? .null }

    /// HELLO; throws unless it succeeds.
    @discardableResult
    package func hello(token: String? = nil, compression: [String] = ["zlib"]) throws -> HelloResponse {
        let frame = try call(.hello, HelloRequest(compression: compression, client: "server-tests", token: token).json)
        guard frame.status == .ok else { throw ServerTestError("HELLO failed: \(String(decoding: frame.json, as: UTF8.self))") }
        return try HelloResponse(json: frame.jsonObject())
    }

    /// Reads until the server closes; returns the frames seen. Throws if it stays silent and open for `timeout`.
    package func framesUntilClosed(timeout: Double = 120) throws -> [Frame] {
        var frames: [Frame] = []
        while let frame = try receive(timeout: timeout) { frames.append(frame) }
        return frames
    }

    package func shutdownWrite() { Glibc.shutdown(fd, Int32(SHUT_WR)) }
}

extension Frame {
    /// The JSON part as a value (for expectations).
    package var replyJSON: JSON { (try? JSONParser.parse(json.isEmpty ? Array("{}".utf8) : json)) ?? .null }
    package var replyText: String { String(decoding: json, as: UTF8.self) }

    /// The answer's JSON without the `seq` a document write's answer ends with (Protocol.md section 5.1): what a GET
    /// of the same record answers, and what a retry answered by another server repeats.
    package var unsequencedJSON: [UInt8] {
        guard let (start, _) = SeqMember.trailing(json) else { return json }
        return Array(json[..<start]) + [UInt8(ascii: "}")]
    }
}


extension RawClient {
    /// A connection to `server` through no listener: one end of a Unix socketpair, which the server serves as it
    /// serves an accepted connection, on one of its event loops (see `withServerWithoutListener`).
    package static func connected(to server: LarderServer) throws -> RawClient {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else {
            throw ServerTestError("socketpair failed: errno \(errno)")
        }
        do throws(IOError) {
            try server.serve(connected: fds[1], peer: "socketpair")
        } catch {
            Glibc.close(fds[0])
            Glibc.close(fds[1])
            throw ServerTestError("the server could not take the socket: \(error)")
        }
        return RawClient(fd: fds[0])
    }
}

/// A server in this process with no listener, in a fresh temporary data directory removed afterwards, shut down when
/// `body` returns: its connections are made with `RawClient.connected(to:)` and run the server's own connection
/// code on its event loops (the plan, the router, the write lanes, WATCH), with no port, address or network.
package func withServerWithoutListener(
    hooks: ServerHooks = ServerHooks(),
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (LarderServer) throws -> Void
) throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-harness-\(UUID())")
    defer { try? FileManager.default.removeItem(at: directory) }
    var configuration = ServerConfiguration()
    configuration.dataDirectory = directory.appendingPathComponent("data").path
    configuration.logLevel = .error
    configuration.ioQueues = 2
    configure(&configuration)
    let server = try LarderServer(configuration: configuration, hooks: hooks)
    server.startWithoutListening()
    defer { server.shutdown() }
    try body(server)
}
