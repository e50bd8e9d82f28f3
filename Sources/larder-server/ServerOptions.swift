import Foundation
import LarderEventLoop
import LarderIO
import LarderServer
import LarderStore
import LarderWire

/// The `larder-server` command line: `--opt value`, `--opt=value`, and a `LARDER_SERVER_*` environment variable for
/// each option (the command line wins). The server reads no other variable: the CLI's `LARDER_HOST`, `LARDER_PORT`
/// and `LARDER_TOKEN` may be set in the same shell.
enum ServerOptions {
    /// What the command line asked for.
    enum Command: Sendable, Equatable {
        case run
        case help
        case version
    }

    /// A usage error (exit 64); `message` is printed after `Error: `. The server's own refusals (a token file it
    /// cannot read) are the same kind of error.
    typealias UsageError = ConfigurationError

    static let usageLine = "Usage: larder-server [--host ADDR] [--port N] [--socket PATH] "
        + "[--data-dir DIR | --postgres URL] [--token T] [--token-file F] [--tls-cert F --tls-key F] [limits...] "
        + "(see --help)"

    struct Option: Sendable {
        var name: String
        var env: String
        var valueName: String
        var help: String
        var apply: @Sendable (inout ServerConfiguration, String) throws(UsageError) -> Void

    }

    static func integer(_ name: String, _ text: String, min: Int = 0, max: Int = Int(Int32.max)) throws(UsageError)
        -> Int
    {
        guard let value = Int(text), value >= min, value <= max else {
            throw UsageError(message: "--\(name) needs an integer between \(min) and \(max), not '\(text)'")
        }
        return value
    }

