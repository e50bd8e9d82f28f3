#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderStore
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// What a hostile input must get: an error reply with the connection left open (proved by a PING after it), or
/// error frames and then the close.
///
/// A struct, not an enum with a `[Status]` payload: Swift keeps an enum's case in the spare bits of such a pointer,
/// which LeakSanitizer cannot follow, so it took every row's statuses in the static tables for leaks.
struct HostileOutcome: Sendable, Equatable, CustomStringConvertible {
    /// The error replies expected: exactly one when the connection stays open.
    let statuses: [Status]
    /// Whether the server then closes the connection.
    let closes: Bool

    static func open(_ status: Status) -> HostileOutcome { HostileOutcome(statuses: [status], closes: false) }
    static func closed(_ statuses: [Status]) -> HostileOutcome { HostileOutcome(statuses: statuses, closes: true) }

    var description: String {
        closes ? "\(statuses.map(\.name)), then closed" : "\(statuses.map(\.name)), connection open"
    }
}

/// One row of the hostile table: bytes a client sends (after a good HELLO unless `hello` is false) and the outcome.
struct HostileCase: Sendable, CustomStringConvertible {
    var name: String
    var hello = true
    /// The HELLO offers zlib (compressed parts are a protocol error without it).
    var zlib = false
    var bytes: [UInt8]
    /// Half-close after sending: the stream ends where the bytes end.
    var endStream = false
    var expect: HostileOutcome
    /// For a request that succeeds: what its answer must hold, as `HostileClientTests.summary` writes it.
    var answer: String?

    var description: String { name }
}

/// Frames built byte by byte, so a case can lie in any header field.
enum HostileFrames {
    static let requestID: UInt32 = 7

