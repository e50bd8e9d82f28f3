import Foundation
import LarderStore
import LarderWire

/// Everything `LarderServer` needs to run, a plain value: set its fields, or let `larder-server`'s option parser build
/// one from a command line and the environment.
public struct ServerConfiguration: Sendable {
    /// IPv4 address to listen on.
    public var host: String = "127.0.0.1"
    /// TCP port; 0 picks a free one (read it back from `LarderServer.start()`).
    public var port: Int = 7411
    /// Also listen on this Unix domain socket path.
    public var socketPath: String?
    public var dataDirectory: String = "./larder-data"
    /// When set, the store is this PostgreSQL database (a libpq URI or conninfo string) instead of SQLite in
    /// `dataDirectory`.
    public var postgresURL: String?
    /// With `postgresURL`: how long one call to PostgreSQL (a connect, or a statement's round trip) may take before
    /// the server gives that connection up and answers UNAVAILABLE; a lock held elsewhere or a stopped database costs
    /// a request at most this long.
    public var postgresTimeoutMs: Int = 20_000
    /// When set, HELLO must present it (or a token of `tokenFile`); it has every right. Compared in constant time,
    /// never logged.
    public var token: String?
    /// TLS: the certificate chain and private key (PEM) turn TLS on for TCP; read again on SIGHUP.
    public var tlsCertificate: String?
    public var tlsKey: String?
    /// Require client certificates signed by one of the CAs of this PEM file.
    public var tlsClientCA: String?
    /// TLS on this port instead, with `port` kept plain beside it; 0 picks a free one (`LarderServer.tlsPort`).
    public var tlsPort: Int?
    /// A file of `ROLE TOKEN [COLLECTION,...]` lines (`TokenTable.parse`), read again on SIGHUP.
    public var tokenFile: String?
    /// The identity providers whose ID tokens sign a connection in as a user (HELLO's `idToken`); none by default.
    /// Their JWKS files are read again on SIGHUP.
    public var oidcIssuers: [OIDCIssuer] = []
    /// The clock difference tolerated on an ID token's `exp` and `nbf`, in milliseconds (at most 600,000).
    public var oidcLeewayMs: Int = 60_000
    /// Accounts Larder keeps, with email and password (`--users`); nil (the default) for none.
    public var passwordAccounts: PasswordAccountSettings?
    public var limits: Limits = .default
    public var zlibLevel: Int32 = FrameEncoder.defaultLevel
    public var compressionThreshold: Int = FrameEncoder.defaultThreshold
    public var synchronous: StoreConfiguration.Synchronous = .normal
    public var logLevel: LogLevel = .info
    /// `text` for people, `json` for log collectors (one object per line).
    public var logFormat: LogFormat = .text
    /// Requests that take at least this many milliseconds are logged at warn with their opcode, status and duration.
    public var slowMs: Int = 1_000
    /// Unsent output above which the server stops reading from a connection until it drains below half of it.
    public var outputHighWaterBytes: Int = 4 << 20
    /// How long shutdown waits for requests in flight and unsent replies before closing connections anyway.
    public var shutdownGraceMs: Int = 10_000
    /// Serve `/metrics` (Prometheus) and `/healthz` over HTTP on this port of `host`; nil (the default) for none, 0
    /// for any free one (`LarderServer.metricsPort` reads it back).
    public var metricsPort: Int?
    /// Serve the web console and its WebSocket (`/ws`, Larder frames one per binary message) over HTTP on this port of
    /// `host`; nil (the default) for none, 0 for any free one (`LarderServer.consolePort` reads it back).
    public var consolePort: Int?
    /// Origins besides the console's own whose pages may open its WebSocket (`https://admin.example.com`).
    public var consoleOrigins: [String] = []
    /// Where the console's files are read at start; nil: `console` beside the executable.
    public var consoleDirectory: String?
    /// The longest one HTTP exchange with the console's port may take (an upgraded WebSocket is not held to it).
    /// Internal: tests lower it.
    var consoleRequestTimeoutMs: Int = 10_000
    /// With `metricsPort`: clients of `/metrics` and `/healthz` at once; when all are taken, a new one takes the slot
    /// of the connection that has waited longest for its request.
    public var metricsMaxConnections: Int = 16
    /// With `metricsPort`: the longest an HTTP exchange may take, from the connection's start (or its previous answer)
    /// to the end of its answer, however steadily the client trickles bytes in.
    public var metricsRequestTimeoutMs: Int = 10_000
    /// Bytes of recent GET answers the event loops keep (split between them); 0 turns the read cache off.
    public var readCacheBytes: Int = 64 << 20
    /// TCP keepalive on client connections: probes start after this many silent seconds (then every sixth of it, six
    /// times), so a peer that vanished without closing (a phone that lost its network, a crashed host) is noticed and
    /// its connection and subscriptions freed; 0 turns it off. The idle timeout does not close a connection that
    /// watches, so this is what ends a dead subscriber.
    public var tcpKeepaliveSeconds: Int = 60
    /// Committed changes an event loop may have waiting before it drops them and ends its live subscriptions with a
    /// gap (`Shard.maxInboxChanges`); only an overloaded server reaches it. Internal: tests lower it.
    var maxInboxChanges: Int = Shard.defaultMaxInboxChanges
    /// Event-loop threads that own the connections. Default: half the cores (at least one), since the store's writer,
    /// the work pool (searches, blobs, parsing writes) and often the clients need the rest; with a loop per core on
    /// 2 cores shared with the load generator, GETs without pipelining ran at 0.6x the rate and 6x the p99 of one
    /// loop (BENCHMARKS.md).
    public var ioQueues: Int = max(1, ProcessInfo.processInfo.activeProcessorCount / 2)
    /// Threads of the work pool (searches, lists, blob bytes, parsing writes, log reads, large sends), started as work
    /// arrives (`WorkPool`).
    public var workThreads: Int = WorkPool.defaultThreads
    /// Thumbnails made at once (each holds its photo's bytes and its decode: up to 3/4 of
    /// `maxThumbnailSourcePixels` bytes for a photo decoded whole); other BLOB_GETs that must make one wait on their
    /// work-pool thread, holding nothing. Default: the number of cores.
    public var thumbnailThreads: Int = ProcessInfo.processInfo.activeProcessorCount
    /// Requests that may wait for a work-pool thread; past it a request is answered RESOURCE_EXHAUSTED at once instead
    /// of queueing without bound. One of the limits HELLO announces (`limits.maxQueuedWork`).
    public var maxQueuedWork: Int {
        get { limits.maxQueuedWork }
        set { limits.maxQueuedWork = newValue }
    }
    /// Whether `limits.maxUploadBytesPerToken` was given; if not, `larder-server`'s option parser makes it a quarter
    /// of `maxUploadBytes`.
    package var uploadBytesPerTokenSet = false
    /// The change log keeps the newest this many changes for WATCH `since`...
    public var changeRetentionEvents: Int = 100_000
    /// ...none older than this (milliseconds).
    public var changeRetentionMs: Int64 = 86_400_000

    public init() {}

    /// The store in use, for the start-up line: `data DIR` or `postgres URL` (the URL's password shown as `***`).
    public var storeDescription: String {
        guard let postgresURL else { return "data \(dataDirectory)" }
        return "postgres " + ((try? PGSettings(url: postgresURL))?.redacted ?? "(unreadable URL)")
    }
}

/// A configuration the server refuses: a token file it cannot read or parse, an option's value out of range.
/// `message` names what is wrong; `larder-server` prints it after `Error: ` and exits 64.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, for a person.
    public var message: String
    /// The error saying `message`.
    public init(message: String) { self.message = message }
    public var description: String { message }
}
