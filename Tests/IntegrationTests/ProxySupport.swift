#if canImport(Glibc)
import Glibc
#endif
import LarderIO

/// Copies `from` to `to` until either end closes, for the tests' proxies. `seen` gets each read before it is passed
/// on (so a request is noted before the server can answer it); `forwarded` gets it after, and ends the copy by
/// answering false.
func relay(
    from: Int32, to: Int32, seen: ([UInt8]) -> Void = { _ in }, forwarded: ([UInt8]) -> Bool = { _ in true }
) {
    var chunk = [UInt8](repeating: 0, count: 256 << 10)
    while true {
        let n = chunk.withUnsafeMutableBytes { Glibc.read(from, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return }
        seen(Array(chunk[0..<n]))
        let code = chunk.withUnsafeBytes { Socket.sendAll(to, UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        guard code == 0, forwarded(Array(chunk[0..<n])) else { return }
    }
}
