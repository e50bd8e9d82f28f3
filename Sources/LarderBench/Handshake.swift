#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import LarderWire

/// What the server said about itself when the first connection shook hands.
struct ServerInfo: Sendable {
    /// `larder-server 0.1.0`, `redis`, or `raw sink`.
    var name: String
    var compression = false
    var compressionThreshold = FrameEncoder.defaultThreshold
    var maxInFlight = Int.max
}

/// Opening connections and the blocking exchanges before the load: HELLO, Redis AUTH and PING, INDEX. These use the
/// full LarderWire decoder; only the hot loop skips bodies.
/// close(2), named apart from `Handshake.close`.
private func systemClose(_ fd: Int32) { close(fd) }

enum Handshake {
    /// A connected socket to the target, handshaken, left blocking: connection `index` goes to the server `index`
    /// in `options.servers`, round robin (`port` overrides the server's port: the raw sink's own).
    static func open(_ options: BenchOptions, port: Int? = nil, index: Int = 0) throws(BenchError)
        -> (Int32, ServerInfo)
    {
        let fd: Int32
        if let path = options.socketPath, options.target != .raw {
            fd = try Sys.connectUnix(path: path)
        } else if options.target == .raw {
            fd = try Sys.connectTCP(host: "127.0.0.1", port: port ?? options.resolvedPort)
        } else {
            let servers = options.servers
            let server = servers[index % servers.count]
            fd = try Sys.connectTCP(host: server.host, port: server.port)
        }
        do throws(BenchError) {
            let deadline = Sys.now() + UInt64(options.timeout * 1e9)
            if options.tls && options.target == .larder {
                try BenchTLS.handshake(fd, options, host: options.host, deadline: deadline)
            }
            switch options.target {
            case .larder: return (fd, try larderHello(fd, options, deadline: deadline))
            case .redis: return (fd, try redisHello(fd, options, deadline: deadline))
            case .raw: return (fd, ServerInfo(name: "raw loopback sink"))
            }
        } catch {
            Handshake.close(fd)
            throw error
        }
    }

    /// Closes a connection `open` made and forgets its TLS session, if any: sessions are found by descriptor, and a
    /// session left behind would be taken by the next connection that gets the same number (a plain one included).
    static func close(_ fd: Int32) {
        _ = BenchTLS.take(fd)
        systemClose(fd)
    }

    static func larderHello(_ fd: Int32, _ options: BenchOptions, deadline: UInt64) throws(BenchError) -> ServerInfo {
        let hello = HelloRequest(
            compression: options.compression ? [zlibCompression] : [], client: "larder-bench \(benchVersion)",
            token: options.token, session: options.session)
        var exchange = FrameExchange(fd: fd)
        let answer = try exchange.call(Frame(opcode: .hello, requestID: 1, json: hello.json.bytes), deadline: deadline)
        guard answer.status == .ok else {
            throw BenchError("HELLO was refused: \(LarderError(status: answer.status, json: parsed(answer)))")
        }
        let response: HelloResponse
        do throws(LarderError) {
            response = try HelloResponse(json: try answer.jsonObject())
        } catch {
            throw BenchError("the HELLO answer is malformed: \(error)")
        }
        return ServerInfo(
            name: response.server, compression: response.compression == zlibCompression,
            compressionThreshold: response.compressionThreshold, maxInFlight: response.limits.maxInFlight)
    }

    static func parsed(_ frame: Frame) -> JSON {
        (try? frame.jsonObject()).map { JSON.object($0) } ?? .null
    }

    /// One Larder request on a handshaken blocking connection (INDEX before the load); throws on an error answer.
    static func larderCall(
        _ fd: Int32, _ opcode: Opcode, _ json: JSONObject, timeout: Double
    ) throws(BenchError) -> Frame {
        var exchange = FrameExchange(fd: fd)
        let answer = try exchange.call(
            Frame(opcode: opcode, requestID: 2, json: json.bytes), deadline: Sys.now() + UInt64(timeout * 1e9))
        guard answer.status == .ok else {
            throw BenchError("\(opcode.name) failed: \(LarderError(status: answer.status, json: parsed(answer)))")
        }
        return answer
    }

