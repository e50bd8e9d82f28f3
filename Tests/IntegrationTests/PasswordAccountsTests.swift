import Foundation
import LarderClient
import LarderServer
import LarderStore
import LarderSync
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Accounts Larder keeps (`--users`, Protocol.md section 10.5): sign-up and sign-in with email and password, sessions
/// presented in HELLO, sign-out, expiry, disabled users, the sign-in rate limits, the admin's requests, and the todo
/// app's `owner` rule with two password users; on SQLite, and on two servers sharing one PostgreSQL.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct PasswordAccountsTests {
    static let todoRules: JSONObject = ["read": "owner", "create": "owner", "update": "owner", "delete": "owner"]

    /// A configuration with accounts (cheap hashes, so the tests spend no time hashing, unless `realCost`), anyone
    /// allowed to sign up, and the admin token "admin-secret".
    static func configure(_ configuration: inout ServerConfiguration, realCost: Bool = false) {
        var settings = PasswordAccountSettings()
        if !realCost { settings.hashParameters = .init(iterations: 1, memoryKiB: 64, parallelism: 1) }
        settings.limits.signUpAllowed = true
        configuration.passwordAccounts = settings
        configuration.token = "admin-secret"
    }

    /// A PostgreSQL schema of its own for a test on `store`; nil on SQLite. The test drops it.
    static func schema(_ store: ServerStore) throws -> TestSchema? {
        store == .postgres ? try TestPostgres.newSchema() : nil
    }

    /// A started server with accounts (`configure`d) on `store`, in a directory and, on PostgreSQL, a schema of its
    /// own: its port, and what stops it and removes both.
    static func accountsServer(
        _ store: ServerStore, _ name: String, _ configure: (inout ServerConfiguration) -> Void
    ) throws -> (port: Int, stop: () -> Void) {
        let directory = temporaryTestDirectory(name)
        let schema = try Self.schema(store)
        var configuration = ServerConfiguration.forTests(in: directory)
        Self.configure(&configuration)
        configuration.postgresURL = schema?.url
        configure(&configuration)
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        return (port, {
            server.shutdown()
            schema?.drop()
            try? FileManager.default.removeItem(at: directory)
        })
    }

    static func ok(_ frame: Frame, _ what: String) throws -> JSON {
        guard frame.status == .ok else { throw ServerTestError("\(what): \(frame.replyText)") }
        return frame.replyJSON
    }

    /// A connection without credentials (HELLO with none), to sign up or sign in on.
    static func anonymous(_ port: Int) throws -> RawClient {
        let client = try RawClient.tcp(port: port)
        _ = try ok(client.call(.hello, HelloRequest(client: "accounts-tests").json), "HELLO")
        return client
    }

    /// SIGN_UP or SIGN_IN on a fresh connection: the frame answered.
    static func credentials(_ port: Int, _ opcode: Opcode, _ email: String, _ password: String) throws -> Frame {
        try anonymous(port).call(opcode, AccountCredentials(email: email, password: password).json)
    }

    /// The session SIGN_UP or SIGN_IN answers.
    static func session(_ port: Int, _ opcode: Opcode, _ email: String, _ password: String) throws -> String {
        let answer = try ok(credentials(port, opcode, email, password), opcode.name)
        return try #require(answer["session"]?.stringValue)
    }

    /// HELLO presenting `session`: the frame answered, and the connection.
    static func hello(_ port: Int, session: String) throws -> (Frame, RawClient) {
        let client = try RawClient.tcp(port: port)
        return (try client.call(.hello, HelloRequest(client: "accounts-tests", session: session).json), client)
    }

    /// A connection signed in with `session`.
    static func signedIn(_ port: Int, _ session: String) throws -> RawClient {
        let (frame, client) = try hello(port, session: session)
        _ = try ok(frame, "HELLO with a session")
        return client
    }

    /// `count` servers (not started) on the PostgreSQL at `url`, one I/O loop each, set up by `configure`.
    static func postgresServers(
        _ count: Int, url: String, in directory: URL, _ configure: (Int, inout ServerConfiguration) -> Void
    ) throws -> [LarderServer] {
        try (0..<count).map { index in
            var configuration = ServerConfiguration.forTests(in: directory.appendingPathComponent("s\(index)"))
            configuration.postgresURL = url
            configuration.ioQueues = 1
            configure(index, &configuration)
            return try LarderServer(configuration: configuration)
        }
    }

    static func admin(_ port: Int) throws -> RawClient {
        let client = try RawClient.tcp(port: port)
        try client.hello(token: "admin-secret")
        return client
    }

    /// Alice and Bob sign up on the first server and use the todo app on the last: each sees and changes only
    /// their own todos, and HELLO names them `larder|<uuid>`.
    static func todoApp(_ ports: [Int]) throws {
        let admin = try admin(ports[0])
        _ = try ok(admin.call(.rulesSet, ["collection": "todos", "rules": .object(todoRules)]), "RULES_SET")
        let aliceSession = try session(ports[0], .signUp, "Alice@Example.com", "alice's password")
        let bobSession = try session(ports[0], .signUp, "bob@example.com", "bob's password!")
        let last = ports[ports.count - 1]
        let (aliceHello, alice) = try hello(last, session: aliceSession)
        let aliceId = try #require(try ok(aliceHello, "HELLO")["user"]?["id"]?.stringValue)
        #expect(aliceId.hasPrefix("larder|"))
        let bob = try signedIn(last, bobSession)
        let todo = try ok(
            alice.call(.create, ["collection": "todos", "data": ["title": "buy milk"]]), "CREATE")
        #expect(todo["data"]?["$owner"]?.stringValue == aliceId)
        let id = try #require(todo["id"]?.stringValue)
        _ = try ok(bob.call(.create, ["collection": "todos", "data": ["title": "walk the dog"]]), "CREATE")
        #expect(try ok(alice.call(.count, ["collection": "todos"]), "COUNT")["count"] == 1)
        #expect(try ok(bob.call(.count, ["collection": "todos"]), "COUNT")["count"] == 1)
        #expect(try bob.call(.get, ["collection": "todos", "id": .string(id)]).status == .notFound)
        #expect(try bob.call(.delete, ["collection": "todos", "id": .string(id)]).status == .notFound)
        #expect(try ok(admin.call(.count, ["collection": "todos"]), "COUNT")["count"] == 2)
        // The email is kept lowercased: Alice signs in with it typed either way.
        _ = try session(last, .signIn, "alice@example.com", "alice's password")
    }

    @Test func twoPasswordUsersOfTheTodoAppOnSQLite() throws {
        try withServerOnPort0({ Self.configure(&$0) }) { _, port in try Self.todoApp([port]) }
    }

    /// Sessions live in the shared database: made through one server, they sign in on the other, and a sign-out
    /// through the other ends them on the first. The stored hash is Argon2id with its parameters, the password
    /// nowhere in the row, and the session kept only as its SHA-256.
    @Test func sessionsWorkAcrossTwoServersOfOnePostgreSQL() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let directory = temporaryTestDirectory("larder-accounts-pg")
        defer { try? FileManager.default.removeItem(at: directory) }
        let servers = try Self.postgresServers(2, url: schema.url, in: directory) { index, configuration in
            Self.configure(&configuration, realCost: index == 0)
        }
        defer { for server in servers { server.shutdown() } }
        let ports = try servers.map { try $0.start() }
        try Self.todoApp(ports)
        let carol = try Self.session(ports[0], .signUp, "carol@example.com", "carol's password")
        let onSecond = try Self.signedIn(ports[1], carol)
        _ = try Self.ok(onSecond.call(.signOut, [:]), "SIGN_OUT")
        #expect(try Self.hello(ports[0], session: carol).0.status == .unauthenticated)
        #expect(try onSecond.call(.count, ["collection": "todos"]).status == .unauthenticated)

        let store = try PostgresStore(url: schema.url)
        defer { store.close() }
        let stored = try #require(try store.account("carol@example.com"))
        #expect(stored.passwordHash.hasPrefix("$argon2id$v=19$m=19456,t=2,p=1$"))
        #expect(!stored.passwordHash.contains("carol's password"))
        #expect(try store.sessionAccount(key: Array(carol.utf8), now: 0) == nil)
    }

    /// Failed sign-ins are counted by every server of one PostgreSQL together: failures spread over two servers reach
    /// the per-email limit, and the right password is then refused on either, with `retryAfterMs`.
    @Test func signInLimitsHoldAcrossServersOfOnePostgreSQL() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let directory = temporaryTestDirectory("larder-accounts-pg-limits")
        defer { try? FileManager.default.removeItem(at: directory) }
        let servers = try Self.postgresServers(2, url: schema.url, in: directory) { _, configuration in
            Self.configure(&configuration)
            configuration.passwordAccounts?.limits.signInAttemptsPerAccount = 3
        }
        defer { for server in servers { server.shutdown() } }
        let ports = try servers.map { try $0.start() }
        _ = try Self.session(ports[0], .signUp, "fay@example.com", "fay's password")
        for port in [ports[0], ports[1], ports[0]] {
            #expect(try Self.credentials(port, .signIn, "fay@example.com", "a guess").status == .unauthenticated)
        }
        for port in ports {
            let refused = try Self.credentials(port, .signIn, "fay@example.com", "fay's password")
            #expect(refused.status == .resourceExhausted, "port \(port): \(refused.replyText)")
            #expect((refused.replyJSON["retryAfterMs"]?.intValue ?? 0) > 0)
        }
        // Another email from the same address is not held by this one's failures.
        _ = try Self.session(ports[1], .signUp, "gil@example.com", "gil's password")
        _ = try Self.session(ports[1], .signIn, "gil@example.com", "gil's password")
    }

    /// A wrong password and an email no account has are answered alike; a disabled user cannot sign in, and their
    /// connection is refused at its next request; enabling lets them sign in again.
    @Test(arguments: ServerStore.allCases) func wrongCredentialsAnswerAlikeAndADisabledUserStops(_ store: ServerStore)
        throws
    {
        let schema = try Self.schema(store)
        defer { schema?.drop() }
        try withServerOnPort0({
            Self.configure(&$0)
            $0.postgresURL = schema?.url
        }) { _, port in
            let session = try Self.session(port, .signUp, "dan@example.com", "dan's password")
            let wrongPassword = try Self.credentials(port, .signIn, "dan@example.com", "not dan's password")
            let wrongEmail = try Self.credentials(port, .signIn, "nobody@example.com", "dan's password")
            #expect(wrongPassword.status == .unauthenticated)
            #expect(wrongPassword.json == wrongEmail.json && wrongPassword.status == wrongEmail.status)
            #expect(!wrongPassword.replyText.contains("not dan's password"))

            let dan = try Self.signedIn(port, session)
            #expect(try dan.call(.rulesGet, ["collection": "todos"]).status == .ok)
            let admin = try Self.admin(port)
            let disabled = try Self.ok(
                admin.call(.userSet, UserRequest(user: "dan@example.com", disabled: true).json), "USER_SET")
            #expect(disabled["disabled"]?.boolValue == true)
            #expect(try dan.call(.rulesGet, ["collection": "todos"]).status == .unauthenticated)
            #expect(try Self.hello(port, session: session).0.status == .unauthenticated)
            let refused = try Self.credentials(port, .signIn, "dan@example.com", "dan's password")
            #expect(refused.status == .permissionDenied)
            _ = try Self.ok(admin.call(.userSet, UserRequest(user: "dan@example.com", disabled: false).json), "USER_SET")
            _ = try Self.session(port, .signIn, "dan@example.com", "dan's password")

            // A user may not send the admin's requests, nor a connection without credentials.
            #expect(try dan.call(.usersList, [:]).status == .permissionDenied)
            #expect(try Self.anonymous(port).call(.usersList, [:]).status == .permissionDenied)
            let unknown = try admin.call(.userSet, UserRequest(user: "nobody@example.com", disabled: true).json)
            #expect(unknown.status == .notFound && unknown.replyJSON["field"] == "user")
            let deleted = try Self.ok(admin.call(.userDelete, UserRequest(user: "dan@example.com").json), "USER_DELETE")
            #expect(deleted["sessionsDeleted"] == 1)
            #expect(try Self.credentials(port, .signIn, "dan@example.com", "dan's password").status == .unauthenticated)
        }
    }

    /// A session ends at its expiry (`--session-ttl-ms`, short here) and at SIGN_OUT; PASSWORD_CHANGE revokes the
    /// user's other sessions and keeps the connection's own.
    @Test func aWatchingConnectionEndsWhenItsSessionIsSignedOut() throws {
        let directory = temporaryTestDirectory("larder-accounts-watch")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        Self.configure(&configuration)
        configuration.passwordAccounts?.limits.sessionCheckMs = 200
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        _ = try Self.ok(Self.admin(port).call(.rulesSet, ["collection": "todos", "rules": .object(Self.todoRules)]), "RULES_SET")
        let session = try Self.session(port, .signUp, "gus@example.com", "gus's password")

        let (hello, watcher) = try Self.hello(port, session: session)
        #expect(try HelloResponse(json: hello.jsonObject()).limits.accounts?.sessionCheckMs == 200)
        _ = try Self.ok(watcher.call(.watch, ["collection": "todos"]), "WATCH")
        let writer = try Self.signedIn(port, session)
        _ = try Self.ok(writer.call(.create, ["collection": "todos", "data": ["title": "milk"]]), "CREATE")
        let event = try #require(try watcher.receive())
        #expect(event.isPush && event.opcode == .event, "the watcher sees its own todo while signed in")

        _ = try Self.ok(try Self.anonymous(port).call(.signOut, SignOutRequest(session: session).json), "SIGN_OUT")
        // Within a few checks (200 ms each) the subscription ends with its connection, saying why.
        let frames = try watcher.framesUntilClosed(timeout: 120)
        let ended = try #require(frames.last)
        #expect(ended.status == .unauthenticated && ended.requestID == 0, "\(ended.replyText)")
        #expect(ended.replyJSON["reason"]?.stringValue == "sessionEnded")
    }

    @Test(arguments: ServerStore.allCases) func sessionsExpireAndAreRevoked(_ store: ServerStore) async throws {
        let (port, stop) = try Self.accountsServer(store, "larder-accounts-expiry") {
            $0.passwordAccounts?.limits.sessionTtlMs = 1_500
        }
        defer { stop() }

        let first = try Self.session(port, .signUp, "erin@example.com", "erin's password")
        let answer = try Self.ok(
            Self.credentials(port, .signIn, "erin@example.com", "erin's password"), "SIGN_IN")
        let second = try #require(answer["session"]?.stringValue)
        let expiresAt = try #require(answer["expiresAt"]?.intValue)
        #expect(abs(expiresAt - Int64(Date().timeIntervalSince1970 * 1000) - 1_500) < 1_500)
        let connection = try Self.signedIn(port, second)
        let changed = try Self.ok(
            connection.call(
                .passwordChange, PasswordChangeRequest(oldPassword: "erin's password", newPassword: "a new one!").json),
            "PASSWORD_CHANGE")
        #expect(changed["sessionsRevoked"] == 1)
        let wrongOld = try connection.call(
            .passwordChange, PasswordChangeRequest(oldPassword: "erin's password", newPassword: "another one").json)
        #expect(wrongOld.status == .unauthenticated && wrongOld.replyJSON["field"] == "oldPassword")
        let anonymous = try Self.anonymous(port)
        #expect(
            try anonymous.call(
                .passwordChange, PasswordChangeRequest(oldPassword: "a new one!", newPassword: "another one").json
            ).status == .permissionDenied)
        #expect(try anonymous.call(.signOut, [:]).status == .invalidArgument)
        #expect(try Self.hello(port, session: first).0.status == .unauthenticated)
        #expect(try connection.call(.rulesGet, ["collection": "todos"]).status == .ok)
        let expired = await waitUntil(120) {
            (try? Self.hello(port, session: second).0.status) == .unauthenticated
        }
        #expect(expired, "the session still signs in after its expiry")
        #expect(try connection.call(.rulesGet, ["collection": "todos"]).status == .unauthenticated)

        let third = try Self.session(port, .signIn, "erin@example.com", "a new one!")
        _ = try Self.ok(try Self.anonymous(port).call(.signOut, SignOutRequest(session: third).json), "SIGN_OUT")
        let (refused, _) = try Self.hello(port, session: third)
        #expect(refused.status == .unauthenticated)
        #expect(refused.replyJSON["reason"]?.stringValue == "sessionEnded")
    }

    /// Failed sign-ins are counted per email and per address: past either limit SIGN_IN is RESOURCE_EXHAUSTED with
    /// `retryAfterMs`, the right password included. Password bounds and every account limit are in HELLO.
    @Test(arguments: ServerStore.allCases) func signInsAreRateLimitedAndPasswordsBounded(_ store: ServerStore) throws {
        let schema = try Self.schema(store)
        defer { schema?.drop() }
        try withServerOnPort0({
            Self.configure(&$0)
            $0.postgresURL = schema?.url
            $0.passwordAccounts?.limits.signInAttemptsPerAccount = 2
            $0.passwordAccounts?.limits.signInAttemptsPerAddress = 5
            $0.passwordAccounts?.limits.minPasswordBytes = 10
            $0.passwordAccounts?.limits.maxPasswordBytes = 20
        }) { _, port in
            let hello = try RawClient.tcp(port: port).hello()
            let limits = try #require(hello.limits.accounts)
            #expect(limits.signInAttemptsPerAccount == 2 && limits.signInAttemptsPerAddress == 5)
            #expect(limits.minPasswordBytes == 10 && limits.maxPasswordBytes == 20 && limits.signUpAllowed)
            #expect(limits.sessionTtlMs == 30 * 86_400_000 && limits.signInWindowMs == 900_000)
            #expect(limits.sessionCheckMs == 30_000)

            #expect(try Self.credentials(port, .signUp, "fay@example.com", "123456789").status == .invalidArgument)
            #expect(
                try Self.credentials(port, .signUp, "fay@example.com", String(repeating: "x", count: 21)).status
                    == .invalidArgument)
            #expect(try Self.credentials(port, .signUp, "not an email", "1234567890").status == .invalidArgument)
            _ = try Self.session(port, .signUp, "fay@example.com", "1234567890")
            #expect(try Self.credentials(port, .signUp, "FAY@example.com", "1234567890").status == .conflict)

            for _ in 0..<2 {
                #expect(try Self.credentials(port, .signIn, "fay@example.com", "wrong wrong").status == .unauthenticated)
            }
            let limited = try Self.credentials(port, .signIn, "fay@example.com", "1234567890")
            #expect(limited.status == .resourceExhausted)
            let retry = try #require(limited.replyJSON["retryAfterMs"]?.intValue)
            #expect(retry > 0 && retry <= 900_000)
            // The address: three more failures on other emails reach its five.
            for n in 0..<3 {
                #expect(try Self.credentials(port, .signIn, "x\(n)@example.com", "wrong wrong").status == .unauthenticated)
            }
            #expect(try Self.credentials(port, .signIn, "y@example.com", "wrong wrong").status == .resourceExhausted)
        }
    }

    /// Without `--allow-sign-up` only an admin token creates users, and its SIGN_UP makes no session.
    @Test func onlyAnAdminCreatesUsersWithoutAllowSignUp() throws {
        try withServerOnPort0({
            Self.configure(&$0)
            $0.passwordAccounts?.limits.signUpAllowed = false
        }) { _, port in
            #expect(try RawClient.tcp(port: port).hello().limits.accounts?.signUpAllowed == false)
            let refused = try Self.credentials(port, .signUp, "jo@example.com", "jo's password")
            #expect(refused.status == .permissionDenied && refused.replyText.contains("--allow-sign-up"))
            let created = try Self.ok(
                Self.admin(port).call(.signUp, AccountCredentials(email: "jo@example.com", password: "jo's password").json),
                "SIGN_UP")
            #expect(created["session"] == nil && created["user"]?["email"] == "jo@example.com")
            _ = try Self.session(port, .signIn, "jo@example.com", "jo's password")
        }
    }

    /// The public API: sign up, the session on every connection (the client reconnects with it), sign out.
    @Test func theClientSignsUpInAndOut() async throws {
        let directory = temporaryTestDirectory("larder-accounts-client")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        Self.configure(&configuration)
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        let admin = LarderClient(port: port, token: "admin-secret")
        defer { admin.close() }
        try await admin.setRules(
            CollectionRules(read: .owner, create: .owner, update: .owner, delete: .owner), for: "todos")
        let created = try await admin.createUser(email: "gus@example.com", password: "gus's password")
        #expect(created.id.hasPrefix("larder|") && !created.disabled)
        #expect(try await admin.users().users.map(\.email) == ["gus@example.com"])

        let client = LarderClient(port: port)
        defer { client.close() }
        let signedIn = try await client.signIn(email: "gus@example.com", password: "gus's password")
        #expect(client.session == signedIn.session && signedIn.user.id == created.id)
        #expect(try await client.user == created.id)
        let todo = try await client.create("todos", ["title": "fix the gate"])
        #expect(todo.data["$owner"]?.stringValue == created.id)
        // Another client given the saved session signs in without the password.
        var saved = LarderClient.Configuration(endpoint: .tcp(host: "127.0.0.1", port: port))
        saved.session = client.session
        let later = LarderClient(configuration: saved)
        defer { later.close() }
        #expect(try await later.user == created.id)
        try await client.signOut()
        #expect(client.session == nil)
        #expect(try await client.user == nil)
        await #expect(throws: LarderError.self) { _ = try await later.count("todos") }

        let hana = LarderClient(port: port)
        defer { hana.close() }
        let signedUp = try await hana.signUp(email: "hana@example.com", password: "hana's password")
        #expect(try await hana.user == signedUp.user.id)
        #expect(try await hana.count("todos") == 0)
    }

    /// SESSION_REFRESH gives the user of a connection's session a new one with a full lifetime; HELLO says when a
    /// session ends; the old session stays in force until its own expiry. LarderClient refreshes by itself once less
    /// than half of the lifetime is left, and tells the app the new session.
    @Test(arguments: ServerStore.allCases) func sessionsAreRefreshedBeforeTheyExpire(_ store: ServerStore) async throws {
        let ttl: Int64 = 6_000
        let (port, stop) = try Self.accountsServer(store, "larder-accounts-refresh") {
            $0.passwordAccounts?.limits.sessionTtlMs = Int(ttl)
        }
        defer { stop() }
        func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

        // On the wire.
        let made = try Self.ok(Self.credentials(port, .signUp, "ida@example.com", "ida's password"), "SIGN_UP")
        let first = try #require(made["session"]?.stringValue)
        let firstExpiry = try #require(made["expiresAt"]?.intValue)
        let (hello, connection) = try Self.hello(port, session: first)
        #expect(try HelloResponse(json: hello.jsonObject()).user?.sessionExpiresAt == firstExpiry)
        let refreshed = try Self.ok(connection.call(.sessionRefresh, [:]), "SESSION_REFRESH")
        let second = try #require(refreshed["session"]?.stringValue)
        #expect(second != first && refreshed["user"]?["id"] == made["user"]?["id"])
        #expect(try #require(refreshed["expiresAt"]?.intValue) >= firstExpiry)
        #expect(try Self.hello(port, session: first).0.status == .ok, "the old session stays in force")
        #expect(try Self.hello(port, session: second).0.status == .ok)
        #expect(try connection.call(.sessionRefresh, ["session": "another"]).status == .invalidArgument)
        #expect(try Self.anonymous(port).call(.sessionRefresh, [:]).status == .permissionDenied)
        #expect(try Self.admin(port).call(.sessionRefresh, [:]).status == .permissionDenied)
        _ = try Self.ok(try Self.anonymous(port).call(.signOut, SignOutRequest(session: first).json), "SIGN_OUT")
        let ended = try connection.call(.sessionRefresh, [:])
        #expect(ended.status == .unauthenticated && ended.replyJSON["reason"]?.stringValue == "sessionEnded")

        // LarderClient.
        let heard = Locked<[AccountSession]>([])
        var client = LarderClient.Configuration(endpoint: .tcp(host: "127.0.0.1", port: port))
        client.sessionRefreshed = { session in heard.withLock { $0.append(session) } }
        let app = LarderClient(configuration: client)
        defer { app.close() }
        let signedIn = try await app.signIn(email: "ida@example.com", password: "ida's password")
        let expiresAt = try #require(signedIn.expiresAt)
        try await app.ping()
        if expiresAt - now() > ttl / 2 {
            #expect(heard.withLock { $0 }.isEmpty, "refreshed with more than half of its life left")
        }
        // Past half of its life, the next request refreshes it.
        #expect(await waitUntil(120) { expiresAt - now() < ttl / 2 })
        try await app.ping()
        #expect(await waitUntil(120) { !heard.withLock { $0 }.isEmpty }, "no refresh past half of the session's life")
        let new = try #require(heard.withLock { $0 }.first)
        #expect(new.session != signedIn.session && app.session == new.session)
        #expect(try #require(new.expiresAt) > expiresAt && new.user.id == signedIn.user.id)
        // Past the old session's expiry the client's new connections present the new one.
        #expect(await waitUntil(120) { now() > expiresAt + 500 })
        #expect(try Self.hello(port, session: try #require(signedIn.session)).0.status == .unauthenticated)
        app.close()
        #expect(try await app.user == signedIn.user.id)
        await #expect(throws: LarderError.self) { try await LarderClient(port: port).refreshSession() }

        // Signing out revokes the session and the one its refresh replaced.
        let other = LarderClient(port: port)
        defer { other.close() }
        let before = try await other.signIn(email: "ida@example.com", password: "ida's password")
        let after = try await other.refreshSession()
        try await other.signOut()
        for ended in [before.session, after.session] {
            #expect(try Self.hello(port, session: try #require(ended)).0.status == .unauthenticated)
        }
    }

    /// HELLO carries one credential at most; a session on a server without `--users` is refused.
    @Test func helloTakesOneCredential() throws {
        try withServerOnPort0({ Self.configure(&$0) }) { _, port in
            let both = try RawClient.tcp(port: port).call(
                .hello, ["versions": [1], "token": "admin-secret", "session": "abc"])
            #expect(both.status == .invalidArgument && both.replyJSON["field"] == "session")
        }
        try withServerOnPort0 { _, port in
            let (refused, _) = try Self.hello(port, session: String(repeating: "A", count: 43))
            #expect(refused.status == .unauthenticated && refused.replyText.contains("--users"))
            let signUp = try RawClient.tcp(port: port)
            try signUp.hello()
            #expect(try signUp.call(.signIn, ["email": "a@b.c", "password": "12345678"]).status == .unknownOpcode)
        }
    }

    /// A server process with `--users`: the passwords sent appear in no line of its log, at debug level.
    @Test func passwordsAppearInNoLog() async throws {
        let lines = try await LoggingTests.serverLog(
            ["--users", "--allow-sign-up", "--token", "admin-secret", "--log-level", "debug", "--slow-ms", "0",
             "--password-memory-kib", "64", "--password-iterations", "1"]
        ) { port in
            let client = LarderClient(port: port)
            _ = try await client.signUp(email: "ivy@example.com", password: "PASSWORD-NEVER-LOGGED-1")
            await #expect(throws: LarderError.self) {
                _ = try await client.signIn(email: "ivy@example.com", password: "WRONG-PASSWORD-NEVER-LOGGED")
            }
            _ = try await client.signIn(email: "ivy@example.com", password: "PASSWORD-NEVER-LOGGED-1")
            client.close()
            let observer = LarderClient(port: port, token: "admin-secret")
            let alone = try await waitUntil(120) { try await observer.stats()["connections"]?["open"]?.intValue == 1 }
            #expect(alone, "the server still counts the closed connections open")
            observer.close()
        }
        #expect(!lines.isEmpty)
        for line in lines {
            #expect(!line.contains("NEVER-LOGGED"))
        }
    }

    /// `larder users create|list|disable|enable|delete`: the admin's commands, the password read from stdin and never
    /// printed.
    @Test func theAdminsUsersCommands() throws {
        let server = try ClientTestServer { Self.configure(&$0) }
        defer { server.stop() }
        let admin = ["--port", String(server.port), "--token", "admin-secret"]
        var r = try CLITests.run(["users", "create", "kim@example.com"] + admin, stdin: Array("kim's password\n".utf8))
        // Not a terminal: the answers as JSON.
        #expect(r.status == 0 && r.stdout.contains(#""email":"kim@example.com""#), "\(r.stderr)")
        #expect(r.stdout.contains(#""id":"larder|"#))
        #expect(!r.stdout.contains("kim's password") && !r.stderr.contains("kim's password"))
        _ = try Self.session(server.port, .signIn, "kim@example.com", "kim's password")
        r = try CLITests.run(["users", "disable", "kim@example.com"] + admin)
        #expect(r.status == 0 && r.stdout.contains(#""disabled":true"#), "\(r.stderr)")
        #expect(
            try Self.credentials(server.port, .signIn, "kim@example.com", "kim's password").status == .permissionDenied)
        r = try CLITests.run(["users", "list", "--json"] + admin)
        let page = try UsersPage(
            json: try #require(try JSONParser.parse(Array(r.stdout.trimmingCharacters(in: .newlines).utf8)).objectValue))
        #expect(page.users.map(\.email) == ["kim@example.com"] && page.users[0].disabled)
        r = try CLITests.run(["users", "enable", "kim@example.com"] + admin)
        #expect(r.status == 0 && r.stdout.contains(#""disabled":false"#))
        r = try CLITests.run(["users", "delete", "kim@example.com"] + admin)
        #expect(r.status == 0 && r.stdout.contains(#""sessionsDeleted":0"#), "\(r.stderr)")
        r = try CLITests.run(["users", "list"] + admin)
        #expect(r.status == 0 && !r.stdout.contains("kim@example.com"))
    }
}
