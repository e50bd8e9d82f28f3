import Foundation
import LarderServer
import LarderTestProcess
import LarderTestSupport

/// Certificates made for one test run with the `openssl` command: a CA, a server certificate for localhost and
/// 127.0.0.1, the same server's certificate already expired, a client certificate, and a second CA with a server
/// certificate of its own (for "wrong CA" and reloads).
final class TestCertificates: Sendable {
    let directory: String

    var caFile: String { directory + "/ca.pem" }
    var serverCertificate: String { directory + "/server.pem" }
    var serverKey: String { directory + "/server.key" }
    var expiredCertificate: String { directory + "/expired.pem" }
    var clientCertificate: String { directory + "/client.pem" }
    var clientKey: String { directory + "/client.key" }
    var otherCAFile: String { directory + "/other-ca.pem" }
    var otherServerCertificate: String { directory + "/other-server.pem" }
    var otherServerKey: String { directory + "/other-server.key" }

    /// Made once per test process (a few hundred milliseconds of `openssl`), shared by the suites.
    static let shared: TestCertificates = {
        do {
            return try TestCertificates()
        } catch {
            fatalError("cannot make test certificates with openssl: \(error)")
        }
    }()

    private init() throws {
        directory = NSTemporaryDirectory() + "larder-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let serverExtensions = "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
            + "extendedKeyUsage=serverAuth\n"
        try write("server.ext", serverExtensions)
        try write("client.ext", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
        // `openssl ca` signs with chosen dates (the expired certificate); it wants a small database.
        try FileManager.default.createDirectory(atPath: directory + "/db", withIntermediateDirectories: true)
        try write("db/index.txt", "")
        try write("db/serial", "1000\n")
        try write(
            "ca.cnf",
            """
            [ca]
            default_ca = test
            [test]
            database = db/index.txt
            serial = db/serial
            new_certs_dir = db
            default_md = sha256
            policy = any
            unique_subject = no
            [any]
            commonName = supplied

            """)
        for ca in ["ca", "other-ca"] {
            try openssl(
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                "\(ca).key", "-out", "\(ca).pem", "-days", "3650", "-subj", "/CN=Larder test \(ca)")
        }
        for (name, ca, ext, subject) in [
            ("server", "ca", "server.ext", "/CN=localhost"), ("client", "ca", "client.ext", "/CN=test client"),
            ("other-server", "other-ca", "server.ext", "/CN=localhost"),
        ] {
            try openssl(
                "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(name).key",
                "-out", "\(name).csr", "-subj", subject)
            try openssl(
                "x509", "-req", "-in", "\(name).csr", "-CA", "\(ca).pem", "-CAkey", "\(ca).key", "-CAcreateserial",
                "-out", "\(name).pem", "-days", "825", "-extfile", ext)
        }
        try openssl(
            "ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in", "server.csr",
            "-out", "expired.pem", "-startdate", "20200101000000Z", "-enddate", "20200201000000Z", "-extfile",
            "server.ext")
    }

    private func write(_ name: String, _ text: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: directory + "/" + name))
    }

    private func openssl(_ arguments: String...) throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let log = directory + "/openssl.log"
        if !FileManager.default.fileExists(atPath: log) { _ = FileManager.default.createFile(atPath: log, contents: nil) }
        let handle = FileHandle(forWritingAtPath: log)
        handle?.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw ServerTestError("openssl \(arguments.joined(separator: " ")) failed: \(text.suffix(500))")
        }
    }

    /// A copy of a certificate and key under new names, for a server whose files a test replaces.
    func copy(certificate: String, key: String, to prefix: String) throws -> (String, String) {
        let (c, k) = (prefix + ".pem", prefix + ".key")
        for (from, to) in [(certificate, c), (key, k)] {
            try? FileManager.default.removeItem(atPath: to)
            try FileManager.default.copyItem(atPath: from, toPath: to)
        }
        return (c, k)
    }
}

extension ServerConfiguration {
    /// TLS with the test certificates (and client certificates required when `mutual`).
    mutating func useTestTLS(mutual: Bool = false, certificate: String? = nil) {
        let certificates = TestCertificates.shared
        tlsCertificate = certificate ?? certificates.serverCertificate
        tlsKey = certificates.serverKey
        if mutual { tlsClientCA = certificates.caFile }
    }
}
