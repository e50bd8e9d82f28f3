import Foundation
import LarderIO
import LarderSync
import LarderWire

/// A connection pool to a Larder server, or to several servers sharing one PostgreSQL, with an async method for every
/// operation.
///
/// Create one and share it: it is `Sendable`, and many tasks may call it at once. Each of its `connections` carries
/// many requests in flight (up to the server's announced `maxInFlight`), matched to their replies by request id.
/// Connections open lazily on first use, each at the next of `endpoints` in turn (so a pool spreads over the servers),
/// going on to the next endpoint when one refuses. A connection that breaks fails its requests in flight with
/// `UNAVAILABLE`, and the next request opens a new one at the next endpoint. Reads and PING that the break failed are
/// sent again on a new connection. So is a write, when the server announces `requestKeyRetentionMs` in HELLO: every
/// write (create, replace, patch, delete, blob put, blob delete, an upload's finish) then carries a request key made
/// for it and kept across its tries, and the server applies it once however many tries reach it (Protocol.md section
/// 5.10), so a write whose answer was lost is applied exactly once. A server that announces no keys gets none, and a
/// write it was sending when the connection broke is never sent again (it may have been applied): its error says
/// whether it was sent (details `sent`).
///
/// ```swift
/// let client = LarderClient(host: "127.0.0.1", port: 7411)
/// let items = client.collection("items", of: Item.self)
/// let stored = try await items.create(Item(name: "poke-ball"))
/// ```
public final class LarderClient: Sendable {
    /// Where the server listens.
    public enum Endpoint: Sendable, Hashable, CustomStringConvertible {
        /// A TCP host name or address and port.
        case tcp(host: String, port: Int)
        /// A Unix domain socket path (same host only; the cheapest transport).
        case unix(path: String)

        /// `host:port` or the socket path.
        public var description: String {
            switch self {
            case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            case .unix(let path): path
            }
        }
    }

    /// How the client connects and how long it waits.
    public struct Configuration: Sendable {
        /// Where the servers listen (at least one): servers that share one PostgreSQL, in the order tried.
        public var endpoints: [Endpoint]
        /// The first of `endpoints`; setting it makes it the only one.
        public var endpoint: Endpoint {
            get { endpoints[0] }
            set { endpoints = [newValue] }
        }
        /// The token sent in HELLO when the server requires one.
        public var token: String?
        /// The client name sent in HELLO (the server may log it).
        public var clientName: String
        /// Connections in the pool (at least 1); requests go to the least busy one.
        public var connections: Int
        /// Deadline for each request, from the call until the reply; nil waits forever.
        public var requestTimeout: Duration?
        /// Deadline for connecting and the HELLO handshake.
        public var connectTimeout: Duration
        /// Offer zlib compression of JSON parts in HELLO.
        public var compression: Bool
        /// TLS to a TCP endpoint (nil: plain).
        public var tls: TLSSettings?
        /// Signs the client in as a user: called at each connect for a fresh OpenID Connect ID token (from Sign in
        /// with Apple, Google, Auth0...), which HELLO sends in place of `token`. A connection stays signed in until it
        /// ends, so an expired token is replaced by connecting again; an error it throws fails the connect with
        /// `UNAUTHENTICATED`.
        public var idTokenProvider: (@Sendable () async throws -> String)?
        /// Signs the client in as a user of an account the server keeps (email and password, on a server with
        /// `--users`): a session from `signIn(email:password:)` or `signUp(email:password:)`, saved by the app from an
        /// earlier launch, which every HELLO presents. `signIn`, `signUp` and `signOut` replace it.
        public var session: String?
        /// Called with the new session each time the client refreshes its session (`refreshSession()`), so that the
        /// app saves it in place of the old one. The client refreshes by itself, in the background, at a request made
        /// when less than half of the server's `sessionTtlMs` is left of its session (HELLO says when the session
        /// ends); the old session stays in force until its own expiry.
        public var sessionRefreshed: (@Sendable (AccountSession) -> Void)?

