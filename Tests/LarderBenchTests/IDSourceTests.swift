import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderBench

/// `--ids`: the documents a run creates carry server-made, random or per-worker ids, as the server stores them.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct IDSourceTests {
    /// Every id in the bench collection, read back by LIST pages over the raw protocol.
    static func storedIDs(port: Int) throws -> [String] {
        let client = try RawClient.tcp(port: port)
        try client.hello(compression: [])
        var ids: [String] = []
        var cursor: JSON = .null
        repeat {
            var request: JSONObject = ["collection": "bench", "limit": 500]
            if cursor != .null { request["cursor"] = cursor }
            let page = try client.call(.list, request)
            #expect(page.status == .ok, "\(page.replyText)")
            for record in page.replyJSON["records"]?.arrayValue ?? [] {
                if let id = record["id"]?.stringValue { ids.append(id) }
            }
            cursor = page.replyJSON["nextCursor"] ?? .null
        } while cursor != .null
        return ids
    }

    /// Creates `count` documents over 4 connections with `--ids source` and returns the ids the server holds.
    static func createdIDs(_ source: String, count: Int = 400) throws -> [String] {
        try withLarderServer { port in
            guard
                case .run(var options) = try BenchArguments.parse([
                    "--port", "\(port)", "--connections", "4", "--requests", "\(count)", "--mix", "create=100",
                    "--ids", source,
                ])
            else { throw BenchError("help") }
            options.quiet = true
            let results = try runBenchmark(options)
            #expect(results.total.errors == 0, "\(results.total.errorsByName)")
            return try storedIDs(port: port)
        }
    }

    /// The UUID version digit of a canonical id string.
    static func version(_ id: String) -> Character { Array(id)[14] }

    @Test func serverMadeIdsAreTimeOrderedVersion7() throws {
        let ids = try Self.createdIDs("server")
        #expect(ids.count == 400)
        #expect(ids.allSatisfy { Self.version($0) == "7" }, "\(ids.prefix(3))")
    }

    @Test func randomIdsAreVersion4AndSpreadOverTheIdSpace() throws {
        let ids = try Self.createdIDs("random")
        #expect(ids.count == 400)
        #expect(Set(ids).count == 400)
        #expect(ids.allSatisfy { Self.version($0) == "4" && "89ab".contains(Array($0)[19]) }, "\(ids.prefix(3))")
        // Random ids begin with every hex digit; per-worker streams share their first eight.
        #expect(Set(ids.map { $0.prefix(1) }).count == 16)
        #expect(Set(ids.map { $0.prefix(8) }).count > 390)
    }

    @Test func streamedIdsShareTheRunsPrefixPerWorker() throws {
        let ids = try Self.createdIDs("streams")
        #expect(ids.count == 400)
        #expect(Set(ids.map { $0.prefix(8) }).count == 1, "\(ids.prefix(3))")
    }

    @Test func serverIdsRefuseAMixThatAddressesCreatedDocuments() throws {
        for mix in ["create=50,delete=50", "patch-rev=100"] {
            let refused = #expect(throws: UsageError.self) {
                guard case .run(let options) = try BenchArguments.parse(["--ids", "server", "--mix", mix]) else { return }
                try options.validate()
            }
            #expect(refused?.message.contains("--ids random or streams") == true, "\(String(describing: refused))")
        }
        #expect(throws: UsageError.self) { try BenchArguments.parse(["--ids", "sequential"]) }
    }
}

/// `--request-keys`: every write carries a fresh key, and only writes do.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct RequestKeyOptionTests {
    /// The JSON parts of the requests one driver encodes for `requests`, in order.
    static func encoded(_ requests: [Request], requestKeys: Bool) throws -> [JSONObject] {
        let payloads = Payloads(docSize: 250, blobs: [], runNonce: 7, requestKeys: requestKeys)
        var driver = LarderDriver(payloads: payloads, worker: 1, collection: "bench", encoder: FrameEncoder())
        var out: [UInt8] = []
        for (index, request) in requests.enumerated() { driver.encode(request, requestID: UInt32(index), into: &out) }
        var buffer = ByteBuffer()
        buffer.append(out[...])
        var decoder = FrameDecoder()
        var objects: [JSONObject] = []
        while let frame = try decoder.next(&buffer) { objects.append(try frame.jsonObject()) }
        return objects
    }

    @Test func everyWriteCarriesAFreshKeyAndReadsNone() throws {
        let writes = [BenchOperation.create, .replace, .patch, .delete, .patchRev, .create].map {
            Request(op: $0, key: 3, idKind: .created, rev: 1)
        }
        let keys = try Self.encoded(writes, requestKeys: true).map { $0["requestKey"]?.stringValue }
        #expect(keys.allSatisfy { $0.flatMap(UUID.init(uuidString:)) != nil }, "\(keys)")
        #expect(Set(keys).count == writes.count, "a key was sent twice: \(keys)")
        #expect(try Self.encoded(writes, requestKeys: false).allSatisfy { $0["requestKey"] == nil })
        let reads = [BenchOperation.get, .search, .count].map { Request(op: $0, key: 3, idKind: .preloaded) }
        #expect(try Self.encoded(reads, requestKeys: true).allSatisfy { $0["requestKey"] == nil })
        #expect(throws: UsageError.self) { try BenchArguments.parse(["--request-keys", "--target", "redis"]) }
    }
}
