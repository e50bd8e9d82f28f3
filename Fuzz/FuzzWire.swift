// The libFuzzer target for everything a peer's bytes reach before the store: the frame decoder, the inflater, the
// JSON parser, every message's init(json:), filters and search queries, and the connection state machine.
//
// Built outside SwiftPM by scripts/fuzz (LarderWire as a static library, this file plus the server's
// ConnectionStateMachine.swift on top), so `swift build` and `swift test` never see it.
//
// The first byte picks a mode (byte % 4), the rest is that mode's input; seeds in Fuzz/seeds start with an ASCII
// digit so they stay readable ('0' = 0x30 = stream, '1' json, '2' zlib, '3' connection), except 'J': a blob, for
// the JPEG validator and SHA-256, and 'W': the console's WebSocket stream (RFC 6455 frames, each binary message one
// Larder frame, whose frames then go through mode 0's frame decoder). Besides "no crash, no hang",
// every mode checks invariants; a broken one traps, which libFuzzer reports as a crash with the input saved.

import LarderWire

@_cdecl("LLVMFuzzerTestOneInput")
public func larderFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let input = Array(bytes.dropFirst())
    if bytes[0] == UInt8(ascii: "W") {
        FuzzWebSocket.run(input)
        return 0
    }
    switch bytes[0] == UInt8(ascii: "J") ? 4 : bytes[0] % 4 {
    case 4: FuzzBlob.run(input)
    case 0: FuzzStream.run(input)
    case 1: FuzzJSON.run(input)
    case 2: FuzzZlib.run(input)
    default: FuzzConnection.run(input)
    }
    return 0
}

/// Deterministic split points derived from the input itself, so a crash reproduces from the saved input alone.
struct SplitMix64 {
    var state: UInt64
    init(_ bytes: [UInt8]) {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        state = hash
    }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(upTo bound: Int) -> Int { Int(next() % UInt64(max(1, bound))) }
}

func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("invariant broken: \(message())") }
}

// MARK: - Mode W: a WebSocket stream into the console's decoder

enum FuzzWebSocket {
    struct Outcome: Equatable {
        var messages: [[UInt8]] = []
        var controls: [String] = []
        var error: WebSocketError?
    }

    /// Decodes `input` in the given pieces, each message also checked as one Larder frame.
    static func decode(_ input: [UInt8], pieces: [Int]) -> Outcome {
        var decoder = WebSocketDecoder(maxMessageBytes: 64 << 10)
        var larder = LarderMessageCheck()
        var outcome = Outcome()
        var message: [UInt8] = []
        var offset = 0
        var index = 0
        while offset < input.count && outcome.error == nil {
            let size = index < pieces.count ? min(pieces[index], input.count - offset) : input.count - offset
            index += 1
            var piece = Array(input[offset..<(offset + size)])
            offset += size
            do {
                try piece.withUnsafeMutableBytes { bytes in
                    try decoder.feed(bytes) { (event) throws(WebSocketError) in
                        switch event {
                        case .payload(let chunk):
                            try larder.payload(chunk)
                            message += chunk
                            check(message.count <= 64 << 10, "a message grew past the limit: \(message.count)")
                        case .messageEnd:
                            try larder.messageEnd()
                            outcome.messages.append(message)
                            message = []
                        case .ping(let data): outcome.controls.append("ping \(data)")
                        case .pong: outcome.controls.append("pong")
                        case .close(let code, let reason):
                            outcome.controls.append("close \(String(describing: code)) \(reason)")
                        }
                    }
                }
            } catch {
                outcome.error = error as? WebSocketError
                check(outcome.error != nil, "the decoder threw something other than a WebSocketError")
            }
        }
        return outcome
    }

