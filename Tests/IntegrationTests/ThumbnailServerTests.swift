import Foundation
import LarderClient
import LarderTestSupport
import LarderTestThreads
import LarderThumbnails
import LarderWire
import Testing

/// BLOB_GET with `thumbnail` against a real `larder-server` process on each store: the client library's
/// `thumbnail(_:maxSide:)`, `larder blob get --thumb`, the cache and its deletion, and the refusals.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ThumbnailServerTests {
    /// A server process on `store` (a PostgreSQL schema of its own, or a data directory), stopped by `body`'s end.
    static func withServer(
        _ store: ServerStore, _ arguments: [String] = [], _ body: (ServerChild, LarderClient) async throws -> Void
    ) async throws {
        let schema = store == .postgres ? try TestPostgres.newSchema() : nil
        defer { schema?.drop() }
        let directory = ServerProcessTests.temporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try ServerChild(
            dataDirectory: directory, arguments: (schema.map { ["--postgres", $0.url] } ?? []) + arguments)
        defer {
            _ = server.stop()
            try? FileManager.default.removeItem(atPath: server.logPath)
        }
        let client = LarderClient(port: server.port)
        defer { client.close() }
        try await body(server, client)
    }

    static func thumbnailStats(_ client: LarderClient) async throws -> (made: Int64, fromCache: Int64, stored: Int64) {
        let stats = try await client.stats()
        let thumbnails = try #require(stats["thumbnails"])
        return (
            try #require(thumbnails["made"]?.intValue), try #require(thumbnails["fromCache"]?.intValue),
            try #require(thumbnails["stored"]?.intValue)
        )
    }

    static func error(_ body: () async throws -> Void) async -> LarderError? {
        do {
            try await body()
            return nil
        } catch let error as LarderError {
            return error
        } catch {
            return nil
        }
    }

    /// Both photos at 256: the longer side, the ratio, a baseline JPEG; the second request comes from the cache
    /// (STATS) with the same bytes; a size HELLO does not announce is refused naming the sizes.
    @Test(arguments: ServerStore.allCases) func clientThumbnailIsMadeOnceThenCached(_ store: ServerStore) async throws {
        try await Self.withServer(store) { _, client in
            let photos = [("rocket.jpg", 640, 427, (256, 171)), ("grace_hopper.jpg", 512, 600, (218, 256))]
            for (name, width, height, shown) in photos {
                let photo = try ServerFixtures.data(name)
                let info = try await client.blobPut(Data(photo))
                let first = try await client.thumbnail(info.id, maxSide: 256)
                #expect(first.info.id == info.id && first.info.width == width && first.info.height == height)
                #expect(first.info.sha256 == info.sha256, "the JSON part still describes the photo")
                let thumbnail = try #require(first.info.thumbnail)
                #expect(thumbnail.maxSide == 256 && thumbnail.width == shown.0 && thumbnail.height == shown.1)
                #expect(thumbnail.size == Int64(first.bytes.count))
                #expect(frameMarker(Array(first.bytes)) == 0xC0, "baseline")
                let decoded = try Thumbnailer.decode(Array(first.bytes))
                #expect(decoded.width == shown.0 && decoded.height == shown.1)
                let again = try await client.thumbnail(info.id, maxSide: 256)
                #expect(again.bytes == first.bytes && again.info == first.info)
                // The photo itself is unchanged.
                #expect(try await client.blobGet(info.id).bytes == Data(photo))
            }
            let counts = try await Self.thumbnailStats(client)
            #expect(counts.made == 2 && counts.fromCache == 2 && counts.stored == 2)

            let photo = try await client.blobPut(Data(try ServerFixtures.data("rocket.jpg")))
            let refused = await Self.error { _ = try await client.thumbnail(photo.id, maxSide: 200) }
            #expect(refused?.status == .invalidArgument && refused?.field == "thumbnail")
            #expect(refused?.message.contains("64, 128, 256, 512, 1024") == true, "\(String(describing: refused))")
            #expect(refused?.details["sizes"] == .array([64, 128, 256, 512, 1024]))
            let missing = await Self.error { _ = try await client.thumbnail(UUID(), maxSide: 64) }
            #expect(missing?.status == .notFound)
            // A photo smaller than the size keeps its own.
            let own = try await client.thumbnail(photo.id, maxSide: 1024)
            #expect(own.info.thumbnail?.width == 640 && own.info.thumbnail?.height == 427)
        }
    }

    /// Thumbnails go with their photo: BLOB_DELETE, DELETE of its document and DROP_COLLECTION.
    @Test(arguments: ServerStore.allCases) func thumbnailsAreDeletedWithThePhoto(_ store: ServerStore) async throws {
        try await Self.withServer(store) { _, client in
            let rocket = try ServerFixtures.data("rocket.jpg")
            let alone = try await client.blobPut(Data(rocket))
            let purchase = try await client.create("purchases", ["item": "茶葉蛋"])
            let onPurchase = try await client.blobPut(
                Data(rocket), attachTo: BlobAttachment(collection: "purchases", id: purchase.id))
            let receipt = try await client.create("receipts", ["n": 1])
            let onReceipt = try await client.blobPut(
                Data(rocket), attachTo: BlobAttachment(collection: "receipts", id: receipt.id))
            for id in [alone.id, onPurchase.id, onReceipt.id] {
                for size in [64, 128] { _ = try await client.thumbnail(id, maxSide: size) }
            }
            #expect(try await Self.thumbnailStats(client).stored == 6)
            _ = try await client.blobDelete(alone.id)
            #expect(try await Self.thumbnailStats(client).stored == 4)
            _ = try await client.delete("purchases", id: purchase.id)
            #expect(try await Self.thumbnailStats(client).stored == 2)
            _ = try await client.dropCollection("receipts")
            #expect(try await Self.thumbnailStats(client).stored == 0)
        }
    }

    /// Headers declaring 60,000 × 60,000 and 65,500 × 65,500, and a truncated scan: refused with their stable codes,
    /// the bombs without the server's memory growing (decoding even 1/8 of 65,500² would take 200 MB), the photos still
    /// fetchable byte for byte, and the server goes on serving.
    @Test(arguments: ServerStore.allCases) func hostilePhotosAreRefusedAndKept(_ store: ServerStore) async throws {
        try await Self.withServer(store) { server, client in
            let rocket = try ServerFixtures.data("rocket.jpg")
            let bomb = withFrameSize(rocket, width: 60_000, height: 60_000)
            let truncated = Array(rocket[0..<(rocket.count / 2)]) + [0xFF, 0xD9]
            let bombInfo = try await client.blobPut(Data(bomb))
            let truncatedInfo = try await client.blobPut(Data(truncated))
            let biggest = try await client.blobPut(Data(withFrameSize(rocket, width: 65_500, height: 65_500)))
            let peakBefore = try #require(server.peakResidentBytes)
            for id in [bombInfo.id, biggest.id] {
                for size in [64, 1024] {
                    let tooLarge = await Self.error { _ = try await client.thumbnail(id, maxSide: size) }
                    #expect(tooLarge?.status == .payloadTooLarge && tooLarge?.field == "thumbnail")
                    #expect(tooLarge?.details["limit"] == .int(100_000_000))
                }
            }
            let growth = try #require(server.peakResidentBytes) - peakBefore
            #expect(growth < 32 << 20, "the server's peak RSS grew by \(growth) bytes")
            let undecodable = await Self.error { _ = try await client.thumbnail(truncatedInfo.id, maxSide: 256) }
            #expect(undecodable?.status == .unsupportedMediaType && undecodable?.field == "thumbnail")
            #expect(try await client.blobGet(bombInfo.id).bytes == Data(bomb))
            #expect(try await client.blobGet(truncatedInfo.id).bytes == Data(truncated))
            let counts = try await Self.thumbnailStats(client)
            #expect(counts.made == 0 && counts.stored == 0)
            let good = try await client.blobPut(Data(rocket))
            #expect(try await client.thumbnail(good.id, maxSide: 64).info.thumbnail?.width == 64)
        }
    }

    // Promise: Protocol §5.4 "thumbnail together with offset or length is INVALID_ARGUMENT (field thumbnail)"
    /// A thumbnail is sent whole: asking for one with `offset`, `length` or both is refused naming `thumbnail`, and
    /// the connection goes on to answer the same thumbnail asked alone.
    @Test func aThumbnailWithARangeIsRefused() async throws {
        try await Self.withServer(.sqlite) { server, client in
            let rocket = try await client.blobPut(Data(try ServerFixtures.data("rocket.jpg")))
            let c = try RawClient.tcp(port: server.port)
            try c.hello()
            let id = JSON.string(rocket.id.wireString)
            let ranged: [JSONObject] = [
                ["id": id, "thumbnail": 64, "offset": 0], ["id": id, "thumbnail": 64, "length": 100],
                ["id": id, "thumbnail": 64, "offset": 10, "length": 100],
            ]
            for request in ranged {
                let answer = try c.call(.blobGet, request)
                #expect(answer.status == .invalidArgument, "\(answer.replyText)")
                #expect(answer.replyJSON["field"] == "thumbnail", "\(answer.replyText)")
                #expect(answer.binary.isEmpty)
            }
            let whole = try c.call(.blobGet, ["id": id, "thumbnail": 64])
            #expect(whole.status == .ok && whole.replyJSON["thumbnail"]?["maxSide"] == 64, "\(whole.replyText)")
        }
    }

    // Promise: Protocol §5.4 "a CMYK photo is UNSUPPORTED_MEDIA_TYPE (field thumbnail)"
    /// A CMYK photo is stored like any JPEG, but its thumbnail is refused as UNSUPPORTED_MEDIA_TYPE naming
    /// `thumbnail`; the photo itself is still served byte for byte, and nothing is counted as made.
    @Test(arguments: ServerStore.allCases) func aCMYKPhotoHasNoThumbnail(_ store: ServerStore) async throws {
        try await Self.withServer(store) { _, client in
            var cmyk = flatJPEG(width: 64, height: 64, sampling: [(1, 1), (1, 1), (1, 1), (1, 1)])
            // An Adobe segment saying "no transform": four components are CMYK.
            let adobe: [UInt8] = [0xFF, 0xEE, 0x00, 0x0E] + Array("Adobe".utf8) + [0x00, 0x64, 0, 0, 0, 0, 0]
            cmyk.insert(contentsOf: adobe, at: 2)
            let info = try await client.blobPut(Data(cmyk))
            let refused = await Self.error { _ = try await client.thumbnail(info.id, maxSide: 64) }
            #expect(refused?.status == .unsupportedMediaType, "\(String(describing: refused))")
            #expect(refused?.field == "thumbnail")
            #expect(refused?.message.contains("CMYK") == true, "\(String(describing: refused?.message))")
            #expect(try await client.blobGet(info.id).bytes == Data(cmyk))
            #expect(try await Self.thumbnailStats(client).made == 0)
        }
    }

    /// `--thumbnail-sizes` and `--max-thumbnail-source-pixels` are announced in HELLO and enforced: a size off the
    /// list is refused, and a photo one pixel over the limit is refused while one at it is made.
    @Test func configuredSizesAndPixelLimitAreAnnouncedAndEnforced() async throws {
        let limit = 640 * 427  // rocket.jpg, at the limit; grace_hopper.jpg (512 × 600) is over it
        try await Self.withServer(
            .sqlite, ["--thumbnail-sizes", "300,100", "--max-thumbnail-source-pixels", String(limit)]
        ) { server, client in
            let raw = try RawClient.tcp(port: server.port)
            let hello = try raw.hello()
            #expect(hello.limits.thumbnailSizes == [100, 300])
            #expect(hello.limits.maxThumbnailSourcePixels == limit)
            let grace = try await client.blobPut(Data(try ServerFixtures.data("grace_hopper.jpg")))
            let rocket = try await client.blobPut(Data(try ServerFixtures.data("rocket.jpg")))
            #expect(try await client.thumbnail(rocket.id, maxSide: 300).info.thumbnail?.width == 300)
            let offList = await Self.error { _ = try await client.thumbnail(rocket.id, maxSide: 64) }
            #expect(offList?.status == .invalidArgument && offList?.details["sizes"] == .array([100, 300]))
            let over = await Self.error { _ = try await client.thumbnail(grace.id, maxSide: 100) }
            #expect(over?.status == .payloadTooLarge && over?.details["limit"] == .int(Int64(limit)))
        }
    }

    /// `larder blob get ID --thumb 256 -o FILE` writes the thumbnail; `--thumb 200` fails naming the sizes.
    @Test(arguments: ServerStore.allCases) func cliWritesAThumbnail(_ store: ServerStore) async throws {
        try await Self.withServer(store) { server, _ in
            let directory = ServerProcessTests.temporaryDirectory().path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let photo = directory + "/grace.jpg"
            try Data(try ServerFixtures.data("grace_hopper.jpg")).write(to: URL(fileURLWithPath: photo))
            let port = ["--port", String(server.port)]
            let put = try CLITests.run(["blob", "put", photo] + port)
            #expect(put.status == 0, "\(put.stderr)")
            let id = try #require(try put.json.first?["id"]?.stringValue)
            let out = directory + "/thumb.jpg"
            let get = try CLITests.run(["blob", "get", id, "--thumb", "256", "-o", out] + port)
            #expect(get.status == 0, "\(get.stderr)")
            // Not on a terminal, the answer is printed as JSON: the photo's metadata with the thumbnail's.
            let answer = try #require(try get.json.first)
            #expect(answer["thumbnail"]?["width"] == 218 && answer["thumbnail"]?["height"] == 256, "\(get.stdout)")
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: out)))
            let decoded = try Thumbnailer.decode(bytes)
            #expect(decoded.width == 218 && decoded.height == 256)
            #expect(frameMarker(bytes) == 0xC0)
            let refused = try CLITests.run(["blob", "get", id, "--thumb", "200", "-o", directory + "/x.jpg"] + port)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("64, 128, 256, 512, 1024"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/x.jpg"))
        }
    }
}
