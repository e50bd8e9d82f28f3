import Foundation
import LarderTestThreads
import LarderWire
import LarderIO
import Testing

@testable import LarderServer

/// The connection's protocol logic, driven without sockets.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine

    static func frameBytes(_ opcode: Opcode, id: UInt32, json: JSONObject = [:], binary: [UInt8] = []) -> [UInt8] {
        FrameEncoder().encode(Frame(opcode: opcode, requestID: id, json: json.bytes, binary: binary))
    }

    static let hello = frameBytes(.hello, id: 1, json: HelloRequest(client: "test").json)

    /// Feeds bytes and returns the actions.
    static func feed(_ machine: inout Machine, _ bytes: [UInt8], now: UInt64 = 0) -> [Machine.Action] {
        bytes.withUnsafeBytes { machine.bytesReceived($0, now: now) }
    }

    /// Decodes everything the machine wants to write, and marks it written.
    static func drain(_ machine: inout Machine, now: UInt64 = 0) -> (frames: [Frame], actions: [Machine.Action]) {
        var buffer = ByteBuffer()
        var actions: [Machine.Action] = []
        // A large binary part is a buffer of its own: take the output one contiguous run at a time.
        while machine.unsentBytes > 0 {
            let count = machine.withUnsentOutput { raw in
                buffer.append(raw)
                return raw.count
            }
            actions += machine.writeCompleted(count, now: now)
        }
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var frames: [Frame] = []
        while let frame = try! decoder.next(&buffer) { frames.append(frame) }
        return (frames, actions)
    }

    static func executed(_ actions: [Machine.Action]) -> [Frame] {
        actions.compactMap { if case .execute(let frame) = $0 { frame } else { nil } }
    }

    static func closeReason(_ actions: [Machine.Action]) -> CloseReason? {
        actions.lazy.compactMap { if case .close(let reason) = $0 { reason } else { nil } }.first
    }

    static func ready(_ configuration: Machine.Configuration = .init()) -> Machine {
        var machine = Machine(configuration: configuration, now: 0)
        _ = feed(&machine, hello)
        _ = drain(&machine)
        return machine
    }

    @Test func helloIsAnsweredAndRaisesTheLimits() throws {
        var machine = Machine(configuration: .init(), now: 0)
        let actions = Self.feed(&machine, Self.hello)
        #expect(actions.contains(.flush))
        #expect(actions.contains(.record(.hello, .ok, requestID: 1)))
        let (frames, _) = Self.drain(&machine)
        #expect(frames.count == 1)
        let response = try HelloResponse(json: frames[0].jsonObject())
        #expect(response.version == 1)
        #expect(response.compression == "zlib")
        #expect(response.limits == .default)
        #expect(!response.authRequired)
        #expect(frames[0].requestID == 1 && frames[0].isResponse)
        #expect(machine.isHandshakeDone)
        // A frame larger than the handshake cap is fine now.
        let big = Self.frameBytes(.get, id: 2, json: ["pad": .string(String(repeating: "x", count: 100_000))])
        #expect(Self.executed(Self.feed(&machine, big)).count == 1)
    }

    @Test func beforeHelloOnlyHelloAndPingAreAccepted() {
        var machine = Machine(configuration: .init(), now: 0)
        #expect(Self.executed(Self.feed(&machine, Self.frameBytes(.ping, id: 7))).map(\.requestID) == [7])
        _ = machine.requestCompleted(Reply(opcode: .ping, requestID: 7, json: Array("{}".utf8)), now: 0)
        let actions = Self.feed(&machine, Self.frameBytes(.get, id: 8, json: ["collection": "a"]))
        #expect(Self.executed(actions).isEmpty)
        #expect(actions.contains(.pauseReading))
        let (frames, after) = Self.drain(&machine)
        #expect(frames.last?.status == .protocolError)
        #expect(frames.last?.requestID == 8)
        #expect(Self.closeReason(after) == .protocolError(.protocolError))
    }

    @Test func beforeHelloWithATokenTheAnswerIsUnauthenticated() {
        var machine = Machine(configuration: .init(token: "s3cret"), now: 0)
        _ = Self.feed(&machine, Self.frameBytes(.get, id: 3, json: ["collection": "a"]))
        let (frames, after) = Self.drain(&machine)
        #expect(frames.map(\.status) == [.unauthenticated])
        #expect(Self.closeReason(after) != nil)
    }

    @Test func handshakeFramesAreCapped() {
        var machine = Machine(configuration: .init(), now: 0)
        let big = Self.frameBytes(.hello, id: 1, json: ["client": .string(String(repeating: "x", count: 70_000))])
        _ = Self.feed(&machine, Array(big.prefix(4096)))
        let (frames, after) = Self.drain(&machine)
        #expect(frames.map(\.status) == [.payloadTooLarge])
        #expect(Self.closeReason(after) == .protocolError(.payloadTooLarge))
    }

    @Test func inFlightOverflowIsResourceExhausted() {
        var machine = Self.ready(.init(limits: Limits(maxInFlight: 2)))
        var bytes: [UInt8] = []
        for id in UInt32(10)..<15 { bytes += Self.frameBytes(.get, id: id, json: ["collection": "a"]) }
        let actions = Self.feed(&machine, bytes)
        #expect(Self.executed(actions).map(\.requestID) == [10, 11])
        let (frames, _) = Self.drain(&machine)
        #expect(frames.map(\.requestID) == [12, 13, 14])
        #expect(frames.allSatisfy { $0.status == .resourceExhausted })
        // Completing one frees a slot; replies may come out of order.
        _ = machine.requestCompleted(Reply(opcode: .get, requestID: 11, json: Array("{}".utf8)), now: 0)
        #expect(Self.executed(Self.feed(&machine, Self.frameBytes(.get, id: 20, json: [:]))).map(\.requestID) == [20])
        #expect(Self.drain(&machine).frames.map(\.requestID) == [11])
    }

    /// A request answered after the connection closed takes the requests it held back with them: they never run, and
    /// nothing is left counted in flight (the fuzzer's invariant: in flight = handed out + held).
    @Test func anAnswerAfterCloseLeavesNothingInFlight() {
        var machine = Self.ready()
        let read = Self.frameBytes(.get, id: 1, json: ["collection": "a", "id": "x"])
        let write = Self.frameBytes(.create, id: 2, json: ["collection": "a", "data": [:]])
        #expect(Self.executed(Self.feed(&machine, read + write)).map(\.requestID) == [1])
        #expect(machine.inFlight == 2 && machine.heldRequests == 1)
        _ = machine.forceClose(.shutdown)
        let actions = machine.requestCompleted(Reply(opcode: .get, requestID: 1, json: Array("{}".utf8)), now: 0)
        #expect(Self.executed(actions).isEmpty)
        #expect(machine.inFlight == 0 && machine.heldRequests == 0)
    }

    /// Frames are decoded straight from the bytes of a read while nothing is buffered, and only the rest is buffered:
    /// however the stream is split into reads, the same requests come out, in order.
    @Test(arguments: [0, 1, 2, 3])
    func theSameRequestsComeOutHoweverTheReadsSplitTheStream(seed: UInt64) {
        let ids = Array(UInt32(1)...40)
        let stream = ids.flatMap { id in
            let pad = String(repeating: "x", count: Int(id) * 7)
            return Self.frameBytes(.get, id: id, json: ["collection": "a", "pad": .string(pad)])
        }
        var random = SplitMix64(seed: seed)
        var machine = Self.ready()
        var executed: [Frame] = []
        var offset = 0
        while offset < stream.count {
            // Seed 0: the whole stream in one read; 1: a byte at a time; others: random splits up to a few frames.
            let size = seed == 0 ? stream.count : seed == 1 ? 1 : Int(random.next() % 700) + 1
            let end = min(stream.count, offset + size)
            executed += Self.executed(Self.feed(&machine, Array(stream[offset..<end])))
            offset = end
        }
        #expect(executed.map(\.requestID) == ids)
        let padding = executed.map { frame in String(decoding: frame.json, as: UTF8.self).filter { $0 == "x" }.count }
        #expect(padding == ids.map { Int($0) * 7 })
        #expect(machine.inFlight == ids.count)
    }

    /// Upload chunks (1 MiB binary parts and odd sizes) arriving a socket read at a time, back to back, are gathered
    /// in the buffer their header has room reserved in, and come out byte-exact and in order.
    @Test(arguments: [0, 1, 2])
    func largeBinaryPartsComeOutWholeHoweverTheReadsSplitThem(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let sizes = [1 << 20, 1 << 20, 70_001, 1 << 20, 3, (1 << 20) - 1]
        let parts = sizes.map { count in (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) } }
        let ids = (1...parts.count).map(UInt32.init)
        let stream = zip(ids, parts).flatMap { id, part in
            Self.frameBytes(.blobUploadChunk, id: id, json: ["n": .int(Int64(id))], binary: part)
        }
        var machine = Self.ready()
        var executed: [Frame] = []
        var offset = 0
        while offset < stream.count {
            // Seed 0: 64 KiB reads (the server's read buffer); others: random sizes up to 200 KiB.
            let size = seed == 0 ? 64 << 10 : Int(random.next() % (200 << 10)) + 1
            let end = min(stream.count, offset + size)
            for frame in Self.executed(Self.feed(&machine, Array(stream[offset..<end]))) {
                executed.append(frame)
                _ = machine.requestCompleted(Self.ok(frame.requestID), now: 0)
                _ = Self.drain(&machine)
            }
            offset = end
        }
        #expect(executed.map(\.requestID) == ids)
        #expect(executed.map(\.binary) == parts)
    }

    /// Reading pauses in the middle of one read's frames: the frames after the pause are buffered undecoded, and
    /// come out in order once it resumes.
    @Test func framesAfterAPauseInTheMiddleOfAReadAreKeptForLater() {
        var machine = Self.ready(.init(inputHighWaterBytes: 100))
        let ids = Array(UInt32(1)...12)
        let stream = ids.flatMap { Self.frameBytes(.get, id: $0, json: ["collection": "a", "n": .int(Int64($0))]) }
        let first = Self.feed(&machine, stream)
        var executed = Self.executed(first).map(\.requestID)
        #expect(first.contains(.pauseReading))
        #expect(!executed.isEmpty && executed.count < ids.count)
        // Answering the oldest request each time: reading resumes below half the mark, and the buffered frames follow.
        var answered = 0
        while answered < executed.count {
            let id = executed[answered]
            answered += 1
            executed += Self.executed(machine.requestCompleted(Self.ok(id), now: 0)).map(\.requestID)
        }
        #expect(executed == ids)
    }

    static func ok(_ id: UInt32) -> Reply { Reply(opcode: .get, requestID: id, json: Array("{}".utf8)) }

    @Test func backpressurePausesAndResumesReading() {
        var machine = Self.ready(.init(outputHighWaterBytes: 1000))
        var bytes: [UInt8] = []
        for id in UInt32(1)...5 { bytes += Self.frameBytes(.get, id: id) }
        #expect(Self.executed(Self.feed(&machine, bytes)).count == 5)
        let big = [UInt8](repeating: UInt8(ascii: " "), count: 600)
        #expect(!machine.requestCompleted(Reply(opcode: .get, requestID: 1, json: big), now: 0).contains(.pauseReading))
        #expect(machine.requestCompleted(Reply(opcode: .get, requestID: 2, json: big), now: 0).contains(.pauseReading))
        // While paused, frames already buffered are not decoded.
        let held = Self.feed(&machine, Self.frameBytes(.get, id: 9))
        #expect(Self.executed(held).isEmpty)
        let (frames, actions) = Self.drain(&machine)
        #expect(frames.count == 2)
        #expect(actions.contains(.resumeReading))
        #expect(Self.executed(actions).map(\.requestID) == [9])
        #expect(machine.peakUnsentBytes > 1000)
    }

    @Test func idleConnectionsAreClosed() {
        var machine = Self.ready(.init(limits: Limits(idleTimeoutMs: 1000)))
        #expect(machine.timerFired(now: 999).isEmpty)
        let actions = machine.timerFired(now: 1000)
        #expect(actions.contains(.record(Opcode(rawValue: 0), .deadlineExceeded, requestID: nil)))
        let (frames, after) = Self.drain(&machine, now: 1000)
        #expect(frames.map(\.status) == [.deadlineExceeded])
        #expect(frames.first?.requestID == 0)
        #expect(Self.closeReason(after) == .idleTimeout)
    }

    @Test func aConnectionWithRequestsInFlightIsNotIdle() {
        var machine = Self.ready(.init(limits: Limits(idleTimeoutMs: 1000)))
        _ = Self.feed(&machine, Self.frameBytes(.search, id: 4), now: 0)
        #expect(machine.timerFired(now: 5000).isEmpty)
    }

    @Test func aStartedFrameMustFinishInTime() {
        var machine = Self.ready(.init(limits: Limits(frameTimeoutMs: 500)))
        let frame = Self.frameBytes(.get, id: 1, json: ["collection": "a"])
        _ = Self.feed(&machine, Array(frame.prefix(10)), now: 100)
        #expect(machine.timerFired(now: 599).isEmpty)
        _ = Self.feed(&machine, Array(frame[10..<12]), now: 550)
        _ = machine.timerFired(now: 600)
        let (frames, after) = Self.drain(&machine, now: 600)
        #expect(frames.map(\.status) == [.deadlineExceeded])
        #expect(Self.closeReason(after) == .frameTimeout)
    }

    /// A frame half arrived when reading paused (the answers' output over its mark) is not cut while reading is
    /// paused, and gets a whole `frameTimeoutMs` from the moment reading resumes.
    @Test func aFrameArrivingWhenReadingPausedGetsAFreshDeadlineOnResume() {
        var machine = Self.ready(.init(limits: Limits(frameTimeoutMs: 500), outputHighWaterBytes: 1000))
        var bytes: [UInt8] = []
        for id in UInt32(1)...2 { bytes += Self.frameBytes(.get, id: id) }
        bytes += Array(Self.frameBytes(.get, id: 3, json: ["collection": "a"]).prefix(10))
        #expect(Self.executed(Self.feed(&machine, bytes, now: 0)).count == 2)
        let big = [UInt8](repeating: UInt8(ascii: " "), count: 600)
        _ = machine.requestCompleted(Reply(opcode: .get, requestID: 1, json: big), now: 10)
        #expect(machine.requestCompleted(Reply(opcode: .get, requestID: 2, json: big), now: 20).contains(.pauseReading))
        // Paused for far longer than the deadline: the half frame is not the client's fault.
        #expect(!machine.timerFired(now: 5000).contains(.record(Opcode(rawValue: 0), .deadlineExceeded, requestID: nil)))
        let (_, resumed) = Self.drain(&machine, now: 6000)
        #expect(resumed.contains(.resumeReading))
        #expect(machine.timerFired(now: 6499).isEmpty)
        _ = machine.timerFired(now: 6500)
        let (frames, after) = Self.drain(&machine, now: 6500)
        #expect(frames.map(\.status) == [.deadlineExceeded])
        #expect(Self.closeReason(after) == .frameTimeout)
    }

    @Test func protocolErrorsSendAnErrorThenClose() {
        var machine = Self.ready()
        var bad = Self.frameBytes(.get, id: 5)
        bad[4] = 0x00  // magic
        let actions = Self.feed(&machine, bad)
        #expect(actions.contains(.pauseReading))
        #expect(Self.closeReason(actions) == nil)  // not before the error frame is written
        let (frames, after) = Self.drain(&machine)
        #expect(frames.map(\.status) == [.protocolError])
        #expect(Self.closeReason(after) == .protocolError(.protocolError))
    }

    @Test func endOfStreamMidFrameIsAProtocolError() {
        var machine = Self.ready()
        _ = Self.feed(&machine, Array(Self.frameBytes(.get, id: 1).prefix(20)))
        _ = machine.readEOF(now: 0)
        let (frames, after) = Self.drain(&machine)
        #expect(frames.map(\.status) == [.protocolError])
        #expect(Self.closeReason(after) != nil)
    }

    @Test func endOfStreamWaitsForRequestsInFlight() {
        var machine = Self.ready()
        _ = Self.feed(&machine, Self.frameBytes(.get, id: 1))
        let eof = machine.readEOF(now: 0)
        #expect(eof.contains(.pauseReading))
        #expect(Self.closeReason(eof) == nil)
        _ = machine.requestCompleted(Reply(opcode: .get, requestID: 1, json: Array("{}".utf8)), now: 0)
        let (frames, after) = Self.drain(&machine)
        #expect(frames.map(\.requestID) == [1])
        #expect(Self.closeReason(after) == .peerClosed)
    }

    @Test func duringShutdownNewRequestsAreUnavailable() {
        var machine = Self.ready()
        machine.beginShutdown()
        #expect(Self.executed(Self.feed(&machine, Self.frameBytes(.get, id: 3))).isEmpty)
        #expect(Self.drain(&machine).frames.map(\.status) == [.unavailable])
    }

    @Test func responseFramesFromAClientAreRejected() {
        var machine = Self.ready()
        let bytes = FrameEncoder().encode(Frame(opcode: .get, requestID: 2, flags: .response))
        _ = Self.feed(&machine, bytes)
        #expect(Self.drain(&machine).frames.map(\.status) == [.protocolError])
    }

    @Test func repliesAreCompressedAfterZlibIsNegotiated() {
        var machine = Self.ready()
        _ = Self.feed(&machine, Self.frameBytes(.search, id: 2))
        let json = Array(("{\"records\":[" + String(repeating: "{\"a\":\"bbbbbbbb\"},", count: 200) + "{}]}").utf8)
        _ = machine.requestCompleted(Reply(opcode: .search, requestID: 2, json: json), now: 0)
        var header: FrameHeader?
        machine.withUnsentOutput { header = FrameHeader($0) }
        #expect(header?.flags.contains(.compressed) == true)
        #expect(machine.uncompressedBytesOut > machine.unsentBytes)
        #expect(Self.drain(&machine).frames.first?.json == json)
    }
}

