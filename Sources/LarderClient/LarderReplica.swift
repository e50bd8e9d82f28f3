import Foundation
import LarderSync
import LarderWire

/// A local copy of chosen collections in a SQLite file the app names, for apps that keep working offline: reads are
/// answered from the file, writes are applied to it at once and sent to the server when one is reachable, and the
/// server's changes flow into it.
///
/// ```swift
/// let replica = try LarderReplica(path: folder.appending(path: "todos.sqlite").path, client: client)
/// let todos = replica.collection("todos", of: Todo.self, conflicts: .clientWins)
/// replica.start()
/// let milk = try todos.create(Todo(title: "Buy milk", isFinish: false))   // at once, online or not
/// try todos.update(milk) { $0.isFinish = true }
/// let open = try todos.search(Field("isFinish") == false, sortedBy: [Field("title").ascending])
/// ```
///
/// - **Reads** (`ReplicaCollection.get`, `all`, `search`, `count`, `group`) answer from the file with the server's
///   semantics: the same filter evaluator, substring search, sort order and keyset cursors as SEARCH (sorts under a
///   collation are the server's alone).
/// - **Writes** (`create`, `replace`, `update`, `patch`, `delete`) change the file and join an ordered outbox in
///   the same transaction, each with its request key and the revision it was made over. The outbox drains in order
///   whenever a server is reachable, each write applied once however often it is sent (Protocol.md section 5.10),
///   retried with back-off for as long as it takes; only a definitive refusal (`INVALID_ARGUMENT`,
///   `PERMISSION_DENIED`, `PAYLOAD_TOO_LARGE`...) drops a write, which `refusals()` reports.
/// - **Changes from the server** arrive through WATCH from the last change applied, saved in the same transaction
///   as the change. The first start subscribes, reads the collection by pages, then applies what arrived meanwhile;
///   a `resync` (the replica was away longer than the server's change log reaches) reads it by pages again.
/// - **Conflicts**: a queued write whose revision is no longer the server's gets its collection's `ConflictPolicy`,
///   and every conflict is reported on `conflicts()`.
///
/// - **One user's file**: the file holds the records of the user the client was signed in as when it first reached
///   a server (or, with `init(path:client:user:)`, the user named), and from then on the replica sends and fetches
///   nothing through a connection signed in as anyone else: while another user is signed in, it stays offline and its
///   outbox waits. A file whose writes were queued before it reached a server is taken by a signed-in user only when
///   `init(path:client:user:)` names them. Open a file per user, and at sign-out, when the phone may be shared,
///   close the user's replica (`await replica.closed()`) and remove its file (`LarderReplica.remove(path:)`).
///
/// A replica needs servers that announce request keys in HELLO (every server of this version does).
public final class LarderReplica: Sendable {
    /// Whether the replica is in touch with a server.
    public enum State: String, Sendable, Equatable {
        /// No server answered the last request: reads and writes are local, the outbox waits.
        case offline
        /// A server answers, and the replica is loading a collection or sending queued writes.
        case syncing
        /// A server answers, every collection is loaded and no write waits.
        case online
    }

    /// The replica's state and how many writes wait in its outbox, for the UI.
    public struct Status: Sendable, Equatable {
        /// Whether the replica is in touch with a server.
        public var state: State
        /// Local writes not yet applied by the server.
        public var pendingWrites: Int
    }

    /// How the replica retries and checks the network.
    public struct Configuration: Sendable {
        /// The first wait before a failed request is tried again; each failure in a row doubles it.
        public var retryDelay: Duration
        /// The longest wait between tries.
        public var maxRetryDelay: Duration
        /// How often an idle replica checks that a server answers (a PING), to tell offline from online.
        public var probeInterval: Duration
        /// Records per LIST page when a collection is loaded.
        public var pageSize: Int
        /// The most bytes of photos and thumbnails read from the server (or uploaded) kept in the replica's folder;
        /// past it the least recently used go. Photos waiting to be uploaded are kept whatever their size.
        public var photoCacheBytes: Int

