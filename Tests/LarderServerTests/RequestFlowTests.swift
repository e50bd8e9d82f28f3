import Foundation
import LarderWire
import Testing

@testable import LarderServer

/// Requests followed through the server's plan and router on one in-memory connection (`InMemoryConnection`): each
/// runs where `RequestPlan` sends it, and the answers keep the connection's order (Protocol.md section 2.3).
@Suite(.timeLimit(.minutes(20)))
struct RequestFlowTests {
    static let x = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"

    static func object(_ frame: Frame) -> JSONObject { (try? frame.jsonObject()) ?? [:] }

    @Test func aGetPipelinedAfterACreateSeesIt() throws {
        let connection = try InMemoryConnection()
        defer { connection.close() }
        // The CREATE goes straight to the writer; the GET (inline) waits for its answer.
        connection.send(.create, ["collection": "t", "id": .string(Self.x), "data": ["v": 1]], id: 2)
        connection.send(.get, ["collection": "t", "id": .string(Self.x)], id: 3)
        let answers = connection.answers(2)
        #expect(answers.map(\.requestID) == [2, 3])
        #expect(answers.map(\.status) == [.ok, .ok])
        #expect(Self.object(answers[1])["data"]?["v"] == .int(1))
    }

    @Test func writesKeepTheirOrderAcrossTheLaneAndTheWriter() throws {
        let connection = try InMemoryConnection()
        defer { connection.close() }
        // A CREATE too large to parse on the loop takes the lane; the small PATCH after it must follow it there.
        let padding = String(repeating: "p", count: RequestPlan.loopWriteBytes)
        let create: JSONObject = ["collection": "t", "id": .string(Self.x), "data": ["v": 1, "pad": .string(padding)]]
        connection.send(.create, create, id: 2)
        connection.send(.patch, ["collection": "t", "id": .string(Self.x), "patch": ["v": 2]], id: 3)
        connection.send(.get, ["collection": "t", "id": .string(Self.x)], id: 4)
        let answers = connection.answers(3)
        #expect(answers.map(\.requestID) == [2, 3, 4])
        #expect(answers.map(\.status) == [.ok, .ok, .ok])
        #expect(Self.object(answers[2])["data"]?["v"] == .int(2))
        #expect(Self.object(answers[2])["rev"] == .int(2))
    }

    @Test func anUploadsChunksGoThroughTheLaneInOrder() throws {
        let connection = try InMemoryConnection()
        defer { connection.close() }
        let begun = connection.call(.blobUpload, BlobUploadRequest(size: 6).json)
        #expect(begun.status == .ok)
        let upload = try BlobUploadInfo(json: try begun.jsonObject()).upload
        let first: [UInt8] = [1, 2, 3]
        let second: [UInt8] = [4, 5, 6]
        connection.send(
            .blobUploadChunk, BlobUploadChunkRequest(upload: upload, offset: 0, crc32: CRC32.checksum(first)).json,
            binary: first, id: 2)
        connection.send(
            .blobUploadChunk, BlobUploadChunkRequest(upload: upload, offset: 3, crc32: CRC32.checksum(second)).json,
            binary: second, id: 3)
        connection.send(.blobUploadStatus, BlobUploadIDRequest(upload: upload).json, id: 4)
        let answers = connection.answers(3)
        #expect(answers.map(\.requestID) == [2, 3, 4])
        #expect(answers.map(\.status) == [.ok, .ok, .ok])
        #expect(try BlobUploadInfo(json: try answers[2].jsonObject()).offset == 6)
        #expect(connection.call(.blobUploadAbort, BlobUploadIDRequest(upload: upload).json, id: 5).status == .ok)
    }

    @Test func refusalsAreAnsweredWithoutTheStore() throws {
        let connection = try InMemoryConnection()
        defer { connection.close() }
        #expect(connection.call(.event, id: 2).status == .unknownOpcode)
        #expect(connection.call(.get, ["collection": "t", "id": .string(Self.x)], binary: [1], id: 3).status
            == .invalidArgument)
        #expect(connection.call(.get, ["collection": "t", "id": .string(Self.x)], id: 4).status == .notFound)
    }
}