@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct HelloNegotiationTests {
    static func hello(_ request: HelloRequest) -> Frame {
        Frame(opcode: .hello, requestID: 1, json: request.json.bytes)
    }

    @Test func versionIsTheHighestCommonOne() {
        guard case .accepted(let response, _, _) = HelloNegotiation.negotiate(
            Self.hello(HelloRequest(versions: [3, 1, 2], client: "t")), configuration: .init())
        else { Issue.record("rejected"); return }
        #expect(response.version == 1)
    }

    @Test func unsupportedVersionListsTheSupportedOnes() {
        guard case .rejected(let error, let close) = HelloNegotiation.negotiate(
            Self.hello(HelloRequest(versions: [2], client: "t")), configuration: .init())
        else { Issue.record("accepted"); return }
        #expect(error.status == .unsupportedVersion)
        #expect(error.details["supported"] == [1])
        #expect(!close)
    }

    @Test func compressionOnlyWhenOffered() {
        guard case .accepted(let response, let on, _) = HelloNegotiation.negotiate(
            Self.hello(HelloRequest(compression: [], client: "t")), configuration: .init())
        else { Issue.record("rejected"); return }
        #expect(response.compression == "none" && !on)
    }

    @Test func tokenIsCheckedAndNeverEchoed() {
        let configuration = ConnectionStateMachine.Configuration(token: "correct horse")
        for token in [nil, "wrong", "correct hors", "correct horse!"] as [String?] {
            guard case .rejected(let error, let close) = HelloNegotiation.negotiate(
                Self.hello(HelloRequest(client: "t", token: token)), configuration: configuration)
            else { Issue.record("accepted \(token ?? "nil")"); continue }
            #expect(error.status == .unauthenticated)
            #expect(close)
            #expect(!error.message.contains("correct"))
            if let token { #expect(!error.message.contains(token)) }
        }
        guard case .accepted(let response, _, _) = HelloNegotiation.negotiate(
            Self.hello(HelloRequest(client: "t", token: "correct horse")), configuration: configuration)
        else { Issue.record("rejected"); return }
        #expect(response.authRequired)
    }

    @Test func constantTimeEqual() {
        #expect(HelloNegotiation.constantTimeEqual(Array("abc".utf8), Array("abc".utf8)))
        #expect(!HelloNegotiation.constantTimeEqual(Array("abc".utf8), Array("abd".utf8)))
        #expect(!HelloNegotiation.constantTimeEqual(Array("abc".utf8), Array("abcd".utf8)))
        #expect(!HelloNegotiation.constantTimeEqual([], Array("a".utf8)))
        #expect(HelloNegotiation.constantTimeEqual([], []))
    }

    @Test func malformedHelloIsInvalidArgument() {
        let frame = Frame(opcode: .hello, requestID: 1, json: Array(#"{"versions":[1],"colour":1}"#.utf8))
        guard case .rejected(let error, let close) = HelloNegotiation.negotiate(frame, configuration: .init())
        else { Issue.record("accepted"); return }
        #expect(error.status == .invalidArgument && !close)
    }
}

/// Large binary parts leave from their own buffer (no copy into the output); the byte stream must be the same.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct BinaryOutputTests {
    typealias Machine = ConnectionStateMachine
    typealias T = ConnectionStateMachineTests

    @Test("a blob answer between small ones: writev buffers, partial writes at every boundary, same frames in order")
    func blobLeavesFromItsOwnBuffer() throws {
        var machine = T.ready()
        for id: UInt32 in 2...4 { _ = T.feed(&machine, T.frameBytes(.ping, id: id)) }
        _ = T.drain(&machine)
        let blob = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let meta = Array(#"{"id":"x"}"#.utf8)
        _ = machine.requestCompleted(Reply(opcode: .ping, requestID: 2, json: Array("{}".utf8)), now: 0)
        _ = machine.requestCompleted(Reply(opcode: .blobGet, requestID: 3, json: meta, binary: blob), now: 0)
        _ = machine.requestCompleted(Reply(opcode: .ping, requestID: 4, json: Array("{}".utf8)), now: 0)
        let expected =
            T.frameBytes(.ping, id: 2, json: [:]).count + Frame.prefixSize + meta.count + blob.count
            + T.frameBytes(.ping, id: 4, json: [:]).count
        #expect(machine.unsentBytes == expected)
        // Three buffers: the first frame and the blob's header, the blob, the last frame.
        let shapes = machine.withUnsentBuffers { $0.map(\.count) }
        #expect(shapes.count == 3 && shapes[1] == blob.count && shapes.reduce(0, +) == expected)

        // Write it in awkward pieces: across each buffer boundary.
        var stream = ByteBuffer()
        var written = 0
        let steps = [7, shapes[0] - 7 - 3, 6, blob.count - 10, 4000, 1 << 20]
        for step in steps where machine.unsentBytes > 0 {
            let taken = machine.withUnsentBuffers { buffers -> Int in
                var left = step
                var taken = 0
                for buffer in buffers where left > 0 {
                    let n = min(left, buffer.count)
                    stream.append(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                    left -= n
                    taken += n
                }
                return taken
            }
            written += taken
            _ = machine.writeCompleted(taken, now: 0)
            #expect(machine.unsentBytes == expected - written)
        }
        #expect(machine.unsentBytes == 0)
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var frames: [Frame] = []
        while let frame = try decoder.next(&stream) { frames.append(frame) }
        #expect(frames.map(\.requestID) == [2, 3, 4])
        #expect(frames[1].binary == blob && frames[1].json == meta)
        // Afterwards the output is one empty buffer again, and small answers are contiguous.
        _ = T.feed(&machine, T.frameBytes(.ping, id: 5))
        _ = machine.requestCompleted(Reply(opcode: .ping, requestID: 5, json: Array("{}".utf8)), now: 0)
        #expect(machine.withUnsentBuffers { $0.count } == 1)
        #expect(T.drain(&machine).frames.map(\.requestID) == [5])
    }

    @Test("binary parts under the threshold are copied into the output as before")
    func smallBinaryIsCopied() {
        var machine = T.ready()
        _ = T.feed(&machine, T.frameBytes(.ping, id: 2))
        let small = [UInt8](repeating: 9, count: Machine.separateBinaryBytes - 1)
        _ = machine.requestCompleted(Reply(opcode: .blobGet, requestID: 2, json: Array("{}".utf8), binary: small), now: 0)
        #expect(machine.withUnsentBuffers { $0.count } == 1)
        #expect(T.drain(&machine).frames.first?.binary == small)
    }
}

/// A reload of the token file checks the connection's token at once (`tokensReloaded`), not at its next request.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct TokenReloadMachineTests {
    typealias T = ConnectionStateMachineTests

    static func table(_ lines: String) throws -> TokenTable { try TokenTable.parse(lines, path: "tokens") }

    static func ready(_ tokens: Tokens) -> ConnectionStateMachine {
        var machine = ConnectionStateMachine(configuration: .init(tokens: tokens), now: 0)
        let hello = T.frameBytes(.hello, id: 1, json: HelloRequest(client: "t", token: "reader").json)
        _ = T.feed(&machine, hello)
        _ = T.drain(&machine)
        return machine
    }

    @Test func aRemovedTokenGetsUnauthenticatedAndItsHeldRequestsNeverRun() throws {
        let tokens = Tokens(try Self.table("write reader\n"))
        var machine = Self.ready(tokens)
        #expect(machine.isHandshakeDone && machine.canPush)
        // A GET runs; a CREATE waits behind it.
        let bytes = T.frameBytes(.get, id: 2, json: ["collection": "a", "id": .string(UUID().uuidString)])
            + T.frameBytes(.create, id: 3, json: ["collection": "a", "data": [:]])
        #expect(T.executed(T.feed(&machine, bytes)).map(\.requestID) == [2])

        tokens.replace(with: try Self.table("admin someone-else\n"))
        var actions: [ConnectionStateMachine.Action] = []
        machine.tokensReloaded(now: 1, into: &actions)
        #expect(!machine.canPush, "events would still be pushed")
        let (frames, _) = T.drain(&machine)
        #expect(frames.map(\.status) == [.unauthenticated])
        #expect(frames.first?.opcode == Opcode(rawValue: 0) && frames.first?.requestID == 0)
        #expect(T.closeReason(actions) == nil, "closed with the GET still in flight")

        let done = machine.requestCompleted(Reply(opcode: .get, requestID: 2, json: Array("{}".utf8)), now: 2)
        #expect(T.executed(done).isEmpty, "a held request ran after the token was revoked")
        let (answers, closing) = T.drain(&machine)
        #expect(answers.map(\.requestID) == [2, 3])
        #expect(answers.last?.status == .unauthenticated)
        #expect(T.closeReason(done + closing) == .tokenRevoked)
    }

    @Test func aChangedGrantAppliesAtOnceAndKeepsTheConnection() throws {
        let tokens = Tokens(try Self.table("write reader alpha,beta\n"))
        var machine = Self.ready(tokens)
        tokens.replace(with: try Self.table("read reader alpha\n"))
        var actions: [ConnectionStateMachine.Action] = []
        machine.tokensReloaded(now: 1, into: &actions)
        #expect(actions.isEmpty && machine.canPush)
        #expect(machine.grant == Grant(role: .read, collections: ["alpha"]))
        // An unchanged table changes nothing either.
        machine.tokensReloaded(now: 2, into: &actions)
        #expect(actions.isEmpty && machine.grant?.role == .read)
    }
}
