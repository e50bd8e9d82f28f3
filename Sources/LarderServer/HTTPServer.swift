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

/// An HTTP/1.1 port served by GNU libmicrohttpd on one thread of its own: `--metrics-port` (`/metrics` in Prometheus
/// text format and `/healthz`) and `--console-port` (the console's files and its WebSocket upgrade, `ConsoleServer`).
/// A library rather than a parser of our own: HTTP's corner cases (pipelining, chunked bodies, header limits, the
/// upgrade handshake) are libmicrohttpd's well-tested business, and the endpoints stay small.
///
/// libmicrohttpd closes a connection after 10 s of silence only, so a client sending a byte every few seconds would
/// keep its slot for ever. Two rules here bound what slow clients can hold:
/// - each exchange (from the connection's start, or its previous answer, to the end of its answer) must be over
///   within `Limits.requestTimeout`, else a watchdog shuts the socket down;
/// - at most `Limits.connections` clients at once; when all are taken, a new client takes the slot of the connection
///   that has waited longest for its request (a request being answered is never cut), so a probe of `/healthz` is
///   answered while slow clients fill the port.
///
/// An upgraded connection (a WebSocket) leaves both rules: its socket belongs to an event loop from then on, bounded by
/// the Larder connection limit and timeouts.
final class HTTPServer: @unchecked Sendable {
    /// What the metrics endpoints answer, computed on the HTTP thread for each request.
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
        /// Upgraded: its socket is an event loop's; the watchdog and admission leave it alone.
        var upgraded = false
    }

    /// One request, answered on the daemon's thread.
    struct Exchange {
        let connection: OpaquePointer
        let method: String
        let path: String
        fileprivate let server: UnsafeMutablePointer<larder_http_server>

        /// A request header's value (the first, when repeated).
        func header(_ name: String) -> String? {
            larder_http_header(connection, name).map { String(cString: $0) }
        }

        /// Queues an answer (the body is copied), with `Cache-Control: no-store` unless `headers` names another.
        func respond(
            _ status: UInt32, _ body: [UInt8], type: String = "text/plain; charset=utf-8",
            headers: [(String, String)] = []
        ) -> MHD_Result {
            // C strings that live through the call: strdup'd, freed after.
            let strings = headers.flatMap { [strdup($0.0), strdup($0.1)] }
            defer { for string in strings { free(string) } }
            let pointers = strings.map { UnsafePointer($0) }
            return body.withUnsafeBytes { bytes in
                pointers.withUnsafeBufferPointer { list in
                    larder_http_respond_with(
                        connection, status, type, bytes.baseAddress, bytes.count, list.baseAddress, headers.count)
                }
            }
        }

        func respond(_ status: UInt32, _ text: String, headers: [(String, String)] = []) -> MHD_Result {
            respond(status, Array(text.utf8), headers: headers)
        }

        /// Answers 101 with `Upgrade: <protocol>` and one more header; `upgraded` (given at init) gets the socket.
        func upgrade(to protocol: String, header: (String, String)) -> MHD_Result {
            larder_http_upgrade(connection, server, `protocol`, header.0, header.1)
        }
    }

    /// A connection's socket after an upgrade, on the daemon's thread: the bytes read past the request, the socket,
    /// and what hands it back to libmicrohttpd (which closes it; call once, from any thread).
    typealias Upgraded = @Sendable (_ early: [UInt8], _ fd: Int32, _ release: @escaping @Sendable () -> Void) -> Void

    private let route: @Sendable (Exchange) -> MHD_Result
    private let upgraded: Upgraded?
    private let limits: Limits
    private let server: UnsafeMutablePointer<larder_http_server>
    private var daemon: OpaquePointer?
    /// Open connections by the address of their `MHD_Connection`.
    private let tracked = Mutex<[UInt: Tracked]>([:])
    private var watchdog: (any DispatchSourceTimer)?
    /// The bound port (useful with port 0).
    let port: Int

    /// Serves `/metrics` and `/healthz`.
    convenience init(host: String, port: Int, limits: Limits = Limits(), handlers: Handlers) throws(IOError) {
        try self.init(host: host, port: port, limits: limits, route: { HTTPServer.answerMetrics($0, handlers) })
    }

    /// Serves what `route` answers; with `upgraded`, connections may be upgraded (`Exchange.upgrade`), and up to
    /// `upgradedConnections` of them stay open beside the `limits.connections` HTTP clients. With `tls` (PEM text of a
    /// certificate chain and its key) it speaks HTTPS.
    init(
        host: String, port: Int, limits: Limits = Limits(), upgradedConnections: Int = 0,
        tls: (certificate: String, key: String)? = nil,
        route: @escaping @Sendable (Exchange) -> MHD_Result, upgraded: Upgraded? = nil
    ) throws(IOError) {
        self.route = route
        self.upgraded = upgraded
        self.limits = limits
        let (fd, bound) = try Socket.listenTCP(host: host, port: port, backlog: 64)
        self.port = bound
        server = .allocate(capacity: 1)
        server.initialize(
            to: larder_http_server(
                handler: { context, connection, method, url in
                    let me = Unmanaged<HTTPServer>.fromOpaque(context!).takeUnretainedValue()
                    return me.answer(connection!, method: String(cString: method!), path: String(cString: url!))
                },
                observer: { context, connection, event, fd in
                    let me = Unmanaged<HTTPServer>.fromOpaque(context!).takeUnretainedValue()
                    me.observe(UInt(bitPattern: connection), event: event, fd: fd)
                },
                admit: { context in
                    Unmanaged<HTTPServer>.fromOpaque(context!).takeUnretainedValue().admit() ? 1 : 0
                },
                upgraded: upgraded == nil
                    ? nil
                    : { context, connection, extra, count, fd, handle in
                        let me = Unmanaged<HTTPServer>.fromOpaque(context!).takeUnretainedValue()
                        let early = extra.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
                        let handle = UpgradeHandle(handle!)
                        me.markUpgraded(UInt(bitPattern: connection))
                        me.upgraded?(early, fd, { handle.close() })
                    }, context: nil))
        server.pointee.context = Unmanaged.passUnretained(self).toOpaque()
        // libmicrohttpd's own ceiling leaves room for connections cut but not yet cleaned up; `admit` keeps to
        // `limits.connections`.
        let connections = UInt32(limits.connections * 2 + upgradedConnections)
        guard let daemon = larder_http_start(fd, server, connections, 10, tls?.certificate, tls?.key) else {
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
                guard table[connection]?.upgraded != true else { return }
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
            guard table.values.count(where: { !$0.cut && !$0.upgraded }) >= limits.connections else { return true }
            let waiting = table.filter { !$0.value.cut && !$0.value.answering && !$0.value.upgraded }
            guard let oldest = waiting.min(by: { $0.value.since < $1.value.since }) else { return false }
            Self.cut(&table, oldest.key)
            return true
        }
    }

    /// Shuts down every connection whose exchange has outlived the deadline (on the watchdog's queue).
    private func cutOverdue() {
        let now = ContinuousClock.now
        tracked.withLock { table in
            for (connection, entry) in table
            where !entry.cut && !entry.upgraded && now - entry.since >= limits.requestTimeout {
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

    /// `connection` was upgraded: it leaves the watchdog's and the admission's count. By the connection, not its
    /// socket: over TLS the socket handed over is one end of a pair, not the client's.
    private func markUpgraded(_ connection: UInt) {
        tracked.withLock { $0[connection]?.upgraded = true }
    }

    private func answer(_ connection: OpaquePointer, method: String, path: String) -> MHD_Result {
        route(Exchange(connection: connection, method: method, path: path, server: server))
    }

    /// `/metrics` and `/healthz`.
    private static func answerMetrics(_ exchange: Exchange, _ handlers: Handlers) -> MHD_Result {
        func respond(_ status: UInt32, _ body: String, type: String = "text/plain; charset=utf-8") -> MHD_Result {
            exchange.respond(status, Array(body.utf8), type: type)
        }
        let method = exchange.method
        guard method == "GET" || method == "HEAD" else {
            return respond(405, "only GET and HEAD are served here\n")
        }
        switch exchange.path {
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

/// libmicrohttpd's handle of an upgraded connection, handed back once (`close`) from the socket's event loop.
private final class UpgradeHandle: @unchecked Sendable {
    /// The handle's address; 0 once handed back.
    private let address: Mutex<UInt>

    init(_ handle: OpaquePointer) { address = Mutex(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))) }

    func close() {
        let taken = address.withLock { value -> UInt in
            defer { value = 0 }
            return value
        }
        guard let handle = OpaquePointer(bitPattern: taken) else { return }
        larder_http_upgrade_close(handle)
    }
}