    /// A byte size option: `4194304`, `4MiB`, `64 KiB` (`ByteSize`).
    static func size(_ name: String, _ text: String, min: Int = 0, max: Int = Int(Int32.max)) throws(UsageError) -> Int {
        guard let value = ByteSize.parse(text), value >= min, value <= max else {
            throw UsageError(
                message: "--\(name) needs a size between \(ByteSize.format(min)) and \(ByteSize.format(max)): "
                    + "\(ByteSize.grammar), not '\(text)'")
        }
        return value
    }

// One `Option` per command-line option, alike by design; what they share
// (integers, sizes, limits) is in `integer`, `size` and `limit`.
    static let options: [Option] = {
        let d = ServerConfiguration()
        let l = Limits.default
        func limit(_ name: String, _ help: String, _ defaultValue: Int, _ key: any WritableKeyPath<Limits, Int> & Sendable)
            -> Option
        {
            // Limits in bytes take units (40MiB) and show their defaults with them.
            let bytes = name.hasSuffix("-bytes")
            return Option(
                name: name, env: envName(name), valueName: bytes ? "SIZE" : "N",
                help: "\(help) (default \(bytes ? ByteSize.format(defaultValue) : String(defaultValue)))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.limits[keyPath: key] = bytes ? try size(name, v, min: 1) : try integer(name, v, min: 1)
                })
        }
        /// An option of password accounts (`--users`): an integer from `min` to `max`, handed to `set`.
        func account(
            _ name: String, _ help: String, _ defaultValue: Int, min: Int = 1, max: Int = Int(Int32.max),
            _ set: @escaping @Sendable (inout PasswordAccountSettings, Int) -> Void
        ) -> Option {
            let unit = name.hasSuffix("-ms") ? "MS" : name.hasSuffix("-kib") ? "KIB" : "N"
            return Option(
                name: name, env: envName(name), valueName: unit, help: "\(help) (default \(defaultValue))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    var settings = c.passwordAccounts ?? PasswordAccountSettings()
                    set(&settings, try integer(name, v, min: min, max: max))
                    c.passwordAccounts = settings
                })
        }
        let a = PasswordAccountSettings().limits
        let h = PasswordAccountSettings().hashParameters
        return [
            Option(
                name: "host", env: "LARDER_SERVER_HOST", valueName: "ADDR",
                help: "IPv4 or IPv6 address to listen on: 0.0.0.0 or :: for every interface (default \(d.host))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    // Checked here, before the server creates anything: a host it cannot listen on is a usage error.
                    guard ListenAddress(host: v, port: 0) != nil else {
                        throw UsageError(
                            message: "--host needs an IPv4 or IPv6 address to listen on (such as 127.0.0.1, ::1, "
                                + "0.0.0.0 or ::), not '\(v)'")
                    }
                    c.host = v
                }),
            Option(
                name: "port", env: "LARDER_SERVER_PORT", valueName: "N", help: "TCP port, 0 for any free one (default \(d.port))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.port = try integer("port", v, max: 65535)
                }),
            Option(
                name: "socket", env: "LARDER_SERVER_SOCKET", valueName: "PATH", help: "also listen on a Unix domain socket",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in c.socketPath = v }),
            Option(
                name: "data-dir", env: "LARDER_SERVER_DATA_DIR", valueName: "DIR",
                help: "where the database lives (default \(d.dataDirectory))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in c.dataDirectory = v }),
            Option(
                name: "postgres", env: "LARDER_SERVER_POSTGRES_URL", valueName: "URL",
                help: "store in this PostgreSQL database (libpq URI or conninfo) instead of SQLite in --data-dir",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    do throws(LarderError) {
                        _ = try PGSettings(url: v)
                    } catch {
                        throw UsageError(message: "--postgres: \(error.message)")
                    }
                    c.postgresURL = v
                }),
            Option(
                name: "postgres-timeout-ms", env: "LARDER_SERVER_POSTGRES_TIMEOUT_MS", valueName: "MS",
                help: "with --postgres: how long one call to the database may take before it answers UNAVAILABLE "
                    + "(default \(d.postgresTimeoutMs))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.postgresTimeoutMs = try integer("postgres-timeout-ms", v, min: 100, max: 3_600_000)
                }),
            Option(
                name: "token", env: "LARDER_SERVER_TOKEN", valueName: "T",
                help: "require this token in HELLO; it has every right (the admin role)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    guard !v.isEmpty else { throw UsageError(message: "--token must not be empty") }
                    c.token = v
                }),
            Option(
                name: "token-file", env: "LARDER_SERVER_TOKEN_FILE", valueName: "FILE",
                help: "accept the tokens of FILE, one 'ROLE TOKEN [COLLECTION,...]' a line (roles: read, write, "
                    + "admin); SIGHUP reads it again",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    _ = try TokenTable.load(path: v)  // refused now rather than at start-up
                    c.tokenFile = v
                }),
            Option(
                name: "oidc-issuer", env: "LARDER_SERVER_OIDC_ISSUER", valueName: "URL",
                help: "accept ID tokens (HELLO idToken) from this identity provider's iss; follow it with its "
                    + "--oidc-audience and --oidc-jwks; repeat the three for each provider",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    guard !v.isEmpty else { throw UsageError(message: "--oidc-issuer must not be empty") }
                    c.oidcIssuers.append(OIDCIssuer(issuer: v, audiences: [], jwksFile: ""))
                }),
            Option(
                name: "oidc-audience", env: "LARDER_SERVER_OIDC_AUDIENCE", valueName: "ID",
                help: "a client id (aud) the last --oidc-issuer's tokens may be for; repeatable",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    guard !c.oidcIssuers.isEmpty else {
                        throw UsageError(message: "--oidc-audience must follow the --oidc-issuer it belongs to")
                    }
                    guard !v.isEmpty else { throw UsageError(message: "--oidc-audience must not be empty") }
                    c.oidcIssuers[c.oidcIssuers.count - 1].audiences.append(v)
                }),
            Option(
                name: "oidc-jwks", env: "LARDER_SERVER_OIDC_JWKS", valueName: "FILE",
                help: "the last --oidc-issuer's signing keys, a JWKS file; SIGHUP reads it again",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    guard !c.oidcIssuers.isEmpty else {
                        throw UsageError(message: "--oidc-jwks must follow the --oidc-issuer it belongs to")
                    }
                    guard c.oidcIssuers[c.oidcIssuers.count - 1].jwksFile.isEmpty else {
                        throw UsageError(message: "--oidc-jwks is given twice for one --oidc-issuer")
                    }
                    c.oidcIssuers[c.oidcIssuers.count - 1].jwksFile = v
                }),
            Option(
                name: "oidc-leeway-ms", env: "LARDER_SERVER_OIDC_LEEWAY_MS", valueName: "MS",
                help: "clock difference tolerated on an ID token's exp and nbf, 0 to 600000 (default \(d.oidcLeewayMs))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.oidcLeewayMs = try integer("oidc-leeway-ms", v, max: 600_000)
                }),
            account("session-ttl-ms", "with --users: how long a session lives from sign-in", a.sessionTtlMs) {
                $0.limits.sessionTtlMs = $1
            },
            account("min-password-bytes", "with --users: the shortest password, 8 or more", a.minPasswordBytes) {
                $0.limits.minPasswordBytes = $1
            },
            account("max-password-bytes", "with --users: the longest password, up to 1024", a.maxPasswordBytes) {
                $0.limits.maxPasswordBytes = $1
            },
            account(
                "sign-in-attempts-per-account", "with --users: failed sign-ins of one email per window",
                a.signInAttemptsPerAccount
            ) { $0.limits.signInAttemptsPerAccount = $1 },
            account(
                "sign-in-attempts-per-address", "with --users: failed sign-ins from one address per window",
                a.signInAttemptsPerAddress
            ) { $0.limits.signInAttemptsPerAddress = $1 },
            account("sign-in-window-ms", "with --users: the window failed sign-ins are counted over", a.signInWindowMs) {
                $0.limits.signInWindowMs = $1
            },
            account(
                "session-check-ms", "with --users: how often a watching connection's session is checked again",
                a.sessionCheckMs
            ) { $0.limits.sessionCheckMs = $1 },
            account(
                "access-cache-ms",
                "with --users on a shared PostgreSQL: how long checked sessions and rules are reused (0: never)",
                a.accessCacheMs, min: 0
            ) { $0.limits.accessCacheMs = $1 },
            account(
                "password-memory-kib", "with --users: Argon2id memory per new password hash",
                Int(h.memoryKiB), min: 8, max: 1 << 20
            ) { $0.hashParameters.memoryKiB = UInt32($1) },
            account(
                "password-iterations", "with --users: Argon2id passes per new password hash", Int(h.iterations),
                max: 64
            ) { $0.hashParameters.iterations = UInt32($1) },
            Option(
                name: "tls-cert", env: "LARDER_SERVER_TLS_CERT", valueName: "FILE",
                help: "speak TLS on TCP with this certificate chain (PEM); SIGHUP reads it again",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in c.tlsCertificate = v }),
            Option(
                name: "tls-key", env: "LARDER_SERVER_TLS_KEY", valueName: "FILE", help: "the certificate's private key (PEM)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in c.tlsKey = v }),
            Option(
                name: "tls-client-ca", env: "LARDER_SERVER_TLS_CLIENT_CA", valueName: "FILE",
                help: "require client certificates signed by a CA of FILE (PEM)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in c.tlsClientCA = v }),
            Option(
                name: "tls-port", env: "LARDER_SERVER_TLS_PORT", valueName: "N",
                help: "TLS on port N, keeping --port plain beside it (default: TLS on --port)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.tlsPort = try integer("tls-port", v, max: 65535)
                }),
            limit("max-frame-bytes", "largest frame", l.maxFrameBytes, \.maxFrameBytes),
            limit("max-json-bytes", "largest JSON part after inflation", l.maxJSONBytes, \.maxJSONBytes),
            limit("max-document-bytes", "largest document", l.maxDocumentBytes, \.maxDocumentBytes),
            limit("max-blob-bytes", "largest blob", l.maxBlobBytes, \.maxBlobBytes),
            limit("blob-chunk-bytes", "largest chunk of a resumable upload", l.blobChunkBytes, \.blobChunkBytes),
            limit(
                "upload-expiry-ms", "drop an upload this long after its last chunk", l.uploadExpiryMs,
                \.uploadExpiryMs),
            Option(
                name: "request-key-retention-ms", env: envName("request-key-retention-ms"), valueName: "N",
                help: "keep a write's requestKey with its answer this long, in ms (default "
                    + "\(l.requestKeyRetentionMs ?? 0))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.limits.requestKeyRetentionMs = try integer("request-key-retention-ms", v, min: 1, max: Int.max)
                }),
            Option(
                name: "after-seq-wait-ms", env: envName("after-seq-wait-ms"), valueName: "N",
                help: "a GET with afterSeq waits at most this long, in ms, for this server to apply the change log "
                    + "that far, then reads the database (default \(l.afterSeqWaitMs ?? 0))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.limits.afterSeqWaitMs = try integer("after-seq-wait-ms", v, min: 0, max: 60_000)
                }),
            limit(
                "max-upload-bytes", "declared bytes of all unfinished uploads together", l.maxUploadBytes,
                \.maxUploadBytes),
            limit(
                "max-uploads-per-token", "unfinished uploads one token (or connection, without tokens) may hold",
                l.maxUploadsPerToken, \.maxUploadsPerToken),
            Option(
                name: "max-upload-bytes-per-token", env: envName("max-upload-bytes-per-token"), valueName: "SIZE",
                help: "declared bytes of one token's (or connection's, without tokens) unfinished uploads together "
                    + "(default a quarter of --max-upload-bytes: \(ByteSize.format(l.maxUploadBytes / 4)))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.limits.maxUploadBytesPerToken = try size("max-upload-bytes-per-token", v, min: 1)
                    c.uploadBytesPerTokenSet = true
                }),
            limit("max-in-flight", "requests in flight per connection", l.maxInFlight, \.maxInFlight),
            limit("max-connections", "connections at once", l.maxConnections, \.maxConnections),
            limit("idle-timeout-ms", "close connections silent this long", l.idleTimeoutMs, \.idleTimeoutMs),
            limit("frame-timeout-ms", "time to finish a started frame", l.frameTimeoutMs, \.frameTimeoutMs),
            limit(
                "max-handshake-frame-bytes", "largest frame before HELLO", l.maxHandshakeFrameBytes,
                \.maxHandshakeFrameBytes),
            limit("max-watches", "WATCH subscriptions per connection", l.maxWatches, \.maxWatches),
            limit(
                "max-watch-buffer-bytes", "unsent bytes a subscriber may hold before its subscription gaps",
                l.maxWatchBufferBytes, \.maxWatchBufferBytes),
            limit(
                "max-thumbnail-source-pixels", "largest photo (width × height) BLOB_GET makes a thumbnail of",
                l.maxThumbnailSourcePixels, \.maxThumbnailSourcePixels),
            limit("max-schema-depth", "nesting of a collection schema's subschemas", l.schema.maxDepth, \.schema.maxDepth),
            limit("max-schema-nodes", "subschemas in one collection schema", l.schema.maxNodes, \.schema.maxNodes),
            limit(
                "max-schema-enum-values", "values in one enum of a collection schema", l.schema.maxEnumValues,
                \.schema.maxEnumValues),
            limit(
                "max-schema-constant-values", "JSON values in all the enum and const values of a collection schema",
                l.schema.maxConstantValues, \.schema.maxConstantValues),
            limit(
                "max-schema-pattern-bytes", "longest pattern in a collection schema", l.schema.maxPatternBytes,
                \.schema.maxPatternBytes),
            limit(
                "max-schema-patterns", "patterns in one collection schema", l.schema.maxPatterns, \.schema.maxPatterns),
            limit(
                "max-schema-required", "names in one required of a collection schema", l.schema.maxRequired,
                \.schema.maxRequired),
            limit(
                "schema-pattern-match-steps", "backtracking steps one pattern match may take before it gives up",
                l.schema.patternMatchSteps, \.schema.patternMatchSteps),
            Option(
                name: "thumbnail-sizes", env: "LARDER_SERVER_THUMBNAIL_SIZES", valueName: "N,N,...",
                help: "the thumbnail sizes (longer side, pixels) BLOB_GET makes; no other is accepted (default "
                    + l.thumbnailSizes.map(String.init).joined(separator: ",") + ")",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    let parts = v.split(separator: ",", omittingEmptySubsequences: false)
                    var sizes: [Int] = []
                    for part in parts {
                        sizes.append(
                            try integer(
                                "thumbnail-sizes", part.trimmingCharacters(in: .whitespaces), min: 1,
                                max: Limits.maxThumbnailSize))
                    }
                    sizes = Array(Set(sizes)).sorted()
                    guard sizes.count <= Limits.maxThumbnailSizeCount else {
                        throw UsageError(
                            message:
                                "--thumbnail-sizes takes at most \(Limits.maxThumbnailSizeCount) sizes, not \(sizes.count)")
                    }
                    c.limits.thumbnailSizes = sizes
                }),
            Option(
                name: "metrics-port", env: "LARDER_SERVER_METRICS_PORT", valueName: "N",
                help: "serve /metrics (Prometheus) and /healthz over HTTP on this port of --host (default: off)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.metricsPort = try integer("metrics-port", v, max: 65535)
                }),
            Option(
                name: "console-port", env: "LARDER_SERVER_CONSOLE_PORT", valueName: "N",
                help: "serve the web console, and Larder over a WebSocket at /ws, over HTTP on this port of --host "
                    + "(default: off)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.consolePort = try integer("console-port", v, max: 65535)
                }),
            Option(
                name: "console-origin", env: "LARDER_SERVER_CONSOLE_ORIGIN", valueName: "ORIGINS",
                help: "comma-separated origins (https://admin.example.com) besides the console's own whose pages may "
                    + "open its WebSocket (default: none)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.consoleOrigins = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                }),
            Option(
                name: "console-dir", env: "LARDER_SERVER_CONSOLE_DIR", valueName: "PATH",
                help: "the console's files, read at start (default: console beside the executable)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.consoleDirectory = v
                }),
            Option(
                name: "metrics-max-connections", env: "LARDER_SERVER_METRICS_MAX_CONNECTIONS", valueName: "N",
                help: "HTTP clients of --metrics-port at once; a new one takes the slot of the one waiting longest "
                    + "for its request (default \(d.metricsMaxConnections))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.metricsMaxConnections = try integer("metrics-max-connections", v, min: 1, max: 1024)
                }),
            Option(
                name: "metrics-request-timeout-ms", env: "LARDER_SERVER_METRICS_REQUEST_TIMEOUT_MS", valueName: "N",
                help: "the longest one HTTP request to --metrics-port may take, answer included, from the "
                    + "connection's start or its previous answer (default \(d.metricsRequestTimeoutMs))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.metricsRequestTimeoutMs = try integer("metrics-request-timeout-ms", v, min: 10, max: 3_600_000)
                }),
            Option(
                name: "change-retention", env: "LARDER_SERVER_CHANGE_RETENTION", valueName: "N",
                help: "changes the log keeps for WATCH since (default \(d.changeRetentionEvents))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.changeRetentionEvents = try integer("change-retention", v, min: 1)
                }),
            Option(
                name: "change-retention-ms", env: "LARDER_SERVER_CHANGE_RETENTION_MS", valueName: "N",
                help: "the oldest change the log keeps, in ms (default \(d.changeRetentionMs))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.changeRetentionMs = Int64(try integer("change-retention-ms", v, min: 1))
                }),
            Option(
                name: "read-cache-bytes", env: "LARDER_SERVER_READ_CACHE_BYTES", valueName: "SIZE",
                help: "recent GET answers kept in memory, 0 for none (default "
                    + "\(ByteSize.format(d.readCacheBytes)))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.readCacheBytes = try size("read-cache-bytes", v, min: 0, max: Int.max)
                }),
            Option(
                name: "tcp-keepalive-s", env: "LARDER_SERVER_TCP_KEEPALIVE_S", valueName: "N",
                help: "TCP keepalive probes after N silent seconds, 0 for none (default \(d.tcpKeepaliveSeconds))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.tcpKeepaliveSeconds = try integer("tcp-keepalive-s", v, min: 0, max: 86_400)
                }),
            Option(
                name: "io-threads", env: "LARDER_SERVER_IO_THREADS", valueName: "N",
                help: "event-loop threads that own the connections (default half the cores: \(d.ioQueues))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.ioQueues = try integer("io-threads", v, min: 1, max: 256)
                }),
            Option(
                name: "work-threads", env: "LARDER_SERVER_WORK_THREADS", valueName: "N",
                help: "threads for searches, lists, blob bytes, parsing writes and large sends (default "
                    + "\(d.workThreads))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.workThreads = try integer("work-threads", v, min: 1, max: 1024)
                }),
            Option(
                name: "thumbnail-threads", env: "LARDER_SERVER_THUMBNAIL_THREADS", valueName: "N",
                help: "thumbnails made at once; other requests that must make one wait (default the cores: "
                    + "\(d.thumbnailThreads))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.thumbnailThreads = try integer("thumbnail-threads", v, min: 1, max: 1024)
                }),
            Option(
                name: "max-queued-work", env: "LARDER_SERVER_MAX_QUEUED_WORK", valueName: "N",
                help: "requests that may wait for a work thread; more are answered RESOURCE_EXHAUSTED (default "
                    + "\(d.maxQueuedWork))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.maxQueuedWork = try integer("max-queued-work", v, min: 1)
                }),
            Option(
                name: "zlib-level", env: "LARDER_SERVER_ZLIB_LEVEL", valueName: "0-9",
                help: "zlib level for replies (default \(d.zlibLevel))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.zlibLevel = Int32(try integer("zlib-level", v, min: 0, max: 9))
                }),
            Option(
                name: "compression-threshold", env: "LARDER_SERVER_COMPRESSION_THRESHOLD", valueName: "SIZE",
                help: "compress JSON parts of at least SIZE (default \(ByteSize.format(d.compressionThreshold)))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.compressionThreshold = try size("compression-threshold", v)
                }),
            Option(
                name: "synchronous", env: "LARDER_SERVER_SYNCHRONOUS", valueName: "normal|full",
                help: "durability: normal survives a crash, full a power loss; on PostgreSQL, full sets "
                    + "synchronous_commit on whatever the database says (default normal)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    guard let s = StoreConfiguration.Synchronous(rawValue: v.uppercased()) else {
                        throw UsageError(message: "--synchronous must be normal or full, not '\(v)'")
                    }
                    c.synchronous = s
                }),
            Option(
                name: "log-level", env: "LARDER_SERVER_LOG_LEVEL", valueName: "LEVEL",
                help: "error, warn, info or debug (default info)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    guard let level = LogLevel(name: v) else {
                        throw UsageError(message: "--log-level must be error, warn, info or debug, not '\(v)'")
                    }
                    c.logLevel = level
                }),
            Option(
                name: "log-format", env: "LARDER_SERVER_LOG_FORMAT", valueName: "text|json",
                help: "log lines for people (text) or one JSON object per line (default text)",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    guard let format = LogFormat(rawValue: v.lowercased()) else {
                        throw UsageError(message: "--log-format must be text or json, not '\(v)'")
                    }
                    c.logFormat = format
                }),
            Option(
                name: "slow-ms", env: "LARDER_SERVER_SLOW_MS", valueName: "N",
                help: "log requests taking N ms or more, with opcode, status and duration; 0 logs every request "
                    + "(default \(d.slowMs))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.slowMs = try integer("slow-ms", v)
                }),
            Option(
                name: "shutdown-grace-ms", env: "LARDER_SERVER_SHUTDOWN_GRACE_MS", valueName: "N",
                help: "how long shutdown waits for requests in flight (default \(d.shutdownGraceMs))",
                apply: { (c: inout ServerConfiguration, v: String) throws(UsageError) in
                    c.shutdownGraceMs = try integer("shutdown-grace-ms", v)
                }),
        ]
    }()

    /// `maxJSONBytes` -> `max-json-bytes`: the option that sets a limit announced in HELLO.
    static func optionName(limit: String) -> String {
        var out = ""
        var previousWasUpper = false
        for character in limit {
            if character.isUppercase {
                if !out.isEmpty && !previousWasUpper { out.append("-") }
                out.append(Character(character.lowercased()))
                previousWasUpper = true
            } else {
                if previousWasUpper && out.count > 1 && !out.hasSuffix("-") {
                    // The end of an acronym: "JSONBytes" -> "json-bytes".
                    let last = out.removeLast()
                    if !out.hasSuffix("-") { out.append("-") }
                    out.append(last)
                }
                out.append(character)
                previousWasUpper = false
            }
        }
        return out
    }

    static func envName(_ option: String) -> String {
        "LARDER_SERVER_" + option.uppercased().replacingOccurrences(of: "-", with: "_")
    }

    /// Parses `arguments` (without the program name) over `environment`.
    static func parse(_ arguments: [String], environment: [String: String] = [:]) throws(UsageError)
        -> (Command, ServerConfiguration)
    {
        var configuration = ServerConfiguration()
        // The environment first, so the command line overrides it.
        for option in options {
            guard let value = environment[option.env] else { continue }
            do throws(UsageError) {
                try option.apply(&configuration, value)
            } catch {
                // The value came from the environment: the message names the variable that holds it.
                throw UsageError(message: "\(option.env): \(error.message)")
            }
        }
        var scanner = ArgumentScanner(arguments)
        var users = environment["LARDER_SERVER_USERS"] == "1"
        var allowSignUp = environment["LARDER_SERVER_ALLOW_SIGN_UP"] == "1"
        while let argument = scanner.next() {
            if argument.text == "--help" || argument.text == "-h" { return (.help, configuration) }
            if argument.text == "--version" { return (.version, configuration) }
            if argument.text == "--users" || argument.text == "--allow-sign-up" {
                users = true
                if argument.text == "--allow-sign-up" { allowSignUp = true }
                continue
            }
            guard argument.name.hasPrefix("--") else {
                throw UsageError(message: "unexpected argument '\(argument.text)'")
            }
            let name = String(argument.name.dropFirst(2))
            guard let option = options.first(where: { $0.name == name }) else {
                throw UsageError(message: "unknown option '--\(name)'")
            }
            guard let value = scanner.value(for: argument) else { throw UsageError(message: "--\(name) needs a value") }
            try option.apply(&configuration, value)
        }
        if !configuration.uploadBytesPerTokenSet {
            configuration.limits.maxUploadBytesPerToken = max(1, configuration.limits.maxUploadBytes / 4)
        }
        if (configuration.tlsCertificate == nil) != (configuration.tlsKey == nil) {
            throw UsageError(message: "TLS needs both --tls-cert and --tls-key")
        }
        if configuration.tlsCertificate == nil, configuration.tlsClientCA != nil || configuration.tlsPort != nil {
            throw UsageError(
                message: "--\(configuration.tlsPort != nil ? "tls-port" : "tls-client-ca") needs TLS: give --tls-cert "
                    + "and --tls-key")
        }
        for issuer in configuration.oidcIssuers {
            if issuer.audiences.isEmpty || issuer.jwksFile.isEmpty {
                throw UsageError(
                    message: "--oidc-issuer \(issuer.issuer) needs --oidc-audience ID and --oidc-jwks FILE after it")
            }
        }
        if !configuration.oidcIssuers.isEmpty {
            // Refused now, with the file and the reason, rather than at the first ID token.
            _ = try IdentityProviders.verifier(configuration.oidcIssuers, leewayMs: configuration.oidcLeewayMs)
        }
        if users {
            var settings = configuration.passwordAccounts ?? PasswordAccountSettings()
            settings.limits.signUpAllowed = allowSignUp
            do throws(ConfigurationError) {
                try settings.validate()
            } catch {
                throw UsageError(message: error.message)
            }
            configuration.passwordAccounts = settings
        } else if configuration.passwordAccounts != nil {
            throw UsageError(
                message: "the options of accounts (--session-ttl-ms, --min-password-bytes, --sign-in-...) need --users")
        }
        do throws(LarderError) {
            try configuration.limits.validate()
        } catch {
            // The limits speak of themselves by their HELLO names; a person at the command line set an option.
            var message = error.message
            for name in configuration.limits.json.keys.sorted(by: { $0.count > $1.count }) {
                message = message.replacingOccurrences(of: name, with: "--" + ServerOptions.optionName(limit: name))
            }
            throw UsageError(message: message)
        }
        return (.run, configuration)
    }

    /// The `--help` text.
    static var helpText: String {
        var text = """
            larder-server: the Larder record-and-photo store server.

            \(usageLine)

            Options (each also read from the environment variable shown):

            """
        for option in options {
            let left = "  --\(option.name) \(option.valueName)"
            let padded = left.padding(toLength: max(left.count + 1, 36), withPad: " ", startingAt: 0)
            text += "\(padded)\(option.help) [\(option.env)]\n"
        }
        text += "  --users".padding(toLength: 36, withPad: " ", startingAt: 0)
            + "keep accounts with email and password (SIGN_UP, SIGN_IN) [LARDER_SERVER_USERS=1]\n"
        text += "  --allow-sign-up".padding(toLength: 36, withPad: " ", startingAt: 0)
            + "with --users: anyone may sign up, not only an admin [LARDER_SERVER_ALLOW_SIGN_UP=1]\n"
        text += "  --version".padding(toLength: 36, withPad: " ", startingAt: 0) + "print the version and exit\n"
        text += "  --help".padding(toLength: 36, withPad: " ", startingAt: 0) + "show this help\n"
        return text
    }
}
