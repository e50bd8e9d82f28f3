#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CMicroHTTPD
import Dispatch
import LarderEventLoop
import LarderIO
import LarderWire
import Synchronization

/// `--metrics-port`: `/metrics` (Prometheus text format) and `/healthz` over HTTP/1.1, served by GNU libmicrohttpd on
/// one thread of its own. A library rather than a parser of our own: HTTP's corner cases (pipelining, chunked bodies,
/// header limits) are libmicrohttpd's well-tested business, and the endpoint stays small.
///
/// libmicrohttpd closes a connection after 10 s of silence only, so a client sending a byte every few seconds would
/// keep its slot for ever. Two rules here bound what slow clients can hold:
/// - each exchange (from the connection's start, or its previous answer, to the end of its answer) must be over
///   within `Limits.requestTimeout`, else a watchdog shuts the socket down;
/// - at most `Limits.connections` clients at once; when all are taken, a new client takes the slot of the connection
///   that has waited longest for its request (a request being answered is never cut), so a probe of `/healthz` is
///   answered while slow clients fill the port.
final class MetricsServer: @unchecked Sendable {
    /// What the endpoints answer, computed on the HTTP thread for each request.
    struct Handlers: Sendable {
        /// The `/metrics` body.
        var metrics: @Sendable () -> String
        /// nil when healthy, else why not (the body of the 503).
        var unhealthy: @Sendable () -> String?
    }

    /// How many clients, and for how long.
    struct Limits: Sendable {
        /// Clients served at once.
        var connections: Int = 16
        /// The longest an exchange (the wait for a request, the request and its answer) may take.
        var requestTimeout: Duration = .seconds(10)
    }

    /// One open connection, as the watchdog and the admission see it.
    struct Tracked {
        /// Its socket: open until `.closed` is reported, so it may be shut down while it is in the table.
        var fd: Int32
        /// When its current exchange began: at accept, then at each answer's end.
        var since: ContinuousClock.Instant
        /// Its request arrived and is being answered.
        var answering = false
        /// Shut down already; its slot is free for a new client.
        var cut = false
    }

    private let handlers: Handlers
    private let limits: Limits
    private let server: UnsafeMutablePointer<larder_http_server>
    private var daemon: OpaquePointer?
    /// Open connections by the address of their `MHD_Connection`.
    private let tracked = Mutex<[UInt: Tracked]>([:])
    private var watchdog: (any DispatchSourceTimer)?
    /// The bound port (useful with port 0).
    let port: Int

