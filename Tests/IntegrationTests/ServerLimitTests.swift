#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Small limits so that crossing each one is cheap.
private func smallLimits(_ c: inout ServerConfiguration) {
    c.limits.maxJSONBytes = 64 << 10
    c.limits.maxDocumentBytes = 16 << 10
    c.limits.maxBlobBytes = 256 << 10
    c.limits.maxFrameBytes = 24 + (64 << 10) + (256 << 10)
}

/// A frame built byte by byte, so tests can lie in any field.
private func rawFrame(
    opcode: Opcode, id: UInt32, version: UInt8 = 1, magic: UInt16 = 0x4C52, flags: UInt8 = 0, json: [UInt8],
    uncompressedLength: Int = 0
) -> [UInt8] {
    func u32(_ v: Int) -> [UInt8] { [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
    var out = u32(24 + json.count)
    out += [UInt8(magic >> 8), UInt8(magic & 0xFF), version, flags]
    out += [UInt8(opcode.rawValue >> 8), UInt8(opcode.rawValue & 0xFF), 0, 0]
    out += u32(Int(id)) + u32(json.count) + u32(0) + u32(uncompressedLength)
    return out + json
}

@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ServerLimitTests {
    @Test func frameOverTheLimitIsRejectedBeforeItsBody() throws {
        try withServerWithoutListener(smallLimits) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            var bytes = c.encode(.ping, id: 9)
            let huge = server.configuration.limits.maxFrameBytes + 1
            bytes.replaceSubrange(0..<4, with: [UInt8(huge >> 24), UInt8(huge >> 16 & 0xFF), UInt8(huge >> 8 & 0xFF), UInt8(huge & 0xFF)])
            try c.writeAll(Array(bytes.prefix(6)))  // six bytes (length and magic) are enough to know
            let frames = try c.framesUntilClosed()
            #expect(frames.map(\.status) == [.payloadTooLarge])
            #expect(frames.first?.replyJSON["limit"]?.intValue == Int64(server.configuration.limits.maxFrameBytes))
        }
    }

    @Test func jsonPartOverTheLimitClosesTheConnection() throws {
        try withServerWithoutListener(smallLimits) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            try c.send(.create, ["collection": "a", "data": ["pad": .string(String(repeating: "x", count: 70_000))]])
            #expect(try c.framesUntilClosed().map(\.status) == [.payloadTooLarge])
        }
    }

    @Test func documentOverTheLimitIsAnErrorButTheConnectionStays() throws {
        try withServerWithoutListener(smallLimits) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let big = try c.call(.create, ["collection": "a", "data": ["pad": .string(String(repeating: "x", count: 20_000))]])
            #expect(big.status == .payloadTooLarge)
            #expect(try c.call(.create, ["collection": "a", "data": ["pad": "small"]]).status == .ok)
        }
    }

    /// Over TCP: the client's 300 KiB fits the loopback socket's buffers, so its write completes before the close.
    @Test func blobOverTheLimitClosesTheConnection() throws {
        try withServerOnPort0(smallLimits) { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            try c.send(.blobPut, [:], binary: [UInt8](repeating: 0xFF, count: 300 << 10))
            #expect(try c.framesUntilClosed().map(\.status) == [.payloadTooLarge])
        }
    }

    @Test func connectionsOverTheLimitAreRefused() throws {
        try withServerWithoutListener({ $0.limits.maxConnections = 3 }) { server in
            var clients = try (0..<3).map { _ in try RawClient.connected(to: server) }
            for c in clients { try c.hello() }
            let extra = try RawClient.connected(to: server)
            #expect(try extra.framesUntilClosed().map(\.status) == [.resourceExhausted])
            clients.removeLast()
            let deadline = Date().addingTimeInterval(120)
            while server.openConnections > 2 && Date() < deadline { usleep(10_000) }
            let again = try RawClient.connected(to: server)
            try again.hello()
            #expect(try again.call(.stats).replyJSON["connections"]?["refused"] == 1)
        }
    }

    /// The first two SEARCHes are held on a gate, so they are surely in flight when the other three arrive.
    @Test func requestsOverTheInFlightLimitAreResourceExhausted() throws {
        let gate = try ServerGate()
        defer { gate.open() }
        try withServerOnPort0(hooks: ServerHooks(search: gate.gate)) {
            $0.limits.maxInFlight = 2
        } _: { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            var batch: [UInt8] = []
            for id in UInt32(100)..<105 { batch += c.encode(.search, ["collection": "x"], id: id) }
            try c.writeAll(batch)
            try gate.waitForHeld(2)
            var statuses: [UInt32: Status] = [:]
            for _ in 0..<3 {
                let frame = try #require(try c.receive(timeout: 120))
                statuses[frame.requestID] = frame.status
            }
            #expect(statuses == [102: .resourceExhausted, 103: .resourceExhausted, 104: .resourceExhausted])
            gate.open()
            for _ in 0..<2 {
                let frame = try #require(try c.receive(timeout: 120))
                statuses[frame.requestID] = frame.status
            }
            #expect(statuses[100] == .ok && statuses[101] == .ok)
            #expect(try c.call(.ping).status == .ok)
        }
    }

    /// The work pool's bound crossed: one thread, one request allowed to wait. The first SEARCH holds the thread on
    /// a gate, the second waits, the third is refused at once with the limit named; the held ones are answered once
    /// the gate opens, and STATS shows the pool's size and the refusal. HELLO announces the bound.
    @Test func requestsPastTheWorkPoolBoundAreResourceExhausted() throws {
        let gate = try ServerGate()
        defer { gate.open() }
        try withServerOnPort0(hooks: ServerHooks(search: gate.gate)) {
            $0.workThreads = 1
            $0.maxQueuedWork = 1
        } _: { _, port in
            let c = try RawClient.tcp(port: port)
            // Announced like every limit, though it counts the requests of all connections together.
            #expect(try c.hello().limits.maxQueuedWork == 1)
            _ = try c.send(.search, ["collection": "x"], id: 100)
            try gate.waitForHeld(1)
            _ = try c.send(.search, ["collection": "x"], id: 101)
            _ = try c.send(.search, ["collection": "x"], id: 102)
            let refused = try #require(try c.receive(timeout: 120))
            #expect(refused.requestID == 102 && refused.status == .resourceExhausted)
            let error = refused.replyJSON
            #expect(error["limit"] == 1)
            #expect(error["message"]?.stringValue?.contains("--max-queued-work") == true)
            gate.open()
            var statuses: [UInt32: Status] = [:]
            for _ in 0..<2 {
                let frame = try #require(try c.receive(timeout: 120))
                statuses[frame.requestID] = frame.status
            }
            #expect(statuses == [100: .ok, 101: .ok])
            let pool = try c.call(.stats).replyJSON["workPool"]
            #expect(pool?["threads"] == 1 && pool?["maxQueued"] == 1 && pool?["refused"] == 1)
        }
    }

    @Test func idleConnectionsAreClosed() throws {
        try withServerWithoutListener({ $0.limits.idleTimeoutMs = 300 }) { server in
            // Before connecting: the server's idle clock starts at the HELLO (or the accept), never earlier, whereas
            // a busy machine can hold this thread back for a while after HELLO's answer.
            let started = Date()
            let c = try RawClient.connected(to: server)
            // Not waited for: a machine slow to send it may find the connection closed as idle before its HELLO,
            // which is as idle as after it.
            let hello = try c.send(.hello, HelloRequest(client: "server-tests").json)
            var frames = try c.framesUntilClosed(timeout: 120)
            if frames.first?.requestID == hello {
                #expect(frames.removeFirst().status == .ok)
            }
            #expect(frames.map(\.status) == [.deadlineExceeded])
            #expect(frames.first?.requestID == 0)
            #expect(Date().timeIntervalSince(started) >= 0.25)
        }
    }

    @Test func aFrameThatStartsMustFinish() throws {
        try withServerWithoutListener({ $0.limits.frameTimeoutMs = 300 }) { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let frame = c.encode(.get, ["collection": "a", "id": .string(UUID().wireString)], id: 3)
            try c.writeAll(Array(frame.prefix(10)))
            #expect(try c.framesUntilClosed(timeout: 120).map(\.status) == [.deadlineExceeded])
        }
    }

    /// Each broken stream gets its status (and a close where the stream cannot go on) while another client works.
    @Test func malformedInputIsContained() throws {
        try withServerWithoutListener { server in
            let observer = try RawClient.connected(to: server)
            try observer.hello()
            let id = try Record(json: observer.call(.create, ["collection": "o", "data": ["k": 1]]).jsonObject()).id
            func observerWorks() throws {
                #expect(try observer.call(.ping).status == .ok)
                #expect(try observer.call(.get, ["collection": "o", "id": .string(id.wireString)]).status == .ok)
            }
            let ping = rawFrame(opcode: .ping, id: 4, json: Array("{}".utf8))

            let badMagic = try RawClient.connected(to: server)
            try badMagic.hello()
            try badMagic.writeAll(rawFrame(opcode: .ping, id: 4, magic: 0x4854, json: Array("{}".utf8)))
            #expect(try badMagic.framesUntilClosed().map(\.status) == [.protocolError])
            try observerWorks()

            let wrongVersion = try RawClient.connected(to: server)
            try wrongVersion.writeAll(rawFrame(opcode: .hello, id: 1, version: 9, json: Array("{}".utf8)))
            let versionFrames = try wrongVersion.framesUntilClosed()
            #expect(versionFrames.map(\.status) == [.unsupportedVersion])
            #expect(versionFrames.first?.requestID == 1)
            try observerWorks()

            let truncated = try RawClient.connected(to: server)
            try truncated.hello()
            try truncated.writeAll(Array(ping.prefix(ping.count - 1)))
            truncated.shutdownWrite()
            #expect(try truncated.framesUntilClosed().map(\.status) == [.protocolError])
            try observerWorks()

            let bomb = try RawClient.connected(to: server)
            try bomb.hello()
            let inflated = Array(("{\"pad\":\"" + String(repeating: " ", count: 3_000_000) + "\"}").utf8)
            let compressed = Deflater(level: 9).compress(inflated)
            #expect(compressed.count < 10_000)
            try bomb.writeAll(
                rawFrame(opcode: .create, id: 6, flags: 0x01, json: compressed, uncompressedLength: 1000))
            let bombFrames = try bomb.framesUntilClosed()
            #expect(bombFrames.count == 1)
            #expect(bombFrames.first.map { $0.status == .protocolError || $0.status == .payloadTooLarge } == true)
            try observerWorks()

            let invalidJSON = try RawClient.connected(to: server)
            try invalidJSON.hello()
            try invalidJSON.writeAll(rawFrame(opcode: .create, id: 7, json: Array("{\"collection\": nope".utf8)))
            let invalid = try #require(try invalidJSON.receive())
            #expect(invalid.status == .invalidArgument && invalid.requestID == 7)
            #expect(try invalidJSON.call(.ping).status == .ok)
            try observerWorks()

            let unknown = try RawClient.connected(to: server)
            try unknown.hello()
            #expect(try unknown.call(Opcode(rawValue: 0x0EEE)).status == .unknownOpcode)
            #expect(try unknown.call(.ping).status == .ok)
            try observerWorks()
        }
    }

    /// A client that writes requests and never reads: the server stops reading from it once its unsent output
    /// passes the high-water mark, so what it buffers stays bounded.
    @Test func aClientThatNeverReadsCannotGrowServerMemory() throws {
        let highWater = 64 << 10
        try withServerWithoutListener({ $0.outputHighWaterBytes = highWater }) { server in
            let setup = try RawClient.connected(to: server)
            try setup.hello()
            let doc = try setup.call(.create, ["collection": "b", "data": ["pad": .string(String(repeating: "y", count: 2000))]])
            let id = try Record(json: doc.jsonObject()).id

            let greedy = try RawClient.connected(to: server)
            try greedy.hello()
            var one = 32 << 10
            setsockopt(greedy.fd, SOL_SOCKET, SO_RCVBUF, &one, socklen_t(MemoryLayout<Int32>.size))
            let flags = fcntl(greedy.fd, F_GETFL)
            _ = fcntl(greedy.fd, F_SETFL, flags | O_NONBLOCK)
            // A hundred GETs at a time, each with an id of its own (an id must not be reused before its answer).
            var nextID: UInt32 = 0
            func chunk() -> ArraySlice<UInt8> {
                var bytes: [UInt8] = []
                for _ in 0..<100 {
                    nextID &+= 1
                    bytes += greedy.encode(.get, ["collection": "b", "id": .string(id.wireString)], id: nextID)
                }
                return bytes[...]
            }
            var stalls = 0
            var sent = 0
            var pending = chunk()
            // Until the server stops reading with its output at the mark. On a slow machine (a sanitizer) the socket
            // can also stall because the server is merely behind, so a stall alone does not end the attempt.
            let deadline = Date().addingTimeInterval(120)
            while (stalls < 20 || server.peakUnsentBytes < highWater) && sent < 200 << 20 && Date() < deadline {
                let n = pending.withUnsafeBytes { Glibc.write(greedy.fd, $0.baseAddress, $0.count) }
                if n > 0 {
                    sent += n
                    stalls = 0
                    pending = pending.dropFirst(n)
                    if pending.isEmpty { pending = chunk() }
                } else {
                    stalls += 1
                    usleep(50_000)
                }
            }
            #expect(stalls >= 20, "the server kept reading \(sent) bytes")
            let peak = server.peakUnsentBytes
            let replySize = 2_200
            let bound = highWater + (server.configuration.limits.maxInFlight + 1) * replySize
            #expect(peak >= highWater)
            #expect(peak <= bound)
            // STATS reports the same peak (or a later one, when a slow machine was still answering: still bounded).
            let reported = try setup.call(.stats).replyJSON["connections"]?["peakUnsentBytes"]?.intValue ?? -1
            #expect(reported >= Int64(peak) && reported <= Int64(bound))
            #expect(try setup.call(.ping).status == .ok)
        }
    }
}