        /// A configuration with the defaults: one connection, 30-second requests, 5-second connects, zlib offered.
        public init(
            endpoint: Endpoint = .tcp(host: "127.0.0.1", port: 7411), token: String? = nil,
            clientName: String = "LarderClient", connections: Int = 1, requestTimeout: Duration? = .seconds(30),
            connectTimeout: Duration = .seconds(5), compression: Bool = true, tls: TLSSettings? = nil
        ) {
            self.tls = tls
            self.endpoints = [endpoint]
            self.token = token
            self.clientName = clientName
            self.connections = connections
            self.requestTimeout = requestTimeout
            self.connectTimeout = connectTimeout
            self.compression = compression
        }
    }

    /// The configuration this client was made with.
    public let configuration: Configuration

    private enum Slot {
        case empty
        case opening(Task<Result<Connection, LarderError>, Never>)
        case open(Connection)
    }

    private let slots: Locked<[Slot]>
    /// The session every new connection presents in HELLO (`Configuration.session`, then `signIn`'s).
    let currentSession: Locked<String?>
    /// The ID token `signIn(idToken:)` gave, which every new connection presents in place of
    /// `Configuration.idTokenProvider`'s.
    let currentIDToken = Locked<String?>(nil)
    /// When `currentSession` expires, and whether a refresh of it is under way (`refreshSessionIfDue`).
    let sessionLife = Locked(SessionLife())
    /// What the TLS connections share: the context made from the certificate files, and sessions to resume.
    private let tlsShared: ClientTLSShared?

    /// TLS handshakes completed so far by this client's connections: with the certificate exchange, and resumed.
    package var tlsHandshakes: (full: Int, resumed: Int) { tlsShared?.handshakes ?? (0, 0) }
    /// The endpoint the next connection tries first.
    private let nextEndpoint = Locked(0)
    /// The keys of this client's writes: time-ordered, so that the server stores each at the end of its index of keys
    /// rather than on a random page.
    private let requestKeys = Locked(TimeOrderedUUIDGenerator())
    /// The highest sequence number this client has seen in an answer (`seenSeq`).
    private let highestSeq = Locked<Int64>(0)

    /// The highest sequence number this client has seen: the newest change among its writes' answers and its GETs'
    /// (Protocol.md section 5.1). Every GET carries it as `afterSeq`, so that whichever server answers, the answer
    /// reflects every write this client made and nothing older than what it already read: read-your-writes and
    /// monotonic reads across servers that share one PostgreSQL, with their read caches on.
    ///
    /// ```swift
    /// let written = try await client.create("notes", ["text": "hello"])
    /// let seen = client.seenSeq  // a web app may hand this to the client that serves the user's next request
    /// ```
    public var seenSeq: Int64 { highestSeq.withLock { $0 } }

    /// Raises `seenSeq` to `seq` (never lowers it): for an app that hands what one client has seen to another, so that
    /// the other's reads reflect it too (for instance a sequence number kept in a web session between requests).
    ///
    /// ```swift
    /// other.advanceSeq(to: client.seenSeq)
    /// let fresh = try await other.get("notes", id: written.id)  // reflects the write, whichever server answers
    /// ```
    public func advanceSeq(to seq: Int64) {
        highestSeq.withLock { $0 = max($0, seq) }
    }

    /// The answers that carry `seq` (Protocol.md section 5.1).
    static func carriesSeq(_ opcode: Opcode) -> Bool {
        switch opcode {
        case .create, .replace, .patch, .delete, .dropCollection, .get: true
        default: false
        }
    }

    /// A client for the server described by `configuration`; nothing connects until the first request.
    public init(configuration: Configuration) {
        self.configuration = configuration
        tlsShared = configuration.tls.map(ClientTLSShared.init)
        slots = Locked(Array(repeating: .empty, count: max(1, configuration.connections)))
        currentSession = Locked(configuration.session)
    }

    /// A client for a TCP server.
    public convenience init(
        host: String = "127.0.0.1", port: Int = 7411, token: String? = nil, connections: Int = 1,
        requestTimeout: Duration? = .seconds(30)
    ) {
        self.init(
            configuration: Configuration(
                endpoint: .tcp(host: host, port: port), token: token, connections: connections,
                requestTimeout: requestTimeout))
    }