    static func frame(
        _ opcode: UInt16, json: [UInt8], binary: [UInt8] = [], magic: UInt16 = 0x4C52, version: UInt8 = 1,
        flags: UInt8? = nil, length: UInt32? = nil, jsonLength: UInt32? = nil, binaryLength: UInt32? = nil,
        uncompressedLength: UInt32 = 0
    ) -> [UInt8] {
        var out: [UInt8] = []
        func u16(_ v: UInt16) { out += [UInt8(v >> 8), UInt8(v & 0xFF)] }
        func u32(_ v: UInt32) { out += [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
        u32(length ?? UInt32(24 + json.count + binary.count))
        u16(magic)
        out.append(version)
        out.append(flags ?? (binary.isEmpty ? 0 : 0x02))
        u16(opcode)
        u16(0)
        u32(requestID)
        u32(jsonLength ?? UInt32(json.count))
        u32(binaryLength ?? UInt32(binary.count))
        u32(uncompressedLength)
        return out + json + binary
    }

    /// An honest frame around a JSON text that may be anything at all.
    static func request(_ opcode: Opcode, _ json: String, binary: [UInt8] = []) -> [UInt8] {
        frame(opcode.rawValue, json: Array(json.utf8), binary: binary)
    }

    static func request(_ opcode: Opcode, bytes json: [UInt8], binary: [UInt8] = []) -> [UInt8] {
        frame(opcode.rawValue, json: json, binary: binary)
    }

    static func compressed(_ opcode: Opcode, _ stream: [UInt8], uncompressedLength: UInt32) -> [UInt8] {
        frame(opcode.rawValue, json: stream, flags: 0x01, uncompressedLength: uncompressedLength)
    }
}

/// What must not change: every collection with its count and records, every blob's metadata and bytes.
struct StoreSnapshot: Equatable {
    var collections: String
    var records: [String: String]
    var blobs: String
    var blobBytes: [String: String]

    static func take(_ c: RawClient) throws -> StoreSnapshot {
        let collections = try c.call(.collections)
        var snapshot = StoreSnapshot(collections: collections.replyText, records: [:], blobs: "", blobBytes: [:])
        for entry in try CollectionsResponse(json: collections.jsonObject()).collections {
            let list = try c.call(.list, ["collection": .string(entry.name), "limit": 1000])
            snapshot.records[entry.name] = list.replyText
        }
        let blobs = try c.call(.blobList, ["limit": 1000])
        snapshot.blobs = blobs.replyText
        for blob in try BlobListResponse(json: blobs.jsonObject()).blobs {
            let got = try c.call(.blobGet, ["id": .string(blob.id.wireString)])
            snapshot.blobBytes[blob.id.wireString] = SHA256.hex(got.binary)
        }
        return snapshot
    }
}

/// A hostile client's connection, over TCP or the console's WebSocket: what the table's runner needs of it.
protocol HostileConnection {
    /// A good HELLO, offering zlib or nothing.
    func hello(zlib: Bool) throws
    /// A case's bytes; with `endStream`, the stream then ends where they end.
    func sendCase(_ bytes: [UInt8], endStream: Bool) throws
    /// The next frame, nil when the server closed the connection.
    func nextFrame() throws -> Frame?
    func ping() throws -> Frame
    /// The frames until the server closes the connection.
    func framesUntilEnd() throws -> [Frame]
}

extension RawClient: HostileConnection {
    func hello(zlib: Bool) throws { try hello(compression: zlib ? ["zlib"] : []) }

    func sendCase(_ bytes: [UInt8], endStream: Bool) throws {
        try writeAll(bytes)
        if endStream { shutdownWrite() }
    }

    func nextFrame() throws -> Frame? { try receive() }
    func ping() throws -> Frame { try call(.ping) }
    func framesUntilEnd() throws -> [Frame] { try framesUntilClosed() }
}

/// A table of hostile inputs over real sockets: each gets its status or its close, the server keeps serving
/// a healthy client, and nothing stored changes.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct HostileClientTests {
    static let existing = UUID(uuidString: "3f2504e0-4f89-41d3-9a0c-0305e82c3301")!
    static let existingBlob = UUID(uuidString: "5a1d0000-0000-4000-8000-000000000001")!
    static let missing = UUID(uuidString: "00000000-0000-4000-8000-00000000dead")!

    static func jpeg() -> [UInt8] { (try? ServerFixtures.data("rocket.jpg")) ?? [] }

    /// The data every case runs against: two collections, an attached and a free blob.
    static func seed(_ c: RawClient) throws {
        let id = existing.wireString
        for (n, name) in ["poke-ball", "great-ball", "ultra-ball"].enumerated() {
            let data: JSONObject = ["name": .string(name), "price": .int(Int64(n * 100))]
            let json: JSONObject = ["collection": "items", "data": .object(data)]
            #expect(try c.call(.create, n == 0 ? json.merging(["id": .string(id)]) : json).status == .ok)
        }
        #expect(try c.call(.create, ["collection": "notes", "data": ["text": "北京市海淀区"]]).status == .ok)
        let attach: JSONObject = ["attach": ["collection": "items", "id": .string(id)]]
        #expect(try c.call(.blobPut, attach, binary: jpeg()).status == .ok)
        #expect(try c.call(.blobPut, ["id": .string(existingBlob.wireString)], binary: jpeg()).status == .ok)
    }

    /// What an answer holds, in a line a table row can name: the `name`s of the records a SEARCH answered (sorted,
    /// since rows the query does not order come in id order, and the ids are made at random), a COUNT's count, a
    /// GROUP's groups, and any other answer's JSON.
    static func summary(_ reply: Frame) -> String {
        let json = reply.replyJSON
        if let records = json["records"]?.arrayValue {
            let names = records.map { $0["data"]?["name"]?.stringValue ?? "(no name)" }.sorted()
            return "records [\(names.joined(separator: ", "))]"
        }
        if let count = json["count"]?.intValue { return "count \(count)" }
        if let groups = json["groups"]?.arrayValue {
            let described = groups.map { group in
                let names = (group["records"]?.arrayValue ?? []).map { $0["data"]?["name"]?.stringValue ?? "(no name)" }
                let key = String(decoding: (group["key"] ?? .null).bytes, as: UTF8.self)
                return "\(key) \(group["count"]?.intValue ?? -1) [\(names.sorted().joined(separator: ", "))]"
            }
            return "groups [\(described.joined(separator: "; "))]"
        }
        return reply.replyText
    }

    /// Runs every case on its own connection, checking after each one that a healthy client is served and the
    /// snapshot is unchanged.
    static func run(
        _ cases: [HostileCase], configure: @escaping (inout ServerConfiguration) -> Void = { _ in }
    ) throws {
        try withServerWithoutListener(configure) { server in
            try check(cases, healthy: try RawClient.connected(to: server)) { try RawClient.connected(to: server) }
        }
    }

    /// Runs every case on a connection of its own from `connect`, then checks that `healthy` (and `alsoHealthy`, a
    /// client of another transport) is still served, and that nothing stored changed.
    static func check(
        _ cases: [HostileCase], healthy: RawClient, alsoHealthy: (String) throws -> Void = { _ in },
        connect: () throws -> any HostileConnection
    ) throws {
        try healthy.hello()
        try seed(healthy)
        let before = try StoreSnapshot.take(healthy)
        for row in cases {
            let hostile = try connect()
            if row.hello { try hostile.hello(zlib: row.zlib) }
            try hostile.sendCase(row.bytes, endStream: row.endStream)
            if !row.expect.closes {
                let reply = try hostile.nextFrame()
                let got = reply.map { $0.replyText } ?? "closed"
                #expect(reply?.status == row.expect.statuses.first, "\(row.name): \(got)")
                #expect(reply?.requestID == HostileFrames.requestID, "\(row.name): reply to the wrong request")
                if let answer = row.answer {
                    #expect(reply.map(summary) == answer, "\(row.name): \(got)")
                }
                let ping = try hostile.ping()
                #expect(ping.status == .ok, "\(row.name): the connection did not stay usable")
            } else {
                let frames: [Frame]
                do {
                    frames = try hostile.framesUntilEnd()
                } catch {
                    throw ServerTestError("\(row.name): \(error)")
                }
                // Replies to requests in flight may come after the error frame; their order is not the point.
                let got = frames.map(\.status.rawValue).sorted()
                let want = row.expect.statuses.map(\.rawValue).sorted()
                #expect(got == want, "\(row.name): \(frames.map(\.replyText))")
            }
            #expect(try healthy.call(.ping).status == .ok, "\(row.name): the healthy client lost its ping")
            try alsoHealthy(row.name)
            let record = try healthy.call(.get, ["collection": "items", "id": .string(existing.wireString)])
            #expect(record.status == .ok, "\(row.name): the healthy client lost its GET")
            // Writes still work (an index gone wrong would break every insert), and leave no trace.
            let canary = try healthy.call(.create, ["collection": "canary", "data": ["name": "c", "price": 1]])
            #expect(canary.status == .ok, "\(row.name): the healthy client cannot write: \(canary.replyText)")
            #expect(try healthy.call(.dropCollection, ["collection": "canary"]).status == .ok)
            #expect(try StoreSnapshot.take(healthy) == before, "\(row.name) changed what is stored")
        }
    }

    // MARK: The table

    static let framing: [HostileCase] = {
        let ping = HostileFrames.request(.ping, "")
        let get = HostileFrames.request(.get, #"{"collection":"items","id":"\#(existing.wireString)"}"#)
        return [
            HostileCase(
                name: "an HTTP request", hello: false, bytes: Array("GET / HTTP/1.1\r\nHost: larder\r\n\r\n".utf8),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a TLS ClientHello", hello: false,
                bytes: [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]
                    + Array(repeating: 0xAB, count: 40),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "bad magic after HELLO", bytes: HostileFrames.frame(2, json: [], magic: 0x4854),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a header cut off by the end of the stream", bytes: Array(get.prefix(10)), endStream: true,
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a body cut off by the end of the stream", bytes: Array(get.prefix(40)), endStream: true,
                expect: .closed([.protocolError])),
            HostileCase(name: "length 0", bytes: [0, 0, 0, 0, 0x4C, 0x52], expect: .closed([.protocolError])),
            HostileCase(
                name: "length 23, shorter than a header", bytes: HostileFrames.frame(2, json: [], length: 23),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "length 4 GiB, refused on its first 6 bytes", bytes: [0xFF, 0xFF, 0xFF, 0xFF, 0x4C, 0x52],
                expect: .closed([.payloadTooLarge])),
            HostileCase(
                name: "length 4 GiB before HELLO", hello: false, bytes: [0xFF, 0xFF, 0xFF, 0xFF, 0x4C, 0x52],
                expect: .closed([.payloadTooLarge])),
            HostileCase(
                name: "length 4 GiB and a bad magic: the magic's error", bytes: [0xFF, 0xFF, 0xFF, 0xFF, 0x48, 0x54],
                expect: .closed([.protocolError])),
            HostileCase(
                name: "JSON length 4 GiB", bytes: HostileFrames.frame(2, json: [], length: 24, jsonLength: 0xFFFF_FFFF),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "JSON and binary lengths that wrap around 32 bits to the frame length",
                bytes: HostileFrames.frame(
                    0x30, json: Array("{}".utf8), flags: 0x02, length: 26, jsonLength: 0xFFFF_FFF0, binaryLength: 0x12),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "length disagreeing with the parts",
                bytes: HostileFrames.frame(2, json: Array("{}".utf8), length: 30),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a reserved flag bit", bytes: HostileFrames.frame(2, json: [], flags: 0x80),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "the binary flag without a binary part", bytes: HostileFrames.frame(2, json: [], flags: 0x02),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a binary part without the binary flag",
                bytes: HostileFrames.frame(0x30, json: [], binary: jpeg(), flags: 0),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "an uncompressed length on an uncompressed part",
                bytes: HostileFrames.frame(2, json: Array("{}".utf8), uncompressedLength: 2),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "frame version 2", bytes: HostileFrames.frame(2, json: [], version: 2),
                expect: .closed([.unsupportedVersion])),
            HostileCase(
                name: "the response flag on a request", bytes: HostileFrames.frame(2, json: [], flags: 0x04),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "the push flag on a request", bytes: HostileFrames.frame(2, json: [], flags: 0x08),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a frame over the handshake cap before HELLO", hello: false,
                bytes: HostileFrames.request(.ping, bytes: Array(repeating: 0x20, count: 70_000)),
                expect: .closed([.payloadTooLarge])),
            HostileCase(
                name: "pipelined: a good PING, then garbage",
                bytes: ping + Array("garbage-garbage-garbage-garbage".utf8),
                expect: .closed([.ok, .protocolError])),
        ]
    }()

    static let compression: [HostileCase] = {
        let pad = Array(#"{"collection":"items","data":{"pad":""#.utf8) + Array(repeating: 0x20, count: 3_000_000)
            + Array(#""}}"#.utf8)
        let bomb = Deflater(level: 9).compress(pad)
        let small = Array(#"{"collection":"items","data":{"a":1}}"#.utf8)
        let smallStream = Deflater(level: 6).compress(small)
        return [
            HostileCase(
                name: "a compression bomb declaring 1,000 bytes", zlib: true,
                bytes: HostileFrames.compressed(
                    .create, bomb, uncompressedLength: 1000), expect: .closed([.protocolError])),
            HostileCase(
                name: "a compression bomb declaring 4 GiB", zlib: true,
                bytes: HostileFrames.compressed(.create, bomb, uncompressedLength: 0xFFFF_FFFF),
                expect: .closed([.payloadTooLarge])),
            HostileCase(
                name: "a compressed part declaring more than it inflates to", zlib: true,
                bytes: HostileFrames.compressed(.create, smallStream, uncompressedLength: UInt32(small.count + 100)),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a compressed part declaring 0 bytes", zlib: true,
                bytes: HostileFrames.compressed(.create, smallStream, uncompressedLength: 0),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a corrupt zlib stream", zlib: true,
                bytes: HostileFrames.compressed(
                    .create, [0x78, 0x9C] + Array(repeating: 0xEE, count: 40), uncompressedLength: 50),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "bytes after the end of the zlib stream", zlib: true,
                bytes: HostileFrames.compressed(
                    .create, smallStream + [1, 2, 3], uncompressedLength: UInt32(small.count)),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a compressed part when zlib was not agreed",
                bytes: HostileFrames.compressed(.create, smallStream, uncompressedLength: UInt32(small.count)),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a compressed HELLO", hello: false,
                bytes: HostileFrames.compressed(
                    .hello, Deflater(level: 6).compress(Array(#"{"versions":[1],"compression":["zlib"]}"#.utf8)),
                    uncompressedLength: 39),
                expect: .closed([.protocolError])),
        ]
    }()

    static let json: [HostileCase] = {
        func create(_ data: [UInt8]) -> [UInt8] {
            HostileFrames.request(.create, bytes: Array(#"{"collection":"items","data":"#.utf8) + data + [0x7D])
        }
        let deepArrays = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        let deepObjects = String(repeating: #"{"a":"#, count: 10_000) + "1" + String(repeating: "}", count: 10_000)
        return [
            HostileCase(
                name: "invalid UTF-8 in a string",
                bytes: create(Array(#"{"s":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "an overlong UTF-8 slash",
                bytes: create(Array(#"{"s":""#.utf8) + [0xC0, 0xAF] + Array(#""}"#.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "UTF-8 of a surrogate",
                bytes: create(Array(#"{"s":""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""}"#.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "a lone surrogate escape", bytes: create(Array(#"{"s":"\ud800"}"#.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "invalid UTF-8 in a member name", bytes: create([0x7B, 0x22, 0xC3, 0x22, 0x3A, 0x31, 0x7D]),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "JSON that is an array", bytes: HostileFrames.request(.create, "[1,2,3]"),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "JSON that is a string", bytes: HostileFrames.request(.get, #""items""#),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "JSON that is null", bytes: HostileFrames.request(.count, "null"),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "10,000 levels of arrays", bytes: create(Array(deepArrays.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "10,000 levels of objects", bytes: create(Array(deepObjects.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "a number over a double", bytes: create(Array(#"{"n":1e400}"#.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "a 5,000-digit integer",
                bytes: create(Array(#"{"n":\#(String(repeating: "9", count: 5000))}"#.utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(name: "NaN", bytes: create(Array(#"{"n":NaN}"#.utf8)), expect: .open(.invalidArgument)),
            HostileCase(
                name: "duplicate member names",
                bytes: HostileFrames.request(
                    .get, #"{"collection":"items","collection":"notes","id":"\#(existing.wireString)"}"#),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "bytes after the object", bytes: HostileFrames.request(.ping, "{} {}"),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "an unterminated object", bytes: HostileFrames.request(.count, #"{"collection":"items""#),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "a raw control character in a string", bytes: create(Array("{\"s\":\"a\u{1}b\"}".utf8)),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "a NUL byte between members",
                bytes: HostileFrames.request(.count, bytes: Array(#"{"collection":"items""#.utf8) + [0] + [0x7D]),
                expect: .open(.invalidArgument)),
        ]
    }()

    static let fields: [HostileCase] = {
        let id = existing.wireString
        func bad(_ name: String, _ opcode: Opcode, _ json: String, _ status: Status = .invalidArgument) -> HostileCase {
            HostileCase(name: name, bytes: HostileFrames.request(opcode, json), expect: .open(status))
        }
        let deepFilter = String(repeating: #"{"not":"#, count: 40) + #"{"field":"a","op":"eq","value":1}"#
            + String(repeating: "}", count: 40)
        let manyClauses = (0..<300).map { _ in #"{"field":"a","op":"eq","value":1}"# }.joined(separator: ",")
        let manyIDs = (0..<1001).map { _ in "\"\(UUID().wireString)\"" }.joined(separator: ",")
        let manyValues = (0..<1001).map(String.init).joined(separator: ",")
        let thousand = (0..<1000).map(String.init).joined(separator: ",")
        let maxClauses = (0..<255).map { #"{"field":"price","op":"eq","value":\#($0)}"# }.joined(separator: ",")
        let mostIns = (0..<255).map { _ in #"{"field":"price","op":"in","value":[\#(thousand)]}"# }
            .joined(separator: ",")
        let longPath = (0..<33).map { _ in "a" }.joined(separator: ".")
        return [
            bad("a collection that is a number", .create, #"{"collection":5,"data":{}}"#),
            bad("data that is a string", .create, #"{"collection":"items","data":"{}"}"#),
            bad("a revision that is a string", .replace, #"{"collection":"items","id":"\#(id)","data":{},"rev":"1"}"#),
            bad("revision 0", .patch, #"{"collection":"items","id":"\#(id)","patch":{},"rev":0}"#),
            bad("a negative revision", .delete, #"{"collection":"items","id":"\#(id)","rev":-1}"#),
            bad("a revision of 2^64", .delete, #"{"collection":"items","id":"\#(id)","rev":18446744073709551616}"#),
            bad("a fractional limit", .list, #"{"collection":"items","limit":2.5}"#),
            bad("a limit of a billion", .search, #"{"collection":"items","limit":1000000000}"#),
            bad("a patch that is an array", .patch, #"{"collection":"items","id":"\#(id)","patch":[]}"#),
            bad("an unknown member", .create, #"{"colection":"items","collection":"items","data":{}}"#),
            bad(
                "an unknown filter member", .search,
                #"{"collection":"items","filter":{"field":"a","op":"eq","value":1,"x":1}}"#),
            bad(
                "an unknown filter op", .count,
                #"{"collection":"items","filter":{"field":"a","op":"like","value":"%"}}"#),
            bad("filters nested 40 deep", .search, #"{"collection":"items","filter":\#(deepFilter)}"#),
            bad("a filter of 300 clauses", .count, #"{"collection":"items","filter":{"or":[\#(manyClauses)]}}"#),
            bad(
                "'in' with 1,001 values", .search,
                #"{"collection":"items","filter":{"field":"a","op":"in","value":[\#(manyValues)]}}"#),
            bad(
                "'in' with 1,000 values, the most allowed", .search,
                #"{"collection":"items","filter":{"field":"price","op":"in","value":[\#(thousand)]}}"#, .ok),
            bad(
                "an 'or' of 255 clauses, the most allowed", .count,
                #"{"collection":"items","filter":{"or":[\#(maxClauses)]}}"#, .ok),
            bad(
                "255 'in' filters of 1,000 values", .count,
                #"{"collection":"items","filter":{"and":[\#(mostIns)]}}"#, .ok),
            bad("GET_MANY of 1,001 ids", .getMany, #"{"collection":"items","ids":[\#(manyIDs)]}"#),
            bad("a field path of 33 segments", .group, #"{"collection":"items","field":"\#(longPath)"}"#),
            bad(
                "a text query of 300 bytes", .search,
                #"{"collection":"items","text":{"query":"\#(String(repeating: "x", count: 300))"}}"#),
            bad("an unknown envelope field", .search, #"{"collection":"items","sort":[{"field":"$seq"}]}"#),
            bad("members in a PING", .ping, #"{"x":1}"#),
            bad("members in STATS", .stats, #"{"verbose":true}"#),
            bad("a second HELLO", .hello, #"{"versions":[1]}"#),
            bad("an unknown opcode", Opcode(rawValue: 0x0EEE), "{}", .unknownOpcode),
            bad("opcode 0", Opcode(rawValue: 0), "{}", .unknownOpcode),
            bad("an EVENT frame from a client", .event, #"{"collection":"items"}"#, .unknownOpcode),
            HostileCase(
                name: "a binary part on a GET",
                bytes: HostileFrames.request(.get, #"{"collection":"items","id":"\#(id)"}"#, binary: [1, 2, 3]),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "a GET before HELLO", hello: false,
                bytes: HostileFrames.request(.get, #"{"collection":"items","id":"\#(id)"}"#),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a CREATE before HELLO", hello: false,
                bytes: HostileFrames.request(.create, #"{"collection":"items","data":{}}"#),
                expect: .closed([.protocolError])),
            HostileCase(
                name: "a HELLO with no versions", hello: false,
                bytes: HostileFrames.request(.hello, #"{"versions":[]}"#),
                expect: .open(.invalidArgument)),
            HostileCase(
                name: "a HELLO offering only version 99", hello: false,
                bytes: HostileFrames.request(.hello, #"{"versions":[99]}"#),
                expect: .open(.unsupportedVersion)),
            HostileCase(
                name: "a HELLO with a 5,000-byte client name", hello: false,
                bytes: HostileFrames.request(
                    .hello, #"{"versions":[1],"client":"\#(String(repeating: "c", count: 5000))"}"#),
                expect: .open(.invalidArgument)),
            bad(
                "a CREATE over the document limit", .create,
                #"{"collection":"items","data":{"pad":"\#(String(repeating: "p", count: 1_100_000))"}}"#,
                .payloadTooLarge),
            bad("a stale revision", .replace, #"{"collection":"items","id":"\#(id)","data":{},"rev":99}"#, .conflict),
            bad("a CREATE with a taken id", .create, #"{"collection":"items","id":"\#(id)","data":{}}"#, .conflict),
            bad(
                "a DELETE of a missing document", .delete, #"{"collection":"items","id":"\#(missing.wireString)"}"#,
                .notFound),
            bad("a DROP of a missing collection", .dropCollection, #"{"collection":"nothing"}"#, .notFound),
        ]
    }()

    static let idsAndNames: [HostileCase] = {
        func bad(
            _ name: String, _ opcode: Opcode, _ json: String, _ status: Status = .invalidArgument,
            _ answer: String? = nil
        ) -> HostileCase {
            HostileCase(name: name, bytes: HostileFrames.request(opcode, json), expect: .open(status), answer: answer)
        }
        let id = existing.wireString
        return [
            bad("a path for an id", .get, #"{"collection":"items","id":"../../etc/passwd"}"#),
            bad("a path for a blob id", .blobGet, #"{"id":"../../etc/passwd"}"#),
            bad("an absolute path for a blob id", .blobDelete, #"{"id":"/etc/passwd"}"#),
            bad(
                "an id with a plus sign (fuzz finding 1)", .get,
                #"{"collection":"items","id":"3f2504e0-4f89-41d3-9a0c-0305+82c3301"}"#),
            bad(
                "an id with 0x (fuzz finding 1)", .delete,
                #"{"collection":"items","id":"0x2504e0-4f89-41d3-9a0c-0305e82c3301"}"#),
            bad(
                "an id with a space", .replace,
                #"{"collection":"items","id":"3f2504e0-4f89-41d3-9a0c-0305 82c3301","data":{}}"#),
            bad("an id with a NUL", .get, #"{"collection":"items","id":"3f2504e0-4f89-41d3-9a0c-0305e82c330\u0000"}"#),
            bad("an id in braces", .get, #"{"collection":"items","id":"{3f2504e0-4f89-41d3-9a0c-0305e82c33}"}"#),
            bad("an empty id", .get, #"{"collection":"items","id":""}"#),
            bad("an id that is a number", .get, #"{"collection":"items","id":12345}"#),
            bad("a client id with SQL", .create, #"{"collection":"items","id":"1' OR '1'='1","data":{}}"#),
            bad("SQL in a collection name", .create, #"{"collection":"items\"; DROP TABLE documents; --","data":{}}"#),
            bad("SQL quotes in a collection name", .search, #"{"collection":"items' OR '1'='1"}"#),
            bad("SQL in a DROP_COLLECTION", .dropCollection, #"{"collection":"items; DROP TABLE blobs"}"#),
            bad(
                "SQL in an INDEX collection", .index,
                #"{"collection":"x\"(a); DROP TABLE documents; --","field":"a"}"#),
            bad("a path for a collection", .list, #"{"collection":"../../etc"}"#),
            bad("a collection of 65 characters", .count, #"{"collection":"\#(String(repeating: "c", count: 65))"}"#),
            bad("an empty collection", .count, #"{"collection":""}"#),
            bad("a collection starting with a digit", .create, #"{"collection":"1items","data":{}}"#),
            bad("a collection with a non-ASCII letter", .create, #"{"collection":"ïtems","data":{}}"#),
            bad(
                "a filter field with a double quote", .search,
                #"{"collection":"items","filter":{"field":"name\") OR 1=1; DROP TABLE documents; --","op":"eq","#
                    + #""value":1}}"#),
            bad(
                "a sort field with a control character", .search,
                #"{"collection":"items","sort":[{"field":"a\u0001"}]}"#),
            bad(
                "an index field with a double quote", .index,
                #"{"collection":"items","field":"x\"); DROP TABLE documents; --"}"#),
            bad("a cursor that is SQL", .search, #"{"collection":"items","cursor":"'; DROP TABLE documents; --"}"#),
            bad("a LIST cursor that is SQL", .list, #"{"collection":"items","cursor":"1 OR 1=1"}"#),
            bad(
                "a cursor from another sort", .search,
                #"{"collection":"items","sort":[{"field":"price"}],"#
                    + #""cursor":"eyJzIjoiIiwidiI6W10sImlkIjoiJyBPUiAxPTEgLS0ifQ"}"#),
            // SQL text where any string may go is data: bound as a value, it matches nothing and changes nothing.
            bad(
                "SQL in a filter field path", .search,
                #"{"collection":"items","filter":{"field":"a') OR 1=1; DROP TABLE documents; --","op":"eq","#
                    + #""value":"x"}}"#,
                .ok, "records []"),
            bad(
                "a cursor of this query carrying SQL as its id", .search,
                #"{"collection":"items","cursor":"#
                    + #""eyJrIjoiU0VBUkNIIiwicSI6ImVkYzM2NWY4NzUyOWE3NjIiLCJ2IjpbXSwiaWQiOiInIE9SIDE9MSAtLSJ9"}"#, .ok,
                    "records [great-ball, poke-ball, ultra-ball]"),
            bad(
                "an INDEX on a field path with SQL quotes", .index,
                #"{"collection":"items","field":"x'); DROP TABLE documents; --"}"#, .ok,
                #"{"name":"ix_items_227082ff8dd06b66","created":true}"#),
            bad(
                "a filter on that indexed path", .count,
                #"{"collection":"items","filter":{"field":"x'); DROP TABLE documents; --","op":"gt","value":0}}"#, .ok,
                "count 0"),
            bad(
                "JSON-path syntax in a filter field", .search,
                #"{"collection":"items","filter":{"field":"a[0].$.b*","op":"exists","value":true}}"#, .ok,
                "records []"),
            bad(
                "a field path ending in a backslash", .count,
                #"{"collection":"items","filter":{"field":"name\\","op":"eq","value":"x"}}"#, .ok, "count 0"),
            bad(
                "an INDEX on a path ending in a backslash", .index, #"{"collection":"items","field":"name\\"}"#, .ok,
                #"{"name":"ix_items_c375a993b9588790","created":true}"#),
            bad(
                "a sort on that indexed path", .search,
                #"{"collection":"items","sort":[{"field":"name\\","order":"desc"}]}"#, .ok,
                "records [great-ball, poke-ball, ultra-ball]"),
            bad(
                "SQL in a filter value", .count,
                #"{"collection":"items","filter":{"field":"name","op":"eq","value":"x' OR '1'='1"}}"#, .ok, "count 0"),
            bad(
                "FTS syntax in a text query", .search,
                #"{"collection":"items","text":{"query":"ball\" OR NEAR(a b) OR *"}}"#, .ok, "records []"),
            bad(
                "SQL in a sort field", .search,
                #"{"collection":"items","sort":[{"field":"price'); DROP TABLE documents; --","order":"desc"}]}"#, .ok,
                "records [great-ball, poke-ball, ultra-ball]"),
            bad(
                "SQL in a GROUP field", .group,
                #"{"collection":"items","field":"x' || (SELECT name FROM sqlite_master) || '"}"#, .ok,
                "groups [null 3 [great-ball, poke-ball, ultra-ball]]"),
            bad("a wrong id for the collection", .get, #"{"collection":"notes","id":"\#(id)"}"#, .notFound),
        ]
    }()

    static let blobs: [HostileCase] = {
        let jpeg = HostileClientTests.jpeg()
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 0, count: 64)
        let wrongHash = String(repeating: "0", count: 64)
        func put(_ name: String, _ json: String, _ binary: [UInt8], _ status: Status) -> HostileCase {
            HostileCase(name: name, bytes: HostileFrames.request(.blobPut, json, binary: binary), expect: .open(status))
        }
        // The frame header found by walking the segments (a byte search could land inside a table).
        var sof = 2
        while sof + 4 < jpeg.count && !(0xC0...0xC2).contains(jpeg[sof + 1]) {
            sof += 2 + (Int(jpeg[sof + 2]) << 8 | Int(jpeg[sof + 3]))
        }
        var lyingSOF = jpeg
        lyingSOF[sof + 2] = 0xFF
        lyingSOF[sof + 3] = 0xFF
        // grace_hopper.jpg is under 64 KiB, so its first segment can claim more bytes than the file has.
        var pastTheEnd = (try? ServerFixtures.data("grace_hopper.jpg")) ?? []
        if pastTheEnd.count > 6 {
            pastTheEnd[4] = 0xFF
            pastTheEnd[5] = 0xFF
        }
        var zeroWidth = jpeg
        zeroWidth[sof + 7] = 0
        zeroWidth[sof + 8] = 0
        return [
            put("a PNG", "{}", png, .unsupportedMediaType),
            put("the first half of a JPEG", "{}", Array(jpeg.prefix(jpeg.count / 2)), .unsupportedMediaType),
            put("a JPEG without its first byte", "{}", Array(jpeg.dropFirst()), .unsupportedMediaType),
            put("no binary part", "{}", [], .unsupportedMediaType),
            put("SOI and EOI only", "{}", [0xFF, 0xD8, 0xFF, 0xD9], .unsupportedMediaType),
            put("a frame header whose length disagrees with its components", "{}", lyingSOF, .unsupportedMediaType),
            put("a segment running past the end of the file", "{}", pastTheEnd, .unsupportedMediaType),
            put("a frame header of width 0", "{}", zeroWidth, .unsupportedMediaType),
            put("4 KiB of 0xFF", "{}", Array(repeating: 0xFF, count: 4096), .unsupportedMediaType),
            put("a SHA-256 that does not match", #"{"sha256":"\#(wrongHash)"}"#, jpeg, .invalidArgument),
            put("a SHA-256 of 63 digits", #"{"sha256":"\#(String(wrongHash.dropFirst()))"}"#, jpeg, .invalidArgument),
            put("an uppercase SHA-256", #"{"sha256":"\#(SHA256.hex(jpeg).uppercased())"}"#, jpeg, .invalidArgument),
            put("a blob id that is taken", #"{"id":"\#(existingBlob.wireString)"}"#, jpeg, .conflict),
            put(
                "an attachment to a missing document",
                #"{"attach":{"collection":"items","id":"\#(missing.wireString)"}}"#, jpeg, .notFound),
            put(
                "an attachment with SQL in its collection",
                #"{"attach":{"collection":"items' OR 1=1 --","id":"\#(existing.wireString)"}}"#, jpeg,
                .invalidArgument),
            put(
                "an attachment with a path for an id", #"{"attach":{"collection":"items","id":"../x"}}"#, jpeg,
                .invalidArgument),
            put("an unknown member in BLOB_PUT", #"{"contentType":"image/png"}"#, jpeg, .invalidArgument),
            HostileCase(
                name: "a BLOB_GET of a missing blob",
                bytes: HostileFrames.request(.blobGet, #"{"id":"\#(missing.wireString)"}"#),
                expect: .open(.notFound)),
        ]
    }()

    // MARK: Tests

    @Test func theTableIsLargeAndItsNamesUnique() {
        let all = Self.framing + Self.compression + Self.json + Self.fields + Self.idsAndNames + Self.blobs
        #expect(all.count >= 40)
        let closing = all.filter(\.expect.closes).count
        report("hostile: \(all.count) cases, \(closing) ending in a close, \(all.count - closing) leaving it open")
        #expect(Set(all.map(\.name)).count == all.count, "duplicate case names")
    }

    @Test func framing() throws { try Self.run(Self.framing) }
    @Test func compression() throws { try Self.run(Self.compression) }
    @Test func json() throws { try Self.run(Self.json) }
    @Test func fieldsOpcodesAndHandshake() throws { try Self.run(Self.fields) }
    @Test func idsNamesAndSQL() throws { try Self.run(Self.idsAndNames) }
    @Test func blobs() throws { try Self.run(Self.blobs) }
}

extension JSONObject {
    fileprivate func merging(_ other: JSONObject) -> JSONObject {
        var merged = self
        for (key, value) in other { merged[key] = value }
        return merged
    }
}
