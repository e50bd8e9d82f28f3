#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderStore
import LarderSync
import LarderTLS
import LarderWire
import LarderEventLoop
import LarderIO

/// The Larder server: listens on TCP (and optionally a Unix socket), speaks the Larder protocol, and serves a store.
///
/// Usable in-process: `start()` binds (port 0 picks a free port) and returns the bound port; `shutdown()` stops
/// accepting, answers new requests with UNAVAILABLE, finishes requests in flight, closes connections and the store.
public final class LarderServer: Sendable {
    /// The software version announced in HELLO and printed at start.
    public static let version = LarderVersion.string
    public static var serverName: String { "larder-server \(version)" }

    public let configuration: ServerConfiguration
    let context: ServerContext
    private let store: Router.Store
    let shards: [Shard]
    private let hub: WatchHub
    let acceptQueue = DispatchQueue(label: "larder.accept")
    /// The tokens HELLO accepts (nil: none required); replaced on SIGHUP (`reload`).
    let tokens: Tokens?
    /// The identity providers whose ID tokens HELLO accepts (nil: none); their keys are read again on SIGHUP.
    let identityProviders: IdentityProviders?
    /// The TLS context for new connections (nil without TLS, or when it failed to load); replaced on SIGHUP.
    let tlsContexts: TLSContexts?
    let state = Locked(State())

    struct State {
        var started = false
        var stopped = false
        var listeners: [ListenerBox] = []
        var nextShard = 0
        var nextConnectionID = 0
        var boundPort: Int?
        var boundTLSPort: Int?
        var metrics: HTTPServer?
        var console: ConsoleServer?
        var uploadSweeper: UploadSweeper?
    }

    /// A listening descriptor and its accept source (only touched on the accept queue once running).
    final class ListenerBox: @unchecked Sendable {
        let fd: Int32
        let source: any DispatchSourceRead
        let unixPath: String?
        /// Connections accepted here speak TLS.
        let tls: Bool
        /// Signalled by the cancel handler once the descriptor is closed (and the socket file removed).
        let closed = DispatchSemaphore(value: 0)
        init(fd: Int32, source: any DispatchSourceRead, unixPath: String?, tls: Bool) {
            self.tls = tls
            self.fd = fd
            self.source = source
            self.unixPath = unixPath
        }
    }

