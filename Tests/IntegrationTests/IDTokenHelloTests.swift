#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// HELLO with an OpenID Connect ID token, through a real server process started with `--oidc-issuer`,
/// `--oidc-audience` and `--oidc-jwks`: a valid token signs the connection in as `issuer|subject`; every kind of bad
/// token is UNAUTHENTICATED naming what failed, without the token; SIGHUP reads the JWKS file again (Protocol.md
/// sections 4 and 10.3). Keys and tokens are made by the `openssl` command (`TestKeys`).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct IDTokenHelloTests {
    /// A server process trusting the tests' issuer and audience, with the keys of `keys` in its JWKS file.
    final class Server {
        let root: URL
        let jwks: String
        let child: ServerChild
        private var reloads = 0

        init(keys: [JSON], arguments: [String] = []) throws {
            root = temporaryTestDirectory("larder-oidc")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            jwks = root.appendingPathComponent("issuer.jwks").path
            _ = FileManager.default.createFile(atPath: jwks, contents: Data(TestKeys.jwksText(keys)))
            child = try ServerChild(
                dataDirectory: root.appendingPathComponent("data").path,
                arguments: [
                    "--oidc-issuer", TestKeys.issuer, "--oidc-audience", TestKeys.audience, "--oidc-jwks", jwks,
                    "--token", "admin-secret", "--log-level", "info",
                ] + arguments)
        }

        deinit {
            _ = child.stop()
            try? FileManager.default.removeItem(at: root)
        }

        /// Writes `text` as the JWKS file, sends SIGHUP, and waits until the server logged the reload's outcome.
        func reload(_ text: [UInt8]) async throws {
            _ = FileManager.default.createFile(atPath: jwks, contents: Data(text))
            reloads += 1
            let wanted = reloads
            kill(child.pid, SIGHUP)
            let log = child.logPath
            let done = await waitUntil(120) {
                Self.count(of: "JWKS reloaded", in: log) + Self.count(of: "the keys in force are kept", in: log) >= wanted
            }
            guard done else { throw ServerTestError("the reload never finished; log: \(ServerChild.tail(child.logPath))") }
        }

        static func count(of text: String, in path: String) -> Int {
            let log = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return log.components(separatedBy: text).count - 1
        }

        /// HELLO with `idToken` on a new connection: the answer frame, and the connection.
        func hello(idToken: String) throws -> (Frame, RawClient) {
            let client = try RawClient.tcp(port: child.port)
            let request = HelloRequest(client: "oidc-tests", idToken: idToken)
            return (try client.call(.hello, request.json), client)
        }
    }

    static let keys = TestKeys.shared

    /// Claims valid now by the system clock (the server's), changed by `changes`.
    static func claims(_ changes: JSONObject = [:]) -> JSONObject {
        let now = Int64(Date().timeIntervalSince1970)
        var claims = TestKeys.claims(["iat": .int(now - 60), "exp": .int(now + 3600)])
        for (key, value) in changes { claims[key] = value }
        return claims
    }

    /// An RS256 token signed by the key `key` under the `kid` `id`, with `claims`.
    static func token(key: String = "rsa", id: String = "rsa-1", _ claims: JSONObject = claims()) throws -> String {
        try keys.token(header: ["alg": "RS256", "typ": "JWT", "kid": .string(id)], claims: claims, signer: .rsa(key))
    }

    /// Checks that `token` is refused with UNAUTHENTICATED, the reason `reason` and a message containing `words`,
    /// that neither the answer nor the log holds the token, and that the connection ends.
    static func expectRefused(_ server: Server, _ token: String, reason: String, _ words: String) throws {
        let (answer, client) = try server.hello(idToken: token)
        #expect(answer.status == .unauthenticated, "\(answer.replyText)")
        #expect(answer.replyJSON["reason"]?.stringValue == reason, "\(answer.replyText)")
        #expect(answer.replyJSON["message"]?.stringValue?.contains(words) == true, "\(answer.replyText)")
        #expect(answer.replyJSON["field"]?.stringValue == "idToken")
        let signature = String(token.split(separator: ".").last ?? "")
        let claims = String(token.split(separator: ".").dropFirst().first ?? "")
        #expect(!answer.replyText.contains(claims) || claims.isEmpty, "the answer holds the token")
        #expect(signature.isEmpty || !answer.replyText.contains(signature), "the answer holds the signature")
        #expect(try client.framesUntilClosed().isEmpty, "the connection stayed open")
        let log = (try? String(contentsOfFile: server.child.logPath, encoding: .utf8)) ?? ""
        #expect(!log.contains(claims) || claims.isEmpty, "the log holds the token")
    }

    @Test func aValidTokenSignsTheConnectionInAsIssuerAndSubject() throws {
        let server = try Server(keys: [Self.keys.jwk("rsa", id: "rsa-1"), Self.keys.jwk("ec", id: "ec-1")])
        for token in [
            try Self.token(),
            try Self.keys.token(
                header: ["alg": "ES256", "kid": "ec-1"], claims: Self.claims(), signer: .ec("ec")),
        ] {
            let (answer, client) = try server.hello(idToken: token)
            #expect(answer.status == .ok, "\(answer.replyText)")
            let hello = try HelloResponse(json: answer.jsonObject())
            #expect(hello.user?.id == "https://issuer.example|user-42")
            #expect(hello.role == nil && hello.authRequired)
            #expect(hello.limits.oidcLeewayMs == 60_000)
            // A user is held to the collections' rules; a collection without any is refused, saying how to set them.
            let get = try client.call(.count, ["collection": "todos"])
            #expect(get.status == .permissionDenied, "\(get.replyText)")
            #expect(get.replyText.contains("has no rules for users") && get.replyText.contains("RULES_SET"))
            #expect(try client.call(.stats).status == .permissionDenied)
        }
        // A role token keeps its meaning beside ID tokens.
        let admin = try RawClient.tcp(port: server.child.port)
        let hello = try admin.hello(token: "admin-secret")
        #expect(hello.role == "admin" && hello.user == nil)
        #expect(try admin.call(.count, ["collection": "todos"]).status == .ok)
    }

    /// Two issuers on one server, each with its own audience and keys: a token of either signs in, the same subject
    /// of each is another user, and a token is checked against its own issuer's audience and keys only.
    @Test func twoIssuersEachWithItsOwnAudienceAndKeys() throws {
        let second = "https://second.example"
        let root = temporaryTestDirectory("larder-oidc-second")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let secondKeys = root.appendingPathComponent("second.jwks").path
        _ = FileManager.default.createFile(
            atPath: secondKeys, contents: Data(TestKeys.jwksText([Self.keys.jwk("ec", id: "ec-2")])))
        let server = try Server(
            keys: [Self.keys.jwk("rsa", id: "rsa-1")],
            arguments: ["--oidc-issuer", second, "--oidc-audience", "second-app", "--oidc-jwks", secondKeys])
        let secondClaims = Self.claims(["iss": .string(second), "aud": "second-app"])
        let fromSecond = try Self.keys.token(
            header: ["alg": "ES256", "kid": "ec-2"], claims: secondClaims, signer: .ec("ec"))
        var users: [String] = []
        for token in [try Self.token(), fromSecond] {
            let (answer, _) = try server.hello(idToken: token)
            #expect(answer.status == .ok, "\(answer.replyText)")
            users.append(try HelloResponse(json: answer.jsonObject()).user?.id ?? "none")
        }
        #expect(users == ["https://issuer.example|user-42", second + "|user-42"])
        // The first issuer's key does not sign the second's tokens, nor does its audience admit them.
        try Self.expectRefused(server, try Self.token(secondClaims), reason: "unknownKey", "no key \"rsa-1\"")
        try Self.expectRefused(
            server, try Self.keys.token(
                header: ["alg": "ES256", "kid": "ec-2"], claims: Self.claims(["iss": .string(second)]), signer: .ec("ec")),
            reason: "wrongAudience", "audience")
    }

    @Test func everyBadTokenIsRefusedNamingWhatFailed() throws {
        let server = try Server(keys: [Self.keys.jwk("rsa", id: "rsa-1")], arguments: ["--oidc-leeway-ms", "1000"])
        let now = Int64(Date().timeIntervalSince1970)
        try Self.expectRefused(server, try Self.token(Self.claims(["exp": .int(now - 600)])), reason: "expired", "expired")
        try Self.expectRefused(
            server, try Self.token(Self.claims(["nbf": .int(now + 600)])), reason: "notYetValid", "not valid yet")
        try Self.expectRefused(
            server, try Self.token(Self.claims(["iss": "https://elsewhere.example"])), reason: "wrongIssuer",
            "\"https://elsewhere.example\" is not one this server accepts")
        try Self.expectRefused(
            server, try Self.token(Self.claims(["aud": "another-app"])), reason: "wrongAudience", "audience")
        try Self.expectRefused(server, try Self.token(key: "rsa2"), reason: "badSignature", "signature does not verify")
        try Self.expectRefused(
            server, try Self.keys.token(header: ["alg": "none", "kid": "rsa-1"], claims: Self.claims(), signer: .none),
            reason: "unsupportedAlgorithm", "algorithm \"none\" is not accepted")
        try Self.expectRefused(
            server,
            try Self.keys.token(
                header: ["alg": "HS256", "kid": "rsa-1"], claims: Self.claims(), signer: .hmac(fileAsKey: "rsa.pub")),
            reason: "unsupportedAlgorithm", "algorithm \"HS256\" is not accepted")
        try Self.expectRefused(server, try Self.token(id: "rsa-9"), reason: "unknownKey", "no key \"rsa-9\"")
    }

    /// A token signed by a key the JWKS file gains is refused before SIGHUP and accepted after it; a file that does
    /// not load at the next SIGHUP keeps the keys in force.
    @Test func sighupReadsTheJWKSFileAgain() async throws {
        let server = try Server(keys: [Self.keys.jwk("rsa", id: "rsa-1")])
        let rotated = try Self.token(key: "rsa2", id: "rsa-2")
        try Self.expectRefused(server, rotated, reason: "unknownKey", "no key \"rsa-2\"")

        try await server.reload(
            TestKeys.jwksText([Self.keys.jwk("rsa", id: "rsa-1"), Self.keys.jwk("rsa2", id: "rsa-2")]))
        #expect(try server.hello(idToken: rotated).0.status == .ok)

        try await server.reload(Array("{\"keys\": [".utf8))
        let log = (try? String(contentsOfFile: server.child.logPath, encoding: .utf8)) ?? ""
        #expect(log.contains("the keys in force are kept") && log.contains(server.jwks), "\(log)")
        #expect(try server.hello(idToken: rotated).0.status == .ok, "a bad JWKS file dropped the keys in force")
    }

    /// A JWKS file that does not load at start is a usage error: exit 64 with the file and the reason.
    @Test func aBadJWKSFileAtStartExits64() throws {
        let root = temporaryTestDirectory("larder-oidc-bad")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let jwks = root.appendingPathComponent("bad.jwks").path
        _ = FileManager.default.createFile(atPath: jwks, contents: Data("{\"keys\": []}".utf8))
        let run = try ServerProcessTests.launch(
            ["--port", "0", "--data-dir", root.appendingPathComponent("data").path, "--oidc-issuer", TestKeys.issuer,
             "--oidc-audience", TestKeys.audience, "--oidc-jwks", jwks])
        run.process.waitUntilExit()
        let message = String(decoding: run.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(run.process.terminationStatus == 64, "\(message)")
        #expect(message.contains(jwks) && message.contains("no usable RS256 or ES256 key"), "\(message)")
    }
}