    /// A client for a server's Unix domain socket.
    public convenience init(socketPath: String, token: String? = nil, connections: Int = 1) {
        self.init(configuration: Configuration(endpoint: .unix(path: socketPath), token: token, connections: connections))
    }

    deinit {
        close()
    }

    /// Closes every connection; requests in flight fail with `UNAVAILABLE`. Later requests reconnect.
    public func close() {
        let old = slots.withLock { slots in
            defer { slots = Array(repeating: .empty, count: slots.count) }
            return slots
        }
        for slot in old {
            switch slot {
            case .open(let connection): connection.close()
            case .opening(let task): Task { if case .success(let c) = await task.value { c.close() } }
            case .empty: break
            }
        }
    }

    /// Opens a connection now (instead of on the first request) and returns what the server announced in HELLO.
    ///
    /// - Throws: `UNAVAILABLE` when no server answers within the connect timeout (`isConnectFailure`);
    ///   `UNAUTHENTICATED` for a missing or wrong token; `UNSUPPORTED_VERSION` when the server speaks no version of
    ///   this client's; `RESOURCE_EXHAUSTED` when the server has `maxConnections` open. Any call that opens a
    ///   connection throws these too.
    @discardableResult
    public func connect() async throws(LarderError) -> HelloResponse {
        let connection = try await connection()
        return connection.hello!
    }

    /// A check every connection a task's requests use must pass, given the user the connection is signed in as (nil
    /// for none): a replica's syncing sets one, so that nothing of its file reaches, or comes from, another user.
    @TaskLocal static var connectionCheck: (@Sendable (_ user: String?) throws(LarderError) -> Void)?

    /// The connection for the next request (`pooledConnection`), once it passed the task's `connectionCheck`.
    func connection() async throws(LarderError) -> Connection {
        let connection = try await pooledConnection()
        if let check = LarderClient.connectionCheck { try check(connection.hello?.user?.id) }
        refreshSessionIfDue(connection)
        return connection
    }

    /// Picks the least busy open connection, opening one in an empty or broken slot first.
    private func pooledConnection() async throws(LarderError) -> Connection {
        enum Pick {
            case ready(Connection)
            case wait(Task<Result<Connection, LarderError>, Never>, Int)
        }
        let tls = tlsShared
        let pick: Pick = slots.withLock { slots in
            var best: (Connection, Int)?
            for (index, slot) in slots.enumerated() {
                switch slot {
                case .open(let connection) where connection.isClosed:
                    slots[index] = .empty
                case .open(let connection):
                    let load = connection.load
                    if load == 0 { return .ready(connection) }
                    if best == nil || load < best!.1 { best = (connection, load) }
                default: break
                }
            }
            // Open another connection only when every open one is busy and a slot is free.
            if let index = slots.firstIndex(where: { if case .empty = $0 { true } else { false } }) {
                // The credentials are read under the pool's lock: a sign-in that changes them then closes the pool,
                // so a connection opened with the old ones is in the pool by then and closed with it.
                var presenting = configuration
                presenting.session = currentSession.withLock { $0 }
                if let idToken = currentIDToken.withLock({ $0 }) { presenting.idTokenProvider = { idToken } }
                let configuration = presenting
                let first = nextEndpoint.withLock { next in
                    defer { next = (next + 1) % configuration.endpoints.count }
                    return next
                }
                let task = Task { () async -> Result<Connection, LarderError> in
                    do throws(LarderError) {
                        return .success(try await LarderClient.open(configuration, startingAt: first, tls: tls))
                    } catch {
                        return .failure(error)
                    }
                }
                slots[index] = .opening(task)
                return .wait(task, index)
            }
            if let best { return .ready(best.0) }
            for (index, slot) in slots.enumerated() {
                if case .opening(let task) = slot { return .wait(task, index) }
            }
            fatalError("a pool slot is always empty, opening or open")
        }
        switch pick {
        case .ready(let connection): return connection
        case .wait(let task, let index):
            let result = await task.value
            let pooled = slots.withLock { slots -> Bool in
                guard index < slots.count else { return false }
                // Another request waiting for the same connection may have put it in its slot already.
                if case .open(let pooled) = slots[index], case .success(let connection) = result {
                    return pooled === connection
                }
                guard case .opening(let current) = slots[index], current == task else { return false }
                switch result {
                case .success(let connection): slots[index] = .open(connection)
                case .failure: slots[index] = .empty
                }
                return true
            }
            // The pool was closed while this one opened (`close`, a sign-in): it may present what the client no
            // longer does, so the request takes a connection opened now.
            if !pooled, case .success(let connection) = result {
                connection.close()
                return try await pooledConnection()
            }
            return try result.get()
        }
    }

