import Foundation
import LarderTestThreads
import LarderWire
import Testing
import LarderIO

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CodecTests {
    static let sampleFrames: [Frame] = {
        var frames: [Frame] = []
        let record = Array(#"{"id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301","rev":3,"createdAt":"2026-11-30T00:26:28.123Z","updatedAt":"2026-11-30T00:27:01.456Z","data":{"title":"Buy milk 買牛奶","isFinish":false,"tags":["home","errand"],"priority":2}}"#.utf8)
        frames.append(Frame(opcode: .ping, requestID: 1))
        frames.append(Frame(opcode: .get, requestID: 2, flags: .response, json: record))
        frames.append(Frame(opcode: .blobPut, requestID: 3, json: Array("{}".utf8), binary: [0xFF, 0xD8, 0xFF, 0xD9]))
        frames.append(Frame(opcode: .search, requestID: 4, flags: .response,
                            json: Array(repeating: record, count: 40).flatMap { $0 }))
        frames.append(Frame(opcode: .get, requestID: .max, status: .notFound, flags: .response,
                            json: LarderError(.notFound, "no such document").json.bytes))
        return frames
    }()

    static func encodedStream(compression: Bool) -> [UInt8] {
        let encoder = FrameEncoder(compressionEnabled: compression, threshold: 256)
        var out: [UInt8] = []
        for frame in sampleFrames { encoder.encode(frame, into: &out) }
        return out
    }

    @Test(arguments: [false, true])
    func decodesTheSameWholeByteByByteAndInRandomSplits(compression: Bool) throws {
        let stream = Self.encodedStream(compression: compression)
        #expect(try decodeAll([stream]) == Self.sampleFrames)
        #expect(try decodeAll(stream.map { [$0] }) == Self.sampleFrames)
        for seed in 1...50 as ClosedRange<UInt64> {
            #expect(try decodeAll(randomSplits(stream, seed: seed)) == Self.sampleFrames)
        }
    }

    @Test func compressesOnlyWhenNegotiatedLargeEnoughAndSmaller() {
        let big = Self.sampleFrames[3]
        let off = FrameEncoder(compressionEnabled: false).encode(big)
        let on = FrameEncoder(compressionEnabled: true, threshold: 1024).encode(big)
        #expect(off[7] & Frame.Flags.compressed.rawValue == 0)
        #expect(on[7] & Frame.Flags.compressed.rawValue != 0)
        #expect(on.count < off.count / 3)
        let small = FrameEncoder(compressionEnabled: true, threshold: 1024).encode(Self.sampleFrames[1])
        #expect(small[7] & Frame.Flags.compressed.rawValue == 0)
        // Random bytes do not compress: they go out as they are even above the threshold.
        var rng = SplitMix64(seed: 9)
        let noise = (0..<4096).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let incompressible = FrameEncoder(compressionEnabled: true, threshold: 16)
            .encode(Frame(opcode: .create, requestID: 1, json: noise))
        #expect(incompressible[7] & Frame.Flags.compressed.rawValue == 0)
        #expect(incompressible.count == Frame.prefixSize + noise.count)
    }

    @Test func theBinaryPartIsNeverCompressed() throws {
        let jpegish = Array(repeating: UInt8(0x41), count: 8192)
        let frame = Frame(opcode: .blobGet, requestID: 5, flags: .response, json: Array("{}".utf8), binary: jpegish)
        let bytes = FrameEncoder(compressionEnabled: true, threshold: 1).encode(frame)
        #expect(bytes.count == Frame.prefixSize + 2 + 8192)
        #expect(try decodeAll([bytes]) == [frame])
    }

    /// A reader that takes a large binary part into its own buffer (`nextHead`, then the part's bytes itself) gets
    /// the frame `next` would have given, however the bytes arrive; `nextHead` consumes nothing until the header and
    /// the whole JSON part are in.
    @Test(arguments: [false, true])
    func nextHeadLeavesTheBinaryPartToTheCaller(compression: Bool) throws {
        let record = CodecTests.sampleFrames[1].json
        let frame = Frame(
            opcode: .blobGet, requestID: 7, flags: .response, json: Array(repeating: record, count: 20).flatMap { $0 },
            binary: (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let stream = FrameEncoder(compressionEnabled: compression, threshold: 256).encode(frame)
        for seed in 1...20 as ClosedRange<UInt64> {
            var decoder = FrameDecoder()
            var buffer = ByteBuffer()
            var head: (FrameHeader, json: [UInt8])?
            var binary: [UInt8] = []
            for piece in randomSplits(stream, seed: seed) {
                buffer.append(piece)
                if head == nil {
                    let before = buffer.readableCount
                    head = try decoder.nextHead(&buffer)
                    if head == nil { #expect(buffer.readableCount == before) }
                }
                if head != nil {
                    buffer.withUnsafeReadableBytes { binary.append(contentsOf: $0) }
                    buffer.moveReader(by: buffer.readableCount)
                }
            }
            let (header, json) = try #require(head)
            #expect(header.binaryLength == UInt32(frame.binary.count))
            let decoded = Frame(
                opcode: header.opcode, requestID: header.requestID, status: header.status, flags: header.flags,
                json: json, binary: binary)
            #expect(decoded == frame)
        }
    }

    @Test func aFourGiBHeaderIsRejectedBeforeAnyBodyIsRead() throws {
        var decoder = FrameDecoder()
        var buffer = ByteBuffer([0xFF, 0xFF, 0xFF, 0xFF])
        #expect(try decoder.next(&buffer) == nil, "the magic is judged with the length")
        buffer.append([0x4C, 0x52])
        #expect {
            _ = try decoder.next(&buffer)
        } throws: { ($0 as! FrameError).error.status == .payloadTooLarge }
        #expect(buffer.readableCount == 6)
    }

    /// A bad length and a bad magic: the magic's error, whether the bytes come at once or one at a time.
    @Test func aBadMagicWinsOverABadLengthHoweverTheBytesArrive() {
        for bytes in [Array("GET / HTTP/1.1\r\n".utf8), [0xFF, 0xFF, 0xFF, 0xFF, 0x48, 0x54], [0, 0, 0, 0, 0, 0]] {
            for split in 1...bytes.count {
                var decoder = FrameDecoder()
                var buffer = ByteBuffer()
                var status: Status?
                var start = 0
                while status == nil && start < bytes.count {
                    buffer.append(bytes[start..<min(bytes.count, start + split)])
                    start += split
                    do { _ = try decoder.next(&buffer) } catch { status = error.error.status }
                }
                #expect(status == .protocolError, "\(bytes) in pieces of \(split)")
            }
        }
    }

    @Test func limitsAreCheckedWhenTheHeaderIsComplete() {
        let decoder = FrameDecoder(maxFrameBytes: 1000, maxJSONBytes: 500, maxBinaryBytes: 100)
        func status(_ header: [UInt8]) -> Status? {
            do {
                _ = try decodeAll([header], decoder: decoder)
                return nil
            } catch {
                return error.error.status
            }
        }
        #expect(status(rawHeader(length: 24 + 600, jsonLength: 600)) == .payloadTooLarge)
        #expect(status(rawHeader(length: 24 + 200, flags: 2, binaryLength: 200)) == .payloadTooLarge)
        #expect(status(rawHeader(length: 24 + 10, flags: 1, jsonLength: 10, uncompressedLength: 501)) == .payloadTooLarge)
        #expect(status(rawHeader(length: 24 + 2000, jsonLength: 2000)) == .payloadTooLarge)
        #expect(status(rawHeader(length: 10)) == .protocolError)
        #expect(status(rawHeader(length: 24, magic: 0x4854)) == .protocolError)
        #expect(status(rawHeader(length: 24, version: 2)) == .unsupportedVersion)
        #expect(status(rawHeader(length: 24, flags: 0x40)) == .protocolError)
        #expect(status(rawHeader(length: 30, jsonLength: 2)) == .protocolError)
        #expect(status(rawHeader(length: 28, flags: 0, binaryLength: 4)) == .protocolError)
        #expect(status(rawHeader(length: 24, uncompressedLength: 5)) == .protocolError)
        #expect(status(rawHeader(length: 24)) == nil)
    }

    @Test func theErrorCarriesTheRequestIDWhenTheHeaderWasReadable() {
        let decoder = FrameDecoder(maxFrameBytes: 1000, maxJSONBytes: 500, maxBinaryBytes: 100)
        #expect {
            _ = try decodeAll([rawHeader(length: 24 + 600, opcode: 0x11, requestID: 77, jsonLength: 600)], decoder: decoder)
        } throws: { error in
            let error = error as! FrameError
            return error.requestID == 77 && error.opcode == .get
        }
    }

    @Test func aSmallCompressedPartThatInflatesPastTheLimitIsRejected() throws {
        // 1 KiB of zlib that inflates to about 1 MiB of zeros: a compression bomb.
        let bomb = Deflater(level: 9).compress(Array(repeating: 0, count: 1 << 20))
        #expect(bomb.count < 1100)
        let limit = 64 << 10
        let decoder = FrameDecoder(maxFrameBytes: 1 << 20, maxJSONBytes: limit, maxBinaryBytes: 0)
        // It declares its true size: rejected by the header check before inflating.
        let honest = rawHeader(length: UInt32(24 + bomb.count), flags: 1, jsonLength: UInt32(bomb.count),
                               uncompressedLength: 1 << 20) + bomb
        #expect { _ = try decodeAll([honest], decoder: decoder) } throws: {
            ($0 as! FrameError).error.status == .payloadTooLarge
        }
        // It lies about its size: inflation stops at the declared length, never allocating past it.
        let lying = rawHeader(length: UInt32(24 + bomb.count), flags: 1, jsonLength: UInt32(bomb.count),
                              uncompressedLength: UInt32(limit)) + bomb
        #expect { _ = try decodeAll([lying], decoder: decoder) } throws: { error in
            let error = (error as! FrameError).error
            return error.status == .protocolError && error.message.contains("inflates past its declared length")
        }
    }

    @Test func declaredUncompressedLengthTooLargeIsRejected() throws {
        let json = Array(#"{"collection":"items","limit":10}"#.utf8)
        let compressed = Deflater().compress(json)
        let frame = rawHeader(length: UInt32(24 + compressed.count), flags: 1, jsonLength: UInt32(compressed.count),
                              uncompressedLength: UInt32(json.count + 1)) + compressed
        #expect { _ = try decodeAll([frame]) } throws: { error in
            (error as! FrameError).error.message.contains("less than the declared")
        }
        let exact = rawHeader(length: UInt32(24 + compressed.count), flags: 1, jsonLength: UInt32(compressed.count),
                              uncompressedLength: UInt32(json.count)) + compressed
        #expect(try decodeAll([exact]).first?.json == json)
    }

    @Test func garbageInsteadOfZlibIsAProtocolError() {
        let garbage: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let frame = rawHeader(length: 32, flags: 1, jsonLength: 8, uncompressedLength: 20) + garbage
        #expect { _ = try decodeAll([frame]) } throws: { ($0 as! FrameError).error.status == .protocolError }
    }

    @Test func aTruncatedFrameAtEndOfStreamYieldsNothingAndConsumesNothing() throws {
        let stream = Self.encodedStream(compression: false)
        var decoder = FrameDecoder()
        var buffer = ByteBuffer(Array(stream.dropLast(3)))
        var frames: [Frame] = []
        while let frame = try decoder.next(&buffer) { frames.append(frame) }
        #expect(frames.count == Self.sampleFrames.count - 1)
        #expect(buffer.readableCount > 0)
        #expect(try decoder.next(&buffer) == nil)
    }

    @Test func unknownOpcodesDecode() throws {
        // The decoder frames them; answering UNKNOWN_OPCODE is the server's job (the connection stays usable).
        let bytes = FrameEncoder().encode(Frame(opcode: Opcode(rawValue: 0x7777), requestID: 9))
        let frame = try #require(try decodeAll([bytes]).first)
        #expect(frame.opcode.rawValue == 0x7777)
        #expect(frame.opcode.name == "0x7777")
    }

    @Test func garbageAfterAFrameIsNotReadUntilAsked() throws {
        var decoder = FrameDecoder()
        var buffer = ByteBuffer(FrameEncoder().encode(Self.sampleFrames[0]) + Array("GET / HTTP/1.1\r\n".utf8))
        #expect(try decoder.next(&buffer) == Self.sampleFrames[0])
        #expect { _ = try decoder.next(&buffer) } throws: { ($0 as! FrameError).error.message.contains("bad magic") }
    }
}