    static func run(_ input: [UInt8]) {
        var random = SplitMix64(input)
        let whole = decode(input, pieces: [])
        // The same bytes in random pieces, and one at a time, decode the same: events and error alike.
        let pieces = (0..<min(64, input.count)).map { _ in 1 + random.next(upTo: 16) }
        check(decode(input, pieces: pieces) == whole, "a split changed what the stream decodes to")
        if input.count <= 512 {
            check(decode(input, pieces: Array(repeating: 1, count: input.count)) == whole, "byte-at-a-time differs")
        }
        for message in whole.messages {
            check(message.count >= 4, "a message shorter than a Larder length passed")
            // A message the check let through is one whole Larder frame to the frame decoder: it decodes to one
            // frame that takes every byte, or is refused; it never leaves the decoder waiting for more, except a
            // message of 4 or 5 bytes (a length under the header's, 0 or 1): the decoder judges a length with the
            // magic after it, which the next message brings, as the same bytes over TCP would.
            var decoder = FuzzStream.decoder()
            var buffer = ByteBuffer(message)
            do throws(FrameError) {
                let frame = try decoder.next(&buffer)
                check(frame != nil || message.count < 6, "a whole message left the frame decoder waiting for more bytes")
                check(frame == nil || buffer.readableCount == 0, "a message held bytes after its frame")
            } catch {
                check(error.error.status != .ok, "a decode error with status OK")
            }
        }
        // The server hands each message's payload to the connection's frame decoder as TCP bytes are handed to it:
        // the stream the messages make goes through everything mode 0 checks.
        FuzzStream.run(Array(whole.messages.joined()))
    }
}

// MARK: - Mode 0: a byte stream into the frame decoder

enum FuzzStream {
    /// Small limits keep each execution's allocations bounded; the checks are the same at any size.
    static func decoder() -> FrameDecoder {
        FrameDecoder(maxFrameBytes: 1 << 20, maxJSONBytes: 256 << 10, maxBinaryBytes: 512 << 10)
    }

    struct Outcome: Equatable {
        var frames: [Frame] = []
        var failed = false
    }

    /// Feeds `bytes` in chunks of `sizes`, decoding after each, as a connection would.
    static func decode(_ bytes: [UInt8], sizes: [Int]) -> Outcome {
        var decoder = decoder()
        var buffer = ByteBuffer()
        var outcome = Outcome()
        var offset = 0
        for size in sizes {
            buffer.append(bytes[offset..<(offset + size)])
            offset += size
            while true {
                let before = buffer.readableCount
                do throws(FrameError) {
                    guard let frame = try decoder.next(&buffer) else {
                        check(buffer.readableCount == before, "next returned nil but consumed bytes")
                        break
                    }
                    check(buffer.readableCount < before, "a frame was decoded from no bytes")
                    outcome.frames.append(frame)
                } catch {
                    check(error.error.status != .ok, "a decode error with status OK")
                    outcome.failed = true
                    return outcome
                }
            }
        }
        return outcome
    }

    static func run(_ bytes: [UInt8]) {
        let whole = decode(bytes, sizes: [bytes.count])
        var rng = SplitMix64(bytes)
        var sizes: [Int] = []
        var left = bytes.count
        while left > 0 {
            let size = 1 + rng.next(upTo: min(left, rng.next(upTo: 4) == 0 ? 1 : 64))
            sizes.append(size)
            left -= size
        }
        let dripped = decode(bytes, sizes: sizes)
        check(whole == dripped, "fed whole and fed in pieces decode differently")

        let encoder = FrameEncoder(compressionEnabled: true, threshold: 16)
        for frame in whole.frames {
            // What the encoder writes, the decoder reads back unchanged.
            var buffer = ByteBuffer(encoder.encode(frame))
            var again = decoder()
            do throws(FrameError) {
                let decoded = try again.next(&buffer)
                check(decoded == frame, "a re-encoded frame decodes differently")
                check(buffer.readableCount == 0, "a re-encoded frame left bytes behind")
            } catch {
                check(false, "a re-encoded frame does not decode: \(error.error)")
            }
            if frame.status != .ok {
                _ = LarderError(status: frame.status, json: (try? JSONParser.parse(frame.json)) ?? .null)
            }
            guard let object = try? frame.jsonObject() else { continue }
            FuzzJSON.messages(object)
        }
    }
}

// MARK: - Mode 1: a JSON part

enum FuzzJSON {
    static func run(_ bytes: [UInt8]) {
        fastPaths(bytes)
        guard let value = try? JSONParser.parse(bytes) else { return }
        // The writer's output is valid JSON that parses back to the same value.
        let written = value.bytes
        guard let reparsed = try? JSONParser.parse(written) else {
            return check(false, "the writer's output does not parse: \(String(decoding: written, as: UTF8.self))")
        }
        check(reparsed == value, "a JSON value changes in a write/parse round trip")
        check(reparsed.bytes == written, "writing is not deterministic")
        values(value, depth: 0)
        if case .object(let object) = value { messages(object) }
    }

