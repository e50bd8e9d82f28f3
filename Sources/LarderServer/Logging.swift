#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import LarderIO
import LarderWire

extension Socket {
    /// The peer of a TCP connection as `127.0.0.1:54321` or `[::1]:54321`, for the logs; `unknown` when the kernel
    /// no longer knows it (the peer already reset the connection).
    static func peerName(_ fd: Int32) -> String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        guard got == 0 else { return "unknown" }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let family = Int32(storage.ss_family)
        return withUnsafePointer(to: &storage) { pointer -> String in
            switch family {
            case AF_INET:
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address -> String in
                    var ip = address.pointee.sin_addr
                    inet_ntop(AF_INET, &ip, &text, socklen_t(text.count))
                    return "\(ip: text):\(UInt16(bigEndian: address.pointee.sin_port))"
                }
            case AF_INET6:
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address -> String in
                    var ip = address.pointee.sin6_addr
                    inet_ntop(AF_INET6, &ip, &text, socklen_t(text.count))
                    return "[\(ip: text)]:\(UInt16(bigEndian: address.pointee.sin6_port))"
                }
            default:
                return "unknown"
            }
        }
    }
}

extension DefaultStringInterpolation {
    /// A NUL-terminated C string in a buffer (what `inet_ntop` wrote).
    fileprivate mutating func appendInterpolation(ip text: [CChar]) {
        appendLiteral(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
}

extension Logger {
    /// A request that took at least `slowMicros`: its opcode, status and duration, never its content.
    func slowRequest(connection: Int, peer: String, _ reply: Reply, micros: UInt64) {
        slowRequest(
            connection: connection, peer: peer, reply.opcode, reply.status, requestID: reply.requestID, micros: micros)
    }

    /// The same for an answer the connection made itself (HELLO, a refusal): `requestID` is nil for an error it sent
    /// unprompted, which answers no request.
    func slowRequest(
        connection: Int, peer: String, _ opcode: Opcode, _ status: Status, requestID: UInt32?, micros: UInt64
    ) {
        guard micros >= slowMicros else { return }
        var fields: [(String, JSON)] = [("opcode", .string(opcode.name)), ("status", .string(status.name))]
        if let requestID { fields.append(("requestId", .int(Int64(requestID)))) }
        fields.append(("durationMs", .double(Double(micros) / 1000)))
        log(.warn, "slow request", Context(connection: connection, peer: peer, fields: fields))
    }
}
