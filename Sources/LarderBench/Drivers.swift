import LarderIO
import LarderWire

/// Result codes of one request: a Larder status (0 to 999), or one of these for the other targets and for failures
/// that have no answer.
enum ResultCode {
    static let ok: UInt16 = 0
    /// A Redis error reply (`-ERR ...`).
    static let redisError: UInt16 = 1000
    /// A Redis nil reply to GET: the key is missing.
    static let redisNil: UInt16 = 1001
    /// The connection broke with the request in flight.
    static let connectionClosed: UInt16 = 2000
    /// No answer within `--timeout` after the load stopped.
    static let timeout: UInt16 = 2001

    static func name(_ code: UInt16) -> String {
        switch code {
        case redisError: "ERR"
        case redisNil: "NIL"
        case connectionClosed: "CONNECTION_CLOSED"
        case timeout: "TIMEOUT"
        default: Status(rawValue: code).name
        }
    }
}

/// Whose id a request carries.
enum IDKind: UInt8 {
    /// A document or blob made by this run (`Payloads.appendCreatedID`).
    case created
    /// A preloaded document or blob (`Payloads.appendDocumentID`, `appendBlobID`).
    case preloaded
}

/// One planned request.
struct Request {
    var op: BenchOperation
    var key: UInt64
    var idKind: IDKind
    /// The revision a `patchRev` expects.
    var rev: Int64 = 0
}

/// A protocol spoken by the load generator: requests encoded into a connection's output buffer, answers recognised
/// in its input without being decoded (only the status matters, and skipping a body costs nothing).
protocol Driver {
    /// True when answers come in request order (Redis, the raw sink); false when they carry request ids (Larder).
    static var inOrder: Bool { get }
    /// Appends one request.
    mutating func encode(_ request: Request, requestID: UInt32, into out: inout [UInt8])
    /// Recognises whole answers in `bytes`, appending (request id, result code) for each, and returns how many bytes
    /// it consumed; bytes it leaves (a partial header) come back at the front of the next call. Throws when the
    /// stream is not the protocol.
    mutating func consume(
        _ bytes: UnsafeRawBufferPointer, into completions: inout [(UInt32, UInt16)]
    ) throws(BenchError) -> Int
}

/// A driver whose answers are a header it reads and then a body it skips as it streams in, across as many reads as
/// the body spans: `consume` is shared, and each protocol reads only its own headers.
protocol SkippingDriver: Driver {
    /// Body bytes of the current answer still to skip.
    var skip: Int { get set }
    /// The answer whose body was skipped to its end: appends its completion, if it has one.
    func bodyEnded(into completions: inout [(UInt32, UInt16)])
    /// Sees the bytes of the current answer's body as they are skipped (`ends`: the last of them).
    mutating func skipping(_ body: UnsafeRawBufferPointer, ends: Bool)
    /// Reads one header at `offset` of `bytes` and returns the offset past it, or nil when the header is not all there
    /// yet. It appends the completion of an answer without a body and sets `skip` for one with a body.
    mutating func readHeader(
        _ bytes: UnsafeRawBufferPointer, at offset: Int, into completions: inout [(UInt32, UInt16)]
    ) throws(BenchError) -> Int?
}

extension SkippingDriver {
    mutating func skipping(_ body: UnsafeRawBufferPointer, ends: Bool) {}

    mutating func consume(
        _ bytes: UnsafeRawBufferPointer, into completions: inout [(UInt32, UInt16)]
    ) throws(BenchError) -> Int {
        var offset = 0
        while true {
            if skip > 0 {
                let n = min(skip, bytes.count - offset)
                skipping(UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + n)]), ends: n == skip)
                skip -= n
                offset += n
                if skip > 0 { return offset }
                bodyEnded(into: &completions)
                continue
            }
            guard let next = try readHeader(bytes, at: offset, into: &completions) else { return offset }
            offset = next
        }
    }
}

/// The Larder protocol: frames encoded by LarderWire's `FrameEncoder`; answers read by their `FrameHeader` and the
/// rest of each frame skipped as it streams in, so a 1 MiB blob is never buffered.
struct LarderDriver: SkippingDriver {
    static let inOrder = false
    let payloads: Payloads
    let worker: Int
    let encoder: FrameEncoder
    private let collectionPrefix: [UInt8]
    private var json: [UInt8] = []
    /// The `requestKey`s of writes (`--request-keys`): time-ordered, as LarderClient makes them.
    private var requestKeys = TimeOrderedUUIDGenerator()
    /// Body bytes of the current answer still to skip, and its id and status.
    var skip = 0
    private var pendingID: UInt32 = 0
    private var pendingStatus: UInt16 = 0
    private var pendingIsAnswer = true
    /// With `--after-seq`: the last bytes of the current answer's body, where a write answer's `seq` is.
    private var tail: [UInt8] = []