        /// The defaults: retries from 0.1 s doubling up to 5 s, a check every 5 s, pages of 500 records, 256 MiB of
        /// photos.
        public init(
            retryDelay: Duration = .milliseconds(100), maxRetryDelay: Duration = .seconds(5),
            probeInterval: Duration = .seconds(5), pageSize: Int = 500, photoCacheBytes: Int = 256 << 20
        ) {
            self.retryDelay = retryDelay
            self.maxRetryDelay = maxRetryDelay
            self.probeInterval = probeInterval
            self.pageSize = pageSize
            self.photoCacheBytes = photoCacheBytes
        }
    }

    /// What decides a conflict, made from a collection's `ConflictPolicy`.
    typealias Resolver = @Sendable (_ server: Record?, _ local: JSONObject?) -> ConflictResolution

    private struct Shared: Sendable {
        var resolvers: [String: Resolver] = [:]
        var feeds: [String: Task<Void, Never>] = [:]
        var loaded: Set<String> = []
        var reachable = false
        var started = false
        var closed = false
        var drain: Task<Void, Never>?
        var observers: [String: [UUID: @Sendable () -> Void]] = [:]
        var status = Status(state: .offline, pendingWrites: 0)
        var closers: [@Sendable () -> Void] = []
        /// What `close()` stopped: `closed()` waits for it to end.
        var stopping: [Task<Void, Never>] = []
        /// The last request or file operation that failed, and how: what `synchronize` reports when it gives up.
        var lastFailure: String?
        /// The file's user once known (`admit`): `.some(nil)` for a file without one.
        var owner: String??
    }

    /// The client the replica reaches servers through.
    public let client: LarderClient
    /// How the replica retries and checks the network.
    public let configuration: Configuration
    /// The replica's file.
    public let path: String
    let store: ReplicaStore
    private let state = Locked(Shared())
    private let wake = ReplicaSignal()
    /// Held through each status update (`updateStatus`).
    private let statusLock = Lock()
    private let statusFeed = Broadcast<Status>()
    private let conflictFeed = Broadcast<ReplicaConflict>()
    private let refusalFeed = Broadcast<ReplicaRefusal>()

    /// Opens the replica in the SQLite file at `path` (made when missing), reaching servers through `client`.
    /// Nothing is sent until `start()`.
    ///
    /// - Throws: `INVALID_ARGUMENT` naming the path when it cannot be opened as a SQLite file, or naming `pageSize`
    ///   when it is outside 1...1000.
    public init(path: String, client: LarderClient, configuration: Configuration = Configuration()) throws(LarderError) {
        guard (1...SearchQuery.maxLimit).contains(configuration.pageSize) else {
            throw LarderError(
                .invalidArgument, "pageSize is the records of one LIST page: from 1 to \(SearchQuery.maxLimit)",
                field: "pageSize")
        }
        self.path = path
        self.client = client
        self.configuration = configuration
        store = try ReplicaStore(path: path)
        let pending = try store.pendingCount()
        state.withLock { $0.status.pendingWrites = pending }
    }

    /// Opens user `user`'s replica in the SQLite file at `path` (made when missing, and then `user`'s), as
    /// `init(path:client:configuration:)` does. The replica syncs only through connections signed in as `user`
    /// (`LarderClient.user`, or `AccountSession.user.id`).
    ///
    /// ```swift
    /// let session = try await client.signIn(email: email, password: password)
    /// let file = folder + "/todos-" + session.user.id.replacingOccurrences(of: "/", with: "_") + ".sqlite"
    /// let replica = try LarderReplica(path: file, client: client, user: session.user.id)
    /// ```
    ///
    /// - Throws: `PERMISSION_DENIED` when the file holds another user's records (or records read without a user),
    ///   and the errors of `init(path:client:configuration:)`.
    public convenience init(
        path: String, client: LarderClient, user: String, configuration: Configuration = Configuration()
    ) throws(LarderError) {
        try self.init(path: path, client: client, configuration: configuration)
        let owner = try store.bindOwner(user)
        state.withLock { $0.owner = .some(owner) }
        guard owner == user else {
            throw LarderError(
                .permissionDenied,
                "the replica file \(path) holds another user's records; open a file of this user's, or remove that "
                    + "one with LarderReplica.remove(path:) first", field: "path")
        }
    }

