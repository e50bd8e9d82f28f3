import Foundation
import LarderStore
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderBench
import LarderIO

/// The protocol drivers in isolation (fed bytes by hand, drip-fed and in random splits), the payloads and the key
/// distributions.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DriverTests {
    /// Feeds `stream` to `driver` in chunks from `split`, carrying unconsumed bytes over as the engine does.
    static func feed<D: Driver>(
        _ driver: inout D, _ stream: [UInt8], split: (Int) -> Int
    ) throws -> [(UInt32, UInt16)] {
        var completions: [(UInt32, UInt16)] = []
        var carried: [UInt8] = []
        var offset = 0
        while offset < stream.count {
            let n = min(split(offset), stream.count - offset)
            let chunk = carried + stream[offset..<(offset + n)]
            offset += n
            let consumed = try chunk.withUnsafeBytes { try driver.consume($0, into: &completions) }
            carried = Array(chunk[consumed...])
        }
        #expect(carried.isEmpty)
        return completions
    }

    static let payloads = Payloads(docSize: 250, blobs: [Payloads.syntheticJPEG(size: 100)], runNonce: 0xABCD)

    @Test func larderAnswersDripFedAndSplit() throws {
        let encoder = FrameEncoder()
        var stream: [UInt8] = []
        let answers: [(UInt32, Status, [UInt8], [UInt8])] = [
            (7, .ok, Array(#"{"id":"x","rev":1}"#.utf8), []),
            (3, .notFound, Array(#"{"code":2,"name":"NOT_FOUND","message":"no"}"#.utf8), []),
            (9, .ok, Array("{}".utf8), [UInt8](repeating: 0xAB, count: 300_000)),
            (1, .ok, [], []),
        ]
        for (id, status, json, binary) in answers {
            let frame = Frame(
                opcode: .get, requestID: id, status: status, flags: .response, json: json, binary: binary)
            encoder.encode(frame, into: &stream)
        }
        // A pushed frame (the change feed) answers nothing and is skipped.
        encoder.encode(Frame(opcode: .event, requestID: 0, flags: .push, json: Array("{}".utf8)), into: &stream)
        let expected: [(UInt32, UInt16)] = [(7, 0), (3, 2), (9, 0), (1, 0)]
        var rng = SplitMix64(seed: 1)
        for split: (Int) -> Int in [{ _ in stream.count }, { _ in 1 }, { _ in Int(rng.below(5000)) + 1 }] {
            var driver = LarderDriver(payloads: DriverTests.payloads, worker: 0, collection: "bench", encoder: encoder)
            let got = try DriverTests.feed(&driver, stream, split: split)
            #expect(got.map(\.0) == expected.map(\.0) && got.map(\.1) == expected.map(\.1))
        }
    }

    @Test func larderRejectsAStranger() {
        var driver = LarderDriver(
            payloads: DriverTests.payloads, worker: 0, collection: "bench", encoder: FrameEncoder())
        let http = Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8)
        #expect(throws: BenchError.self) { try DriverTests.feed(&driver, http, split: { _ in 100 }) }
    }

    /// `--after-seq`: the `seq` write answers end with, however the reads split them, becomes the `afterSeq` of the
    /// GETs sent after them (the highest seen); answers that only contain a member named `seq` do not count.
    @Test func afterSeqFollowsTheHighestSeqOfWriteAnswers() throws {
        let encoder = FrameEncoder()
        func get(_ driver: inout LarderDriver) throws -> GetRequest {
            var out: [UInt8] = []
            driver.encode(Request(op: .get, key: 5, idKind: .preloaded, rev: 1), requestID: 1, into: &out)
            var decoder = FrameDecoder()
            var buffer = ByteBuffer(out)
            return try GetRequest(json: try #require(try decoder.next(&buffer)).jsonObject())
        }
        var stream: [UInt8] = []
        for json in [
            #"{"id":"a","rev":1,"seq":41}"#, #"{"id":"b","rev":2,"seq":40}"#,
            #"{"id":"c","rev":1,"data":{"seq":99}}"#, #"{"code":9,"name":"CONFLICT","message":"at \"seq\":77"}"#,
        ] {
            encoder.encode(
                Frame(opcode: .create, requestID: 2, status: .ok, flags: .response, json: Array(json.utf8)),
                into: &stream)
        }
        var rng = SplitMix64(seed: 7)
        for split: (Int) -> Int in [{ _ in stream.count }, { _ in 1 }, { _ in Int(rng.below(40)) + 1 }] {
            let payloads = Payloads(
                docSize: 250, blobs: [Payloads.syntheticJPEG(size: 100)], runNonce: 0xABCD, afterSeq: true)
            var driver = LarderDriver(payloads: payloads, worker: 0, collection: "bench", encoder: encoder)
            #expect(try get(&driver).afterSeq == nil, "nothing seen yet: no afterSeq")
            _ = try DriverTests.feed(&driver, stream, split: split)
            #expect(try get(&driver).afterSeq == 41)
        }
        #expect(SeenSeq.parse(tail: Array(#""seq":}"#.utf8)) == nil)
        #expect(SeenSeq.parse(tail: Array(#"seq":12}"#.utf8)) == nil)
        #expect(SeenSeq.parse(tail: Array(#","seq":12}"#.utf8)) == 12)
        guard case .run(let options) = try BenchArguments.parse(["--after-seq"]) else {
            Issue.record("--after-seq is an option of run")
            return
        }
        #expect(options.afterSeq)
        #expect(throws: UsageError.self) { try BenchArguments.parse(["--after-seq", "--target", "redis"]) }
    }

    @Test func larderRequestsAreValidMessages() throws {
        var driver = LarderDriver(
            payloads: DriverTests.payloads, worker: 3, collection: "bench", encoder: FrameEncoder())
        var decoder = FrameDecoder()
        for op in BenchOperation.allCases {
            for kind in [IDKind.created, .preloaded] {
                var out: [UInt8] = []
                driver.encode(Request(op: op, key: 123, idKind: kind, rev: 4), requestID: 77, into: &out)
                var buffer = ByteBuffer(out)
                let frame = try #require(try decoder.next(&buffer))
                #expect(frame.requestID == 77 && buffer.readableCount == 0)
                let json = try frame.jsonObject()  // strict JSON: parses, no duplicates
                switch op {
                case .get: _ = try GetRequest(json: json)
                case .create:
                    let create = try CreateRequest(json: json)
                    #expect(create.data.bytes.count == 250, "document of \(create.data.bytes.count) bytes")
                case .replace: _ = try ReplaceRequest(json: json)
                case .patch: _ = try PatchRequest(json: json)
                case .patchRev: #expect(try PatchRequest(json: json).rev == 4)
                case .delete: _ = try DeleteRequest(json: json)
                case .search: _ = try SearchRequest(json: json)
                case .count: _ = try CountRequest(json: json)
                case .blobPut:
                    _ = try BlobPutRequest(json: json)
                    #expect(frame.binary == DriverTests.payloads.blobs[0])
                case .blobGet: _ = try BlobIDRequest(json: json)
                }
            }
        }
    }

    @Test func redisRepliesDripFedAndSplit() throws {
        let stream = Array("+OK\r\n$5\r\nhello\r\n$-1\r\n-ERR wrong type\r\n:12\r\n$0\r\n\r\n".utf8)
            + Array("$300000\r\n".utf8) + [UInt8](repeating: 0x61, count: 300_000) + Array("\r\n+OK\r\n".utf8)
        let expected: [UInt16] = [0, 0, ResultCode.redisNil, ResultCode.redisError, 0, 0, 0, 0]
        var rng = SplitMix64(seed: 2)
        for split: (Int) -> Int in [{ _ in stream.count }, { _ in 1 }, { _ in Int(rng.below(7000)) + 1 }] {
            var driver = RedisDriver(payloads: DriverTests.payloads, worker: 0)
            #expect(try DriverTests.feed(&driver, stream, split: split).map(\.1) == expected)
        }
        var driver = RedisDriver(payloads: DriverTests.payloads, worker: 0)
        #expect(throws: BenchError.self) { try DriverTests.feed(&driver, Array("*1\r\n".utf8), split: { _ in 10 }) }
    }

    @Test func redisCommands() {
        var driver = RedisDriver(payloads: DriverTests.payloads, worker: 0)
        var out: [UInt8] = []
        driver.encode(Request(op: .get, key: 42, idKind: .preloaded), requestID: 0, into: &out)
        #expect(String(decoding: out, as: UTF8.self) == "*2\r\n$3\r\nGET\r\n$8\r\nbench:42\r\n")
        out.removeAll()
        driver.encode(Request(op: .replace, key: 7, idKind: .preloaded), requestID: 0, into: &out)
        let text = String(decoding: out, as: UTF8.self)
        #expect(text.hasPrefix("*3\r\n$3\r\nSET\r\n$7\r\nbench:7\r\n$250\r\n") && out.count == 32 + 250 + 2)
        out.removeAll()
        driver.encode(Request(op: .create, key: 7, idKind: .created), requestID: 0, into: &out)
        let created = String(decoding: out, as: UTF8.self)
        #expect(created.hasPrefix("*3\r\n$3\r\nSET\r\n$42\r\nbench:0000abcd-0000-4000-a000-"))
    }

    @Test func syntheticJPEGsAreExactAndValid() throws {
        for size in [21, 22, 24, 25, 100, 4096, 65_553, 65_554, 65_555, 65_556, 65_557, 131_090, 1 << 20, 3_000_001] {
            let jpeg = Payloads.syntheticJPEG(size: size)
            #expect(jpeg.count == size)
            let info = try JPEG.inspect(jpeg)
            #expect(info.width == 1 && info.height == 1)
        }
    }

    @Test func documentsHaveTheRequestedSize() throws {
        for size in [64, 100, 250, 1000, 4096] {
            let p = Payloads(docSize: size, blobs: [], runNonce: 1)
            for key: UInt64 in [0, 9, 12345, 999_999_999] {
                var out: [UInt8] = []
                p.appendDocument(key, into: &out)
                let object = try JSONParser.parseObject(out)
                #expect(object["n"]?.intValue == Int64(key) && object["group"]?.intValue == Int64(key % 100))
                if size >= 100 { #expect(out.count == size) }
            }
        }
        let p = Payloads(docSize: 250, blobs: [], runNonce: 1)
        #expect(UUID(uuidString: p.documentID(5)) != nil && p.documentID(5).hasSuffix("-0000-4000-8000-000000000005"))
        // Another document size is another dataset, with other ids.
        #expect(Payloads(docSize: 300, blobs: [], runNonce: 1).documentID(5) != p.documentID(5))
    }

    /// `--doc-size 100-4KiB`: each document has a size of its own within the range, the same every time it is made,
    /// and the sizes spread over the range.
    @Test func mixedDocumentSizes() throws {
        guard case .run(let o) = try BenchArguments.parse(["--doc-size", "100-4KiB"]) else { throw UsageError("help") }
        #expect(o.docSize == 100 && o.docSizeMax == 4096)
        #expect(throws: UsageError.self) { try BenchArguments.parse(["--doc-size", "4KiB-100"]) }
        let p = Payloads(docSize: 100, docSizeMax: 4096, blobs: [], runNonce: 1)
        var sizes: [Int] = []
        for key: UInt64 in 0..<2000 {
            var out: [UInt8] = []
            p.appendDocument(key, into: &out)
            _ = try JSONParser.parseObject(out)
            #expect(out.count == p.documentSize(key) && (100...4096).contains(out.count))
            var again: [UInt8] = []
            p.appendDocument(key, into: &again)
            #expect(again == out)
            #expect(p.redisValue(key).count == out.count)
            sizes.append(out.count)
        }
        // Spread: each quarter of the range holds a good share of 2000 uniform draws (expected 500 each).
        for quarter in 0..<4 {
            let low = 100 + quarter * 999, high = low + 999
            #expect(sizes.filter { $0 >= low && $0 < high }.count > 300, "quarter \(quarter)")
        }
        // Another range is another dataset.
        #expect(Payloads(docSize: 100, blobs: [], runNonce: 1).documentID(5) != p.documentID(5))
    }

    @Test func zipfIsSkewedAndInRange() {
        let n: UInt64 = 1000
        let zipf = Zipf(n: n, theta: 0.99)
        var rng = SplitMix64(seed: 4)
        var counts = [Int](repeating: 0, count: Int(n))
        let draws = 200_000
        for _ in 0..<draws { counts[Int(zipf.next(&rng))] += 1 }
        let sorted = counts.sorted(by: >)
        // The most popular key gets about 1/zeta(n) of the draws: 1/7.4 for n = 1000, theta = 0.99.
        let top = Double(sorted[0]) / Double(draws)
        #expect(top > 0.11 && top < 0.16, "top share \(top)")
        #expect(Double(sorted[0]) / Double(sorted[9]) > 7)  // rank 10 is about 10^0.99 times rarer
        #expect(counts.filter { $0 > 0 }.count > 500)
        // Scrambled: rank r is key r * m mod n, so neighbouring ranks are far apart (rank 0 stays key 0).
        let hottest = counts.indices.sorted { counts[$0] > counts[$1] }
        #expect(hottest[0] == 0 && hottest[1] == Int(zipf.scramble % n) && hottest[1] != 1, "\(hottest.prefix(3))")
    }

    static func phase(_ mix: OperationMix, keys: KeyDistribution = .uniform) -> Phase {
        Phase(
            kind: .measure, connections: 1, pipeline: 1, threads: 1, mix: mix, keys: keys, keyspace: 100,
            blobKeyspace: 10, rate: nil, requests: nil, duration: 1, warmup: 0, timeout: 1, seed: 1)
    }

    @Test func requestsFollowTheMixWeights() {
        let mix = OperationMix([(.get, 70), (.create, 20), (.search, 10)])
        let worker = Worker<RawDriver>(
            index: 0, workers: 1, phase: DriverTests.phase(mix), aggregator: Aggregator(workers: 1), connections: [])
        var counts: [BenchOperation: Int] = [:]
        for _ in 0..<100_000 {
            let r = worker.nextRequest()
            counts[r.op, default: 0] += 1
            #expect(r.op == .create ? r.idKind == .created : r.key < 100)
        }
        #expect(abs(counts[.get, default: 0] - 70_000) < 1_500)
        #expect(abs(counts[.create, default: 0] - 20_000) < 1_000)
        #expect(abs(counts[.search, default: 0] - 10_000) < 800)
    }

    @Test func deleteRemovesWhatTheRunCreated() {
        let worker = Worker<RawDriver>(
            index: 0, workers: 1, phase: DriverTests.phase(OperationMix([(.delete, 1)])),
            aggregator: Aggregator(workers: 1), connections: [])
        // Nothing created yet: a create is sent instead.
        let first = worker.nextRequest()
        #expect(first.op == .create && first.idKind == .created)
        worker.deletable = [first.key]
        let second = worker.nextRequest()
        #expect(second.op == .delete && second.key == first.key && second.idKind == .created)
    }

    @Test func sequentialKeysCoverTheSpaceOnceAcrossWorkers() {
        var seen = Set<UInt64>()
        let workers = 3
        for w in 0..<workers {
            let worker = Worker<RawDriver>(
                index: w, workers: workers, phase: DriverTests.phase(OperationMix([(.get, 1)]), keys: .sequential),
                aggregator: Aggregator(workers: workers), connections: [])
            for _ in 0..<34 { seen.insert(worker.nextRequest().key) }
        }
        #expect(seen == Set(0..<100))
    }
}
