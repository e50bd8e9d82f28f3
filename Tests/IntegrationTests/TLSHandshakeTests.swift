#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderServer
import LarderSync
import LarderTLS
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// What Protocol.md section 10.1 promises about the TLS handshake itself (versions, renegotiation, ciphers and their
/// order, session tickets across a reload, the connection limit), checked with another TLS implementation: the
/// `openssl s_client` command.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TLSHandshakeTests {
    static var certificates: TestCertificates { .shared }

    /// Runs `openssl s_client` against `port` with `arguments`, `input` on its standard input (then end of file), and
    /// answers what it printed, standard output and error together.
    static func sClient(_ port: Int, _ arguments: [String], input: String = "") throws -> String {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["s_client", "-connect", "127.0.0.1:\(port)", "-CAfile", certificates.caFile] + arguments
        let out = Pipe()
        let stdin = Pipe()
        process.standardOutput = out
        process.standardError = out
        process.standardInput = stdin
        try process.run()
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let text = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: text, as: UTF8.self)
    }

    // Promise: Protocol §10.1 "TLS 1.2 and 1.3 only" (a TLS 1.0 or 1.1 client is refused)
    /// A client that speaks only TLS 1.1 or 1.0 is refused with the protocol_version alert; TLS 1.2 and 1.3 are
    /// served.
    @Test func onlyTLS12And13AreServed() throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        // The client's own security level would forbid the old versions before the server could refuse them.
        for old in ["-tls1_1", "-tls1"] {
            let said = try Self.sClient(server.port, [old, "-cipher", "DEFAULT@SECLEVEL=0"])
            #expect(said.contains("alert protocol version"), "\(old): \(said)")
            #expect(!said.contains("Cipher is ECDHE"), "\(old): \(said)")
        }
        let twelve = try Self.sClient(server.port, ["-tls1_2"])
        #expect(twelve.contains("New, TLSv1.2, Cipher is ECDHE"), "\(twelve)")
        let thirteen = try Self.sClient(server.port, ["-tls1_3"])
        #expect(thirteen.contains("New, TLSv1.3, Cipher is TLS_"), "\(thirteen)")
    }

    // Promise: Protocol §10.1 "a TLS 1.2 client that asks to renegotiate gets the no_renegotiation warning alert"
    /// A TLS 1.2 client that asks to renegotiate (`R` on s_client's input, once connected) is answered with the
    /// no_renegotiation warning alert, never a second handshake.
    @Test func renegotiationIsAnsweredWithNoRenegotiation() async throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = [
            "s_client", "-connect", "127.0.0.1:\(server.port)", "-CAfile", Self.certificates.caFile, "-tls1_2", "-msg",
        ]
        let out = Pipe()
        let stdin = Pipe()
        process.standardOutput = out
        process.standardError = out
        process.standardInput = stdin
        try process.run()
        let said = Locked("")
        let reader = Thread {
            while true {
                let data = out.fileHandleForReading.availableData
                if data.isEmpty { return }
                said.withLock { $0 += String(decoding: data, as: UTF8.self) }
            }
        }
        reader.start()
        let text = { said.withLock { $0 } }
        let connected = await waitUntil(120) { text().contains("Verify return code") }
        #expect(connected, "\(text())")
        stdin.fileHandleForWriting.write(Data("R\n".utf8))
        let answered = await waitUntil(120) {
            text().contains("no_renegotiation") || text().contains("no renegotiation") || !process.isRunning
        }
        #expect(answered, "\(text())")
        try stdin.fileHandleForWriting.close()
        try await offThePool { process.waitUntilExit() }
        let all = text()
        #expect(all.contains("RENEGOTIATING"), "\(all)")
        #expect(all.contains("no_renegotiation") || all.contains("no renegotiation"), "\(all)")
        // One ServerHello line (ServerHelloDone is another message): the server never began a second handshake.
        let serverHellos = all.split(separator: "\n").filter { $0.hasSuffix(", ServerHello") }.count
        #expect(serverHellos == 1, "\(all)")
    }

    // Promise: Protocol §10.1 "AEAD only, in the server's order: AES-256-GCM, AES-128-GCM, ChaCha20-Poly1305"
    /// Whatever order a client lists them in, the server picks AES-256-GCM, then AES-128-GCM, then
    /// ChaCha20-Poly1305, in TLS 1.2 and 1.3; a client offering only CBC suites is refused.
    @Test func aeadSuitesInTheServersOrder() throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        let chacha = "ECDHE-ECDSA-CHACHA20-POLY1305"
        let aes128 = "ECDHE-ECDSA-AES128-GCM-SHA256"
        let aes256 = "ECDHE-ECDSA-AES256-GCM-SHA384"
        for (offered, chosen) in [([chacha, aes128, aes256], aes256), ([chacha, aes128], aes128), ([chacha], chacha)] {
            let said = try Self.sClient(server.port, ["-tls1_2", "-cipher", offered.joined(separator: ":")])
            #expect(said.contains("New, TLSv1.2, Cipher is \(chosen)"), "offered \(offered): \(said)")
        }
        let cbc = try Self.sClient(server.port, ["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-SHA384:ECDHE-ECDSA-AES128-SHA"])
        #expect(!cbc.contains("Cipher is ECDHE") && cbc.contains("handshake failure"), "\(cbc)")
        let suites13 = [
            (["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"], "TLS_AES_256_GCM_SHA384"),
            (["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"], "TLS_AES_128_GCM_SHA256"),
        ]
        for (offered, chosen) in suites13 {
            let said = try Self.sClient(server.port, ["-tls1_3", "-ciphersuites", offered.joined(separator: ":")])
            #expect(said.contains("New, TLSv1.3, Cipher is \(chosen)"), "offered \(offered): \(said)")
        }
    }

    // Promise: Protocol §10.1 "a ticket from before a SIGHUP reload, or from another server, gets a full handshake"
    /// A session ticket resumes on the server that issued it until that server's SIGHUP reload; from then on (and on
    /// another server at any time) it gets a full handshake, and the ticket issued then resumes again.
    @Test func ticketsFromBeforeASighupOrAnotherServerGetAFullHandshake() async throws {
        let root = temporaryTestDirectory("larder-tls-tickets")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let c = Self.certificates
        let arguments = ["--tls-cert", c.serverCertificate, "--tls-key", c.serverKey]
        let server = try ServerChild(dataDirectory: root.appendingPathComponent("data").path, arguments: arguments)
        defer { _ = server.stop() }
        let other = try ServerChild(dataDirectory: root.appendingPathComponent("other").path, arguments: arguments)
        defer { _ = other.stop() }
        let ticket = root.appendingPathComponent("ticket").path
        let first = try Self.sClient(server.port, ["-tls1_2", "-sess_out", ticket])
        #expect(first.contains("New, TLSv1.2"), "\(first)")
        let resumed = try Self.sClient(server.port, ["-tls1_2", "-sess_in", ticket])
        #expect(resumed.contains("Reused, TLSv1.2"), "the ticket did not resume: \(resumed)")
        let elsewhere = try Self.sClient(other.port, ["-tls1_2", "-sess_in", ticket])
        #expect(elsewhere.contains("New, TLSv1.2"), "another server resumed the ticket: \(elsewhere)")

        kill(server.pid, SIGHUP)
        // The reload takes effect a moment after the signal: from then on the old ticket is never resumed.
        let full = try await waitUntil(120) {
            try await offThePool { try Self.sClient(server.port, ["-tls1_2", "-sess_in", ticket]) }
                .contains("New, TLSv1.2")
        }
        #expect(full, "a ticket from before the SIGHUP still resumes")
        let fresh = root.appendingPathComponent("fresh").path
        _ = try Self.sClient(server.port, ["-tls1_2", "-sess_out", fresh])
        let again = try Self.sClient(server.port, ["-tls1_2", "-sess_in", fresh])
        #expect(again.contains("Reused, TLSv1.2"), "a ticket issued after the reload does not resume: \(again)")
    }

    // Promise: Protocol §10.1 "the handshake counts against maxConnections"
    /// Connections still in their TLS handshake hold their places: with two of them open on a server that takes two,
    /// a third connection gets RESOURCE_EXHAUSTED and is closed; once they go, a TLS client is served.
    @Test func unfinishedHandshakesCountAgainstMaxConnections() async throws {
        let server = try ClientTestServer {
            $0.useTestTLS()
            $0.limits.maxConnections = 2
        }
        defer { server.stop() }
        let (_, hello) = try TLSHostileTests.clientHello()
        var unfinished: [RawClient] = []
        for _ in 0..<2 {
            let raw = try RawClient.tcp(port: server.port)
            try raw.writeAll(Array(hello.prefix(hello.count / 2)))
            unfinished.append(raw)
        }
        let third = try RawClient.tcp(port: server.port)
        let refused = try #require(try third.receive(timeout: 120), "the third connection was closed without a word")
        #expect(refused.status == .resourceExhausted && refused.replyJSON["limit"] == 2, "\(refused.replyText)")
        #expect(try third.receive(timeout: 120) == nil, "the refused connection stayed open")
        unfinished.removeAll()
        let client = LarderClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: server.port), connectTimeout: .seconds(120),
                tls: .init(caFile: Self.certificates.caFile)))
        defer { client.close() }
        let served = await waitUntil(120) {
            defer { client.close() }
            return (try? await client.ping()) != nil
        }
        #expect(served, "a TLS client was not served once the unfinished handshakes closed")
    }
}