    /// A connection to the first endpoint, from `first` on, that accepts one; UNAVAILABLE naming each refusal
    /// when none does. An error the server answered (a wrong token, say) ends the search: another server of the same
    /// deployment would answer it too.
    static func open(_ configuration: Configuration, startingAt first: Int, tls: ClientTLSShared?)
        async throws(LarderError) -> Connection
    {
        let endpoints = configuration.endpoints
        var refusals: [String] = []
        for step in 0..<endpoints.count {
            let endpoint = endpoints[(first + step) % endpoints.count]
            do throws(LarderError) {
                return try await Connection.open(configuration, endpoint: endpoint, tls: tls)
            } catch {
                guard error.status == .unavailable || error.status == .deadlineExceeded, endpoints.count > 1 else {
                    throw error
                }
                refusals.append(error.message)
            }
        }
        throw LarderError(
            .unavailable, "no server answered: " + refusals.joined(separator: "; ") + "; retry when one is back")
    }

    /// Whether a request of `opcode` changes nothing, so sending it again after a lost connection is harmless.
    static func isRetryable(_ opcode: Opcode) -> Bool {
        switch opcode {
        case .ping, .get, .getMany, .list, .search, .count, .group, .collections, .blobGet, .blobHead, .blobList,
            .stats:
            true
        default: false
        }
    }

    // MARK: - Raw requests

    /// A successful reply: its JSON object and binary part.
    public struct Reply: Sendable {
        /// The reply's JSON part.
        public var json: JSONObject
        /// The reply's binary part (a JPEG for `BLOB_GET`), empty otherwise.
        public var binary: [UInt8]

        /// A reply with these parts.
        public init(json: JSONObject, binary: [UInt8] = []) {
            self.json = json
            self.binary = binary
        }
    }

    /// Sends any request and returns the reply, for opcodes this client has no method for. (`WATCH` has one:
    /// `watch(collection:filter:since:idsOnly:bufferLimit:)`; a raw WATCH's events are dropped.)
    ///
    /// - Throws: the server's error reply as `LarderError`; `PAYLOAD_TOO_LARGE`, before anything is sent, for a
    ///   request the server's limits would refuse; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as
    ///   any request.
    public func request(
        _ opcode: Opcode, json: JSONObject = [:], binary: [UInt8] = [], timeout: Duration? = nil,
        progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    ) async throws(LarderError) -> Reply {
        let frame = try await call(opcode, json, binary: binary, timeout: timeout, progress: progress)
        return Reply(json: try frame.jsonObject(), binary: frame.binary)
    }

    func call(
        _ opcode: Opcode, _ json: JSONObject, binary: [UInt8] = [], timeout: Duration? = nil,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) async throws(LarderError) -> Frame {
        try await call(opcode, jsonBytes: json.bytes, binary: binary, timeout: timeout, progress: progress)
    }

