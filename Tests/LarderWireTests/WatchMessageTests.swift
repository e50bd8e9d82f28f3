import Foundation
import LarderTestThreads
import LarderWire
import Testing

/// The change feed's messages go through JSON, a frame and back unchanged, and reject what they must.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct WatchMessageTests {
    static let id = UUID(uuidString: "3F2504E0-4F89-41D3-9A0C-0305E82C3301")!
    static let record = Record(
        id: id, rev: 2, createdAtMs: 1_795_998_388_123, updatedAtMs: 1_795_998_421_456,
        data: ["item": "鮪魚飯糰", "price": 35, "discount": true])
    static let blob = BlobInfo(
        id: UUID(uuidString: "9B2D3C4E-1111-4A2B-8C3D-4E5F60718293")!, size: 17, sha256: String(repeating: "a", count: 64),
        contentType: "image/jpeg", width: 1, height: 1, createdAtMs: 1_795_998_421_456,
        attachedTo: BlobAttachment(collection: "items", id: id))

    func roundTrip<M: WireMessage & Equatable>(_ message: M) throws {
        let frame = Frame(opcode: .event, requestID: 7, flags: .push, json: message.json.bytes)
        let encoded = FrameEncoder(compressionEnabled: true, threshold: 64).encode(frame)
        var decoder = FrameDecoder()
        var buffer = ByteBuffer(encoded)
        let decoded = try #require(try decoder.next(&buffer))
        #expect(decoded.isPush && !decoded.isResponse && decoded.requestID == 7)
        #expect(try M(json: decoded.jsonObject()) == message)
    }

    @Test func requestsAndResponses() throws {
        try roundTrip(WatchRequest())
        try roundTrip(
            WatchRequest(
                collection: "items", filter: .compare(try FieldPath("price"), .lt, 50), since: 41, idsOnly: true))
        try roundTrip(WatchRequest(collection: nil, filter: nil, since: 0))
        try roundTrip(WatchResponse(subscription: 3, seq: 1234))
        try roundTrip(UnwatchRequest(subscription: 3))
        try roundTrip(UnwatchResponse(subscription: 3))
        #expect(UnwatchResponse(subscription: 3).json["ended"] == true)
        #expect(WatchRequest().json.isEmpty)
    }

    @Test func everyKindOfEvent() throws {
        let time = Timestamp.date(1_795_998_421_456)
        try roundTrip(
            ChangeEvent(
                subscription: 1, seq: 42, kind: .create, collection: "items", id: Self.id, rev: 1, time: time,
                record: Self.record))
        try roundTrip(ChangeEvent(subscription: 1, seq: 43, kind: .patch, collection: "items", id: Self.id, rev: 2, time: time))
        try roundTrip(
            ChangeEvent(
                subscription: 1, seq: 43, kind: .patch, collection: "items", id: Self.id, rev: 2, time: time,
                record: Self.record, matches: false))
        #expect(ChangeEvent(subscription: 1, seq: 1, kind: .create).json["matches"] == nil)
        try roundTrip(ChangeEvent(subscription: 1, seq: 44, kind: .delete, collection: "items", id: Self.id, rev: 2, time: time))
        try roundTrip(
            ChangeEvent(
                subscription: 1, seq: 45, kind: .blobAttach, collection: "items", id: Self.id, rev: 2, time: time,
                blob: Self.blob))
        try roundTrip(ChangeEvent(subscription: 1, seq: 46, kind: .drop, collection: "items", time: time))
        try roundTrip(ChangeEvent(subscription: 2, seq: 900, kind: .resync, oldestSeq: 500))
        try roundTrip(ChangeEvent(subscription: 2, seq: 901, kind: .gap))
    }

    @Test func unknownKindsAreKeptNotRejected() throws {
        let event = try ChangeEvent(json: ["subscription": 1, "seq": 5, "kind": "rename", "future": true])
        #expect(event.kind == ChangeKind(rawValue: "rename"))
        #expect(!event.kind.isControl && !ChangeKind.changes.contains(event.kind))
        #expect(ChangeKind.resync.isControl && ChangeKind.gap.isControl)
    }

    @Test func badRequestsNameTheirField() {
        func field(_ json: JSONObject) -> String? {
            do {
                _ = try WatchRequest(json: json)
                return nil
            } catch {
                return error.field
            }
        }
        #expect(field(["since": -1]) == "since")
        #expect(field(["since": "5"]) == "since")
        #expect(field(["idsOnly": 1]) == "idsOnly")
        #expect(field(["collection": 5]) == "collection")
        #expect(field(["filter": ["field": "a", "op": "near", "value": 1]]) == "filter.op")
        #expect(field(["colection": "items"]) == "colection")
        expectError(.invalidArgument, field: "subscription") { _ = try UnwatchRequest(json: ["subscription": 0]) }
        expectError(.invalidArgument, field: "subscription") { _ = try UnwatchRequest(json: [:]) }
    }

    @Test func limitsAnnounceTheFeed() throws {
        let limits = Limits(maxWatches: 4, maxWatchBufferBytes: 65_536)
        #expect(try Limits(json: limits.json) == limits)
        #expect(Limits.default.maxWatches == 16 && Limits.default.maxWatchBufferBytes == 1 << 20)
        expectError(.invalidArgument) { try Limits(maxWatches: 0).validate() }
        expectError(.invalidArgument) { try Limits(maxWatchBufferBytes: 0).validate() }
        // An older server's HELLO lacks the members: the defaults stand.
        var old = Limits.default.json
        old["maxWatches"] = nil
        #expect(try Limits(json: old).maxWatches == 16)
    }
}
