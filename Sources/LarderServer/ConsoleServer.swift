#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CMicroHTTPD
import COpenSSL
import Foundation
import LarderIO

/// `--console-port`: the web console's files, and at `/ws` a WebSocket whose binary messages are Larder frames, one
/// frame per message (`WebSocketTransport`). The HTTP side and the upgrade handshake are libmicrohttpd's (already
/// linked for `/metrics`, and it hands the upgraded socket over as it is, so the connection runs on an event loop like
/// any other); libwebsockets would bring a second event loop and its own connection code, where the point is that a
/// browser goes through the same connection code as TCP. Only the framing of RFC 6455 is ours (`WebSocketDecoder`),
/// since libmicrohttpd stops at the handshake.
///
/// The files are read once at start from `--console-dir` (by default `console` beside the executable, where an
/// install puts them) and served from memory: only the files found then are served, whatever the path asks.
final class ConsoleServer: @unchecked Sendable {
    /// One file of the console, in memory.
    struct File: Sendable {
        var bytes: [UInt8]
        var type: String
    }

    /// The policy of every answer: the page's own scripts and styles only (no inline script), photos as `blob:` URLs
    /// made from WebSocket answers, and connections to its own origin, the WebSocket included.
    static let contentSecurityPolicy =
        "default-src 'self'; img-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        + "form-action 'none'; frame-ancestors 'none'"

    private let http: HTTPServer
    /// The bound port (useful with port 0).
    var port: Int { http.port }

    /// Serves `files` on `host:port`, over HTTPS with `tls` (PEM text); `origins` are the origins besides the
    /// console's own that may open `/ws`; `upgraded` gets each WebSocket's socket.
    init(
        host: String, port: Int, files: [String: File], origins: [String], maxConnections: Int,
        requestTimeout: Duration = .seconds(10), tls: (certificate: String, key: String)? = nil,
        upgraded: @escaping HTTPServer.Upgraded
    ) throws(IOError) {
        let scheme = tls == nil ? "http://" : "https://"
        http = try HTTPServer(
            host: host, port: port, limits: HTTPServer.Limits(requestTimeout: requestTimeout),
            upgradedConnections: maxConnections, tls: tls,
            route: { ConsoleServer.answer($0, files: files, origins: origins, scheme: scheme) }, upgraded: upgraded)
    }

    func stop() { http.stop() }

    /// `console` in the executable's directory: where an install puts the files.
    static var besideExecutable: String {
        let executable = CommandLine.arguments.first.map { URL(fileURLWithPath: $0).resolvingSymlinksInPath().path }
            ?? ""
        return (executable as NSString).deletingLastPathComponent + "/console"
    }

    /// Reads the console's files (one level: the directory's regular files) from `directory`.
    static func load(_ directory: String) throws(IOError) -> [String: File] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else {
            throw IOError("console directory \(directory): cannot be read (set --console-dir)", errno: ENOENT)
        }
        var files: [String: File] = [:]
        for name in names where !name.hasPrefix(".") {
            let path = directory + "/" + name
            guard let data = FileManager.default.contents(atPath: path), let type = mediaType(name) else { continue }
            files["/" + name] = File(bytes: Array(data), type: type)
        }
        guard files["/index.html"] != nil else {
            throw IOError("console directory \(directory) has no index.html (set --console-dir)", errno: ENOENT)
        }
        return files
    }

    private static func mediaType(_ name: String) -> String? {
        switch (name as NSString).pathExtension {
        case "html": "text/html; charset=utf-8"
        case "js": "text/javascript; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        case "svg": "image/svg+xml"
        case "png": "image/png"
        case "ico": "image/x-icon"
        case "json": "application/json"
        default: nil
        }
    }

    private static let securityHeaders = [
        ("Content-Security-Policy", contentSecurityPolicy), ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"), ("X-Frame-Options", "DENY"),
    ]

    private static func answer(
        _ exchange: HTTPServer.Exchange, files: [String: File], origins: [String], scheme: String
    ) -> MHD_Result {
        guard exchange.method == "GET" || exchange.method == "HEAD" else {
            return exchange.respond(405, "only GET and HEAD are served here\n", headers: securityHeaders)
        }
        if exchange.path == "/ws" { return upgrade(exchange, origins: origins, scheme: scheme) }
        let path = exchange.path == "/" ? "/index.html" : exchange.path
        guard let file = files[path] else {
            return exchange.respond(404, "not found: \(path.prefix(200))\n", headers: securityHeaders)
        }
        return exchange.respond(
            200, file.bytes, type: file.type, headers: securityHeaders + [("Cache-Control", "no-cache")])
    }

    /// RFC 6455 section 4.2: a GET with `Upgrade: websocket`, version 13 and a 16-byte key, from an allowed origin.
    private static func upgrade(_ exchange: HTTPServer.Exchange, origins: [String], scheme: String) -> MHD_Result {
        func refuse(_ status: UInt32, _ why: String, _ headers: [(String, String)] = []) -> MHD_Result {
            exchange.respond(status, why + "\n", headers: securityHeaders + headers)
        }
        guard exchange.header("Upgrade")?.lowercased().split(separator: ",").contains(where: {
            $0.trimmingCharacters(in: CharacterSet.whitespaces) == "websocket"
        }) == true
        else { return refuse(426, "/ws speaks WebSocket: send Upgrade: websocket", [("Upgrade", "websocket")]) }
        guard exchange.header("Sec-WebSocket-Version") == "13" else {
            return refuse(426, "WebSocket version 13 only", [("Sec-WebSocket-Version", "13")])
        }
        guard let key = exchange.header("Sec-WebSocket-Key"), Data(base64Encoded: key)?.count == 16 else {
            return refuse(400, "Sec-WebSocket-Key must be 16 bytes in base64")
        }
        if let origin = exchange.header("Origin") {
            guard originAllowed(origin, scheme: scheme, host: exchange.header("Host"), extra: origins) else {
                return refuse(
                    403, "origin \(origin.prefix(100)) may not open the console's WebSocket (--console-origin)")
            }
        }
        return exchange.upgrade(to: "websocket", header: ("Sec-WebSocket-Accept", acceptKey(key)))
    }

    /// The console's own origin (its scheme and the Host the browser asked for), or one of `extra`. A request with no
    /// Origin is not a browser's page, and may open the socket: the check protects a browser's user from other
    /// sites' pages, and a HELLO still needs a token.
    static func originAllowed(_ origin: String, scheme: String, host: String?, extra: [String]) -> Bool {
        if extra.contains(origin) { return true }
        guard let host else { return false }
        return origin == scheme + host
    }

    /// `Sec-WebSocket-Accept`: base64 of the SHA-1 of the key and RFC 6455's GUID.
    static func acceptKey(_ key: String) -> String {
        let input = Array((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)
        var digest = [UInt8](repeating: 0, count: 20)
        var size: UInt32 = 0
        _ = EVP_Digest(input, input.count, &digest, &size, EVP_sha1(), nil)
        return Data(digest).base64EncodedString()
    }
}