    init(host: String, port: Int, limits: Limits = Limits(), handlers: Handlers) throws(IOError) {
        self.handlers = handlers
        self.limits = limits
        let (fd, bound) = try Socket.listenTCP(host: host, port: port, backlog: 64)
        self.port = bound
        server = .allocate(capacity: 1)
        server.initialize(
            to: larder_http_server(
                handler: { context, connection, method, url in
                    let me = Unmanaged<MetricsServer>.fromOpaque(context!).takeUnretainedValue()
                    return me.answer(connection!, method: String(cString: method!), path: String(cString: url!))
                },
                observer: { context, connection, event, fd in
                    let me = Unmanaged<MetricsServer>.fromOpaque(context!).takeUnretainedValue()
                    me.observe(UInt(bitPattern: connection), event: event, fd: fd)
                },
                admit: { context in
                    Unmanaged<MetricsServer>.fromOpaque(context!).takeUnretainedValue().admit() ? 1 : 0
                }, context: nil))
        server.pointee.context = Unmanaged.passUnretained(self).toOpaque()
        // libmicrohttpd's own ceiling leaves room for connections cut but not yet cleaned up; `admit` keeps to
        // `limits.connections`.
        guard let daemon = larder_http_start(fd, server, UInt32(limits.connections * 2), 10) else {
            Socket.close(fd)
            server.deallocate()
            throw IOError("MHD_start_daemon", errno: errno)
        }
        self.daemon = daemon
        // Checked a few times per deadline, so a connection is cut at most a quarter of it late.
        let period = max(Duration.milliseconds(10), min(.seconds(1), limits.requestTimeout / 4))
        let nanoseconds = Int(period.components.seconds) * 1_000_000_000
            + Int(period.components.attoseconds / 1_000_000_000)
        let watchdog = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "larder.metrics.watchdog"))
        watchdog.schedule(deadline: .now() + .nanoseconds(nanoseconds), repeating: .nanoseconds(nanoseconds))
        watchdog.setEventHandler { [weak self] in self?.cutOverdue() }
        watchdog.resume()
        self.watchdog = watchdog
    }

    /// Stops serving: waits for the request being answered, then closes every connection and the listener.
    func stop() {
        guard let daemon else { return }
        self.daemon = nil
        watchdog?.cancel()
        // It closes the listening socket too.
        MHD_stop_daemon(daemon)
    }

    deinit {
        stop()
        server.deallocate()
    }

    /// Follows a connection through its life (on the daemon's thread).
    private func observe(_ connection: UInt, event: Int32, fd: Int32) {
        let now = ContinuousClock.now
        tracked.withLock { table in
            switch UInt32(event) {
            case LARDER_HTTP_OPENED.rawValue:
                table[connection] = Tracked(fd: fd, since: now)
            case LARDER_HTTP_REQUEST.rawValue:
                table[connection]?.answering = true
            case LARDER_HTTP_ANSWERED.rawValue:
                table[connection]?.answering = false
                table[connection]?.since = now
            default:
                // Removed before libmicrohttpd closes the socket, under the lock `cut` holds: a socket shut down here
                // is never one reused for something else.
                table[connection] = nil
            }
        }
    }

    /// Whether to take on a new client (on the daemon's thread): yes below the limit; at it, yes after cutting the
    /// connection that has waited longest for its request; no when every connection is being answered.
    private func admit() -> Bool {
        tracked.withLock { table in
            guard table.values.count(where: { !$0.cut }) >= limits.connections else { return true }
            let waiting = table.filter { !$0.value.cut && !$0.value.answering }
            guard let oldest = waiting.min(by: { $0.value.since < $1.value.since }) else { return false }
            Self.cut(&table, oldest.key)
            return true
        }
    }

    /// Shuts down every connection whose exchange has outlived the deadline (on the watchdog's queue).
    private func cutOverdue() {
        let now = ContinuousClock.now
        tracked.withLock { table in
            for (connection, entry) in table where !entry.cut && now - entry.since >= limits.requestTimeout {
                Self.cut(&table, connection)
            }
        }
    }

    /// Shuts the connection's socket down; libmicrohttpd sees it end and closes it on its own thread.
    private static func cut(_ table: inout [UInt: Tracked], _ connection: UInt) {
        guard let fd = table[connection]?.fd, fd >= 0 else { return }
        table[connection]?.cut = true
        _ = shutdown(fd, Int32(SHUT_RDWR))
    }

    private func answer(_ connection: OpaquePointer, method: String, path: String) -> MHD_Result {
        func respond(_ status: UInt32, _ body: String, type: String = "text/plain; charset=utf-8") -> MHD_Result {
            var bytes = Array(body.utf8)
            return bytes.withUnsafeMutableBytes {
                larder_http_respond(connection, status, type, $0.baseAddress, $0.count)
            }
        }
        guard method == "GET" || method == "HEAD" else {
            return respond(405, "only GET and HEAD are served here\n")
        }
        switch path {
        case "/metrics":
            return respond(200, handlers.metrics(), type: "text/plain; version=0.0.4; charset=utf-8")
        case "/healthz":
            if let reason = handlers.unhealthy() { return respond(503, "unavailable: \(reason)\n") }
            return respond(200, "ok\n")
        default:
            return respond(404, "not found: this port serves /metrics and /healthz\n")
        }
    }
}