    init(payloads: Payloads, worker: Int, collection: String, encoder: FrameEncoder) {
        self.payloads = payloads
        self.worker = worker
        self.encoder = encoder
        collectionPrefix = Array(#"{"collection":""#.utf8) + Array(collection.utf8) + Array(#"""#.utf8)
        json.reserveCapacity(payloads.docSizeMax + 256)
    }

    private static let idOpen = Array(#","id":""#.utf8)
    private static let dataOpen = Array(#"","data":"#.utf8)
    private static let dataWithoutID = Array(#","data":"#.utf8)
    private static let requestKeyOpen = Array(#","requestKey":""#.utf8)
    private static let afterSeqOpen = Array(#","afterSeq":"#.utf8)
    private static let patchOpen = Array(#"","patch":{"name":"patched "#.utf8)
    private static let patchClose = Array(#""}}"#.utf8)
    private static let patchRevMiddle = Array(#""},"rev":"#.utf8)
    /// A two-filter search: the key's group, and keys from it up (`{"and":[group eq K % 100, n gte K]}`).
    private static let searchOpen = Array(#","filter":{"and":[{"field":"group","op":"eq","value":"#.utf8)
    private static let searchMiddle = Array(#"},{"field":"n","op":"gte","value":"#.utf8)
    private static let searchClose = Array(#"}]},"limit":10}"#.utf8)
    private static let countOpen = Array(#","filter":{"field":"group","op":"eq","value":"#.utf8)
    private static let blobIDOpen = Array(#"{"id":""#.utf8)
    private static let quoteClose = Array(#""}"#.utf8)

    mutating func encode(_ request: Request, requestID: UInt32, into out: inout [UInt8]) {
        json.removeAll(keepingCapacity: true)
        var binary: [UInt8]?
        let opcode: Opcode
        func appendID(_ request: Request, into json: inout [UInt8]) {
            switch request.idKind {
            case .created: payloads.appendCreatedID(worker: worker, counter: request.key, into: &json)
            case .preloaded: payloads.appendDocumentID(request.key, into: &json)
            }
        }
        switch request.op {
        case .get, .delete:
            opcode = request.op == .get ? .get : .delete
            json.append(contentsOf: collectionPrefix)
            json.append(contentsOf: LarderDriver.idOpen)
            appendID(request, into: &json)
            json.append(contentsOf: LarderDriver.quoteClose)
        case .create where request.idKind == .created && payloads.ids == .server:
            opcode = .create
            json.append(contentsOf: collectionPrefix)
            json.append(contentsOf: LarderDriver.dataWithoutID)
            payloads.appendDocument(request.key, into: &json)
            json.append(UInt8(ascii: "}"))
        case .create, .replace:
            opcode = request.op == .create ? .create : .replace
            json.append(contentsOf: collectionPrefix)
            json.append(contentsOf: LarderDriver.idOpen)
            appendID(request, into: &json)
            json.append(contentsOf: LarderDriver.dataOpen)
            payloads.appendDocument(request.key, into: &json)
            json.append(UInt8(ascii: "}"))
        case .patch:
            opcode = .patch
            json.append(contentsOf: collectionPrefix)
            json.append(contentsOf: LarderDriver.idOpen)
            appendID(request, into: &json)
            json.append(contentsOf: LarderDriver.patchOpen)
            appendDecimal(request.key, into: &json)
            json.append(contentsOf: LarderDriver.patchClose)
        case .patchRev:
            opcode = .patch
            json.append(contentsOf: collectionPrefix)
            json.append(contentsOf: LarderDriver.idOpen)
            appendID(request, into: &json)
            json.append(contentsOf: LarderDriver.patchOpen)
            appendDecimal(UInt64(request.rev), into: &json)
            json.append(contentsOf: LarderDriver.patchRevMiddle)
            appendDecimal(UInt64(request.rev), into: &json)
            json.append(UInt8(ascii: "}"))
        case .search:
            opcode = .search
            json.append(contentsOf: collectionPrefix)
            json.append(contentsOf: LarderDriver.searchOpen)
            appendDecimal(request.key % 100, into: &json)
            json.append(contentsOf: LarderDriver.searchMiddle)
            appendDecimal(request.key, into: &json)
            json.append(contentsOf: LarderDriver.searchClose)
        case .count:
            opcode = .count
            json.append(contentsOf: collectionPrefix)
            json.append(contentsOf: LarderDriver.countOpen)
            appendDecimal(request.key % 100, into: &json)
            json.append(contentsOf: Array("}}".utf8))
        case .blobPut where request.idKind == .created && payloads.ids == .server:
            opcode = .blobPut
            json.append(contentsOf: Array("{}".utf8))
            binary = payloads.blobs[Int(request.key % UInt64(payloads.blobs.count))]
        case .blobPut, .blobGet:
            opcode = request.op == .blobPut ? .blobPut : .blobGet
            json.append(contentsOf: LarderDriver.blobIDOpen)
            switch request.idKind {
            case .created: payloads.appendCreatedID(worker: worker, counter: request.key, into: &json)
            case .preloaded: payloads.appendBlobID(request.key, into: &json)
            }
            json.append(contentsOf: LarderDriver.quoteClose)
            if request.op == .blobPut { binary = payloads.blobs[Int(request.key % UInt64(payloads.blobs.count))] }
        }
        if request.op == .get, let seen = payloads.seenSeq?.value, seen > 0 {
            // `…}` becomes `…,"afterSeq":N}`: the newest write this run has seen answered.
            json.removeLast()
            json.append(contentsOf: LarderDriver.afterSeqOpen)
            appendDecimal(UInt64(seen), into: &json)
            json.append(UInt8(ascii: "}"))
        }
        if payloads.requestKeys && request.op.writes {
            // `…}` becomes `…,"requestKey":"<uuid>"}`: a fresh key for every write.
            json.removeLast()
            json.append(contentsOf: LarderDriver.requestKeyOpen)
            json.append(contentsOf: requestKeys.next().uuidString.lowercased().utf8)
            json.append(contentsOf: LarderDriver.quoteClose)
        }
        json.withUnsafeBytes { jsonBytes in
            if let binary {
                binary.withUnsafeBytes { encoder.encode(opcode: opcode, requestID: requestID, json: jsonBytes,
                                                        binary: $0, into: &out) }
            } else {
                encoder.encode(opcode: opcode, requestID: requestID, json: jsonBytes, into: &out)
            }
        }
    }

    /// The answer whose body was skipped to its end: complete unless it was a pushed frame.
    func bodyEnded(into completions: inout [(UInt32, UInt16)]) {
        if pendingIsAnswer { completions.append((pendingID, pendingStatus)) }
    }

    /// With `--after-seq`, keeps an answer's last bytes and, at its end, the `seq` a write answer ends with. (Write
    /// answers are small and never compressed; a JSON part ends the body when there is no binary part.)
    mutating func skipping(_ body: UnsafeRawBufferPointer, ends: Bool) {
        guard let seen = payloads.seenSeq, pendingIsAnswer else { return }
        tail.append(contentsOf: body.suffix(32))
        if tail.count > 32 { tail.removeFirst(tail.count - 32) }
        guard ends else { return }
        if let seq = SeenSeq.parse(tail: tail) { seen.saw(seq) }
        tail.removeAll(keepingCapacity: true)
    }

    mutating func readHeader(
        _ bytes: UnsafeRawBufferPointer, at offset: Int, into completions: inout [(UInt32, UInt16)]
    ) throws(BenchError) -> Int? {
        guard bytes.count - offset >= Frame.prefixSize else { return nil }
        let header = FrameHeader(UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + Frame.prefixSize)]))
        guard header.magic == Frame.magic, header.version == Frame.version,
            Int(header.length) >= Frame.headerSize
        else {
            throw BenchError("the server sent a malformed frame header (magic, version or length)")
        }
        // A pushed frame (the change feed) was not asked for: skipped, it answers nothing.
        pendingIsAnswer = !header.flags.contains(.push)
        pendingID = header.requestID
        pendingStatus = header.status.rawValue
        skip = Int(header.length) - Frame.headerSize
        if skip == 0 && pendingIsAnswer { completions.append((pendingID, pendingStatus)) }
        return offset + Frame.prefixSize
    }
}

/// RESP, for `--target redis`: GET and SET of the same value sizes, in the same engine.
struct RedisDriver: SkippingDriver {
    static let inOrder = true
    let payloads: Payloads
    let worker: Int
    /// Body bytes of the current bulk reply still to skip.
    var skip = 0
    private var pendingStatus: UInt16 = 0

    init(payloads: Payloads, worker: Int) {
        self.payloads = payloads
        self.worker = worker
    }

    private static let getCommand = Array("*2\r\n$3\r\nGET\r\n$".utf8)
    private static let setCommand = Array("*3\r\n$3\r\nSET\r\n$".utf8)
    private static let crlf = Array("\r\n".utf8)
    private static let dollar = UInt8(ascii: "$")

    private static let keyPrefix = Array("bench:".utf8)

    /// `bench:<key>` for preloaded values, `bench:<created id>` for new ones, as a RESP bulk string.
    private func appendKey(_ request: Request, into out: inout [UInt8]) {
        let length = RedisDriver.keyPrefix.count + (request.idKind == .preloaded ? decimalDigits(request.key) : 36)
        appendDecimal(UInt64(length), into: &out)
        out.append(contentsOf: RedisDriver.crlf)
        out.append(contentsOf: RedisDriver.keyPrefix)
        switch request.idKind {
        case .preloaded: appendDecimal(request.key, into: &out)
        case .created: payloads.appendCreatedID(worker: worker, counter: request.key, into: &out)
        }
        out.append(contentsOf: RedisDriver.crlf)
    }

    mutating func encode(_ request: Request, requestID: UInt32, into out: inout [UInt8]) {
        if request.op == .get {
            out.append(contentsOf: RedisDriver.getCommand)
            appendKey(request, into: &out)
            return
        }
        let value = payloads.redisValue(request.key)
        out.append(contentsOf: RedisDriver.setCommand)
        appendKey(request, into: &out)
        out.append(RedisDriver.dollar)
        appendDecimal(UInt64(value.count), into: &out)
        out.append(contentsOf: RedisDriver.crlf)
        out.append(contentsOf: value)
        out.append(contentsOf: RedisDriver.crlf)
    }

    /// The bulk reply whose body was skipped to its end: complete.
    func bodyEnded(into completions: inout [(UInt32, UInt16)]) {
        completions.append((0, pendingStatus))
    }

    mutating func readHeader(
        _ bytes: UnsafeRawBufferPointer, at offset: Int, into completions: inout [(UInt32, UInt16)]
    ) throws(BenchError) -> Int? {
        // A reply starts with a line ending in CRLF.
        var end = offset
        while end + 1 < bytes.count && !(bytes[end] == 0x0D && bytes[end + 1] == 0x0A) { end += 1 }
        guard end + 1 < bytes.count else {
            if bytes.count - offset > 65_536 { throw BenchError("the Redis server sent a reply line over 64 KiB") }
            return nil
        }
        let kind = bytes[offset]
        let line = UnsafeRawBufferPointer(rebasing: bytes[(offset + 1)..<end])
        switch kind {
        case UInt8(ascii: "+"), UInt8(ascii: ":"): completions.append((0, ResultCode.ok))
        case UInt8(ascii: "-"): completions.append((0, ResultCode.redisError))
        case UInt8(ascii: "$"):
            guard let length = RedisDriver.parseInt(line) else {
                throw BenchError("the Redis server sent a malformed bulk length")
            }
            if length < 0 {
                completions.append((0, ResultCode.redisNil))
            } else {
                pendingStatus = ResultCode.ok
                skip = length + 2
            }
        default:
            throw BenchError("the Redis server sent an unexpected reply type (byte \(kind))")
        }
        return end + 2
    }

    static func parseInt(_ bytes: UnsafeRawBufferPointer) -> Int? {
        var negative = false
        var value = 0
        var digits = 0
        for (i, b) in bytes.enumerated() {
            if i == 0 && b == UInt8(ascii: "-") {
                negative = true
                continue
            }
            guard b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"), digits < 18 else { return nil }
            value = value * 10 + Int(b - UInt8(ascii: "0"))
            digits += 1
        }
        return digits == 0 ? nil : (negative ? -value : value)
    }
}

/// The raw loopback sink of `tcp-copy`: each 4-byte request is answered with exactly `responseSize` bytes.
struct RawDriver: Driver {
    static let inOrder = true
    let responseSize: Int
    private var received = 0
    static let request = Array("GET\n".utf8)

    init(responseSize: Int) { self.responseSize = responseSize }

    mutating func encode(_ request: Request, requestID: UInt32, into out: inout [UInt8]) {
        out.append(contentsOf: RawDriver.request)
    }

    mutating func consume(
        _ bytes: UnsafeRawBufferPointer, into completions: inout [(UInt32, UInt16)]
    ) throws(BenchError) -> Int {
        received += bytes.count
        while received >= responseSize {
            received -= responseSize
            completions.append((0, ResultCode.ok))
        }
        return bytes.count
    }
}
