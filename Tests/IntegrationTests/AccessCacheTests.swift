import Foundation
import LarderServer
import LarderStore
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// A server checks users' requests against the sessions and rules it read, without reading them again: on SQLite a
/// sign-out, a disabled user or a RULES_SET holds from its answer on; on servers sharing one PostgreSQL, the server
/// that made the change holds it at once and the others within `accessCacheMs` (Protocol.md sections 10.4, 10.5).
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct AccessCacheTests {
    typealias Accounts = PasswordAccountsTests

    /// Alice's GET of her own todo on a connection that already read it (so her session, the rules and the record
    /// were all read before): answered, then refused at once after each change made through the same server.
    @Test func aSignOutOrARulesChangeHoldsAtTheNextRequestOnSQLite() throws {
        try withServerOnPort0({ Accounts.configure(&$0) }) { _, port in
            let admin = try Accounts.admin(port)
            _ = try Accounts.ok(
                admin.call(.rulesSet, ["collection": "todos", "rules": .object(Accounts.todoRules)]), "RULES_SET")
            let session = try Accounts.session(port, .signUp, "alice@example.com", "alice's password")
            let alice = try Accounts.signedIn(port, session)
            let todo = try Accounts.ok(alice.call(.create, ["collection": "todos", "data": ["title": "tea"]]), "CREATE")
            let get: JSONObject = ["collection": "todos", "id": .string(try #require(todo["id"]?.stringValue))]
            for _ in 0..<3 { _ = try Accounts.ok(alice.call(.get, get), "GET") }

            // The rules change: read becomes the admin's alone, then owner again.
            let adminRead: JSONObject = ["read": "admin", "create": "owner", "update": "owner", "delete": "owner"]
            _ = try Accounts.ok(admin.call(.rulesSet, ["collection": "todos", "rules": .object(adminRead)]), "RULES_SET")
            #expect(try alice.call(.get, get).status == .permissionDenied)
            _ = try Accounts.ok(
                admin.call(.rulesSet, ["collection": "todos", "rules": .object(Accounts.todoRules)]), "RULES_SET")
            _ = try Accounts.ok(alice.call(.get, get), "GET after the rules were set back")

            // Another connection signs her session out: this one is refused at its next request.
            _ = try Accounts.ok(Accounts.anonymous(port).call(.signOut, SignOutRequest(session: session).json), "SIGN_OUT")
            let refused = try alice.call(.get, get)
            #expect(refused.status == .unauthenticated && refused.replyJSON["reason"] == "sessionEnded")

            // A disabled user's session stops too.
            let again = try Accounts.session(port, .signIn, "alice@example.com", "alice's password")
            let second = try Accounts.signedIn(port, again)
            _ = try Accounts.ok(second.call(.get, get), "GET")
            _ = try Accounts.ok(
                admin.call(.userSet, UserRequest(user: "alice@example.com", disabled: true).json), "USER_SET")
            #expect(try second.call(.get, get).status == .unauthenticated)
        }
    }

    /// Two servers of one PostgreSQL, the second with `accessCacheMs` as given: a sign-out through the first.
    private static func signOutOnTheFirst(accessCacheMs: Int, _ check: (Int, String, RawClient, JSONObject) async throws -> Void)
        async throws
    {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let directory = temporaryTestDirectory("larder-access-cache-pg")
        defer { try? FileManager.default.removeItem(at: directory) }
        let servers = try Accounts.postgresServers(2, url: schema.url, in: directory) { index, configuration in
            Accounts.configure(&configuration)
            if index == 1 { configuration.passwordAccounts?.limits.accessCacheMs = accessCacheMs }
        }
        defer { for server in servers { server.shutdown() } }
        let ports = try servers.map { try $0.start() }
        let admin = try Accounts.admin(ports[0])
        _ = try Accounts.ok(
            admin.call(.rulesSet, ["collection": "todos", "rules": .object(Accounts.todoRules)]), "RULES_SET")
        let session = try Accounts.session(ports[0], .signUp, "bob@example.com", "bob's password")
        let (hello, onSecond) = try Accounts.hello(ports[1], session: session)
        let limits = try HelloResponse(json: try hello.jsonObject()).limits.accounts
        #expect(limits?.accessCacheMs == accessCacheMs, "HELLO announces the second server's accessCacheMs")
        let todo = try Accounts.ok(onSecond.call(.create, ["collection": "todos", "data": ["title": "x"]]), "CREATE")
        let get: JSONObject = ["collection": "todos", "id": .string(try #require(todo["id"]?.stringValue))]
        _ = try Accounts.ok(onSecond.call(.get, get), "GET")
        _ = try Accounts.ok(Accounts.anonymous(ports[0]).call(.signOut, SignOutRequest(session: session).json), "SIGN_OUT")
        #expect(try Accounts.hello(ports[0], session: session).0.status == .unauthenticated)
        try await check(ports[1], session, onSecond, get)
    }

    /// With the default of one second, the second server refuses the session soon after; with 0 it refuses it at
    /// once; with a window longer than the test, it still answers (the documented bound, crossed from both sides).
    @Test func anotherServersSignOutHoldsWithinAccessCacheMs() async throws {
        try await Self.signOutOnTheFirst(accessCacheMs: AccountLimits().accessCacheMs) { _, _, onSecond, get in
            let refused = await waitUntil(120) { (try? onSecond.call(.get, get).status) == .unauthenticated }
            #expect(refused, "the second server still accepts a session signed out on the first")
        }
        try await Self.signOutOnTheFirst(accessCacheMs: 0) { _, _, onSecond, get in
            let status = try onSecond.call(.get, get).status
            #expect(status == .unauthenticated)
        }
        try await Self.signOutOnTheFirst(accessCacheMs: 600_000) { port, session, onSecond, get in
            let status = try onSecond.call(.get, get).status
            #expect(status == .ok, "a session read within accessCacheMs is reused")
            // A connection that presents it afresh is checked against the store at HELLO.
            let hello = try Accounts.hello(port, session: session).0.status
            #expect(hello == .unauthenticated)
        }
    }

    /// Bob's record in the read cache (Bob just read it, so his GET was answered on the event loop) answers Alice
    /// exactly as an id nobody used, at every try: the same status and the same bytes but for the id, and her own
    /// record, read the same way, is still hers.
    @Test func anotherUsersCachedRecordAnswersAsAMissingOne() throws {
        try withServerOnPort0({ Accounts.configure(&$0) }) { _, port in
            let admin = try Accounts.admin(port)
            _ = try Accounts.ok(
                admin.call(.rulesSet, ["collection": "todos", "rules": .object(Accounts.todoRules)]), "RULES_SET")
            let alice = try Accounts.signedIn(port, try Accounts.session(port, .signUp, "al@example.com", "al's password"))
            let bob = try Accounts.signedIn(port, try Accounts.session(port, .signUp, "bo@example.com", "bo's password"))
            let theirs = try Accounts.ok(bob.call(.create, ["collection": "todos", "data": ["title": "b"]]), "CREATE")
            let mine = try Accounts.ok(alice.call(.create, ["collection": "todos", "data": ["title": "a"]]), "CREATE")
            let other = try #require(theirs["id"]?.stringValue)
            let missing = UUID().uuidString.lowercased()
            for _ in 0..<3 {
                _ = try Accounts.ok(bob.call(.get, ["collection": "todos", "id": .string(other)]), "Bob's GET")
                let hidden = try alice.call(.get, ["collection": "todos", "id": .string(other)])
                let absent = try alice.call(.get, ["collection": "todos", "id": .string(missing)])
                #expect(hidden.status == .notFound && absent.status == .notFound)
                let same = UserRulesTests.shape(hidden, other) == UserRulesTests.shape(absent, missing)
                #expect(same, "a cached record of another user answers unlike a missing one: \(hidden.replyText)")
                let own = try Accounts.ok(alice.call(.get, ["collection": "todos", "id": mine["id"]!]), "GET")
                #expect(own["data"]?["title"] == "a")
            }
        }
    }
}
