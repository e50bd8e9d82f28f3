#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderIO
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Ranges of a blob kept in a file, which the server sends with sendfile(2) on plain TCP and Unix-socket connections,
/// against a real `larder-server` process: byte-exact over both, still delivered when the blob is deleted while its
/// answer waits, every byte to a reader that lets the socket fill, and small answers kept whole beside large ones.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct BlobSendfileTests {
    /// A server with a 24 MiB photo uploaded in chunks (so kept in a file), reachable by TCP and a Unix socket.
    struct Fixture {
        let root: URL
        let server: ServerChild
        let socket: String
        let id: UUID
        let bytes: [UInt8]

        init(_ name: String, size: Int = 24 << 20) async throws {
            root = try BlobStreamingTests.directory(name)
            socket = root.appendingPathComponent("s").path
            let source = root.appendingPathComponent("photo.jpg").path
            try BlobStreamingTests.writeJPEG(size: size, to: source, seed: 11)
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: source)))
            server = try ServerChild(
                dataDirectory: root.appendingPathComponent("data").path, arguments: ["--socket", socket])
            let client = LarderClient(socketPath: socket)
            defer { client.close() }
            id = try await client.putBlob(contentsOf: URL(fileURLWithPath: source)).id
        }

        /// The files in the data directory's `blobs/`.
        var blobFiles: [String] {
            (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("data/blobs").path)) ?? []
        }

        func stop() {
            _ = server.stop()
            try? FileManager.default.removeItem(at: root)
        }
    }

    static func rangeRequest(_ id: UUID, _ offset: Int, _ length: Int) -> JSONObject {
        BlobGetRequest(id: id, offset: Int64(offset), length: Int64(length)).json
    }

    /// Reads exactly `count` bytes from `client`'s socket, `chunk` bytes at most per read (a slow reader's pace).
    static func readExactly(_ client: RawClient, _ count: Int, chunk: Int = 256 << 10) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            var pfd = pollfd(fd: client.fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 120_000)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { throw ServerTestError("nothing arrived in 120 s after \(done) of \(count) bytes") }
            let n = out.withUnsafeMutableBytes { read(client.fd, $0.baseAddress! + done, min(chunk, count - done)) }
            if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
            guard n > 0 else { throw ServerTestError("the connection ended after \(done) of \(count) bytes") }
            done += n
        }
        return out
    }

    /// One whole frame read at `chunk` bytes per read: its header, JSON part and binary part.
    static func readFrame(_ client: RawClient, chunk: Int = 256 << 10) throws -> (FrameHeader, [UInt8], [UInt8]) {
        let head = try readExactly(client, Frame.prefixSize, chunk: chunk)
        let header = head.withUnsafeBytes { FrameHeader($0) }
        let json = try readExactly(client, Int(header.jsonLength), chunk: chunk)
        let binary = try readExactly(client, Int(header.binaryLength), chunk: chunk)
        return (header, json, binary)
    }

    /// A large range (20 MiB from an odd offset) arrives byte-exact over TCP and over the Unix socket, twice on one
    /// connection, and a range of the last bytes too.
    @Test func aLargeRangeArrivesByteExactOverTCPAndUnixSocket() async throws {
        let fixture = try await Fixture("sendfile-exact")
        defer { fixture.stop() }
        for client in [try RawClient.tcp(port: fixture.server.port), try RawClient.unix(path: fixture.socket)] {
            try client.hello()
            for (offset, length) in [(12_345, 20 << 20), (0, 1 << 20), (fixture.bytes.count - 300_000, 300_000)] {
                let frame = try client.call(.blobGet, Self.rangeRequest(fixture.id, offset, length))
                #expect(frame.status == .ok, "\(frame.replyText)")
                #expect(frame.binary.count == length)
                #expect(frame.binary == Array(fixture.bytes[offset..<(offset + length)]))
                #expect(frame.replyJSON["offset"]?.intValue == Int64(offset))
                #expect(frame.replyJSON["length"]?.intValue == Int64(length))
            }
        }
    }

    /// A blob deleted (and its file unlinked) while the answer to a range of it waits in the server, behind a client
    /// that has not read it yet, still delivers the whole range: the answer holds the file open.
    @Test func aBlobDeletedWhileItsRangeIsSentStillDeliversTheRange() async throws {
        let fixture = try await Fixture("sendfile-deleted")
        defer { fixture.stop() }
        let reader = try RawClient.tcp(port: fixture.server.port)
        try reader.hello()
        let length = 20 << 20
        let id = try reader.send(.blobGet, Self.rangeRequest(fixture.id, 0, length))
        // The answer's header has arrived: the server holds the range (its file open) and is sending it.
        let head = try Self.readExactly(reader, Frame.prefixSize)
        let header = head.withUnsafeBytes { FrameHeader($0) }
        #expect(header.requestID == id && header.status == .ok && Int(header.binaryLength) == length)
        #expect(fixture.blobFiles.count == 1)
        let other = LarderClient(socketPath: fixture.socket)
        defer { other.close() }
        try await other.blobDelete(fixture.id)
        let unlinked = await waitUntil(120) { fixture.blobFiles.isEmpty }
        #expect(unlinked, "the deleted blob's file is still in blobs/: \(fixture.blobFiles)")
        _ = try Self.readExactly(reader, Int(header.jsonLength))
        let binary = try Self.readExactly(reader, length)
        #expect(binary == Array(fixture.bytes[0..<length]))
        // The blob is gone for the next request.
        #expect(try reader.call(.blobGet, Self.rangeRequest(fixture.id, 0, 1 << 20)).status == .notFound)
    }

    /// A reader that reads 4 KiB at a time, asking for three 8 MiB ranges at once (more than the sockets hold, so the
    /// server's sends stop on a full socket and resume), gets every byte of each, over TCP and the Unix socket.
    @Test func aSlowReaderGetsEveryByte() async throws {
        let fixture = try await Fixture("sendfile-slow")
        defer { fixture.stop() }
        for client in [try RawClient.tcp(port: fixture.server.port), try RawClient.unix(path: fixture.socket)] {
            try client.hello()
            let ranges = [(0, 8 << 20), (8 << 20, 8 << 20), (16 << 20, 8 << 20)]
            var ids: [UInt32: Int] = [:]
            for (n, (offset, length)) in ranges.enumerated() {
                ids[try client.send(.blobGet, Self.rangeRequest(fixture.id, offset, length))] = n
            }
            for _ in ranges {
                let (header, _, binary) = try Self.readFrame(client, chunk: 4096)
                let known = ids.removeValue(forKey: header.requestID)
                let n = try #require(known)
                let (offset, length) = ranges[n]
                #expect(header.status == .ok && binary.count == length)
                #expect(binary == Array(fixture.bytes[offset..<(offset + length)]))
            }
        }
    }

    /// On one connection a small GET sent right after a large range is answered whole, never inside the range's
    /// frame: both answers arrive intact (in whichever order the server finished them), then a second range.
    @Test func aSmallGetAfterALargeRangeKeepsBothAnswersWhole() async throws {
        let fixture = try await Fixture("sendfile-order")
        defer { fixture.stop() }
        for client in [try RawClient.tcp(port: fixture.server.port), try RawClient.unix(path: fixture.socket)] {
            try client.hello()
            let created = try client.call(.create, ["collection": .string("notes"), "data": ["title": "milk"]])
            let docID = try #require(created.replyJSON["id"]?.stringValue)
            let length = 16 << 20
            let requests: [(Opcode, JSONObject)] = [
                (.blobGet, Self.rangeRequest(fixture.id, 100, length)),
                (.get, ["collection": .string("notes"), "id": .string(docID)]),
                (.blobGet, Self.rangeRequest(fixture.id, 0, 65_536)),
            ]
            let ids = try client.sendTogether(requests)
            var answers: [UInt32: Frame] = [:]
            for _ in requests {
                let frame = try #require(try client.receive(timeout: 120))
                answers[frame.requestID] = frame
            }
            let range = try #require(answers[ids[0]])
            #expect(range.status == .ok && range.binary == Array(fixture.bytes[100..<(100 + length)]))
            let document = try #require(answers[ids[1]])
            #expect(document.status == .ok && document.binary.isEmpty)
            #expect(document.replyJSON["data"]?["title"]?.stringValue == "milk")
            let small = try #require(answers[ids[2]])
            #expect(small.status == .ok && small.binary == Array(fixture.bytes[0..<65_536]))
        }
    }
}
