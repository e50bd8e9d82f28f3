import Foundation
import LarderClient
import LarderServer
import LarderTestSupport
import LarderTestThreads
import Testing

/// README's "Users and rules" section, its Swift blocks compiled and run here against a server that trusts the tests'
/// identity provider; the text between each `// README:` line and `// README end` is the README's, character for
/// character (less its indentation here).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReadmeUsersTests {
    struct Todo: Codable, Sendable {
        var title: String
        var isFinish: Bool
    }

    /// The app's own sign-in: hands out an ID token of the tests' issuer for `subject`.
    struct SignIn: Sendable {
        let subject: String
        func freshIDToken() async throws -> String {
            let now = Int64(Date().timeIntervalSince1970)
            let claims = TestKeys.claims(["sub": .string(subject), "iat": .int(now - 60), "exp": .int(now + 3600)])
            return try TestKeys.shared.token(
                header: ["alg": "RS256", "typ": "JWT", "kid": "rsa-1"], claims: claims, signer: .rsa("rsa"))
        }
    }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test func theReadmeSignInAndRulesWork() async throws {
        let directory = temporaryTestDirectory("larder-readme-users")
        defer { try? FileManager.default.removeItem(at: directory) }
        let jwks = try UserRulesTests.jwksFile(in: directory)
        let server = try ClientTestServer { UserRulesTests.configure(&$0, jwks: jwks) }
        defer { server.stop() }
        let endpoint = LarderClient.Endpoint.tcp(host: "127.0.0.1", port: server.port)
        let adminToken = "admin-secret"

        // README: admin
        let admin = LarderClient(configuration: .init(endpoint: endpoint, token: adminToken))
        try await admin.collection("todos", of: Todo.self)
            .setRules(CollectionRules(read: .owner, create: .owner, update: .owner, delete: .owner))
        // README end
        _ = try await admin.collection("todos", of: Todo.self).create(Todo(title: "someone else's", isFinish: false))

        let signIn = SignIn(subject: "001234.5678abcd")
        // README: sign in
        var configuration = LarderClient.Configuration(endpoint: endpoint)
        configuration.idTokenProvider = { try await signIn.freshIDToken() }
        let client = LarderClient(configuration: configuration)
        let me = try await client.user  // "https://appleid.apple.com|001234.5678abcd"
        let todos = client.collection("todos", of: Todo.self)
        let milk = try await todos.create(Todo(title: "Buy milk", isFinish: false))  // stored with "$owner": me
        let open = try await todos.count(Field("isFinish") == false)                // this user's todos only
        // README end

        #expect(me == TestKeys.issuer + "|001234.5678abcd")
        #expect(open == 1)
        let stored = try await admin.get("todos", id: milk.id)
        #expect(stored.data["$owner"]?.stringValue == me)
        #expect(try await todos.rules()?.read == .owner)
        client.close()
        admin.close()
    }

    /// `signIn(idToken:)`: the token signs in every connection after it, a refused one signs the client out, and
    /// `signOut()` forgets it.
    @Test func theClientSignsInWithAnIDToken() async throws {
        let directory = temporaryTestDirectory("larder-id-token-sign-in")
        defer { try? FileManager.default.removeItem(at: directory) }
        let jwks = try UserRulesTests.jwksFile(in: directory)
        let server = try ClientTestServer { UserRulesTests.configure(&$0, jwks: jwks) }
        defer { server.stop() }
        let endpoint = LarderClient.Endpoint.tcp(host: "127.0.0.1", port: server.port)
        let admin = LarderClient(configuration: .init(endpoint: endpoint, token: "admin-secret"))
        defer { admin.close() }
        try await admin.setRules(CollectionRules(read: .owner, create: .owner, update: .owner, delete: .owner), for: "todos")
        let client = LarderClient(configuration: LarderClient.Configuration(endpoint: endpoint))
        defer { client.close() }

        let idToken = try await SignIn(subject: "001234.5678abcd").freshIDToken()
        let me = try await client.signIn(idToken: idToken)  // "https://appleid.apple.com|001234.5678abcd"
        #expect(me == TestKeys.issuer + "|001234.5678abcd")
        let todo = try await client.create("todos", ["title": "water the plants"])
        #expect(todo.data["$owner"]?.stringValue == me)
        client.close()  // the next connection presents the token again
        #expect(try await client.count("todos") == 1)

        let other = try await client.signIn(idToken: try await SignIn(subject: "someone-else").freshIDToken())
        #expect(other != me)
        #expect(try await client.count("todos") == 0, "another user's todos are not this one's")

        let expired = try TestKeys.shared.token(
            header: ["alg": "RS256", "typ": "JWT", "kid": "rsa-1"],
            claims: TestKeys.claims(["sub": "001234.5678abcd", "iat": 1_000, "exp": 2_000]), signer: .rsa("rsa"))
        let refused = await #expect(throws: LarderError.self) { try await client.signIn(idToken: expired) }
        #expect(refused?.status == .unauthenticated)
        // Signed out, the client presents no credential, which this server (it requires one) refuses.
        let signedOut = await #expect(throws: LarderError.self) { _ = try await client.count("todos") }
        #expect(signedOut?.status == .unauthenticated && signedOut?.field == "token", "a refused token signs the client out")

        try await client.signIn(idToken: idToken)
        try await client.signOut()
        let after = await #expect(throws: LarderError.self) { _ = try await client.count("todos") }
        #expect(after?.status == .unauthenticated && after?.field == "token")

        let plain = try ClientTestServer()
        defer { plain.stop() }
        let roles = LarderClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: plain.port)))
        defer { roles.close() }
        let noUsers = await #expect(throws: LarderError.self) { try await roles.signIn(idToken: idToken) }
        #expect(noUsers?.status == .unauthenticated)
    }

    /// Where the README's sign-up puts the session: the app's own store.
    final class Keychain: @unchecked Sendable {
        var saved: String?
        func save(_ session: String?) { saved = session }
    }

    @Test func theReadmePasswordSignUpWorks() async throws {
        let server = try ClientTestServer {
            var settings = PasswordAccountSettings()
            settings.hashParameters = .init(iterations: 1, memoryKiB: 64, parallelism: 1)
            settings.limits.signUpAllowed = true
            $0.passwordAccounts = settings
            $0.token = "admin-secret"
        }
        defer { server.stop() }
        let endpoint = LarderClient.Endpoint.tcp(host: "127.0.0.1", port: server.port)
        let admin = LarderClient(configuration: .init(endpoint: endpoint, token: "admin-secret"))
        defer { admin.close() }
        try await admin.setRules(CollectionRules(read: .owner, create: .owner, update: .owner, delete: .owner), for: "todos")
        let password = "ann's long password"
        let keychain = Keychain()

        // README: password sign-up
        let client = LarderClient(configuration: LarderClient.Configuration(endpoint: endpoint))
        let signedIn = try await client.signUp(email: "ann@example.com", password: password)  // or signIn(email:password:)
        let todos = client.collection("todos", of: Todo.self)
        let vet = try await todos.create(Todo(title: "Call the vet", isFinish: false))  // "$owner": signedIn.user.id
        keychain.save(signedIn.session)
        try await client.signOut()  // the session is revoked on every server
        // README end

        defer { client.close() }
        #expect(keychain.saved != nil && client.session == nil)
        let stored = try await admin.get("todos", id: vet.id)
        #expect(stored.data["$owner"]?.stringValue == signedIn.user.id)
    }

    /// Each Swift block of README's "Users and rules" section is one of this file's `// README:` regions.
    @Test func theReadmeShowsThisCode() throws {
        let readme = try String(contentsOf: Self.repository.appendingPathComponent("README.md"), encoding: .utf8)
        guard let start = readme.range(of: "\n## Users and rules\n") else {
            Issue.record("README.md has no Users and rules section")
            return
        }
        let section = readme[start.upperBound...]
        let end = section.range(of: "\n## ")?.lowerBound ?? section.endIndex
        let blocks = ReadmeText.swiftBlocks(section[..<end].split(separator: "\n", omittingEmptySubsequences: false))
        let regions = try ReadmeText.regions(ofFile: #filePath)
        #expect(blocks.count == 3, "README's Users and rules section has \(blocks.count) Swift blocks")
        for block in blocks {
            #expect(regions.contains(block), "README's Users and rules block is not this file's code:\n\(block)")
        }
    }
}

/// The Swift blocks of README.md and the `// README:` regions of the test files that run them, to compare.
enum ReadmeText {
    /// The bodies of the ```swift blocks among `lines`.
    static func swiftBlocks(_ lines: [Substring]) -> [String] {
        var blocks: [String] = []
        var current: [Substring]?
        for line in lines {
            if current == nil, line == "```swift" {
                current = []
            } else if current != nil, line == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    /// The text between each `// README:` line and `// README end` of the source file at `path`, less its indentation.
    static func regions(ofFile path: String) throws -> [String] {
        let source = try String(contentsOfFile: path, encoding: .utf8)
        var regions: [String] = []
        var region: [Substring]?
        for line in source.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("// README: ") {
                region = []
            } else if trimmed == "// README end", let lines = region {
                let indent = lines.filter { !$0.isEmpty }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
                regions.append(lines.map { String($0.dropFirst(min(indent, $0.count))) }.joined(separator: "\n"))
                region = nil
            } else {
                region?.append(line)
            }
        }
        return regions
    }
}
