import Foundation
import LarderServer
import LarderStore
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// One test per problem the hostile-client table (HostileClientTests) found in the store; RELIABILITY.md lists them.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReliabilityHostileFindingsTests {
    static func withStore(_ body: (SQLiteStore) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-in-\(UUID().wireString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory.path))
        defer { store.close() }
        try body(store)
    }

    /// Every scalar kind (filters compare only scalars), and values that only look alike (1 and "1", true and 1).
    static let values: [JSON] = [1, 1.0, 2.5, 0, -0.0, "1", "a", "A", "北京", true, false, nil, 9_007_199_254_740_993]

    static func ids(_ store: SQLiteStore, _ filter: Filter) throws -> Set<UUID> {
        Set(try store.search("kinds", SearchQuery(filter: filter, limit: 1000)).records.map(\.id))
    }

    /// Finding 3: `in` was written as one OR term per value, nesting a level per value, and SQLite refuses
    /// expressions deeper than 1,000: `in` with the documented maximum of 1,000 values answered INTERNAL.
    @Test func inWithAThousandValuesWorks() throws {
        try Self.withStore { store in
            for n in 0..<1200 { _ = try store.create("kinds", id: nil, data: ["n": .int(Int64(n))]) }
            let field = try FieldPath("n")
            let thousand = (0..<1000).map { JSON.int(Int64($0 * 2)) }
            #expect(try store.count("kinds", filter: .isIn(field, thousand), text: nil) == 600)
            let twenty = Filter.and((0..<20).map { _ in .isIn(field, thousand) })
            #expect(try store.count("kinds", filter: twenty, text: nil) == 600)
            // The largest filter a request may carry: 255 of them under one `and`.
            let most = Filter.and((0..<255).map { _ in .isIn(field, thousand) })
            #expect(try store.count("kinds", filter: most, text: nil) == 600)
        }
    }

    /// `in` still selects exactly what an `or` of `eq` selects, value kind by value kind, on data and envelope fields,
    /// with and without an index.
    @Test func inMeansAnOrOfEq() throws {
        try Self.withStore { store in
            var stored: [UUID] = []
            for value in Self.values + [[1], ["a": 1]] {
                stored.append(try store.create("kinds", id: nil, data: ["v": value]).id)
            }
            stored.append(try store.create("kinds", id: nil, data: ["other": 1]).id)
            let field = try FieldPath("v")
            for indexed in [false, true] {
                if indexed { _ = try store.createIndex("kinds", field: field) }
                for size in 1...Self.values.count {
                    for start in stride(from: 0, to: Self.values.count, by: 3) {
                        let chosen = Array((Self.values + Self.values)[start..<(start + size)])
                        let viaIn = try Self.ids(store, .isIn(field, chosen))
                        let viaOr = try Self.ids(store, .or(chosen.map { .compare(field, .eq, $0) }))
                        #expect(viaIn == viaOr, "in \(chosen) (indexed: \(indexed))")
                    }
                }
            }
            let id = try FieldPath("$id")
            let some = [stored[0], stored[3], stored[7]]
            let upper = some.map { JSON.string($0.wireString.uppercased()) } + ["not-an-id", 5]
            #expect(try Self.ids(store, .isIn(id, upper)) == Set(some))
            let rev = try FieldPath("$rev")
            #expect(try Self.ids(store, .isIn(rev, [1, "2"])) == Set(stored))
        }
    }
}

/// Finding 4: every frame read was inflated and handed out at once, up to 128 per connection, so 128 pipelined
/// frames of 4 KiB that each inflate to 4 MiB made the server hold half a gigabyte for 0.5 MB sent. Reading now
/// pauses while the requests in flight hold more than `inputHighWaterBytes`.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReliabilityInflationFindingTests {
    static func bomb(_ encoder: FrameEncoder, id: UInt32, inflated: Int) -> [UInt8] {
        let pad = String(repeating: " ", count: inflated - 40)
        let json: JSONObject = ["collection": "b", "data": ["pad": .string(pad)]]
        return encoder.encode(Frame(opcode: .create, requestID: id, json: json.bytes))
    }

    @Test func readingPausesWhileRequestsInFlightHoldTooMuch() throws {
        let configuration = ConnectionStateMachine.Configuration(inputHighWaterBytes: 1 << 20)
        var machine = ConnectionStateMachine(configuration: configuration, now: 0)
        let hello = FrameEncoder().encode(
            Frame(opcode: .hello, requestID: 1, json: HelloRequest(client: "t").json.bytes))
        _ = hello.withUnsafeBytes { machine.bytesReceived($0, now: 0) }
        #expect(machine.isHandshakeDone)
        let encoder = FrameEncoder(compressionEnabled: true, threshold: 0)
        var stream: [UInt8] = []
        for id in UInt32(10)..<74 { stream += Self.bomb(encoder, id: id, inflated: 256 << 10) }
        #expect(stream.count < 64 * 2048, "the frames compress to \(stream.count) bytes")

        var pending: [Frame] = []
        func run(_ actions: [ConnectionStateMachine.Action]) -> Bool {
            var paused = false
            for action in actions {
                if case .execute(let frame) = action { pending.append(frame) }
                if action == .pauseReading { paused = true }
            }
            return paused
        }
        #expect(stream.withUnsafeBytes { run(machine.bytesReceived($0, now: 1)) })
        #expect(pending.count == 5, "1 MiB holds four frames of 256 KiB; the fifth crosses the mark")
        var executed = pending.count
        while let frame = pending.first {
            pending.removeFirst()
            let actions = machine.requestCompleted(Reply(opcode: .create, requestID: frame.requestID, json: []), now: 2)
            let before = pending.count
            _ = run(actions)
            executed += pending.count - before
            #expect(pending.count <= 5)
        }
        #expect(executed == 64, "every frame ran in the end")
    }

    /// The same against a real server: its peak RSS stays far below what the frames inflate to.
    @Test func aServerFedCompressionBombsStaysSmall() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("larder-bomb-\(UUID().wireString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let server = try ServerChild(dataDirectory: root.appendingPathComponent("data").path)
        defer { _ = server.stop() }
        let c = try RawClient.tcp(port: server.port)
        try c.hello()
        let before = try #require(server.residentBytes)
        // Encoded once (4 MiB of JSON is slow to write in a debug build); each copy gets its own request id.
        let one = Self.bomb(FrameEncoder(compressionEnabled: true, threshold: 0), id: 0, inflated: 4 << 20)
        var stream: [UInt8] = []
        for id in UInt32(10)..<138 {
            var frame = one
            frame.replaceSubrange(12..<16, with: [0, 0, UInt8(id >> 8), UInt8(id & 0xFF)])
            stream += frame
        }
        try c.writeAll(stream)
        var statuses: [Status] = []
        while statuses.count < 128, let frame = try c.receive(timeout: 120) { statuses.append(frame.status) }
        #expect(statuses == Array(repeating: .payloadTooLarge, count: 128), "documents over 1 MiB are refused")
        let peak = try #require(server.peakResidentBytes)
        report(
            "inflation: 128 frames, \(stream.count) bytes on the wire, \(128 * 4) MiB inflated; server RSS "
                + "\(before >> 20) MB before, peak \(peak >> 20) MB")
        // Inflating every frame whole would take ~400 MB over the baseline; the mark (16 MiB) plus parsing stays far
        // under.
        #expect(peak - before < SanitizerBuild.current.residentBound(160 << 20))
    }
}