    /// The point-read fast path answers only when the general path gives the same request (any bytes, valid or not).
    static func fastPaths(_ bytes: [UInt8]) {
        if let fast = GetRequest.fast(bytes) {
            check((try? JSONParser.parseObject(bytes)).flatMap { try? GetRequest(json: $0) } == fast, "GET fast path differs")
        }
        if let fast = BlobIDRequest.fast(bytes) {
            check((try? JSONParser.parseObject(bytes)).flatMap { try? BlobIDRequest(json: $0) } == fast, "BLOB fast path differs")
        }
        // Documents read without a tree: the parser accepts them too, and its tree writes the same bytes and holds the
        // same string values in the same order.
        if let document = CompactJSON.object(bytes) {
            guard let object = try? JSONParser.parseObject(bytes) else {
                return check(false, "CompactJSON read a document the parser refuses")
            }
            check(document.bytes == object.bytes, "CompactJSON wrote different bytes")
            check(document.strings == strings(.object(object)), "CompactJSON collected different strings")
        }
        mergePatches(bytes)
        // Answers read without a tree: the general path reads the same fields, and the data span holds its object.
        if let span = AnswerReader.record(bytes), let object = try? JSONParser.parseObject(bytes),
            let record = try? Record(json: object)
        {
            check(span.id == record.id && span.rev == record.rev && span.createdAt == record.createdAtMs
                && span.updatedAt == record.updatedAtMs, "AnswerReader read other record fields")
            let data = try? JSONParser.parseObject(bytes[span.data])
            check(data == nil || data == record.data, "AnswerReader's data span holds another object")
        }
        if let (spans, cursor) = AnswerReader.page(bytes) {
            let page = (try? JSONParser.parseObject(bytes)).flatMap { try? PageResponse(json: $0) }
            check(page == nil || (page!.records.count == spans.count && page!.nextCursor == cursor),
                  "AnswerReader read another page")
        }
        for opcode in [Opcode.create, .replace] {
            guard let write = DocumentWrite.fast(bytes, opcode: opcode) else { continue }
            guard var object = try? JSONParser.parseObject(bytes) else {
                return check(false, "DocumentWrite read a request the parser refuses")
            }
            // The general path takes the request key out before it reads the request (the server's RequestKey.take).
            let key = object["requestKey"]
            object["requestKey"] = nil
            check(write.requestKey?.wireString == key?.stringValue?.lowercased(), "the request key differs")
            if opcode == .create {
                let request = try? CreateRequest(json: object)
                check(request?.collection == write.collection && request?.id == write.id, "CREATE fast path differs")
                check(request?.data.bytes == write.data.bytes && write.rev == nil, "CREATE fast path's document differs")
            } else {
                let request = try? ReplaceRequest(json: object)
                check(
                    request?.collection == write.collection && request?.id == write.id && request?.rev == write.rev,
                    "REPLACE fast path differs")
                check(request?.data.bytes == write.data.bytes, "REPLACE fast path's document differs")
            }
        }
    }

    /// Merge patches applied to the bytes as a stored document without its tree: refused where the parser refuses
    /// the bytes, and otherwise the tree's merge, byte for byte and string for string. The patches name members the
    /// document has (removed, replaced, merged into) and one it has not.
    static func mergePatches(_ bytes: [UInt8]) {
        let document = try? JSONParser.parseObject(bytes)
        var patches: [JSONObject] = [["n": 1, "o": ["p": .null, "q": "r"]], ["n": .null]]
        for key in document?.keys.prefix(3) ?? [] {
            patches += [[key: .null], [key: "x\n\u{E9}"], [key: ["k": .null, "n": 2]], ["z": 0, key: [1.5]]]
        }
        for patch in patches {
            guard let merged = MergePatch.apply(patch, toStored: bytes) else { continue }
            guard let document else { return check(false, "MergePatch read a document the parser refuses") }
            let tree = MergePatch.apply(patch, to: document)
            check(merged.bytes == tree.bytes, "MergePatch wrote different bytes")
            check(merged.strings == strings(.object(tree)), "MergePatch collected different strings")
        }
    }

