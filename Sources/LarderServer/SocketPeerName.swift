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
