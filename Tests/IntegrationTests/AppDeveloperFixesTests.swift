import Foundation
import LarderClient
import LarderTestSupport
import LarderTestThreads
import Testing

/// What a new app developer runs into first: errors that read well, `Identifiable` values, `Date` times, `Data`
/// photos, a byte range that may run past the end, and an import that keeps its file's order.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct AppDeveloperFixesTests {
    struct Todo: Codable, Sendable, Equatable {
        var title: String
    }

    @Test func anErrorsLocalizedDescriptionIsItsMessage() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let missing = UUID()
        do {
            _ = try await client.collection("todos", of: Todo.self).get(missing)
            Issue.record("a missing todo was found")
        } catch {
            // As an app shows it: through `any Error`, the way `catch` hands it to a generic alert.
            let shown = (error as any Error).localizedDescription
            #expect(shown == error.message, "\(shown)")
            #expect(shown.contains(missing.wireString) && !shown.contains("LarderWire"))
            #expect((error as any Error as? LocalizedError)?.failureReason == "NOT_FOUND")
        }
        let bad = LarderError(.invalidArgument, "limit must be from 1 to 1000", field: "limit")
        #expect((bad as any Error).localizedDescription == "limit must be from 1 to 1000")
        #expect("\(bad)" == "INVALID_ARGUMENT: limit must be from 1 to 1000 (field: limit)")
    }

    /// Anything generic over `Identifiable` (SwiftUI's `List`, `ForEach`) takes stored values as they are.
    @Test func storedValuesAreIdentifiableByTheirDocumentsID() async throws {
        func ids<T: Identifiable>(_ values: [T]) -> [T.ID] { values.map(\.id) }
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)
        let made = [try await todos.create(Todo(title: "a")), try await todos.create(Todo(title: "b"))]
        #expect(ids(made) == made.map(\.id))
        #expect(ids(try await todos.all()) == made.map(\.id))
    }

    @Test(arguments: ServerStore.allCases) func timesAreDatesAndPhotosAreData(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let feed = try await client.watch(collection: "diary")
        let before = Date().addingTimeInterval(-600)
        let entry = try await client.create("diary", ["text": "日記"])
        let jpeg: Data = Data(try ClientFixtures.bytes("grace_hopper.jpg"))
        let info = try await client.blobPut(jpeg, attachTo: BlobAttachment(collection: "diary", id: entry.id))
        let after = Date().addingTimeInterval(600)
        let created: Date = info.createdAt
        #expect(created > before && created < after)
        #expect(try await client.blobHead(info.id).createdAt == created)
        let recordTimes: [Date] = [entry.createdAt, entry.updatedAt]
        #expect(recordTimes.allSatisfy { $0 > before && $0 < after })
        let events = try await WatchClientTests.take(2, from: feed)
        let times: [Date] = events.compactMap(\.time)
        #expect(times.count == 2 && times.allSatisfy { $0 > before && $0 < after })
        #expect(events[1].blob?.createdAt == created)
        feed.cancel()

        let photo: Data = try await client.blobGet(info.id).bytes
        #expect(photo == jpeg)
        let thumbnail: Data = try await client.thumbnail(info.id, maxSide: 64).bytes
        #expect(thumbnail.starts(with: [0xFF, 0xD8]))
        let head: Data = try await client.blob(info.id, range: 0..<2)
        #expect(head == Data([0xFF, 0xD8]))
    }

    /// A photo under 64 KiB read as its first 64 KiB: the range is cut at the end, as an HTTP range is.
    @Test(arguments: ServerStore.allCases) func aRangePastTheEndIsCutAtTheEnd(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let jpeg = Data(try ClientFixtures.bytes("grace_hopper.jpg"))
        #expect(jpeg.count < 65_536)
        let info = try await client.blobPut(jpeg)
        #expect(try await client.blob(info.id, range: 0..<65_536) == jpeg)
        let end = Int64(jpeg.count)
        #expect(try await client.blob(info.id, range: (end - 2)..<(end + 100)) == jpeg.suffix(2))
        let past = await #expect(throws: LarderError.self) {
            _ = try await client.blob(info.id, range: Int64(jpeg.count)..<Int64(jpeg.count + 10))
        }
        #expect(past?.status == .invalidArgument && past?.field == "offset")
        #expect(past?.details["size"]?.intValue == Int64(jpeg.count))
        // A file of a range that runs past the end holds the bytes up to the end.
        let file = URL(fileURLWithPath: NSTemporaryDirectory() + "larder-range-\(UUID().uuidString).jpg")
        defer { try? FileManager.default.removeItem(at: file) }
        try await client.writeBlob(info.id, to: file, range: 100..<1_000_000)
        #expect(try Data(contentsOf: file) == jpeg.dropFirst(100))
        let outside = await #expect(throws: LarderError.self) {
            try await client.writeBlob(info.id, to: file, range: Int64(jpeg.count)..<Int64(jpeg.count + 1))
        }
        #expect(outside?.status == .invalidArgument && outside?.details["size"]?.intValue == Int64(jpeg.count))

        // Protocol.md's example: 65,536 bytes asked from offset 8 of its 17-byte photo answer the 9 there are.
        let raw = try RawClient.tcp(port: server.port)
        try raw.hello()
        let id = try #require(UUID(wireString: "9b2e0a4c-58d1-4f7e-8a3b-2f6c1d0e5a77"))
        let tiny: [UInt8] = [
            0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00, 0xFF, 0xD9,
        ]
        #expect(try raw.call(.blobPut, BlobPutRequest(id: id).json, binary: tiny).status == .ok)
        let answer = try raw.call(.blobGet, BlobGetRequest(id: id, offset: 8, length: 65_536).json)
        #expect(answer.status == .ok && answer.binary == Array(tiny[8...]))
        #expect(answer.replyJSON["offset"] == 8 && answer.replyJSON["length"] == 9 && answer.replyJSON["size"] == 17)
    }

    /// `larder import` pipelines its creates, and the records are created, and listed, in the file's order.
    @Test func importCreatesRecordsInTheFilesOrder() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let count = 2_000
        let lines = (0..<count).map { #"{"n":\#($0),"title":"第\#($0)項"}"# }
        let r = try CLITests.run(
            ["import", "items", "--port", String(server.port)], stdin: Array(lines.joined(separator: "\n").utf8))
        #expect(r.status == 0 && r.stderr.contains("created: \(count), errors: 0"), "\(r.stderr)")
        var listed: [Int64] = []
        var createdAt: [Date] = []
        var cursor: String?
        repeat {
            let page = try await client.list("items", limit: maxPageLimit, cursor: cursor)
            listed += page.records.compactMap { $0.data["n"]?.intValue }
            createdAt += page.records.map(\.createdAt)
            cursor = page.nextCursor
        } while cursor != nil
        let misplaced = zip(listed, 0...).filter { $0 != Int64($1) }.count
        #expect(listed.count == count && misplaced == 0, "\(misplaced) records out of the file's order")
        #expect(createdAt == createdAt.sorted())
    }
}