    /// Every string value in `value` (not member names), in order, joined by U+001F: what the store's search text is
    /// folded from.
    static func strings(_ value: JSON) -> [UInt8] {
        var out: [UInt8] = []
        var count = 0
        func walk(_ value: JSON) {
            switch value {
            case .string(let s):
                if count > 0 { out.append(0x1F) }
                count += 1
                out.append(contentsOf: s.utf8)
            case .array(let items): items.forEach(walk)
            case .object(let o): for (_, v) in o { walk(v) }
            default: break
            }
        }
        walk(value)
        return out
    }

    /// Every query piece on every value: filters, text queries, sort keys, paths, timestamps, ids.
    static func values(_ value: JSON, depth: Int) {
        if let filter = try? Filter(json: value) {
            check((try? Filter(json: filter.json)) == filter, "a filter changes in a round trip")
        }
        if let text = try? TextQuery(json: value) {
            check((try? TextQuery(json: text.json)) == text, "a text query changes in a round trip")
        }
        if let key = try? SortKey(json: value, path: "sort.0") {
            check((try? SortKey(json: key.json, path: "sort.0")) == key, "a sort key changes in a round trip")
        }
        switch value {
        case .string(let string):
            if let path = try? FieldPath(string) {
                check(path.description == string, "a field path does not print as it was written")
            }
            if let ms = Timestamp.parse(string) {
                let text = Timestamp.string(ms)
                check(Timestamp.parse(text) == ms, "a parsed timestamp does not survive writing: \(string) -> \(text)")
            }
            if let id = try? FieldReader.uuid(string, field: "id") {
                check(id.wireString == string.lowercased(), "a UUID does not print as it was written")
            }
        case .array(let items) where depth < 4:
            for item in items.prefix(16) { values(item, depth: depth + 1) }
        case .object(let object) where depth < 4:
            for (_, item) in object.prefix(16) { values(item, depth: depth + 1) }
        default:
            break
        }
    }

    /// Reads `object` as every request and response; whatever reads, re-reads its own encoding as the same value.
    static func messages(_ object: JSONObject) {
        roundTrip(HelloRequest.self, object)
        roundTrip(HelloResponse.self, object)
        roundTrip(EmptyMessage.self, object)
        roundTrip(CreateRequest.self, object)
        roundTrip(GetRequest.self, object)
        roundTrip(GetManyRequest.self, object)
        roundTrip(ReplaceRequest.self, object)
        roundTrip(PatchRequest.self, object)
        roundTrip(DeleteRequest.self, object)
        roundTrip(DeleteResponse.self, object)
        roundTrip(ListRequest.self, object)
        roundTrip(Record.self, object)
        roundTrip(GetManyResponse.self, object)
        roundTrip(PageResponse.self, object)
        roundTrip(CountResponse.self, object)
        roundTrip(DropCollectionRequest.self, object)
        roundTrip(DropCollectionResponse.self, object)
        roundTrip(CollectionsResponse.self, object)
        roundTrip(BlobPutRequest.self, object)
        roundTrip(BlobIDRequest.self, object)
        roundTrip(BlobGetRequest.self, object)
        roundTrip(BlobInfo.self, object)
        roundTrip(BlobListRequest.self, object)
        roundTrip(BlobListResponse.self, object)
        roundTrip(BlobDeleteResponse.self, object)
        roundTrip(BlobGetRequest.self, object)
        roundTrip(BlobUploadRequest.self, object)
        roundTrip(BlobUploadChunkRequest.self, object)
        roundTrip(BlobUploadIDRequest.self, object)
        roundTrip(BlobUploadFinishRequest.self, object)
        roundTrip(BlobUploadInfo.self, object)
        roundTrip(BlobUploadAbortResponse.self, object)
        roundTrip(SearchRequest.self, object)
        roundTrip(CountRequest.self, object)
        roundTrip(GroupRequest.self, object)
        roundTrip(GroupResponse.self, object)
        roundTrip(IndexRequest.self, object)
        roundTrip(IndexResponse.self, object)
        roundTrip(WatchRequest.self, object)
        roundTrip(WatchResponse.self, object)
        roundTrip(UnwatchRequest.self, object)
        roundTrip(UnwatchResponse.self, object)
        roundTrip(ChangeEvent.self, object)
        if let query = try? SearchQuery(json: object) {
            check((try? SearchQuery(json: query.json)) == query, "a search query changes in a round trip")
        }
        if let limits = try? Limits(json: object) {
            check((try? Limits(json: limits.json)) == limits, "limits change in a round trip")
            _ = try? limits.validate()
        }
        _ = LarderError(status: .invalidArgument, json: .object(object)).json.bytes
    }

