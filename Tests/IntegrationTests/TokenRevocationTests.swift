#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// A reload of the token file (SIGHUP) holds open connections to the new table at once, not at their next request:
/// a subscriber that sends nothing is closed when its token goes, and loses the subscriptions its token no longer
/// covers (Protocol.md sections 4 and 10.2). Real server processes, real sockets.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TokenRevocationTests {
    /// A server child with `tokens` as its token file, logging at info (the reload's lines are the tests' condition).
    final class Server {
        let root: URL
        let file: String
        let child: ServerChild
        private var reloads = 0

        init(_ tokens: String, arguments: [String] = []) throws {
            root = temporaryTestDirectory("larder-revoke")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            file = root.appendingPathComponent("tokens").path
            _ = FileManager.default.createFile(atPath: file, contents: Data(tokens.utf8))
            child = try ServerChild(
                dataDirectory: root.appendingPathComponent("data").path,
                arguments: ["--token-file", file, "--log-level", "info"] + arguments)
        }

        deinit {
            _ = child.stop()
            try? FileManager.default.removeItem(at: root)
        }

        var port: Int { child.port }

        /// Writes `tokens` to the token file, sends SIGHUP, and waits until every open connection was checked against
        /// the new table (the server logs it once every event loop has done so).
        func reload(_ tokens: String) throws {
            _ = FileManager.default.createFile(atPath: file, contents: Data(tokens.utf8))
            reloads += 1
            kill(child.pid, SIGHUP)
            let wanted = reloads
            let deadline = Date().addingTimeInterval(120)
            while Self.count(of: "tokens checked again", in: child.logPath) < wanted {
                guard Date() < deadline else {
                    let log = ServerChild.tail(child.logPath)
                    throw ServerTestError("the reload never finished checking connections; log: \(log)")
                }
                usleep(20_000)  // polling a file: a condition, with a deadline
            }
        }

        static func count(of text: String, in path: String) -> Int {
            let log = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return log.components(separatedBy: text).count - 1
        }

        func connect(_ token: String) throws -> RawClient {
            let client = try RawClient.tcp(port: port)
            try client.hello(token: token)
            return client
        }
    }

    static func watch(_ client: RawClient, _ json: JSONObject) throws -> UInt32 {
        let reply = try client.call(.watch, json)
        guard reply.status == .ok, let id = reply.replyJSON["subscription"]?.intValue else {
            throw ServerTestError("WATCH failed: \(reply.replyText)")
        }
        return UInt32(id)
    }

    static func create(_ admin: RawClient, _ collection: String) throws {
        let reply = try admin.call(.create, ["collection": .string(collection), "data": ["n": 1]])
        guard reply.status == .ok else { throw ServerTestError("CREATE failed: \(reply.replyText)") }
    }

    /// (a) A removed token's silent subscriber gets UNAUTHENTICATED (opcode 0, request id 0) and is closed; a write
    /// made after the reload reaches it as no event.
    @Test func aRemovedTokenClosesItsSilentSubscriber() throws {
        let server = try Server("admin admin-token\nread gone-token\n")
        let admin = try server.connect("admin-token")
        let watcher = try server.connect("gone-token")
        let subscription = try Self.watch(watcher, ["collection": "t"])
        try Self.create(admin, "t")
        let first = try #require(try watcher.receive())
        #expect(first.opcode == .event && first.requestID == subscription, "the subscription was not live")

        try server.reload("admin admin-token\n")
        try Self.create(admin, "t")
        let frames = try watcher.framesUntilClosed(timeout: 120)
        #expect(frames.map(\.status) == [.unauthenticated], "\(frames.map(\.replyText))")
        #expect(frames.first?.opcode == Opcode(rawValue: 0) && frames.first?.requestID == 0)
        #expect(frames.first?.replyText.contains("revoked") == true)
        #expect(!frames.contains { $0.opcode == .event }, "an event reached a revoked token")
        let log = (try? String(contentsOfFile: server.child.logPath, encoding: .utf8)) ?? ""
        #expect(log.contains("1 closed (token removed)"))
        #expect(!log.contains("gone-token") && !log.contains("admin-token"), "a token reached the log")
    }

    /// (b) A token narrowed from alpha,beta to alpha: its subscriptions on beta and on every collection end with a
    /// gap carrying PERMISSION_DENIED, the one on alpha goes on; later requests use the new collections.
    @Test func aNarrowedTokenLosesOnlyTheSubscriptionsOutsideItsCollections() throws {
        let server = try Server("admin admin-token\nread shelf alpha,beta\n")
        let admin = try server.connect("admin-token")
        let watcher = try server.connect("shelf")
        let alpha = try Self.watch(watcher, ["collection": "alpha"])
        let beta = try Self.watch(watcher, ["collection": "beta"])
        let every = try Self.watch(watcher, [:])

        try server.reload("admin admin-token\nread shelf alpha\n")
        // Beta first: were its subscription still live, its event would come before alpha's.
        try Self.create(admin, "beta")
        try Self.create(admin, "alpha")
        var frames: [Frame] = []
        while !frames.contains(where: { $0.requestID == alpha }), let frame = try watcher.receive(timeout: 120) {
            frames.append(frame)
        }
        let ended = frames.filter { $0.replyJSON["kind"]?.stringValue == "gap" }
        #expect(Set(ended.map(\.requestID)) == [beta, every], "\(frames.map(\.replyText))")
        for gap in ended {
            let event = try ChangeEvent(json: gap.jsonObject())
            #expect(event.error?.status == .permissionDenied, "\(gap.replyText)")
            #expect(event.error?.message.contains("limited to alpha") == true, "\(gap.replyText)")
        }
        let live = frames.filter { $0.replyJSON["kind"]?.stringValue != "gap" }
        #expect(live.map(\.requestID) == [alpha], "\(frames.map(\.replyText))")
        #expect(live.first?.replyJSON["collection"]?.stringValue == "alpha")
        // The ended subscriptions are gone, and the connection follows the new grant.
        #expect(try watcher.call(.unwatch, ["subscription": .int(Int64(beta))]).status == .notFound)
        #expect(try watcher.call(.list, ["collection": "beta"]).status == .permissionDenied)
        #expect(try watcher.call(.watch, ["collection": "beta"]).status == .permissionDenied)
        #expect(try watcher.call(.list, ["collection": "alpha"]).status == .ok)
    }

    /// (c) A token the reload leaves alone keeps its subscription; one whose role is lowered keeps it too (every role
    /// may WATCH) and is held to the new role at its next request.
    @Test func anUnchangedOrLoweredTokenKeepsItsSubscription() throws {
        let server = try Server("admin admin-token\nread keep-token\nwrite lowered-token\nread other-token\n")
        let admin = try server.connect("admin-token")
        let kept = try server.connect("keep-token")
        let lowered = try server.connect("lowered-token")
        let keptID = try Self.watch(kept, ["collection": "t"])
        let loweredID = try Self.watch(lowered, ["collection": "t"])

        try server.reload("admin admin-token\nread keep-token\nread lowered-token\nread new-token\n")
        try Self.create(admin, "t")
        for (client, id) in [(kept, keptID), (lowered, loweredID)] {
            let event = try #require(try client.receive(timeout: 120))
            #expect(event.opcode == .event && event.requestID == id, "\(event.replyText)")
            #expect(event.replyJSON["kind"]?.stringValue == "create", "\(event.replyText)")
            #expect(try client.call(.ping).status == .ok)
        }
        let denied = try lowered.call(.create, ["collection": "t", "data": [:]])
        #expect(denied.status == .permissionDenied, "\(denied.replyText)")
    }

    /// (a) over TLS, where a closed connection writes its last ciphertext and close_notify: the UNAUTHENTICATED frame
    /// arrives encrypted, then close_notify, and no event.
    @Test func aRemovedTokenClosesItsSubscriberOverTLS() throws {
        let certificates = TestCertificates.shared
        let server = try Server(
            "admin admin-token\nread gone-token\n",
            arguments: ["--tls-cert", certificates.serverCertificate, "--tls-key", certificates.serverKey])
        let watcher = try TLSCloseTests.SlowTLSClient(port: server.port)
        try watcher.send([
            (.hello, HelloRequest(compression: [], client: "revoke-tls", token: "gone-token").json),
            (.watch, ["collection": "t"]),
            (.get, ["collection": "t", "id": .string(UUID().uuidString)]),
        ])
        var failure: String?
        let ending = watcher.readToEnd {
            // The WATCH was answered before this GET: the subscription is live.
            do {
                try server.reload("admin admin-token\n")
                let admin = try TLSAdmin(port: server.port)
                try admin.create("t")
            } catch {
                failure = "\(error)"
            }
        }
        #expect(failure == nil, "\(failure ?? "")")
        #expect(ending.failure == nil, "\(ending.failure ?? "")")
        #expect(ending.closeNotify, "no close_notify after the error")
        #expect(ending.frames.map(\.opcode) == [.hello, .watch, .get, Opcode(rawValue: 0)])
        #expect(ending.frames.last?.status == .unauthenticated, "\(ending.frames.map(\.replyText))")
    }

    /// An admin over TLS that writes one document (the server's one port speaks TLS).
    struct TLSAdmin {
        let client: TLSCloseTests.SlowTLSClient

        init(port: Int) throws {
            client = try TLSCloseTests.SlowTLSClient(port: port)
            let hello = HelloRequest(compression: [], client: "revoke-tls-admin", token: "admin-token")
            try client.send([(.hello, hello.json)])
        }

        /// Sends a CREATE and shuts the connection down once it is answered.
        func create(_ collection: String) throws {
            try client.send([(.create, ["collection": .string(collection), "data": ["n": 1]])])
            try client.send([(.get, ["collection": .string(collection), "id": .string(UUID().uuidString)])])
            let ending = client.readToEnd(firstAnswer: { shutdown(client.fd, Int32(SHUT_WR)) })
            let created = ending.frames.first { $0.opcode == .create }
            guard created?.status == .ok else {
                let seen = ending.frames.map(\.replyText)
                throw ServerTestError("CREATE over TLS failed: \(seen) \(ending.failure ?? "")")
            }
        }
    }
}
