import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

/// Requests followed through the server's own connection code (`ServerConnection` on its event loop) over a
/// socketpair, with no listener: each runs where `RequestPlan` sends it, and the answers keep the connection's order
/// (Protocol.md section 2.3).
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct RequestFlowTests {
    static let x = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"

    static func object(_ frame: Frame) -> JSONObject { (try? frame.jsonObject()) ?? [:] }

    /// The next `count` answers, in the order the connection wrote them.
    static func answers(_ count: Int, from client: RawClient) throws -> [Frame] {
        try (0..<count).map { _ in
            guard let frame = try client.receive() else { throw ServerTestError("the server closed the connection") }
            return frame
        }
    }

    /// A connection that has said HELLO (no compression: the answers are read as they are).
    static func connection(to server: LarderServer) throws -> RawClient {
        let client = try RawClient.connected(to: server)
        try client.hello(compression: [])
        return client
    }

    @Test func aGetPipelinedAfterACreateSeesIt() throws {
        try withServerWithoutListener { server in
            let client = try Self.connection(to: server)
            // The CREATE goes straight to the writer; the GET (inline) waits for its answer.
            try client.send(.create, ["collection": "t", "id": .string(Self.x), "data": ["v": 1]], id: 2)
            try client.send(.get, ["collection": "t", "id": .string(Self.x)], id: 3)
            let answers = try Self.answers(2, from: client)
            #expect(answers.map(\.requestID) == [2, 3])
            #expect(answers.map(\.status) == [.ok, .ok])
            #expect(Self.object(answers[1])["data"]?["v"] == .int(1))
        }
    }

    @Test func writesKeepTheirOrderAcrossTheLaneAndTheWriter() throws {
        try withServerWithoutListener { server in
            let client = try Self.connection(to: server)
            // A CREATE too large to parse on the loop takes the lane; the small PATCH after it must follow it there.
            let padding = String(repeating: "p", count: RequestPlan.loopWriteBytes)
            let create: JSONObject = [
                "collection": "t", "id": .string(Self.x), "data": ["v": 1, "pad": .string(padding)],
            ]
            try client.send(.create, create, id: 2)
            try client.send(.patch, ["collection": "t", "id": .string(Self.x), "patch": ["v": 2]], id: 3)
            try client.send(.get, ["collection": "t", "id": .string(Self.x)], id: 4)
            let answers = try Self.answers(3, from: client)
            #expect(answers.map(\.requestID) == [2, 3, 4])
            #expect(answers.map(\.status) == [.ok, .ok, .ok])
            #expect(Self.object(answers[2])["data"]?["v"] == .int(2))
            #expect(Self.object(answers[2])["rev"] == .int(2))
        }
    }

    @Test func anUploadsChunksGoThroughTheLaneInOrder() throws {
        try withServerWithoutListener { server in
            let client = try Self.connection(to: server)
            let begun = try client.call(.blobUpload, BlobUploadRequest(size: 6).json)
            #expect(begun.status == .ok)
            let upload = try BlobUploadInfo(json: try begun.jsonObject()).upload
            let first: [UInt8] = [1, 2, 3]
            let second: [UInt8] = [4, 5, 6]
            try client.send(
                .blobUploadChunk, BlobUploadChunkRequest(upload: upload, offset: 0, crc32: CRC32.checksum(first)).json,
                binary: first, id: 20)
            try client.send(
                .blobUploadChunk,
                BlobUploadChunkRequest(upload: upload, offset: 3, crc32: CRC32.checksum(second)).json,
                binary: second, id: 21)
            try client.send(.blobUploadStatus, BlobUploadIDRequest(upload: upload).json, id: 22)
            let answers = try Self.answers(3, from: client)
            #expect(answers.map(\.requestID) == [20, 21, 22])
            #expect(answers.map(\.status) == [.ok, .ok, .ok])
            #expect(try BlobUploadInfo(json: try answers[2].jsonObject()).offset == 6)
            #expect(try client.call(.blobUploadAbort, BlobUploadIDRequest(upload: upload).json).status == .ok)
        }
    }

    @Test func refusalsAreAnsweredWithoutTheStore() throws {
        try withServerWithoutListener { server in
            let client = try Self.connection(to: server)
            #expect(try client.call(.event).status == .unknownOpcode)
            let withBinary = try client.call(.get, ["collection": "t", "id": .string(Self.x)], binary: [1])
            #expect(withBinary.status == .invalidArgument)
            #expect(try client.call(.get, ["collection": "t", "id": .string(Self.x)]).status == .notFound)
        }
    }

    /// A WATCH's answer, then a write's on another connection, then its EVENT: the watch machine and the shard's
    /// change inbox run as they do behind a listener.
    @Test func aWatchSeesAWriteFromAnotherConnection() throws {
        try withServerWithoutListener { server in
            let watcher = try Self.connection(to: server)
            let writer = try Self.connection(to: server)
            let watching = try watcher.call(.watch, ["collection": "t"])
            #expect(watching.status == .ok, "\(watching.replyText)")
            #expect(try writer.call(.create, ["collection": "t", "id": .string(Self.x), "data": ["v": 1]]).status == .ok)
            let event = try #require(try watcher.receive())
            #expect(event.opcode == .event)
            #expect(Self.object(event)["kind"] == "create", "\(event.replyText)")
            #expect(Self.object(event)["id"] == .string(Self.x), "\(event.replyText)")
        }
    }
}
