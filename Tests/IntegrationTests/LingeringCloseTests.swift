#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// A client that goes on sending after the server closed on a protocol error still reads the error frame and then the
/// end of the stream: the server reads and drops the rest of its input instead of closing the socket on it, which would
/// make the kernel send a reset that can destroy the frame on its way.
@Suite(.ownThreads, .timeLimit(.minutes(10))) struct LingeringCloseTests {
    /// A frame with a bad magic, then 4 MiB more: far more than the socket buffers hold, so the client's write
    /// finishes only if the server reads it all.
    static let hostile = HostileFrames.frame(2, json: [], magic: 0x4854) + [UInt8](repeating: 0x41, count: 4 << 20)

    @Test func theErrorFrameReachesAClientThatGoesOnSending() throws {
        try withServerWithoutListener { server in
            for _ in 0..<3 {
                let client = try RawClient.connected(to: server)
                try client.hello()
                try client.writeAll(LingeringCloseTests.hostile)
                let frames = try client.framesUntilClosed()
                #expect(frames.map(\.status) == [.protocolError], "\(frames.map(\.status.name))")
                #expect(!client.wasReset, "the server reset the connection")
            }
            // The server drained and closed each: it serves the next client.
            let next = try RawClient.connected(to: server)
            try next.hello()
            #expect(try next.call(.ping).status == .ok)
        }
    }
}
