#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import LarderIO
import LarderWire

/// The client's words for what LarderIO's sockets report: errors as `LarderError`.
enum ClientSocket {
    static func errnoText(_ code: Int32) -> String { String(cString: strerror(code)) }

    /// An error for a connection that could not be made; the CLI maps `details.reason == "connect"` to exit 2.
    static func connectError(_ endpoint: String, _ why: String, errno code: Int32? = nil) -> LarderError {
        var details: JSONObject = ["reason": "connect", "endpoint": .string(endpoint)]
        if let code { details["errno"] = .int(Int64(code)) }
        return LarderError(.unavailable, "cannot connect to \(endpoint): \(why)", details: details)
    }

    /// Connects a blocking stream socket to `endpoint`, giving up after `timeoutMs`.
    static func connect(_ endpoint: LarderClient.Endpoint, timeoutMs: Int) throws(LarderError) -> Int32 {
        do throws(ConnectFailure) {
            switch endpoint {
            case .unix(let path): return try Socket.connect(unixPath: path, timeoutMs: timeoutMs)
            case .tcp(let host, let port): return try Socket.connect(host: host, port: port, timeoutMs: timeoutMs)
            }
        } catch {
            throw connectError(endpoint.description, error.description, errno: error.errno)
        }
    }
}