    /// Says why `path` cannot be created, in terms of its nearest existing ancestor (Foundation's own error only
    /// says "the operation could not be completed").
    static func whyNotCreatable(_ path: String) -> String {
        var ancestor = (path as NSString).deletingLastPathComponent
        while !ancestor.isEmpty && ancestor != "/" && !FileManager.default.fileExists(atPath: ancestor) {
            ancestor = (ancestor as NSString).deletingLastPathComponent
        }
        if ancestor.isEmpty { ancestor = "." }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: ancestor, isDirectory: &isDirectory), !isDirectory.boolValue {
            return "\(ancestor) is a file, not a directory"
        }
        if access(ancestor, W_OK | X_OK) != 0 { return "no permission to create entries in \(ancestor)" }
        return "the file system refused (is it read-only or full?)"
    }

    /// Opens the store: the PostgreSQL database of `configuration.postgresURL` when set, else SQLite in
    /// `configuration.dataDirectory` (created if missing).
    public convenience init(configuration: ServerConfiguration) throws(LarderError) {
        try self.init(configuration: configuration, hooks: ServerHooks())
    }

    /// As `init(configuration:)`, with a test's `hooks`; it waits at `hooks.start` before it opens the store.
    package convenience init(configuration: ServerConfiguration, hooks: ServerHooks) throws(LarderError) {
        hooks.start?.pass()
        var storeConfiguration = StoreConfiguration(
            dataDirectory: configuration.dataDirectory, synchronous: configuration.synchronous,
            maxDocumentBytes: configuration.limits.maxDocumentBytes, maxBlobBytes: configuration.limits.maxBlobBytes,
            maxPageBytes: Router.pageBudget(maxJSONBytes: configuration.limits.maxJSONBytes),
            changeRetentionEvents: configuration.changeRetentionEvents,
            changeRetentionMs: configuration.changeRetentionMs)
        storeConfiguration.blobChunkBytes = configuration.limits.blobChunkBytes
        storeConfiguration.uploadExpiryMs = Int64(configuration.limits.uploadExpiryMs)
        storeConfiguration.requestKeyRetentionMs = Int64(configuration.limits.requestKeyRetentionMs ?? 86_400_000)
        storeConfiguration.maxUploadBytes = Int64(configuration.limits.maxUploadBytes)
        storeConfiguration.maxUploadsPerOwner = Int64(configuration.limits.maxUploadsPerToken)
        storeConfiguration.maxUploadBytesPerOwner = Int64(configuration.limits.maxUploadBytesPerToken)
        storeConfiguration.schemaLimits = configuration.limits.schema
        if let url = configuration.postgresURL {
            let store = try PostgresStore(
                url: url, configuration: storeConfiguration, timeoutMs: configuration.postgresTimeoutMs)
            if let gate = hooks.follower { store.holdFollower { gate.pass() } }
            self.init(configuration: configuration, store: store, hooks: hooks)
            return
        }
        do throws(LarderError) {
            try PrivateFiles.makeDirectory(configuration.dataDirectory)
        } catch {
            throw LarderError(
                .unavailable, "cannot create the data directory \(configuration.dataDirectory): "
                    + LarderServer.whyNotCreatable(configuration.dataDirectory) + "; choose another --data-dir")
        }
        do throws(ConfigurationError) {
            _ = try LarderServer.tokenTable(configuration)
            _ = try LarderServer.identityProviders(configuration)
            try configuration.passwordAccounts?.validate()
        } catch {
            throw LarderError(.invalidArgument, error.message)
        }
        do throws(TLSError) {
            _ = try LarderServer.tlsContexts(configuration)
        } catch {
            throw LarderError(.invalidArgument, error.message)
        }
        guard access(configuration.dataDirectory, W_OK) == 0 else {
            throw LarderError(.unavailable, "the data directory \(configuration.dataDirectory) is not writable")
        }
        let store = try SQLiteStore(configuration: storeConfiguration)
        self.init(configuration: configuration, store: store, hooks: hooks)
    }

    /// The store in use, for the start-up line: `data DIR`, or `postgres URL` (its password shown as `***`) with the
    /// writer's `synchronous_commit`.
    public var storeDescription: String {
        guard let commit = store.commitDescription else { return configuration.storeDescription }
        return configuration.storeDescription + " (\(commit))"
    }

    /// Serves an already open store (tests, embedding), holding work at the gates of `hooks`.
    package init(
        configuration: ServerConfiguration, store: any DocumentStore & BlobStore, hooks: ServerHooks = ServerHooks()
    ) {
        self.configuration = configuration
        self.store = store
        let now = DispatchTime.now().uptimeNanoseconds
        let stats = ServerStats(now: now)
        let pool = WorkPool(threads: configuration.workThreads, maxWaiting: configuration.maxQueuedWork)
        let router = Router(
            store: store, stats: stats, pool: pool, searchGate: hooks.search,
            serverName: LarderServer.serverName, maxReplyJSONBytes: configuration.limits.maxJSONBytes,
            maxReplyBinaryBytes: configuration.limits.maxBinaryPartBytes,
            thumbnailSizes: configuration.limits.thumbnailSizes,
            maxThumbnailSourcePixels: configuration.limits.maxThumbnailSourcePixels,
            thumbnailThreads: configuration.thumbnailThreads, schemaLimits: configuration.limits.schema,
            accessCacheMs: configuration.passwordAccounts?.limits.accessCacheMs ?? 0)
        let logger = Logger(
            level: configuration.logLevel, format: configuration.logFormat,
            slowMicros: UInt64(configuration.slowMs) * 1000)
        tokens = LarderServer.initialTokens(configuration, logger: logger)
        tlsContexts = LarderServer.initialTLS(configuration, logger: logger)
        identityProviders = LarderServer.initialIdentityProviders(configuration, logger: logger)
        var limits = configuration.limits
        if !configuration.oidcIssuers.isEmpty { limits.oidcLeewayMs = configuration.oidcLeewayMs }
        limits.accounts = configuration.passwordAccounts?.limits
        var machine = ConnectionStateMachine.Configuration(
            limits: limits, compressionThreshold: configuration.compressionThreshold,
            zlibLevel: configuration.zlibLevel, outputHighWaterBytes: configuration.outputHighWaterBytes,
            serverName: LarderServer.serverName, tokens: tokens)
        machine.identityProviders = identityProviders
        let accounts = configuration.passwordAccounts.map { PasswordAccounts(store: store, settings: $0) }
        machine.accounts = accounts
        let backups = BackupService(
            store: store, pool: pool, gate: hooks.backup,
            maxChunkBytes: configuration.limits.maxBinaryPartBytes)
        context = ServerContext(
            router: router, stats: stats, logger: logger, machineConfiguration: machine, accounts: accounts,
            backups: backups)
        let lastChangeSeq = store.lastChangeSeq
        // On a store other servers write too, a cached answer is current as far as this server has applied the
        // shared log: a GET with `afterSeq` waits for that (`Shard.sharedGet`).
        let readCacheBytes = configuration.readCacheBytes
        shards = (0..<max(1, configuration.ioQueues)).map {
            Shard(
                index: $0, configuration: machine, store: store, stats: stats,
                readCacheBytes: readCacheBytes / max(1, configuration.ioQueues), publishedSeq: lastChangeSeq,
                maxInboxChanges: configuration.maxInboxChanges, afterSeqWaitMs: configuration.limits.afterSeqWaitMs ?? 0)
        }
        let hub = WatchHub(shards: shards)
        self.hub = hub
        store.addChangeListener { [weak hub] entries in hub?.publish(entries) }
    }

    /// A server dropped without `shutdown()` (never started, or an embedding that forgot) stops accepting, closes its
    /// connections and ends its loop threads, as `shutdown()` does but without waiting for requests in flight.
    deinit {
        let listeners = state.withLock { s -> [ListenerBox] in
            defer { s.stopped = true }
            return s.stopped ? [] : s.listeners
        }
        closeListeners(listeners)
        state.withLock { $0.metrics }?.stop()
        for shard in shards {
            shard.loop.sync {
                for connection in Array(shard.connections.values) {
                    connection.forceClose(.shutdown)
                    connection.endLinger()
                }
                shard.stopTimer()
            }
            shard.loop.stop()
        }
        context.router.pool.stop()
    }

    /// Binds the listeners and starts accepting. Returns the bound TCP port.
    @discardableResult
    public func start() throws(IOError) -> Int {
        _ = Socket.ignoreSIGPIPE
        let backlog: Int32 = 1024
        let (tcp, port) = try Socket.listenTCP(host: configuration.host, port: configuration.port, backlog: backlog)
        let tlsEverywhere = configuration.tlsCertificate != nil && configuration.tlsPort == nil
        var fds: [(Int32, String?, Bool)] = [(tcp, nil, tlsEverywhere)]
        var tlsPort: Int? = tlsEverywhere ? port : nil
        do throws(IOError) {
            if configuration.tlsCertificate != nil, let extra = configuration.tlsPort {
                let (fd, bound) = try Socket.listenTCP(host: configuration.host, port: extra, backlog: backlog)
                fds.append((fd, nil, true))
                tlsPort = bound
            }
            if let path = configuration.socketPath {
                fds.append((try Socket.listenUnix(path: path, backlog: backlog), path, false))
            }
        } catch {
            for (fd, _, _) in fds { Socket.close(fd) }
            throw error
        }
        if configuration.metricsPort != nil || configuration.consolePort != nil {
            do throws(IOError) {
                if let metricsPort = configuration.metricsPort {
                    let limits = HTTPServer.Limits(
                        connections: configuration.metricsMaxConnections,
                        requestTimeout: .milliseconds(configuration.metricsRequestTimeoutMs))
                    let metrics = try HTTPServer(
                        host: configuration.host, port: metricsPort, limits: limits, handlers: metricsHandlers())
                    state.withLock { $0.metrics = metrics }
                }
                if let consolePort = configuration.consolePort { try startConsole(port: consolePort) }
            } catch {
                state.withLock { $0.metrics }?.stop()
                for (fd, path, _) in fds {
                    Socket.close(fd)
                    if let path { _ = unlink(path) }
                }
                throw error
            }
        }
        startTimers()
        var boxes: [ListenerBox] = []
        for (fd, path, tls) in fds {
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: acceptQueue)
            let box = ListenerBox(fd: fd, source: source, unixPath: path, tls: tls)
            source.setEventHandler { [unowned self] in acceptAll(box) }
            source.setCancelHandler { [closed = box.closed] in
                Socket.close(fd)
                if let path { _ = unlink(path) }
                closed.signal()
            }
            boxes.append(box)
        }
        state.withLock {
            $0.started = true
            $0.listeners = boxes
            $0.boundPort = port
            $0.boundTLSPort = tlsPort
        }
        for box in boxes { box.source.activate() }
        startHousekeeping()
        context.logger.debug("listening on \(addresses(port: port).joined(separator: ", "))")
        return port
    }

    /// Starts what `start()` starts besides its listeners (the connections' timers, the upload sweeper): a server
    /// that serves only the connections handed to `serve(connected:peer:)`.
    package func startWithoutListening() {
        startTimers()
        state.withLock { $0.started = true }
        startHousekeeping()
    }

    /// The shards' timers, which enforce the idle and frame deadlines.
    private func startTimers() {
        let limits = configuration.limits
        let tickMs = max(10, min(1000, min(limits.idleTimeoutMs, limits.frameTimeoutMs) / 4))
        for shard in shards { shard.startTimer(intervalMs: tickMs) }
    }

    /// The upload sweeper, the store's start-up warnings logged, and the log line of each schema warning.
    private func startHousekeeping() {
        startUploadSweeper()
        // Blobs whose file is missing from the data directory: each BLOB_GET of one says so too.
        for warning in store.startupWarnings { context.logger.warn(warning) }
        // One line per write accepted in `warn` mode whose record did not match: where and which keyword, no content.
        store.setSchemaWarningListener { [logger = context.logger] collection, id, violation in
            let place = violation.pointer.isEmpty ? "(the record)" : violation.pointer
            logger.warn(
                "schema warning: \(collection) \(id.wireString) does not match its schema at \(place) (\(violation.keyword))")
        }
    }

    /// Drops abandoned uploads with their bytes, every minute (or every `uploadExpiryMs` when shorter); a
    /// `BLOB_UPLOAD` also drops them before it counts the quota.
    private func startUploadSweeper() {
        let interval = max(1, min(configuration.limits.uploadExpiryMs, 60_000))
        let sweeper = UploadSweeper(intervalMs: interval) { [store, logger = context.logger] in
            do throws(LarderError) {
                let dropped = try store.expireUploads()
                if dropped > 0 { logger.info("dropped \(dropped) abandoned upload(s) and their bytes") }
            } catch {
                logger.warn("dropping abandoned uploads failed: \(error)")
            }
        }
        state.withLock { $0.uploadSweeper = sweeper }
    }

    /// The bound TCP port once started.
    public var port: Int? { state.withLock { $0.boundPort } }

    /// The port that speaks TLS once started: `port` itself unless `--tls-port` asked for another.
    public var tlsPort: Int? { state.withLock { $0.boundTLSPort } }

    /// The bound port of the web console once started, when `consolePort` was set.
    public var consolePort: Int? { state.withLock { $0.console?.port } }

    /// Starts `--console-port`: its WebSockets are admitted as connections on the shards, like accepted ones.
    private func startConsole(port: Int) throws(IOError) {
        let directory = configuration.consoleDirectory ?? ConsoleServer.besideExecutable
        let files = try ConsoleServer.load(directory)
        let maxFrameBytes = configuration.limits.maxFrameBytes
        // With TLS on, the console speaks HTTPS with the server's certificate (as read at start).
        var tls: (certificate: String, key: String)?
        if let certificate = configuration.tlsCertificate, let key = configuration.tlsKey {
            guard let certificateText = try? String(contentsOfFile: certificate, encoding: .utf8),
                let keyText = try? String(contentsOfFile: key, encoding: .utf8)
            else { throw IOError("--console-port: the TLS certificate or key cannot be read", errno: EACCES) }
            tls = (certificateText, keyText)
        }
        let console = try ConsoleServer(
            host: configuration.host, port: port, files: files, origins: configuration.consoleOrigins,
            maxConnections: configuration.limits.maxConnections,
            requestTimeout: .milliseconds(configuration.consoleRequestTimeoutMs), tls: tls
        ) { [weak self] early, fd, release in
            guard let self else { return release() }
            let transport = WebSocketTransport(maxFrameBytes: maxFrameBytes, early: early, release: release)
            admit(fd, peer: "ws:" + Socket.peerName(fd), tls: false, websocket: transport)
        }
        state.withLock { $0.console = console }
    }

    /// The bound port of `/metrics` and `/healthz` once started, when `metricsPort` was set.
    public var metricsPort: Int? { state.withLock { $0.metrics?.port } }

    /// Why `/healthz` answers 503 now, or nil: shutting down, or the store not answering a read.
    public var unhealthyReason: String? {
        if state.withLock({ $0.stopped }) { return "the server is shutting down" }
        do throws(LarderError) {
            // A point read through the store's protocol, so it works for every store: NOT_FOUND is an answer.
            _ = try store.get("larder_healthz", id: UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
        } catch where error.status == .notFound {
        } catch {
            return "the store does not answer (\(error.status.name)): \(error.message)"
        }
        return nil
    }

    private func metricsHandlers() -> HTTPServer.Handlers {
        HTTPServer.Handlers(
            metrics: { [weak self] in
                guard let self else { return "" }
                let storeStats = try? store.stats()
                let lag = shards.reduce(0) { $0 + $1.pendingChanges }
                return context.stats.prometheus(
                    now: DispatchTime.now().uptimeNanoseconds, store: storeStats, watchLagChanges: lag,
                    pool: context.router.pool.snapshot, version: LarderServer.version,
                    schemaWarnings: store.schemaWarnings, followerLag: store.followerLag)
            },
            unhealthy: { [weak self] in
                guard let self else { return "the server has stopped" }
                return unhealthyReason
            })
    }

    /// The listening addresses, e.g. `["tcp://127.0.0.1:7411", "unix:///tmp/larder.sock"]`; `tls://` for TLS.
    public func addresses(port: Int) -> [String] {
        let tlsPort = self.tlsPort
        var list = ["\(tlsPort == port ? "tls" : "tcp")://\(configuration.host):\(port)"]
        if let tlsPort, tlsPort != port { list.append("tls://\(configuration.host):\(tlsPort)") }
        if let path = configuration.socketPath { list.append("unix://\(path)") }
        return list
    }

    /// Connections open now.
    public var openConnections: Int { context.stats.openConnections }

    /// Requests being executed now, on every connection.
    public var requestsInFlight: Int { context.inFlight.current }

    /// The largest unsent output any connection has held (bytes): the backpressure bound, for tests.
    public var peakUnsentBytes: Int { context.stats.peakUnsentBytes }

    /// Graceful shutdown: stop accepting, answer new requests UNAVAILABLE, wait (up to the grace period) for requests
    /// in flight and their replies, close every connection, checkpoint and close the store. Blocks until done; safe
    /// to call more than once.
    public func shutdown() {
        let listeners = state.withLock { s -> [ListenerBox]? in
            guard !s.stopped else { return nil }
            s.stopped = true
            return s.listeners
        }
        guard let listeners else { return }
        context.logger.info("shutting down: \(context.inFlight.current) requests in flight")
        closeListeners(listeners)
        for shard in shards {
            shard.loop.sync { for connection in shard.connections.values { connection.beginShutdown() } }
        }
        let deadline = monotonicMs() + UInt64(configuration.shutdownGraceMs)
        while context.inFlight.current > 0 && monotonicMs() < deadline { usleep(5_000) }
        // Give replies a chance to reach clients that are reading.
        while unsentTotal() > 0 && monotonicMs() < deadline { usleep(5_000) }
        if context.inFlight.current > 0 {
            context.logger.warn("shutdown grace period over with \(context.inFlight.current) requests in flight")
        }
        for shard in shards {
            shard.loop.sync {
                for connection in Array(shard.connections.values) {
                    // A connection draining its peer's input after a close has nothing left to say.
                    if connection.outputShutDown { connection.endLinger() } else { connection.forceClose(.shutdown) }
                }
                shard.stopTimer()
            }
        }
        // Closed TLS connections write their last ciphertext and close_notify first (ServerConnection.lingerWrite).
        let closeDeadline = monotonicMs() + 2_000
        while context.stats.openConnections > 0 && monotonicMs() < closeDeadline { usleep(2_000) }
        for shard in shards {
            shard.loop.sync { for connection in Array(shard.connections.values) { connection.endLinger() } }
        }
        for shard in shards { shard.loop.stop() }
        state.withLock { $0.console }?.stop()
        context.router.pool.stop()
        // Requests cut off by the grace period still hold the store: wait for them a little before closing it.
        do throws(LarderError) {
            try store.checkpoint()
        } catch {
            context.logger.warn("checkpoint on shutdown failed: \(error)")
        }
        state.withLock { $0.uploadSweeper }?.cancel()
        store.close()
        state.withLock { $0.metrics }?.stop()
        // After the connections: each WebSocket's socket went back to libmicrohttpd as its connection closed.
        state.withLock { $0.console }?.stop()
        context.logger.info("shutdown complete")
    }

    private func unsentTotal() -> Int {
        var total = 0
        for shard in shards {
            total += shard.loop.sync { shard.connections.values.reduce(0) { $0 + $1.unsentBytes } }
        }
        return total
    }
}
