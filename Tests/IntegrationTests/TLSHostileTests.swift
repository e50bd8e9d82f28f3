#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderServer
import LarderTLS
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// What a hostile or broken peer can do to a TLS port: garbage where the ClientHello belongs, a handshake trickled a
/// byte at a time, a frame over the cap before HELLO, and a thousand handshakes that never finish. A healthy client is
/// served throughout.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TLSHostileTests {
    static var certificates: TestCertificates { .shared }

    /// A real ClientHello, as a TLS client sends it first (and the session that sent it).
    static func clientHello() throws -> (TLSEngine, [UInt8]) {
        let engine = try TLSEngine(context: try TLSContext.client(ca: certificates.caFile), serverName: "127.0.0.1")
        _ = engine.handshake()
        var hello: [UInt8] = []
        engine.takeOutput(appendingTo: &hello)
        return (engine, hello)
    }

    /// Reads until the peer closes (true) or `seconds` pass (false); what was read is returned too.
    static func readUntilClosed(_ fd: Int32, seconds: Double = 60) -> (closed: Bool, bytes: [UInt8]) {
        let deadline = Date().addingTimeInterval(seconds)
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while Date() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) > 0 else { continue }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return (true, bytes) }
            bytes += chunk[0..<n]
        }
        return (false, bytes)
    }

    /// A healthy TLS client's round trip.
    static func healthyRoundTrip(port: Int) async throws {
        let client = LarderClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: port), connectTimeout: .seconds(120),
                tls: .init(caFile: certificates.caFile)))
        defer { client.close() }
        let record = try await client.create("healthy", ["ok": true])
        #expect(try await client.get("healthy", id: record.id).data["ok"] == true)
    }

    /// Each garbage opening ends its connection at once, not at the handshake deadline: that deadline is ten minutes
    /// here and each close is awaited for two, so only the server's refusal of the bytes can close it in time.
    @Test func garbageInsteadOfAClientHelloIsCutAndOthersAreServed() async throws {
        let server = try ClientTestServer {
            $0.useTestTLS()
            $0.limits.frameTimeoutMs = 600_000
            $0.limits.idleTimeoutMs = 600_000
        }
        defer { server.stop() }
        let garbage: [[UInt8]] = [
            Array("GET / HTTP/1.1\r\nHost: larder\r\n\r\n".utf8),
            // A handshake record header, then noise: GnuTLS refuses it.
            [0x16, 0x03, 0x01, 0x00, 0x40] + (0..<64).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) },
            [0x16] + [UInt8](repeating: 0xFF, count: 4096),
        ]
        for bytes in garbage {
            let raw = try RawClient.tcp(port: server.port)
            try raw.writeAll(bytes)
            let (closed, answer) = Self.readUntilClosed(raw.fd, seconds: 120)
            #expect(closed, "the server kept a connection that sent garbage open: \(bytes.prefix(8))")
            #expect(answer.count < 64, "the server answered garbage with \(answer.count) bytes")
            try await Self.healthyRoundTrip(port: server.port)
        }
    }

    /// A ClientHello sent one byte per write still completes a handshake, and HELLO is answered inside it.
    @Test func aHandshakeTrickledOneByteAtATimeCompletes() throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        let raw = try RawClient.tcp(port: server.port)
        let (engine, hello) = try Self.clientHello()
        for byte in hello { try raw.writeAll([byte]) }
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            var out: [UInt8] = []
            let progress = engine.handshake()
            engine.takeOutput(appendingTo: &out)
            for byte in out { try raw.writeAll([byte]) }
            if progress == .done { break }
            if case .failed(let error) = progress { Issue.record("handshake failed: \(error)"); return }
            let n = chunk.withUnsafeMutableBytes { recv(raw.fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { Issue.record("the server closed a trickled handshake"); return }
            chunk.withUnsafeBytes { engine.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        #expect(engine.isHandshakeDone && engine.negotiatedLarderALPN)
        let frame = FrameEncoder().encode(
            Frame(opcode: .hello, requestID: 1, json: HelloRequest(client: "trickle").json.bytes))
        #expect(frame.withUnsafeBytes { engine.write($0) } == .success(frame.count))
        var out: [UInt8] = []
        engine.takeOutput(appendingTo: &out)
        for byte in out { try raw.writeAll([byte]) }
        var decoder = FrameDecoder()
        var buffer = ByteBuffer()
        var answer: Frame?
        var plain = [UInt8](repeating: 0, count: 64 << 10)
        while answer == nil && Date() < deadline {
            let n = chunk.withUnsafeMutableBytes { recv(raw.fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            chunk.withUnsafeBytes { engine.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            while case .bytes(let count) = plain.withUnsafeMutableBytes({ engine.read(into: $0) }) {
                plain.withUnsafeBytes { buffer.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            }
            answer = try decoder.next(&buffer)
        }
        let reply = try #require(answer, "no answer to HELLO over the trickled session")
        #expect(reply.status == .ok && reply.opcode == .hello)
        #expect(try HelloResponse(json: reply.jsonObject()).tls == true)
    }

    /// Protocol.md section 4's cap on frames before HELLO holds inside TLS too: over a finished TLS handshake, a HELLO
    /// whose `length` is the cap is answered, and one a byte longer, sent whole (more than the cap of plaintext before
    /// HELLO), is refused with PAYLOAD_TOO_LARGE naming the limit, then close_notify ends the connection.
    @Test func theHandshakeFrameCapHoldsInsideTLS() throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        let cap = Limits.default.maxHandshakeFrameBytes
        func hello(length: Int) -> [UInt8] {
            let json = #"{"versions":[1]}"#
            return HostileFrames.request(.hello, json + String(repeating: " ", count: length - 24 - json.utf8.count))
        }
        let badMagic: [UInt8] = [0, 0, 0, 24, 0x58, 0x58] + [UInt8](repeating: 0, count: 22)

        let atCap = try TLSCloseTests.SlowTLSClient(port: server.port)
        let frame = hello(length: cap)
        #expect(frame.count == 4 + cap)
        // A header with bad magic after it ends the connection, so that reading to its end shows both answers.
        try atCap.send([], then: frame + badMagic)
        let answered = atCap.readToEnd()
        #expect(answered.failure == nil, "\(answered.failure ?? "")")
        #expect(answered.frames.map(\.status) == [.ok, .protocolError], "\(answered.frames.map(\.replyText))")
        #expect(answered.frames.first?.opcode == .hello)

        let over = try TLSCloseTests.SlowTLSClient(port: server.port)
        try over.send([], then: hello(length: cap + 1))
        let refused = over.readToEnd()
        #expect(refused.failure == nil, "\(refused.failure ?? "")")
        #expect(refused.closeNotify)
        #expect(refused.frames.map(\.status) == [.payloadTooLarge], "\(refused.frames.map(\.replyText))")
        #expect(refused.frames.first?.replyJSON["limit"] == .int(Int64(cap)))
    }

    /// A handshake that stalls is cut at the frame deadline, like a slow frame.
    @Test func aStalledHandshakeIsCutAtTheFrameDeadline() throws {
        let server = try ClientTestServer {
            $0.useTestTLS()
            $0.limits.frameTimeoutMs = 500
        }
        defer { server.stop() }
        let (_, hello) = try Self.clientHello()
        let raw = try RawClient.tcp(port: server.port)
        try raw.writeAll(Array(hello.prefix(hello.count / 2)))
        let silent = try RawClient.tcp(port: server.port)
        #expect(Self.readUntilClosed(raw.fd).closed, "a half handshake outlived the frame deadline")
        #expect(Self.readUntilClosed(silent.fd).closed, "a connection that never started a handshake stayed")
    }

    /// A thousand connections that start a handshake and never finish it: a healthy client is served meanwhile, and
    /// the server's memory grows by a bounded amount per connection. The frame deadline is long here, so that all of
    /// them are open at once however slowly a busy machine opens them (aStalledHandshakeIsCutAtTheFrameDeadline shows
    /// the deadline cutting them).
    @Test func aThousandUnfinishedHandshakes() async throws {
        let root = temporaryTestDirectory("larder-tls-flood")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let c = Self.certificates
        let server = try ServerChild(
            dataDirectory: root.appendingPathComponent("data").path,
            arguments: [
                "--tls-cert", c.serverCertificate, "--tls-key", c.serverKey, "--frame-timeout-ms", "3600000",
                "--idle-timeout-ms", "3600000",
            ])
        defer { _ = server.stop() }
        try await Self.healthyRoundTrip(port: server.port)
        let before = try #require(server.residentBytes, "the server's resident memory cannot be read")
        let (_, hello) = try Self.clientHello()
        var flood: [RawClient] = []
        for index in 0..<1000 {
            let raw = try RawClient.tcp(port: server.port)
            // Half of them send half a ClientHello, the others nothing at all.
            if index % 2 == 0 { try raw.writeAll(Array(hello.prefix(hello.count / 2))) }
            flood.append(raw)
            if index % 250 == 249 { try await Self.healthyRoundTrip(port: server.port) }
        }
        // Every one of them reached the server: the admin's STATS counts them.
        let admin = LarderClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: server.port), connectTimeout: .seconds(120),
                tls: .init(caFile: c.caFile)))
        defer { admin.close() }
        var open: Int64 = 0
        let allOpen = try await waitUntil(600) {
            open = try await admin.stats()["connections"]?["open"]?.intValue ?? 0
            return open >= 1001
        }
        #expect(allOpen, "\(open) connections open")
        try await Self.healthyRoundTrip(port: server.port)
        let during = try #require(server.residentBytes, "the server's resident memory cannot be read")
        let perConnection = (during - before) / 1000
        report("1000 unfinished TLS handshakes: server RSS \(before >> 20) MiB -> \(during >> 20) MiB "
            + "(\(perConnection) bytes each)")
        #expect(
            during - before < SanitizerBuild.current.residentBound(1000 * (64 << 10)),
            "each unfinished handshake holds \(perConnection) bytes")
        flood.removeAll()
        try await Self.healthyRoundTrip(port: server.port)
    }

    /// ALPN (Protocol.md 10.1), checked with another TLS implementation (`openssl s_client`): a client that offers ALPN
    /// without `larder/1` is refused with no_application_protocol, one that offers none is served, and one that offers
    /// it among others gets it.
    @Test func alpnWithoutLarderIsRefusedAndNoALPNIsServed() throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        func connect(_ alpn: [String]) throws -> String {
            let run = try CLIShellTests.run(
                URL(fileURLWithPath: "/usr/bin/openssl"),
                ["s_client", "-connect", "127.0.0.1:\(server.port)", "-CAfile", Self.certificates.caFile] + alpn)
            return run.stdout + run.stderr
        }
        let foreign = try connect(["-alpn", "h2,http/1.1"])
        #expect(foreign.contains("no application protocol"), "\(foreign)")
        let none = try connect([])
        #expect(none.contains("No ALPN negotiated") && none.contains("New, TLSv1.3"), "\(none)")
        let larder = try connect(["-alpn", "h2,larder/1"])
        #expect(larder.contains("ALPN protocol: larder/1"), "\(larder)")
    }
}