    func call(
        _ opcode: Opcode, jsonBytes: [UInt8], binary: [UInt8] = [], timeout: Duration? = nil,
        progress: (@Sendable (Int, Int) -> Void)? = nil, enqueued: (@Sendable () -> Void)? = nil,
        requestKey: UUID? = nil
    ) async throws(LarderError) -> Frame {
        // A read the lost connection failed goes once more to each other endpoint (a new connection moves on). So does
        // a write sent with a request key (one key for all its tries), which the server applies once however often it
        // arrives; a write to a server that takes no keys is never sent again.
        // `requestKey`: the caller's own, kept across calls (a replica's outbox sends a write again after a restart).
        let key = LarderClient.takesRequestKey(opcode) ? requestKey ?? requestKeys.withLock { $0.next() } : nil
        var attempts: Int?
        var wasKeyed = false
        while true {
            let connection = try await connection()
            var json = jsonBytes
            if opcode == .get, connection.hello?.limits.afterSeqWaitMs != nil {
                let seen = seenSeq
                if seen > 0 { json = SeqMember.appending(seen, name: SeqMember.afterSeq, to: json) }
            }
            if let key, connection.hello?.limits.requestKeyRetentionMs != nil {
                json = LarderClient.keyed(jsonBytes, key)
                wasKeyed = true
            } else if wasKeyed, let key {
                // The new connection's server takes no keys: sent without one, the write might apply twice.
                throw LarderError(
                    .unavailable, "\(opcode.name) was sent with requestKey \(key.wireString) and its answer was lost, "
                        + "and the server now reached takes no request keys; read it back before retrying")
            }
            let endpoints = configuration.endpoints.count
            if attempts == nil {
                attempts = wasKeyed ? max(2, endpoints) : LarderClient.isRetryable(opcode) ? endpoints : 1
            }
            attempts! -= 1
            do throws(LarderError) {
                let answer = try await connection.call(
                    opcode, json: json, binary: binary, timeout: timeout ?? configuration.requestTimeout,
                    progress: progress, enqueued: enqueued)
                if LarderClient.carriesSeq(opcode), let (_, seq) = SeqMember.trailing(answer.json) { advanceSeq(to: seq) }
                return answer
            } catch {
                guard attempts! > 0, error.status == .unavailable, error.details["sent"] != nil else { throw error }
            }
        }
    }

    /// The writes that carry a request key (Protocol.md section 5.10) when the server announces
    /// `requestKeyRetentionMs`.
    static func takesRequestKey(_ opcode: Opcode) -> Bool {
        switch opcode {
        case .create, .replace, .patch, .delete, .blobPut, .blobDelete, .blobUploadFinish: true
        default: false
        }
    }

    /// A request's compact JSON object with `"requestKey": key` added as its last member.
    static func keyed(_ json: [UInt8], _ key: UUID) -> [UInt8] {
        guard let end = json.lastIndex(of: UInt8(ascii: "}")) else { return json }
        var out = Array(json[..<end])
        out.reserveCapacity(json.count + 52)
        let isEmpty = out.last == UInt8(ascii: "{")
        out.append(contentsOf: (isEmpty ? #""requestKey":""# : #","requestKey":""#).utf8)
        out.append(contentsOf: key.wireString.utf8)
        out.append(contentsOf: #""}"#.utf8)
        return out
    }

    func message<M: WireMessage>(
        _ type: M.Type, _ opcode: Opcode, _ json: JSONObject, binary: [UInt8] = []
    ) async throws(LarderError) -> M {
        try M(json: try await call(opcode, json, binary: binary).jsonObject())
    }

    // MARK: - Server

    /// Sends PING and returns the round-trip time.
    ///
    /// - Throws: `UNAVAILABLE` or `DEADLINE_EXCEEDED` as any request (PING needs no role).
    @discardableResult
    public func ping() async throws(LarderError) -> Duration {
        _ = try await connection()
        let clock = ContinuousClock()
        let start = clock.now
        _ = try await call(.ping, jsonBytes: [])
        return clock.now - start
    }

    /// The server's statistics (uptime, connections, requests, latencies, counts; see Protocol.md, STATS).
    ///
    /// - Throws: `PERMISSION_DENIED` for a token that is not `admin`; and `UNAVAILABLE` or `DEADLINE_EXCEEDED` as
    ///   any request.
    public func stats() async throws(LarderError) -> JSONObject {
        try await call(.stats, [:]).jsonObject()
    }

    /// What the server announced in HELLO on the connection most recently opened, connecting if none is open.
    ///
    /// - Throws: what `connect()` throws, when it has to connect.
    public func serverHello() async throws(LarderError) -> HelloResponse {
        try await connect()
    }
}

extension LarderError {
    /// True when the client could not reach the server at all (the CLI exits 2); nothing was sent.
    public var isConnectFailure: Bool { details["reason"] == "connect" }
}
