#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderBench
import LarderClient
import LarderServer
import LarderTLS
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// TLS between real clients and servers over real sockets, with certificates the `openssl` command made for this run.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TLSTests {
    static var certificates: TestCertificates { .shared }

    static func tlsServer(mutual: Bool = false, certificate: String? = nil) throws -> ClientTestServer {
        try ClientTestServer { $0.useTestTLS(mutual: mutual, certificate: certificate) }
    }

    static func client(port: Int, _ tls: LarderClient.TLSSettings?) -> LarderClient {
        LarderClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: port), connectTimeout: .seconds(120), tls: tls))
    }

    /// The library over TLS: a round trip of a document and a photo, verified against the test CA by IP address.
    @Test func clientLibraryOverTLS() async throws {
        let server = try Self.tlsServer()
        defer { server.stop() }
        let client = Self.client(port: server.port, .init(caFile: Self.certificates.caFile))
        defer { client.close() }
        let created = try await client.create("notes", ["text": "over TLS 加密"])
        #expect(try await client.get("notes", id: created.id).data["text"] == "over TLS 加密")
        let photo = try ServerFixtures.data("rocket.jpg")
        let blob = try await client.blobPut(Data(photo))
        #expect(try await client.blobGet(blob.id).bytes == Data(photo))
        // By name too, with the name the certificate carries.
        let named = Self.client(port: server.port, .init(caFile: Self.certificates.caFile, serverName: "localhost"))
        defer { named.close() }
        _ = try await named.ping()
    }

    /// A client that reconnects offers the session its server issued a ticket for, and the server resumes it: no
    /// certificate exchange the second time (a phone that loses and regains its network does this all day), with a
    /// client certificate too. The certificate files are read once, for the first connection, not per connect: the
    /// reconnect works with the CA file gone.
    @Test(arguments: [false, true]) func aReconnectResumesTheSessionWithoutReadingTheFilesAgain(mutual: Bool)
        async throws
    {
        let server = try Self.tlsServer(mutual: mutual)
        defer { server.stop() }
        let c = Self.certificates
        let caCopy = NSTemporaryDirectory() + "larder-ca-\(UUID().uuidString).pem"
        try FileManager.default.copyItem(atPath: c.caFile, toPath: caCopy)
        defer { try? FileManager.default.removeItem(atPath: caCopy) }
        let client = Self.client(
            port: server.port,
            .init(
                caFile: caCopy, certificateFile: mutual ? c.clientCertificate : nil,
                keyFile: mutual ? c.clientKey : nil))
        defer { client.close() }
        let record = try await client.create("resumed", ["n": 1])
        #expect(client.tlsHandshakes.full == 1 && client.tlsHandshakes.resumed == 0)
        try FileManager.default.removeItem(atPath: caCopy)
        for n in 1...2 {
            client.close()  // the next request connects again
            #expect(try await client.get("resumed", id: record.id).data["n"] == 1)
            #expect(
                client.tlsHandshakes.full == 1 && client.tlsHandshakes.resumed == n,
                "reconnect \(n): \(client.tlsHandshakes)")
        }
    }

    /// Runs the built `larder` CLI against `port`.
    static func cli(_ port: Int, _ arguments: [String], environment: [String: String] = [:]) throws -> CLITests.Run {
        try CLITests.run(["--port", String(port), "--timeout", "30"] + arguments + ["collections"], environment: environment)
    }

    @Test func cliOverTLSWithTheOptionsOrTheEnvironment() throws {
        let server = try Self.tlsServer()
        defer { server.stop() }
        let run = try Self.cli(server.port, ["--tls", "--ca", Self.certificates.caFile])
        #expect(run.status == 0, "\(run.stderr)")
        let env = try Self.cli(server.port, [], environment: ["LARDER_TLS": "1", "LARDER_CA": Self.certificates.caFile])
        #expect(env.status == 0, "\(env.stderr)")
    }

    @Test func aPlainClientOnATLSPortIsToldSoAndExits2() throws {
        let server = try Self.tlsServer()
        defer { server.stop() }
        let run = try Self.cli(server.port, [])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("this port speaks TLS"), "\(run.stderr)")
    }

    @Test func aTLSClientOnAPlainPortIsToldSoAndExits2() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let run = try Self.cli(server.port, ["--tls", "--ca", Self.certificates.caFile])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("does not speak TLS on this port"), "\(run.stderr)")
    }

    @Test func anExpiredCertificateIsRefusedWithExit2() throws {
        let server = try Self.tlsServer(certificate: Self.certificates.expiredCertificate)
        defer { server.stop() }
        let run = try Self.cli(server.port, ["--tls", "--ca", Self.certificates.caFile])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("certificate has expired"), "\(run.stderr)")
    }

    @Test func aCertificateFromAnotherCAIsRefusedWithExit2() throws {
        let server = try Self.tlsServer()
        defer { server.stop() }
        let run = try Self.cli(server.port, ["--tls", "--ca", Self.certificates.otherCAFile])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("the server's certificate was refused"), "\(run.stderr)")
        #expect(run.stderr.contains("not signed by a CA of"), "\(run.stderr)")
        // Nor is it trusted by the system's store.
        let system = try Self.cli(server.port, ["--tls"])
        #expect(system.status == 2 && system.stderr.contains("--ca FILE"), "\(system.stderr)")
    }

    @Test func aCertificateForAnotherNameIsRefusedWithExit2() throws {
        let server = try Self.tlsServer()
        defer { server.stop() }
        let run = try Self.cli(
            server.port, ["--tls", "--ca", Self.certificates.caFile, "--tls-server-name", "db.example.com"])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("mismatch") && run.stderr.contains("db.example.com"), "\(run.stderr)")
    }

    @Test func skippingVerificationWorksAndWarns() throws {
        let server = try Self.tlsServer(certificate: Self.certificates.expiredCertificate)
        defer { server.stop() }
        let run = try Self.cli(server.port, ["--tls-insecure-skip-verify"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("Warning: --tls-insecure-skip-verify"), "\(run.stderr)")
    }

    @Test func mutualTLSServesAClientCertificateAndRefusesNone() throws {
        let server = try Self.tlsServer(mutual: true)
        defer { server.stop() }
        let c = Self.certificates
        let with = try Self.cli(
            server.port, ["--tls", "--ca", c.caFile, "--tls-cert", c.clientCertificate, "--tls-key", c.clientKey])
        #expect(with.status == 0, "\(with.stderr)")
        let without = try Self.cli(server.port, ["--tls", "--ca", c.caFile])
        #expect(without.status == 2, "\(without.stderr)")
        #expect(without.stderr.contains("requires a client certificate"), "\(without.stderr)")
        // A certificate of a CA the server does not trust is refused too.
        let foreign = try Self.cli(
            server.port, ["--tls", "--ca", c.caFile, "--tls-cert", c.otherServerCertificate, "--tls-key",
                c.otherServerKey])
        #expect(foreign.status == 2, "\(foreign.stderr)")
    }

    /// `--tls-port` keeps the TCP port plain beside the TLS one, and the start-up line names both.
    @Test func aPlainPortBesideTheTLSPort() async throws {
        let server = try ClientTestServer {
            $0.useTestTLS()
            $0.tlsPort = 0
        }
        defer { server.stop() }
        let tlsPort = try #require(server.server.tlsPort)
        #expect(tlsPort != server.port)
        #expect(server.server.addresses(port: server.port).contains("tls://127.0.0.1:\(tlsPort)"))
        let plain = Self.client(port: server.port, nil)
        defer { plain.close() }
        _ = try await plain.ping()
        let secure = Self.client(port: tlsPort, .init(caFile: Self.certificates.caFile))
        defer { secure.close() }
        _ = try await secure.ping()
    }

    /// SIGHUP on a server process reads a new certificate (of another CA): new connections get it while a connection
    /// made before goes on with the old one.
    @Test func sighupReloadsTheCertificateWhileAConnectionStaysOpen() async throws {
        let c = Self.certificates
        let root = temporaryTestDirectory("larder-tls-hup")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let (certificate, key) = try c.copy(
            certificate: c.serverCertificate, key: c.serverKey, to: root.appendingPathComponent("live").path)
        let server = try ServerChild(
            dataDirectory: root.appendingPathComponent("data").path,
            arguments: ["--tls-cert", certificate, "--tls-key", key])
        defer { _ = server.stop() }
        let kept = Self.client(port: server.port, .init(caFile: c.caFile))
        defer { kept.close() }
        let record = try await kept.create("notes", ["n": 1])

        _ = try c.copy(certificate: c.otherServerCertificate, key: c.otherServerKey, to: root.appendingPathComponent("live").path)
        kill(server.pid, SIGHUP)
        let reloaded = await waitUntil(120) {
            let probe = Self.client(port: server.port, .init(caFile: c.otherCAFile))
            defer { probe.close() }
            return (try? await probe.ping()) != nil
        }
        #expect(reloaded, "the new certificate was never served")
        #expect(try await kept.get("notes", id: record.id).rev == 1, "the connection made before the reload broke")
        let old = Self.client(port: server.port, .init(caFile: c.caFile))
        defer { old.close() }
        await #expect(throws: LarderError.self) { _ = try await old.ping() }
    }
}

/// larder-bench over TLS (`--tls-ca`): the load generator's poll loops encrypt and decrypt as the server's loops do;
/// pipelined documents and 200 KiB photos arrive whole.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TLSBenchTests {
    @Test func benchmarkRunOverTLS() throws {
        let server = try ClientTestServer { $0.useTestTLS() }
        defer { server.stop() }
        guard case .run(var options) = try BenchArguments.parse([
            "--port", "\(server.port)", "--tls-ca", TestCertificates.shared.caFile, "--connections", "3",
            "--pipeline", "4", "--requests", "600", "--preload", "100", "--preload-blobs", "3", "--blob-size", "200k",
            "--mix", "get=10,create=4,blob-get=2",
        ]) else { throw ServerTestError("not a run") }
        options.quiet = true
        let results = try runBenchmark(options)
        #expect(results.total.count == 600 && results.total.errors == 0, "\(results.total.errorsByName)")
        #expect(results.connectionErrors.isEmpty, "\(results.connectionErrors)")
        #expect(results.stats(for: .blobGet).count > 0)
        // Every session went with its connection, the control connection's too: a plain run later in this process
        // must not find one under a reused descriptor number.
        #expect(benchTLSSessionsHeld() == 0)
    }
}
