#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call: its name and errno. `description` is what the operator reads.
public struct IOError: Error, Sendable, Equatable, CustomStringConvertible {
    public var call: String
    public var errno: Int32

    public init(_ call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    public var description: String { "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))" }
}

/// The outcome of a non-blocking call that did not fail.
package enum IOResult: Equatable {
    case done(Int)
    case wouldBlock
}

/// Every system call of the server goes through here: `EINTR` is retried, `EAGAIN`/`EWOULDBLOCK` become
/// `.wouldBlock`, anything else throws an `IOError` naming the call.
@inline(__always)
package func systemCall(_ name: String, _ body: () -> Int) throws(IOError) -> IOResult {
    while true {
        let result = body()
        if result >= 0 { return .done(result) }
        let error = errno
        if error == EINTR { continue }
        if error == EAGAIN || error == EWOULDBLOCK { return .wouldBlock }
        throw IOError(name, errno: error)
    }
}

/// `systemCall` for calls that never legitimately block (socket, bind, setsockopt...).
@discardableResult
package func blockingCall(_ name: String, _ body: () -> Int32) throws(IOError) -> Int32 {
    switch try systemCall(name, { Int(body()) }) {
    case .done(let value): return Int32(value)
    case .wouldBlock: throw IOError(name, errno: EAGAIN)
    }
}