    /// Removes the replica file at `path` with its journal and its photos; nothing when there is none. An app calls
    /// it at sign-out, so that the next user of the phone finds nothing of the last one's. A replica open on the file
    /// must be closed first with `closed()` (or be released).
    ///
    /// - Throws: `INVALID_ARGUMENT` naming the path while a replica in this process holds the file open, or naming
    ///   the file that could not be removed.
    public static func remove(path: String) throws(LarderError) {
        guard !OpenReplicaFiles.isOpen(path) else {
            throw LarderError(
                .invalidArgument,
                "a replica is still open on \(path): await its closed() before removing the file", field: "path")
        }
        for name in [path, path + "-wal", path + "-shm", path + "-journal", path + ".photos"]
        where FileManager.default.fileExists(atPath: name) {
            do {
                try FileManager.default.removeItem(atPath: name)
            } catch {
                throw LarderError(
                    .invalidArgument, "cannot remove \(name): \(error.localizedDescription)", field: "path")
            }
        }
    }

    /// The user whose records the file holds: nil until the replica first reaches a server (or for a file of a
    /// client without a user), else the user's id.
    ///
    /// - Throws: `INTERNAL` when the replica's file fails.
    public func user() throws(LarderError) -> String? {
        try store.owner() ?? nil
    }

    /// Admits a connection of the replica's syncing, signed in as `user`: the file's user, made so when the file has
    /// none yet.
    private func admit(_ user: String?) throws(LarderError) {
        let owner: String?
        if let known = state.withLock({ $0.owner }) {
            owner = known
        } else {
            // Writes queued before the file knew its user may be another user's: a signed-in user takes the file
            // with them only when the app says whose they are.
            if user != nil, try store.owner() == nil, try store.pendingCount() > 0 {
                throw LarderError(
                    .unauthenticated,
                    "the replica file \(path) holds writes queued before it recorded whose they are: open it with "
                        + "LarderReplica(path:client:user:) naming their user, and they are sent as that user's",
                    details: ["reason": "ownerUnknown"])
            }
            owner = try store.bindOwner(user)
            state.withLock { $0.owner = .some(owner) }
        }
        guard owner == user else {
            throw LarderError(
                .unauthenticated,
                "the replica file \(path) holds another user's records than this client is signed in as: it sends "
                    + "and fetches nothing until that user signs in again (open a replica file per user)",
                details: ["reason": "otherUser"])
        }
    }

