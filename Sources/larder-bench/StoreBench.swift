import Dispatch
import Foundation
import LarderStore
import LarderSync
import LarderWire

/// The in-process store benchmark behind `larder-bench store`: prints a Markdown table and returns it.
///
/// Measures create and get-by-id for a ~250-byte document (get-by-id beside the raw SQLite statement alone), substring
/// search and a two-filter sorted query over `documents` records with and without indexes (p50/p99), and blob put/get
/// throughput for a 1 MiB JPEG. Uses a fresh directory under `directory` (default: the temporary directory). `quick`
/// makes a smoke run: a hundredth of each measurement's operations.
@discardableResult
func runStoreBenchmark(
    directory: String? = nil, documents: Int = 100_000, quick: Bool = false, output: (String) -> Void = { print($0) }
) throws(LarderError) -> String {
    // A quick run shows that every measurement runs; its figures compare with nothing.
    func scaled(_ count: Int) -> Int { quick ? max(2, count / 100) : count }
    let base = directory ?? FileManager.default.temporaryDirectory.path
    let path = (base as NSString).appendingPathComponent("larder-bench-\(UUID().wireString)")
    defer { try? FileManager.default.removeItem(atPath: path) }
    let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: path))
    defer { store.close() }
    var rows: [String] = ["| Measurement | Result |", "|---|---|"]
    func report(_ name: String, _ value: String) {
        rows.append("| \(name) | \(value) |")
        output("\(name): \(value)")
    }
    func seconds(_ body: () throws(LarderError) -> Void) throws(LarderError) -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try body()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }
    func rate(_ count: Int, _ time: Double) -> String { "\(Int(Double(count) / time).formatted()) /s" }

    // ~250 bytes of compact JSON, like a purchase record.
    @Sendable func smallDocument(_ n: Int) -> JSONObject {
        [
            "store": "FamilyMart 全家", "item": .string("Iced latte 冰拿鐵 #\(n)"), "date": "2024-05-02T08:05:00Z",
            "price": .int(Int64(n % 500)), "discount": .bool(n % 2 == 0), "comment": "Too sweet, but the staff were kind 🍯",
            "photoName": .null, "tags": ["drink", "coffee"], "rating": 4.5,
        ]
    }
    output("document size: \(smallDocument(1).bytes.count) bytes")
    // A create as a client's: the document encoded and folded on the caller's thread, then one write job of its own.
    @Sendable func create(_ data: JSONObject) throws(LarderError) -> StoredRecord {
        let document = PreparedDocument(data)
        return try store.syncWrite(single: true) { context throws(LarderError) in
            try context.create("small", id: nil, document: document)
        }
    }

    // Create, one caller at a time (each write its own transaction).
    let createCount = scaled(5_000)
    var ids: [UUID] = []
    ids.reserveCapacity(createCount)
    let single = try seconds { () throws(LarderError) in
        for n in 0..<createCount { ids.append(try create(smallDocument(n)).id) }
    }
    report("create, 1 caller (250-byte doc)", rate(createCount, single))

    // Create, 16 concurrent callers (group commit shares transactions).
    let concurrentCount = scaled(20_000)
    let failures = ResultCounter()
    let concurrent = try seconds {
        // Real threads: concurrentPerform runs at most one worker per core, which would leave two callers on a
        // two-core machine and nothing for group commit to batch.
        let done = DispatchGroup()
        for worker in 0..<16 {
            done.enter()
            Thread {
                for n in stride(from: worker, to: concurrentCount, by: 16) {
                    if (try? create(smallDocument(n))) == nil { failures.add() }
                }
                done.leave()
            }.start()
        }
        done.wait()
    }
    report("create, 16 concurrent callers (group commit)", rate(concurrentCount, concurrent))

    // Get by id through the store, then the raw statement alone on its own connection.
    let getCount = scaled(200_000)
    var sink = 0
    let viaStore = try seconds { () throws(LarderError) in
        for n in 0..<getCount {
            let record = try store.get("small", id: ids[n % ids.count])
            var out: [UInt8] = []
            record.write(into: &out)
            sink &+= out.count
        }
    }
    let raw = try SQLiteConnection(path: store.databasePath, readOnly: true)
    let rawTime = try seconds { () throws(LarderError) in
        let statement = try raw.statement(
            "SELECT id, rev, createdAt, updatedAt, data FROM documents WHERE collection = ?1 AND id = ?2")
        for n in 0..<getCount {
            statement.reset()
            try statement.bind([.text("small"), .text(ids[n % ids.count].wireString)])
            guard try statement.step() else { continue }
            sink &+= statement.bytes(4).count
        }
        statement.reset()
    }
    report("get by id, store (incl. record encoding)", rate(getCount, viaStore))
    report("get by id, raw SQLite statement", rate(getCount, rawTime))
    let per = scaled(50_000)
    let readIds = ids
    let parallel = try seconds {
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            for n in 0..<per { _ = try? store.get("small", id: readIds[(n * 4 + worker) % readIds.count]) }
        }
    }
    report("get by id, 4 concurrent readers (total)", rate(per * 4, parallel))

    // A large collection for search.
    let cities = ["北京市海淀区", "上海市浦东新区", "广州市天河区", "Taipei Xinyi", "Tainan East", "深圳市南山区", "Kaohsiung"]
    let names = ["张三", "李四", "王五", "Emily Chen", "林怡君", "Hedon", "王小明", "Grace Hopper"]
    let load = try seconds { () throws(LarderError) in
        var n = 0
        while n < documents {
            let start = n
            let end = min(documents, n + 5_000)
            _ = try store.syncWrite { context throws(LarderError) -> Int in
                for i in start..<end {
                    let data: JSONObject = [
                        "name": .string(names[i % names.count] + " \(i)"), "score": .int(Int64((i * 7919) % 1000)),
                        "category": .string("c\(i % 20)"),
                        "address": ["city": .string(cities[(i / 3) % cities.count]), "street": .string("Road \(i % 977)")],
                    ]
                    _ = try context.create("big", id: nil, data: data)
                }
                return end
            }
            n = end
        }
    }
    report("load \(documents.formatted()) documents (5,000 per transaction)", rate(documents, load))

    func percentiles(_ runs: Int, _ body: () throws(LarderError) -> Void) throws(LarderError) -> String {
        var times: [Double] = []
        for _ in 0..<scaled(runs) { times.append(try seconds(body) * 1000) }
        times.sort()
        let p50 = times[times.count / 2]
        let p99 = times[min(times.count - 1, Int(Double(times.count) * 0.99))]
        return String(format: "p50 %.2f ms, p99 %.2f ms", p50, p99)
    }
    let twoFilter = try SearchQuery(
        json: JSONParser.parseObject(Array(
            #"{"filter":{"and":[{"field":"category","op":"eq","value":"c7"},{"field":"score","op":"lt","value":100}]},"sort":[{"field":"score","order":"desc"}],"limit":50}"#
                .utf8)))
    let text3 = SearchQuery(text: TextQuery(query: "浦东新区"), limit: 50)
    let text3Rare = SearchQuery(text: TextQuery(query: "hopper 99"), limit: 50)
    let text2 = SearchQuery(text: TextQuery(query: "天河", fields: [try FieldPath("address.city")]), limit: 50)
    let countQuery = SearchQuery(text: TextQuery(query: "grace hopper 12"))

    func searchRows(_ label: String) throws(LarderError) {
        report("two filters + sort, \(label)", try percentiles(50) { () throws(LarderError) in _ = try store.search("big", twoFilter) })
        report("substring 4 chars (common), \(label)", try percentiles(50) { () throws(LarderError) in _ = try store.search("big", text3) })
        report("substring 9 chars (rare), \(label)", try percentiles(50) { () throws(LarderError) in _ = try store.search("big", text3Rare) })
        report("substring 2 chars in one field (scan)", try percentiles(50) { () throws(LarderError) in _ = try store.search("big", text2) })
        report("count of a rare substring, \(label)", try percentiles(20) { () throws(LarderError) in
            _ = try store.count("big", filter: nil, text: countQuery.text)
        })
    }
    // "Without indexes": a second store on the same data with the trigram index and field indexes switched off.
    let plain = try SQLiteStore(
        configuration: StoreConfiguration(dataDirectory: path, useTextIndex: false, useFieldIndexes: false))
    report("two filters + sort, no index", try percentiles(20) { () throws(LarderError) in _ = try plain.search("big", twoFilter) })
    report("substring 4 chars (common), no trigram index", try percentiles(20) { () throws(LarderError) in _ = try plain.search("big", text3) })
    report("substring 9 chars (rare), no trigram index", try percentiles(20) { () throws(LarderError) in _ = try plain.search("big", text3Rare) })
    plain.close()
    let scoreField = try FieldPath("score")
    _ = try store.syncWrite { context throws(LarderError) in try context.createIndex("big", field: scoreField) }
    let categoryField = try FieldPath("category")
    _ = try store.syncWrite { context throws(LarderError) in try context.createIndex("big", field: categoryField) }
    // Covered by the trigram index (as its first substring search would ask) and caught up before timing.
    if let textIndexer = store.textIndexer {
        try textIndexer.indexCollection("big")
        try textIndexer.catchUp(rounds: 1_000)
    }
    try searchRows("indexed")
    // The same searches while the trigram index's backlog is as full as it gets (one document short of a flush):
    // each text search also checks those documents one by one.
    let waiting = store.configuration.fullTextBacklog - 1
    if waiting > 0 {
        _ = try store.syncWrite { context throws(LarderError) -> Int in
            for i in 0..<waiting {
                _ = try context.create("big", id: nil, data: ["name": .string("late \(i)"), "score": .int(Int64(i))])
            }
            return waiting
        }
        report("substring 4 chars (common), indexed, backlog of \(waiting)", try percentiles(50) { () throws(LarderError) in
            _ = try store.search("big", text3)
        })
        report("substring 9 chars (rare), indexed, backlog of \(waiting)", try percentiles(50) { () throws(LarderError) in
            _ = try store.search("big", text3Rare)
        })
        report("count of a rare substring, indexed, backlog of \(waiting)", try percentiles(20) { () throws(LarderError) in
            _ = try store.count("big", filter: nil, text: countQuery.text)
        })
    }

    // Blobs: a synthetic 1 MiB JPEG (comment segments, a frame header, EOI).
    var jpeg: [UInt8] = [0xFF, 0xD8]
    while jpeg.count < (1 << 20) - 70_000 {
        jpeg += [0xFF, 0xFE, 0xFF, 0xFF]
        jpeg += (0..<65_533).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    }
    jpeg += [0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x04, 0x38, 0x07, 0x80, 0x01, 0x01, 0x11, 0x00]
    jpeg += [UInt8](repeating: 0x55, count: (1 << 20) - jpeg.count - 2) + [0xFF, 0xD9]
    let blobCount = scaled(100)
    var blobIds: [UUID] = []
    let put = try seconds { () throws(LarderError) in
        for _ in 0..<blobCount {
            let put = try store.syncWrite { [jpeg] context throws(LarderError) in
                try context.blobPut(id: nil, bytes: jpeg, expectedSHA256: nil, attachTo: nil)
            }
            blobIds.append(put.id)
        }
    }
    let get = try seconds { () throws(LarderError) in
        for id in blobIds { sink &+= try store.blobGet(id).bytes.count }
    }
    let megabytes = Double(blobCount * jpeg.count) / 1_048_576
    report("blob put, 1 MiB JPEG (validate + SHA-256 + commit)", String(format: "%.0f MB/s", megabytes / put))
    report("blob get, 1 MiB JPEG", String(format: "%.0f MB/s", megabytes / get))
    let hashes = scaled(20)
    let hash = try seconds { () throws(LarderError) in for _ in 0..<hashes { _ = SHA256.hex(jpeg) } }
    report("SHA-256 alone", String(format: "%.0f MB/s", Double(hashes) / hash))
    if failures.value > 0 { report("failed creates", "\(failures.value)") }
    output("(checksum \(sink % 10))")
    let table = rows.joined(separator: "\n")
    output(table)
    return table
}

/// A counter shared by benchmark threads.
final class ResultCounter: @unchecked Sendable {
    private let lock = Lock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