    static func roundTrip<M: WireMessage & Equatable>(_ type: M.Type, _ object: JSONObject) {
        guard let message = try? M(json: object) else { return }
        let encoded = message.json
        do throws(LarderError) {
            let again = try M(json: try JSONParser.parseObject(encoded.bytes))
            check(again == message, "\(M.self) changes in a round trip")
        } catch {
            check(false, "\(M.self) cannot read its own encoding: \(error)")
        }
    }
}

// MARK: - Mode 2: a zlib stream

enum FuzzZlib {
    static func run(_ bytes: [UInt8]) {
        guard bytes.count >= 2 else { return }
        // The declared size: small, so both "inflates past it" and "ends short of it" are reachable.
        let expected = 1 + (Int(bytes[0]) << 8 | Int(bytes[1])) % (64 << 10)
        let stream = Array(bytes.dropFirst(2))
        let inflater = Inflater()
        if let out = try? stream.withUnsafeBytes({ (raw) throws(LarderError) in
            try inflater.inflate(raw, expectedLength: expected)
        }) {
            check(out.count == expected, "inflate returned \(out.count) bytes, not the declared \(expected)")
        }
        // Compression round trip on arbitrary bytes, reusing one deflater and one inflater as the server does.
        let deflater = Deflater(level: Int32(bytes[0] % 10))
        let compressed = deflater.compress(stream)
        guard !compressed.isEmpty else { return }
        let back = try? compressed.withUnsafeBytes { (raw) throws(LarderError) in
            try inflater.inflate(raw, expectedLength: stream.count)
        }
        check(back == stream, "deflate then inflate changed the bytes")
    }
}

// MARK: - Mode J: a blob

enum FuzzBlob {
    static func run(_ bytes: [UInt8]) {
        if let info = try? JPEG.inspect(bytes) {
            check(info.width > 0 && info.height > 0, "a JPEG of \(info.width)x\(info.height) was accepted")
            check(bytes.count >= 4 && bytes[0] == 0xFF && bytes[1] == 0xD8, "a JPEG without SOI was accepted")
        }
        // The EXIF orientation reader (thumbnails) never reads out of bounds, and answers 1 to 8.
        check((1...8).contains(ExifOrientation.of(jpeg: bytes).rawValue), "an orientation outside 1...8")
        // Hashing in pieces gives the one-shot digest.
        var rng = SplitMix64(bytes)
        var hasher = SHA256()
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + 1 + rng.next(upTo: 130))
            hasher.update(Array(bytes[offset..<end]))
            offset = end
        }
        let hex = SHA256.hex(bytes)
        check(hasher.finalizeHex() == hex, "SHA-256 in pieces differs from one shot")
        check(hex.utf8.count == 64, "a SHA-256 hex digest of \(hex.utf8.count) digits")
    }
}

// MARK: - Mode 3: events into a connection's state machine

enum FuzzConnection {
    static let limits = Limits(
        maxFrameBytes: 24 + (8 << 10) + (16 << 10), maxJSONBytes: 8 << 10, maxDocumentBytes: 4 << 10,
        maxBlobBytes: 16 << 10, maxInFlight: 4, maxConnections: 10, idleTimeoutMs: 5_000, frameTimeoutMs: 1_000,
        maxHandshakeFrameBytes: 2 << 10)