    /// Runs `body` with every connection its requests use checked to be signed in as the file's user.
    func asOwner<T>(_ body: () async throws(LarderError) -> T) async throws(LarderError) -> T {
        let check: @Sendable (String?) throws(LarderError) -> Void = { [weak self] user throws(LarderError) in
            guard let self else { throw LarderError(.unavailable, "the replica is closed") }
            try self.admit(user)
        }
        let result = await LarderClient.$connectionCheck.withValue(check) { () async -> Result<T, LarderError> in
            do throws(LarderError) {
                return .success(try await body())
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    deinit { close() }

    /// Typed access to collection `name` in the replica, which the replica then keeps (call it before `start()`, or
    /// any time after, for each collection the app uses). `conflicts` decides what a queued write whose revision is
    /// no longer the server's becomes.
    public func collection<Model: Codable & Sendable>(
        _ name: String, of type: Model.Type = Model.self, conflicts: ConflictPolicy<Model> = .serverWins
    ) -> ReplicaCollection<Model> {
        let resolver = conflicts.resolver
        let follow = state.withLock { state -> Bool in
            state.resolvers[name] = resolver
            return state.started && !state.closed && state.feeds[name] == nil
        }
        if follow { startFeed(name) }
        return ReplicaCollection(name: name, replica: self)
    }

    /// Starts syncing: the outbox drains and each collection follows the server's changes, from now until
    /// `close()`, through every loss of the network.
    public func start() {
        let names = state.withLock { state -> [String]? in
            guard !state.started, !state.closed else { return nil }
            state.started = true
            return Array(state.resolvers.keys)
        }
        guard let names else { return }
        let drain = Task { [weak self] in
            guard let self else { return }
            _ = try? await self.asOwner { () async throws(LarderError) in await self.drainLoop() }
        }
        state.withLock { $0.drain = drain }
        for name in names { startFeed(name) }
    }

    /// Stops syncing and ends the replica's sequences; the file keeps the records and the outbox for the next
    /// start.
    public func close() {
        let tasks = state.withLock { state -> [Task<Void, Never>] in
            state.closed = true
            defer {
                state.feeds = [:]
                state.drain = nil
            }
            state.stopping += Array(state.feeds.values) + (state.drain.map { [$0] } ?? [])
            return state.stopping
        }
        let closers = state.withLock { state in
            defer { state.closers = [] }
            return state.closers
        }
        for task in tasks { task.cancel() }
        for closer in closers { closer() }
        wake.fire()
        statusFeed.finish()
        conflictFeed.finish()
        refusalFeed.finish()
    }

    /// Closes the replica (`close()`) and returns once its syncing has stopped and its file is closed: nothing of
    /// this replica touches the file after it, and `remove(path:)` may remove it. Calls on the replica then throw
    /// UNAVAILABLE.
    ///
    /// ```swift
    /// await replica.closed()
    /// try LarderReplica.remove(path: replica.path)
    /// ```
    public func closed() async {
        close()
        for task in state.withLock({ $0.stopping }) { await task.value }
        store.close()
    }

    /// The replica's state and pending writes now.
    public var status: Status { state.withLock { $0.status } }

    /// The replica's status now and at each change, until `close()`.
    public func statusUpdates() -> AsyncStream<Status> { statusFeed.stream(first: status) }

    /// Every conflict from now on, whatever the policy decided, until `close()`.
    public func conflicts() -> AsyncStream<ReplicaConflict> { conflictFeed.stream(first: nil) }

    /// Every queued write a server refused for good from now on (the write is dropped and the record shows the
    /// server's version again), until `close()`.
    public func refusals() -> AsyncStream<ReplicaRefusal> { refusalFeed.stream(first: nil) }

    /// Waits until a server answers, every collection is loaded and no write waits in the outbox (the server's later
    /// changes keep arriving by themselves).
    ///
    /// - Throws: `DEADLINE_EXCEEDED` after `timeout`, saying what was still waiting and the last failure seen;
    ///   `UNAVAILABLE` when the replica is closed.
    public func synchronize(timeout: Duration = .seconds(120)) async throws(LarderError) {
        let deadline = ContinuousClock.now + timeout
        wake.fire()
        while true {
            if state.withLock({ $0.closed }) {
                throw LarderError(.unavailable, "the replica is closed; open it again to synchronize")
            }
            // Checked once more after the deadline: a process suspended past it may have synchronized meanwhile.
            if status.state == .online { return }
            if ContinuousClock.now >= deadline { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        throw LarderError(.deadlineExceeded, "the replica did not synchronize within \(timeout): \(waitingFor())")
    }

    /// What keeps the replica from being online, for `synchronize`'s error.
    private func waitingFor() -> String {
        let (status, unloaded, failure) = state.withLock { state in
            (state.status, state.resolvers.keys.filter { !state.loaded.contains($0) }.sorted(), state.lastFailure)
        }
        var parts = [status.state == .offline ? "no server answers" : "it is \(status.state.rawValue)"]
        if status.pendingWrites > 0 {
            parts.append(status.pendingWrites == 1 ? "1 write waits in its outbox" : "\(status.pendingWrites) writes wait in its outbox")
        }
        if !unloaded.isEmpty { parts.append("not loaded yet: \(unloaded.joined(separator: ", "))") }
        parts.append(failure.map { "the last failure: \($0)" } ?? "no request failed")
        return parts.joined(separator: "; ")
    }

    /// Keeps what failed for `synchronize`'s error.
    private func failed(_ what: String, _ error: LarderError) {
        state.withLock { $0.lastFailure = "\(what): \(error)" }
    }

    // MARK: Notifications

    /// Runs `body` when the replica closes (at once when it is closed).
    func onClose(_ body: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if !state.closed { state.closers.append(body) }
            return state.closed
        }
        if now { body() }
    }

    /// Runs `rerun` after every change to `collection`'s records until the returned token is removed.
    func observe(_ collection: String, _ rerun: @escaping @Sendable () -> Void) -> UUID {
        let token = UUID()
        state.withLock { $0.observers[collection, default: [:]][token] = rerun }
        return token
    }

    func stopObserving(_ collection: String, _ token: UUID) {
        state.withLock { _ = $0.observers[collection]?.removeValue(forKey: token) }
    }

    /// After a change to `collection`'s records: its observers rerun, and the status is brought up to date.
    func changed(_ collection: String) {
        let observers = state.withLock { Array(($0.observers[collection] ?? [:]).values) }
        for observer in observers { observer() }
        updateStatus()
    }

    /// Reports a write refused for good.
    func refused(_ refusal: ReplicaRefusal) { refusalFeed.send(refusal) }

    /// A local write went into the outbox: the drain is woken.
    func queued(_ collection: String) {
        changed(collection)
        wake.fire()
    }

    private func updateStatus(reachable: Bool? = nil) {
        // One update at a time, from the count to the status it makes: a count read before another update's must not
        // be stored after it.
        statusLock.lock()
        defer { statusLock.unlock() }
        let pending = (try? store.pendingCount()) ?? 0
        let changed = state.withLock { state -> Status? in
            if let reachable { state.reachable = reachable }
            let allLoaded = state.resolvers.keys.allSatisfy { state.loaded.contains($0) }
            let new = Status(
                state: !state.reachable ? .offline : (pending > 0 || !allLoaded) ? .syncing : .online,
                pendingWrites: pending)
            guard new != state.status else { return nil }
            state.status = new
            return new
        }
        if let changed { statusFeed.send(changed) }
    }

    private var retryDelay: Duration { configuration.retryDelay }

    private func nextDelay(_ delay: Duration) -> Duration { min(delay * 2, configuration.maxRetryDelay) }

    private var isClosed: Bool { state.withLock { $0.closed } || Task.isCancelled }

    /// A request failed for a reason that trying again may mend: the network, a server going away, a deadline, a
    /// limit, a failure inside the server.
    static func isTransient(_ error: LarderError) -> Bool {
        [.unavailable, .deadlineExceeded, .resourceExhausted, .internal, .unauthenticated, .protocolError]
            .contains(error.status)
    }

    // MARK: The outbox's drain

    private func drainLoop() async {
        var delay = retryDelay
        while !isClosed {
            let write: OutboxWrite?
            do throws(LarderError) {
                write = try store.firstWrite()
            } catch {
                failed("reading the outbox", error)
                await wake.wait(upTo: configuration.maxRetryDelay)
                continue
            }
            guard let write else {
                // Idle: a check that a server answers, then a wait for a write or the next check.
                do throws(LarderError) {
                    _ = try await client.ping()
                    updateStatus(reachable: true)
                } catch {
                    failed("a PING", error)
                    updateStatus(reachable: false)
                }
                await wake.wait(upTo: configuration.probeInterval)
                continue
            }
            do throws(LarderError) {
                try await send(write)
                delay = retryDelay
            } catch where LarderReplica.isTransient(error) {
                failed("sending a queued \(write.operation.rawValue) of \(write.collection)", error)
                updateStatus(reachable: false)
                await wake.sleep(delay)
                delay = nextDelay(delay)
            } catch {
                // The file failed: wait, then read the outbox again.
                failed("settling a queued \(write.operation.rawValue) of \(write.collection)", error)
                await wake.sleep(delay)
                delay = nextDelay(delay)
            }
        }
    }

    /// Sends one queued write and settles it: applied, a conflict decided by the policy, or refused for good.
    private func send(_ write: OutboxWrite) async throws(LarderError) {
        let request: (Opcode, JSONObject)
        switch write.operation {
        case .photo:
            return try await sendPhoto(write)
        case .create:
            request = (.create, CreateRequest(collection: write.collection, id: write.id, data: write.body ?? [:]).json)
        case .replace:
            request = (
                .replace,
                ReplaceRequest(collection: write.collection, id: write.id, data: write.body ?? [:], rev: write.baseRev)
                    .json
            )
        case .patch:
            request = (
                .patch,
                PatchRequest(collection: write.collection, id: write.id, patch: write.body ?? [:], rev: write.baseRev)
                    .json
            )
        case .delete:
            request = (.delete, DeleteRequest(collection: write.collection, id: write.id, rev: write.baseRev).json)
        }
        do throws(LarderError) {
            let frame = try await client.call(request.0, jsonBytes: request.1.bytes, requestKey: write.requestKey)
            updateStatus(reachable: true)
            let answer = write.operation == .delete ? nil : try Record(json: try frame.jsonObject())
            try store.acknowledge(write, answer: answer)
            changed(write.collection)
        } catch where error.status == .notFound && write.operation == .delete {
            updateStatus(reachable: true)
            try store.acknowledge(write, answer: nil)
            changed(write.collection)
        } catch where error.status == .conflict || error.status == .notFound {
            updateStatus(reachable: true)
            try await resolve(write)
        } catch where !LarderReplica.isTransient(error) && error.status != .internal {
            updateStatus(reachable: true)
            try store.discardWrites(write.collection, write.id, server: .keep)
            changed(write.collection)
            refused(
                ReplicaRefusal(collection: write.collection, id: write.id, operation: write.operation, error: error))
        }
    }

    /// A queued write whose revision is no longer the server's (or whose record the server no longer has): the
    /// server's current version is read, the collection's policy decides, and the conflict is reported.
    private func resolve(_ write: OutboxWrite) async throws(LarderError) {
        let current: Record?
        do throws(LarderError) {
            current = try await client.get(write.collection, id: write.id)
        } catch where error.status == .notFound {
            current = nil
        }
        let local = try store.record(write.collection, write.id)?.item.data
        let resolver = state.withLock { $0.resolvers[write.collection] } ?? { _, _ in .keptServer }
        let resolution = resolver(current, local)
        switch resolution {
        case .keptServer:
            try store.discardWrites(write.collection, write.id, server: current.map { .record($0) } ?? .none)
        case .keptLocal:
            switch (write.operation, current) {
            case (.delete, nil):
                try store.discardWrites(write.collection, write.id, server: .none)
            case (.delete, let current?):
                try store.rewrite(write, .delete, nil, baseRev: current.rev, server: current)
            case (_, nil):
                // Deleted on the server: the record as the replica shows it is created again.
                try store.foldLaterWrites(write)
                try store.rewrite(write, .create, local ?? write.body, baseRev: nil, server: nil)
            case (.create, let current?):
                try store.rewrite(write, .replace, write.body, baseRev: current.rev, server: current)
            case (let operation, let current?):
                try store.rewrite(write, operation, write.body, baseRev: current.rev, server: current)
            }
        case .merged(let data):
            try store.foldLaterWrites(write)
            if let data {
                try store.rewrite(
                    write, current == nil ? .create : .replace, data, baseRev: current?.rev, server: current)
            } else if let current {
                try store.rewrite(write, .delete, nil, baseRev: current.rev, server: current)
            } else {
                try store.discardWrites(write.collection, write.id, server: .none)
            }
        }
        changed(write.collection)
        conflictFeed.send(
            ReplicaConflict(
                collection: write.collection, id: write.id, operation: write.operation, server: current,
                local: local, resolution: resolution))
    }

    // MARK: Following the server

    private func startFeed(_ name: String) {
        let task = Task { [weak self] in
            guard let self else { return }
            _ = try? await self.asOwner { () async throws(LarderError) in await self.follow(name) }
        }
        let kept = state.withLock { state -> Bool in
            guard !state.closed, state.feeds[name] == nil else { return false }
            state.feeds[name] = task
            return true
        }
        if kept == false { task.cancel() }
    }

    /// Follows one collection's changes for as long as the replica is open: WATCH from the last change applied (the
    /// first time, or after a `resync`, a load by pages), each change applied with its sequence number.
    private func follow(_ collection: String) async {
        var delay = retryDelay
        while !isClosed {
            do throws(LarderError) {
                let last = try store.feed(collection).lastSeq
                let subscription = try await client.watch(collection: collection, since: last)
                defer { subscription.cancel() }
                updateStatus(reachable: true)
                if last == nil { try await load(collection, through: subscription.startSeq) }
                markLoaded(collection)
                delay = retryDelay
                var events = subscription.makeAsyncIterator()
                while let event = try await events.next() {
                    switch event.kind {
                    case .create, .replace, .patch:
                        try store.applyChange(
                            collection, seq: event.seq, record: event.record, deleted: nil, dropped: false)
                    case .delete:
                        let deleted = event.id.map { ($0, event.rev ?? Int64.max) }
                        try store.applyChange(collection, seq: event.seq, record: nil, deleted: deleted, dropped: false)
                    case .drop:
                        try store.applyChange(collection, seq: event.seq, record: nil, deleted: nil, dropped: true)
                    case .resync:
                        try await load(collection, through: event.seq)
                    default:
                        try store.applyChange(collection, seq: event.seq, record: nil, deleted: nil, dropped: false)
                    }
                    changed(collection)
                }
            } catch {
                if isClosed { return }
                failed("following \(collection)", error)
                if LarderReplica.isTransient(error) { updateStatus(reachable: false) }
                await wake.sleep(delay)
                delay = nextDelay(delay)
            }
        }
    }

    private func markLoaded(_ collection: String) {
        state.withLock { _ = $0.loaded.insert(collection) }
        updateStatus()
    }

    /// Reads `collection` by pages into the file, then goes on after `seq` (a WATCH's start, or a `resync`'s).
    private func load(_ collection: String, through seq: Int64) async throws(LarderError) {
        state.withLock { _ = $0.loaded.remove(collection) }
        updateStatus()
        let generation = try store.beginLoad(collection)
        var cursor: String?
        repeat {
            let page = try await client.list(collection, limit: configuration.pageSize, cursor: cursor)
            try store.applyPage(collection, page.records)
            changed(collection)
            cursor = page.nextCursor
        } while cursor != nil
        try store.finishLoad(collection, generation: generation, seq: seq)
        changed(collection)
    }
}

/// What a collection's queued writes become when the server's version moved on since they were made.
///
/// ```swift
/// let todos = replica.collection("todos", of: Todo.self, conflicts: .merge { server, local in
///     guard var merged = server?.value else { return local }
///     merged.isFinish = merged.isFinish || (local?.isFinish ?? false)   // a tick on either side stays
///     return merged
/// })
/// ```
public struct ConflictPolicy<Model: Codable & Sendable>: Sendable {
    let resolver: LarderReplica.Resolver

    /// The server's version stays: the queued writes of the record are dropped.
    public static var serverWins: ConflictPolicy {
        ConflictPolicy { _, _ in .keptServer }
    }

    /// The local writes are applied again over the server's current revision (a delete deletes it; a record the
    /// server deleted is created again as the replica shows it).
    public static var clientWins: ConflictPolicy {
        ConflictPolicy { _, _ in .keptLocal }
    }

    /// `merge` is given the server's current version (nil when the server deleted the record) and the local one
    /// (nil when it was deleted locally) and answers the value to write over the server's revision, or nil to delete
    /// the record. A version that does not decode as `Model` leaves the server's version in place.
    public static func merge(
        _ merge: @escaping @Sendable (_ server: Stored<Model>?, _ local: Model?) -> Model?
    ) -> ConflictPolicy {
        ConflictPolicy { server, local in
            do throws(LarderError) {
                let serverValue = try server.map { record throws(LarderError) in try Stored<Model>(record) }
                let localValue = try local.map { data throws(LarderError) in
                    try ModelCoding.decode(Model.self, from: data)
                }
                return .merged(try merge(serverValue, localValue).map { value throws(LarderError) in
                    try ModelCoding.encode(value)
                })
            } catch {
                return .keptServer
            }
        }
    }

    init(_ resolver: @escaping LarderReplica.Resolver) { self.resolver = resolver }
}

/// What a conflict's policy decided.
public enum ConflictResolution: Sendable, Equatable {
    /// The server's version stayed; the local writes were dropped.
    case keptServer
    /// The local writes were sent again over the server's current revision.
    case keptLocal
    /// The merge closure's value was written over the server's revision (nil: the record was deleted).
    case merged(JSONObject?)
}

/// A queued write that met a newer server version, as `LarderReplica.conflicts()` reports it.
public struct ReplicaConflict: Sendable {
    /// The record's collection.
    public var collection: String
    /// The record's id.
    public var id: UUID
    /// The queued write that met the conflict.
    public var operation: ReplicaOperation
    /// The server's version when the conflict was met; nil when the server had deleted the record.
    public var server: Record?
    /// The record as the replica showed it (every queued write applied); nil when it was deleted locally.
    public var local: JSONObject?
    /// What the collection's policy decided.
    public var resolution: ConflictResolution

    /// The server's version as a typed value; nil when the server had deleted the record.
    ///
    /// - Throws: `DECODING_FAILED` when it does not decode as `Model`.
    public func serverVersion<Model: Codable & Sendable>(as type: Model.Type = Model.self) throws(LarderError)
        -> Stored<Model>?
    {
        try server.map { record throws(LarderError) in try Stored<Model>(record) }
    }

    /// The local version as a typed value; nil when it was deleted locally.
    ///
    /// - Throws: `DECODING_FAILED` when it does not decode as `Model`.
    public func localVersion<Model: Codable & Sendable>(as type: Model.Type = Model.self) throws(LarderError) -> Model? {
        try local.map { data throws(LarderError) in try ModelCoding.decode(Model.self, from: data, id: id) }
    }
}

/// A queued write a server refused for good, as `LarderReplica.refusals()` reports it: the write and the record's
/// later queued writes were dropped, and the record shows the server's version again.
public struct ReplicaRefusal: Sendable {
    /// The record's collection.
    public var collection: String
    /// The record's id.
    public var id: UUID
    /// The refused write.
    public var operation: ReplicaOperation
    /// The server's answer (`INVALID_ARGUMENT`, `PERMISSION_DENIED`, `PAYLOAD_TOO_LARGE`...).
    public var error: LarderError
}

/// A wake-up for the replica's loops: `fire` ends the current or the next `wait`.
final class ReplicaSignal: Sendable {
    private let state = Locked<(fired: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func fire() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            if state.waiter == nil { state.fired = true }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns at `fire`, or after `duration`.
    func wait(upTo duration: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                if (try? await Task.sleep(for: duration)) != nil || Task.isCancelled { fire() }
            }
            group.addTask { [self] in await fired() }
            await group.next()
            group.cancelAll()
            fire()
            await group.waitForAll()
            state.withLock { $0.fired = false }
        }
    }

    /// Waits `duration` (a retry's back-off); ends early only when the task is cancelled.
    func sleep(_ duration: Duration) async {
        try? await Task.sleep(for: duration)
    }

    private func fired() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.fired {
                    state.fired = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// Hands each value to every stream made by `stream(first:)` until `finish()`.
final class Broadcast<Value: Sendable>: Sendable {
    private let state = Locked<(streams: [UUID: AsyncStream<Value>.Continuation], finished: Bool)>(([:], false))

    func stream(first: Value?) -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream<Value>.makeStream()
        let id = UUID()
        let finished = state.withLock { state -> Bool in
            if !state.finished { state.streams[id] = continuation }
            return state.finished
        }
        if let first { continuation.yield(first) }
        if finished { continuation.finish() }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.streams.removeValue(forKey: id) } }
        return stream
    }

    func send(_ value: Value) {
        for continuation in state.withLock({ Array($0.streams.values) }) { continuation.yield(value) }
    }

    func finish() {
        let all = state.withLock { state -> [AsyncStream<Value>.Continuation] in
            state.finished = true
            defer { state.streams = [:] }
            return Array(state.streams.values)
        }
        for continuation in all { continuation.finish() }
    }
}
