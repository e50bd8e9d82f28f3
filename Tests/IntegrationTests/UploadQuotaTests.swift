import Foundation
import LarderServer
import LarderWire
import Testing

/// Each token's share of the upload quota (Protocol.md sections 5.4 and 8) on a real server: announced in HELLO,
/// crossed per token whatever the connection, per connection on a server without tokens, and the answers tell a
/// client its own usage only.
@Suite(.timeLimit(.minutes(20))) struct UploadQuotaTests {
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
        try withServerOnPort0({ $0.limits.maxUploadsPerToken = 1 }) { _, port in
            let first = try RawClient.tcp(port: port)
            try first.hello()
            #expect(try Self.upload(first, 10).status == .ok)
            let refused = try Self.upload(first, 10)
            #expect(refused.status == .resourceExhausted && refused.replyJSON["uploads"] == 1, "\(refused.replyText)")
            let second = try RawClient.tcp(port: port)
            try second.hello()
            #expect(try Self.upload(second, 10).status == .ok)
        }
    }

    /// The per-token bytes default to a quarter of `--max-upload-bytes`, and both take a flag or an environment variable.
    @Test func theOptionsAndTheirDefault() throws {
        let (_, plain) = try ServerOptions.parse([])
        #expect(plain.limits.maxUploadsPerToken == 64 && plain.limits.maxUploadBytesPerToken == 256 << 20)
        let (_, quarter) = try ServerOptions.parse(["--max-upload-bytes", "400MiB"])
        #expect(quarter.limits.maxUploadBytesPerToken == 100 << 20)
        let (_, set) = try ServerOptions.parse(
            ["--max-uploads-per-token", "5", "--max-upload-bytes", "400MiB"],
            environment: ["LARDER_MAX_UPLOAD_BYTES_PER_TOKEN": "3MiB"])
        #expect(set.limits.maxUploadsPerToken == 5 && set.limits.maxUploadBytesPerToken == 3 << 20)
        #expect(ServerOptions.helpText.contains("--max-upload-bytes-per-token SIZE"))
    }
}