    /// Signs in as `email` on a connection of its own and returns the new session, which every connection of the run
    /// then presents in its HELLO.
    static func signIn(_ options: BenchOptions, email: String, password: String) throws(BenchError) -> String {
        var anonymous = options
        anonymous.token = nil
        anonymous.session = nil
        let (fd, _) = try open(anonymous)
        defer { close(fd) }
        let answer = try larderCall(
            fd, .signIn, AccountCredentials(email: email, password: password).json, timeout: options.timeout)
        let session: String?
        do throws(LarderError) {
            session = try AccountSession(json: try answer.jsonObject()).session
        } catch {
            throw BenchError("the SIGN_IN answer is malformed: \(error)")
        }
        guard let session else { throw BenchError("SIGN_IN answered no session") }
        return session
    }

    static func redisHello(_ fd: Int32, _ options: BenchOptions, deadline: UInt64) throws(BenchError) -> ServerInfo {
        var request = ""
        if let token = options.token { request += "*2\r\n$4\r\nAUTH\r\n$\(token.utf8.count)\r\n\(token)\r\n" }
        request += "*1\r\n$4\r\nPING\r\n"
        try Sys.writeAll(fd, Array(request.utf8))
        var received: [UInt8] = []
        let expectedLines = options.token == nil ? 1 : 2
        var buffer = [UInt8](repeating: 0, count: 512)
        while received.count(where: { $0 == 0x0A }) < expectedLines {
            guard try Sys.waitReadable(fd, until: deadline) else {
                throw BenchError("no answer to PING: is this a Redis server?")
            }
            let outcome = try Sys.call("read") { buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) } }
            guard case .done(let n) = outcome, n > 0 else { throw BenchError("the Redis server closed the connection") }
            received += buffer[0..<n]
            if received.count > 4096 { break }
        }
        let text = String(decoding: received, as: UTF8.self)
        guard text.hasSuffix("+PONG\r\n"), !text.hasPrefix("-") else {
            throw BenchError("the Redis server refused the connection: \(text.trimmingTrailing("\r\n"))")
        }
        return ServerInfo(name: "redis")
    }
}

/// Blocking request/answer over a socket with LarderWire's `FrameEncoder` and `FrameDecoder`.
struct FrameExchange {
    let fd: Int32
    var decoder = FrameDecoder()
    var buffer = ByteBuffer()

    init(fd: Int32) { self.fd = fd }

    mutating func call(_ frame: Frame, deadline: UInt64) throws(BenchError) -> Frame {
        let bytes = FrameEncoder().encode(frame)
        let tls = BenchTLS.peek(fd)
        if let tls { try tls.writeAllBlocking(fd, bytes) } else { try Sys.writeAll(fd, bytes) }
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let decoded: Frame?
            do throws(FrameError) {
                decoded = try decoder.next(&buffer)
            } catch {
                throw BenchError("the server's answer breaks the protocol: \(error.error)")
            }
            if let answer = decoded {
                guard answer.requestID == frame.requestID else {
                    throw BenchError("the server answered request \(answer.requestID), not \(frame.requestID)")
                }
                return answer
            }
            guard try Sys.waitReadable(fd, until: deadline) else {
                throw BenchError("no answer to \(frame.opcode.name) within the timeout")
            }
            let attempt = chunk.withUnsafeMutableBytes { raw -> Result<Sys.Outcome, BenchError> in
                do throws(BenchError) {
                    if let tls { return .success(try tls.read(fd, into: raw)) }
                    return .success(try Sys.call("read") { read(fd, raw.baseAddress!, raw.count) })
                } catch {
                    return .failure(error)
                }
            }
            let outcome = try attempt.get()
            guard case .done(let n) = outcome else { continue }
            if n == 0 { throw BenchError("the server closed the connection during \(frame.opcode.name)") }
            chunk.withUnsafeBytes { buffer.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
    }
}

extension String {
    func trimmingTrailing(_ set: String) -> String {
        var s = Substring(self)
        while let c = s.last, set.contains(c) { s.removeLast() }
        return String(s)
    }
}
