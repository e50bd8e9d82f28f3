#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CMicroHTTPD
import LarderIO
import LarderWire

/// `--metrics-port`: `/metrics` (Prometheus text format) and `/healthz` over HTTP/1.1, served by GNU libmicrohttpd on
/// one thread of its own. A library rather than a parser of our own: HTTP's corner cases (pipelining, chunked bodies,
/// slow clients, header limits) are libmicrohttpd's well-tested business, and the endpoint stays small. It serves at
/// most 16 clients at once and closes one silent for 10 s.
final class MetricsServer: @unchecked Sendable {
    /// What the endpoints answer, computed on the HTTP thread for each request.
    struct Handlers: Sendable {
        /// The `/metrics` body.
        var metrics: @Sendable () -> String
        /// nil when healthy, else why not (the body of the 503).
        var unhealthy: @Sendable () -> String?
    }

    private let handlers: Handlers
    private let server: UnsafeMutablePointer<larder_http_server>
    private var daemon: OpaquePointer?
    /// The bound port (useful with port 0).
    let port: Int

    init(host: String, port: Int, handlers: Handlers) throws(IOError) {
        self.handlers = handlers
        let (fd, bound) = try Socket.listenTCP(host: host, port: port, backlog: 64)
        self.port = bound
        server = .allocate(capacity: 1)
        server.initialize(
            to: larder_http_server(
                handler: { context, connection, method, url in
                    let me = Unmanaged<MetricsServer>.fromOpaque(context!).takeUnretainedValue()
                    return me.answer(connection!, method: String(cString: method!), path: String(cString: url!))
                }, context: nil))
        server.pointee.context = Unmanaged.passUnretained(self).toOpaque()
        guard let daemon = larder_http_start(fd, server, 16, 10) else {
            Socket.close(fd)
            server.deallocate()
            throw IOError("MHD_start_daemon", errno: errno)
        }
        self.daemon = daemon
    }

    /// Stops serving: waits for the request being answered, then closes every connection and the listener.
    func stop() {
        guard let daemon else { return }
        self.daemon = nil
        // It closes the listening socket too.
        MHD_stop_daemon(daemon)
    }

    deinit {
        stop()
        server.deallocate()
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
