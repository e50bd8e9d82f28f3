#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderServer
import LarderSync
import LarderTestThreads
import Testing

/// The client library's settings and callbacks, each checked for what it does against a real server.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ClientOptionTests {
    /// A TCP listener that never accepts: the kernel completes the connection (the backlog), and nobody answers.
    final class SilentListener {
        let fd: Int32
        let port: Int

        init() throws { (fd, port) = try listenOnLoopback() }

        deinit { close(fd) }
    }

    /// A server that takes the connection and never answers HELLO: the connect timeout ends the wait (the request
    /// timeout is off, so nothing else could), as a connect failure.
    @Test func connectTimeoutBoundsTheHandshake() async throws {
        let silent = try SilentListener()
        let client = LarderClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: silent.port), requestTimeout: nil, connectTimeout: .seconds(1)))
        defer { client.close() }
        let error = await #expect(throws: LarderError.self) { try await client.ping() }
        #expect(error?.status == .unavailable && error?.isConnectFailure == true)
        let message = error?.message ?? ""
        #expect(message.contains("no answer to HELLO within the connect timeout"), "\(message)")
        #expect(message.contains("127.0.0.1:\(silent.port)"))
    }

    /// Without compression the client offers none in HELLO, and the server sends every answer as it is; with it (the
    /// default), a large answer goes compressed. The server's byte counts tell.
    @Test func compressionFalseOffersNone() async throws {
        for compression in [false, true] {
            let server = try ClientTestServer()
            defer { server.stop() }
            let client = LarderClient(
                configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: server.port), compression: compression))
            defer { client.close() }
            #expect(try await client.serverHello().compression == (compression ? "zlib" : "none"))
            for n in 0..<100 {
                _ = try await client.create("items", ["item": .string("Iced latte 冰拿鐵 #\(n)"), "store": "7-Eleven"])
            }
            func sent() async throws -> (wire: Int64, plain: Int64) {
                let bytes = try await client.stats()["bytes"]
                return (try #require(bytes?["outWire"]?.intValue), try #require(bytes?["outUncompressed"]?.intValue))
            }
            let before = try await sent()
            let page = try await client.search("items", SearchQuery(limit: 100))
            #expect(page.records.count == 100)
            let after = try await sent()
            // The search's answer (and the first STATS answer, which is small).
            let wire = after.wire - before.wire
            let plain = after.plain - before.plain
            if compression {
                #expect(wire < plain / 3, "\(wire) bytes on the wire for \(plain)")
            } else {
                #expect(wire == plain && plain > 10_000, "\(wire) bytes on the wire for \(plain)")
            }
        }
    }

    /// What the server announced: its version, its limits as configured, whether it wants a token.
    @Test func serverHelloIsWhatTheServerAnnounced() async throws {
        let server = try ClientTestServer { configuration in
            configuration.limits.maxInFlight = 7
            configuration.limits.maxBlobBytes = 3 << 20
            configuration.compressionThreshold = 300
        }
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let hello = try await client.serverHello()
        #expect(hello.version == 1 && hello.server == LarderServer.serverName && !hello.authRequired)
        #expect(hello.limits == server.server.configuration.limits)
        #expect(hello.limits.maxInFlight == 7 && hello.limits.maxBlobBytes == 3 << 20)
        #expect(hello.compression == "zlib" && hello.compressionThreshold == 300)
        // The same answer again, from the open connection.
        #expect(try await client.serverHello() == hello)
    }

    /// A photo of a megabyte or more reports its progress both ways: steps that never go back, ending at the whole.
    @Test func uploadAndDownloadProgress() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let jpeg = uniqueJPEG(commentBytes: 2 << 20)
        let sent = Locked<[(Int, Int)]>([])
        let info = try await client.blobPut(Data(jpeg)) { done, total in sent.withLock { $0.append((done, total)) } }
        let received = Locked<[(Int, Int)]>([])
        let blob = try await client.blobGet(info.id) { done, total in received.withLock { $0.append((done, total)) } }
        #expect(blob.bytes == Data(jpeg))
        for (name, steps) in [("upload", sent.withLock { $0 }), ("download", received.withLock { $0 })] {
            let total = try #require(steps.last?.1, "\(name): no progress")
            #expect(total >= jpeg.count && total < jpeg.count + 4096, "\(name): total \(total)")
            #expect(steps.allSatisfy { $0.1 == total } && steps.last?.0 == total, "\(name)")
            #expect(zip(steps, steps.dropFirst()).allSatisfy { $0.0 <= $1.0 }, "\(name) went back")
            #expect(steps.count >= 2, "\(name): \(steps.count) steps for \(total) bytes")
        }
        // Small photos are sent and read at once, without progress.
        let small = Locked(0)
        let smallInfo = try await client.blobPut(Data(uniqueJPEG(commentBytes: 1000))) { _, _ in
            small.withLock { $0 += 1 }
        }
        _ = try await client.blobGet(smallInfo.id) { _, _ in small.withLock { $0 += 1 } }
        #expect(small.withLock { $0 } == 0)
    }
}