    static func run(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let configuration = ConnectionStateMachine.Configuration(
            limits: limits, token: first & 1 == 0 ? nil : "fuzz-token", compressionThreshold: 32,
            outputHighWaterBytes: 512)
        var machine = ConnectionStateMachine(configuration: configuration, now: 0)
        var now: UInt64 = 0
        var pending: [Frame] = []
        var closed = false
        // The peer's view: everything the server writes must decode as well-formed response frames.
        var peer = FrameDecoder(maxFrameBytes: 1 << 24, maxJSONBytes: 1 << 24, maxBinaryBytes: 1 << 24)
        var peerBuffer = ByteBuffer()
        var index = 1

        func take(_ count: Int) -> [UInt8] {
            let slice = Array(bytes[min(index, bytes.count)..<min(index + count, bytes.count)])
            index += count
            return slice
        }

        func apply(_ actions: [ConnectionStateMachine.Action]) {
            for action in actions {
                check(!closed, "an action after close: \(action)")
                switch action {
                case .execute(let frame):
                    check(machine.isHandshakeDone || frame.opcode == .ping, "\(frame.opcode) ran before HELLO")
                    check(!frame.isResponse && !frame.isPush, "a response frame was executed")
                    pending.append(frame)
                case .close:
                    closed = true
                    check(machine.isClosed, "closed while the machine is not")
                case .flush, .pauseReading, .resumeReading, .record, .lookUpSession:
                    break
                }
            }
            check(
                machine.inFlight == pending.count + machine.heldRequests,
                "inFlight \(machine.inFlight) but \(pending.count) handed out and \(machine.heldRequests) held")
            // A connection's order: what runs at one time is all reads or all writes.
            check(Set(pending.map(\.opcode.isWrite)).count <= 1, "reads and writes ran at the same time")
        }

        // Each event is one byte: the kind is byte % 7, its argument byte / 7; bytes received carry a length byte.
        while index < bytes.count {
            let op = bytes[index]
            let arg = Int(op / 7)
            index += 1
            switch op % 7 {
            case 0, 1:
                let length = 1 + Int(take(1).first ?? 0)
                let chunk = take(length)
                apply(chunk.withUnsafeBytes { machine.bytesReceived($0, now: now) })
            case 2:
                now += UInt64(arg) * 50
                apply(machine.timerFired(now: now))
            case 3:
                guard !pending.isEmpty else { continue }
                let frame = pending.removeFirst()
                let json = Array("{\"pad\":\"\(String(repeating: "x", count: arg * 8))\"}".utf8)
                // Odd sizes cross the threshold at which a binary part leaves from its own buffer.
                let binary = arg & 2 == 0 ? [] : [UInt8](repeating: UInt8(truncatingIfNeeded: arg), count: arg * 1024)
                let reply =
                    arg & 1 == 0
                    ? Reply(opcode: frame.opcode, requestID: frame.requestID, json: json, binary: binary)
                    : Reply(opcode: frame.opcode, requestID: frame.requestID, error: LarderError(.notFound, "gone"))
                apply(machine.requestCompleted(reply, now: now))
            case 4:
                // A short write across the buffers the output may be split into, as writev does.
                var count = 0
                machine.withUnsentBuffers { buffers in
                    var left = min(machine.unsentBytes, 1 + arg * 64 + (arg & 4 == 0 ? 0 : 1 << 17))
                    for buffer in buffers where left > 0 {
                        let n = min(left, buffer.count)
                        peerBuffer.append(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                        left -= n
                        count += n
                    }
                }
                guard count > 0 else { continue }
                apply(machine.writeCompleted(count, now: now))
                drain(&peer, &peerBuffer)
            case 5:
                apply(machine.readEOF(now: now))
            default:
                switch arg % 3 {
                case 0: machine.beginShutdown()
                case 1: apply(machine.forceClose(.shutdown))
                default:
                    // A change-feed event pushed unasked (WATCH); dropped before HELLO and once closing.
                    let json = Array("{\"subscription\":1,\"seq\":\(arg),\"kind\":\"drop\"}".utf8)
                    apply(machine.push(opcode: .event, requestID: 1, json: json))
                }
            }
        }
        // Whatever is still unsent must decode too.
        if machine.unsentBytes > 0 {
            machine.withUnsentOutput { peerBuffer.append($0) }
            drain(&peer, &peerBuffer)
        }
    }

    static func drain(_ decoder: inout FrameDecoder, _ buffer: inout ByteBuffer) {
        do throws(FrameError) {
            while let frame = try decoder.next(&buffer) {
                check(frame.isResponse != frame.isPush, "the server sent a frame that is not one of response or push")
                if !frame.json.isEmpty {
                    let object = try? JSONParser.parseObject(frame.json)
                    check(object != nil, "the server sent a JSON part that is no object")
                }
            }
        } catch {
            check(false, "the server's output does not decode: \(error.error)")
        }
    }
}
