import Foundation
import LarderServer
import LarderStore
import LarderSync
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing
@testable import larder_server

/// Each token's share of the upload quota (Protocol.md sections 5.4 and 8) on a real server: announced in HELLO,
/// crossed per token whatever the connection, per connection on a server without tokens, and the answers tell a
/// client its own usage only.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct UploadQuotaTests {
    static func upload(_ client: RawClient, _ size: Int) throws -> Frame {
        try client.call(.blobUpload, BlobUploadRequest(size: Int64(size)).json)
    }

    @Test func eachTokenHasItsShare() throws {
        let directory = temporaryTestDirectory("larder-upload-quota")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("tokens").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("write one-token\nwrite two-token\n".utf8))
        try withServerOnPort0({
            $0.tokenFile = file
            $0.limits.maxUploadBytes = 1_500
            $0.limits.maxUploadsPerToken = 3
            $0.limits.maxUploadBytesPerToken = 1_000
        }) { _, port in
            let one = try RawClient.tcp(port: port)
            let hello = try one.hello(token: "one-token")
            #expect(hello.limits.maxUploadsPerToken == 3 && hello.limits.maxUploadBytesPerToken == 1_000)
            var begun: [BlobUploadInfo] = []
            for _ in 0..<3 {
                let answer = try Self.upload(one, 100)
                #expect(answer.status == .ok, "\(answer.replyText)")
                begun.append(try BlobUploadInfo(json: try answer.jsonObject()))
            }
            let fourth = try Self.upload(one, 100)
            #expect(fourth.status == .resourceExhausted, "\(fourth.replyText)")
            #expect(fourth.replyJSON["limit"] == 3 && fourth.replyJSON["uploads"] == 3, "\(fourth.replyText)")
            // The same token on another connection holds the same uploads.
            let again = try RawClient.tcp(port: port)
            try again.hello(token: "one-token")
            #expect(try Self.upload(again, 100).status == .resourceExhausted)
            let aborted = try one.call(.blobUploadAbort, BlobUploadIDRequest(upload: begun[0].upload).json)
            #expect(aborted.status == .ok)

            // Another token has its own share; past it, the answer names its own bytes.
            let two = try RawClient.tcp(port: port)
            try two.hello(token: "two-token")
            #expect(try Self.upload(two, 900).status == .ok)
            let over = try Self.upload(two, 200)
            #expect(over.status == .resourceExhausted && over.replyJSON["field"] == "size", "\(over.replyText)")
            #expect(over.replyJSON["limit"] == 1_000 && over.replyJSON["bytes"] == 900, "\(over.replyText)")
            // Everyone's together: 1,100 held; 450 more would pass 1,500. The answer names one-token's 200 only.
            let total = try Self.upload(one, 450)
            #expect(total.status == .resourceExhausted, "\(total.replyText)")
            #expect(total.replyJSON["limit"] == 1_500 && total.replyJSON["bytes"] == 200, "\(total.replyText)")
            #expect(!total.replyText.contains("900") && !total.replyText.contains("1100"), "\(total.replyText)")
            #expect(try Self.upload(one, 400).status == .ok)
        }
    }

    /// Without tokens each connection has its own share.
    @Test func eachConnectionHasItsShareWithoutTokens() throws {
        try withServerWithoutListener({ $0.limits.maxUploadsPerToken = 1 }) { server in
            let first = try RawClient.connected(to: server)
            try first.hello()
            #expect(try Self.upload(first, 10).status == .ok)
            let refused = try Self.upload(first, 10)
            #expect(refused.status == .resourceExhausted && refused.replyJSON["uploads"] == 1, "\(refused.replyText)")
            let second = try RawClient.connected(to: server)
            try second.hello()
            #expect(try Self.upload(second, 10).status == .ok)
        }
    }

    // Promise: Protocol §5.4 "expired uploads are dropped before the quota is counted"
    /// An upload that expired stops counting at once: the next BLOB_UPLOAD, refused while it was live, is admitted
    /// before any sweep has run (the sweep looks every minute; the store's clock is moved by hand past the expiry),
    /// and the expired upload is gone with its bytes.
    @Test func anExpiredUploadIsDroppedBeforeTheQuotaIsCounted() throws {
        let directory = temporaryTestDirectory("larder-upload-expiry")
        defer { try? FileManager.default.removeItem(at: directory) }
        let now = Locked<Int64>(1_780_000_000_000)
        let expiry: Int64 = 3_600_000
        var storeConfiguration = StoreConfiguration(dataDirectory: directory.appendingPathComponent("data").path)
        storeConfiguration.clock = { now.withLock { $0 } }
        storeConfiguration.uploadExpiryMs = expiry
        storeConfiguration.maxUploadsPerOwner = 1
        storeConfiguration.maxUploadBytes = 1_000
        storeConfiguration.maxUploadBytesPerOwner = 1_000
        let store = try SQLiteStore(configuration: storeConfiguration)
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.limits.uploadExpiryMs = Int(expiry)
        configuration.limits.maxUploadsPerToken = 1
        configuration.limits.maxUploadBytes = 1_000
        configuration.limits.maxUploadBytesPerToken = 1_000
        let server = LarderServer(configuration: configuration, store: store)
        _ = try server.start()
        defer { server.shutdown() }
        let c = try RawClient.tcp(port: try #require(server.port))
        try c.hello()
        let first = try Self.upload(c, 800)
        #expect(first.status == .ok, "\(first.replyText)")
        let held = try BlobUploadInfo(json: try first.jsonObject())
        let part = [UInt8](repeating: 0xFF, count: 100)
        let chunk = try c.call(
            .blobUploadChunk, BlobUploadChunkRequest(upload: held.upload, offset: 0, crc32: CRC32.checksum(part)).json,
            binary: part)
        #expect(chunk.status == .ok, "\(chunk.replyText)")
        let file = directory.appendingPathComponent("data/blobs/\(held.upload.wireString)").path
        #expect(FileManager.default.fileExists(atPath: file), "the upload's bytes are not in blobs/")
        let refused = try Self.upload(c, 800)
        #expect(refused.status == .resourceExhausted, "\(refused.replyText)")

        now.withLock { $0 += expiry }
        let admitted = try Self.upload(c, 800)
        #expect(admitted.status == .ok, "an expired upload still counted: \(admitted.replyText)")
        let status = try c.call(.blobUploadStatus, BlobUploadIDRequest(upload: held.upload).json)
        #expect(status.status == .notFound, "\(status.replyText)")
        #expect(!FileManager.default.fileExists(atPath: file), "the expired upload's bytes are still in blobs/")
    }

    /// The per-token bytes default to a quarter of `--max-upload-bytes`, and both take a flag or an environment variable.
    @Test func theOptionsAndTheirDefault() throws {
        let (_, plain) = try ServerOptions.parse([])
        #expect(plain.limits.maxUploadsPerToken == 64 && plain.limits.maxUploadBytesPerToken == 256 << 20)
        let (_, quarter) = try ServerOptions.parse(["--max-upload-bytes", "400MiB"])
        #expect(quarter.limits.maxUploadBytesPerToken == 100 << 20)
        let (_, set) = try ServerOptions.parse(
            ["--max-uploads-per-token", "5", "--max-upload-bytes", "400MiB"],
            environment: ["LARDER_SERVER_MAX_UPLOAD_BYTES_PER_TOKEN": "3MiB"])
        #expect(set.limits.maxUploadsPerToken == 5 && set.limits.maxUploadBytesPerToken == 3 << 20)
        #expect(ServerOptions.helpText.contains("--max-upload-bytes-per-token SIZE"))
    }
}
