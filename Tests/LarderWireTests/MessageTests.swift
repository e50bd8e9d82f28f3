import Foundation
import LarderTestThreads
import LarderWire
import Testing

/// Every message goes through its JSON, the wire bytes, a frame and back unchanged.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct MessageTests {
    static let id = UUID(uuidString: "3F2504E0-4F89-41D3-9A0C-0305E82C3301")!
    static let other = UUID(uuidString: "9B2D3C4E-1111-4A2B-8C3D-4E5F60718293")!
    static let record = Record(
        id: id, rev: 3, createdAtMs: 1_795_998_388_123, updatedAtMs: 1_795_998_421_456,
        data: ["name": "张三", "address": "北京市海淀区中关村大街1号", "score": 92, "tags": ["a", "b"]])

    func roundTrip<M: WireMessage & Equatable>(_ message: M, opcode: Opcode = .ping) throws {
        let frame = Frame(opcode: opcode, requestID: 42, json: message.json.bytes)
        let encoded = FrameEncoder(compressionEnabled: true, threshold: 64).encode(frame)
        var decoder = FrameDecoder()
        var buffer = ByteBuffer(encoded)
        let decoded = try #require(try decoder.next(&buffer))
        #expect(try M(json: decoded.jsonObject()) == message)
    }

    @Test func handshake() throws {
        try roundTrip(HelloRequest(client: "larder-cli 0.1", token: "s3cret"))
        try roundTrip(HelloRequest(versions: [1, 2], compression: [], client: ""))
        try roundTrip(HelloResponse(version: 1, compression: "zlib", compressionThreshold: 1024, limits: .default,
                                    server: "larder-server 0.1.0", authRequired: true))
        try roundTrip(EmptyMessage())
    }

    @Test func documents() throws {
        try roundTrip(CreateRequest(collection: "students", data: Self.record.data))
        try roundTrip(CreateRequest(collection: "students", id: Self.id, data: [:]))
        try roundTrip(GetRequest(collection: "todos", id: Self.id))
        try roundTrip(GetManyRequest(collection: "todos", ids: [Self.id, Self.other]))
        try roundTrip(GetManyResponse(records: [Self.record], missing: [Self.other]))
        try roundTrip(ReplaceRequest(collection: "todos", id: Self.id, data: ["title": "x"], rev: 2))
        try roundTrip(ReplaceRequest(collection: "todos", id: Self.id, data: ["title": "x"]))
        try roundTrip(PatchRequest(collection: "todos", id: Self.id, patch: ["isFinish": true, "old": nil], rev: 5))
        try roundTrip(DeleteRequest(collection: "todos", id: Self.id, rev: 1))
        try roundTrip(DeleteResponse(id: Self.id, rev: 4, blobsDeleted: 1))
        try roundTrip(ListRequest(collection: "todos", limit: 10, cursor: "abc"))
        try roundTrip(PageResponse(records: [Self.record, Self.record], nextCursor: "next"))
        try roundTrip(PageResponse(records: [], nextCursor: nil))
        try roundTrip(Self.record)
    }

    @Test func search() throws {
        let query = SearchQuery(
            filter: .and([
                .compare(try FieldPath("price"), .lt, 50), .compare(try FieldPath("discount"), .eq, true),
                .or([.isIn(try FieldPath("store"), ["7-Eleven", "OK mart"]), .not(.exists(try FieldPath("photo"), true))]),
                .prefix(try FieldPath("item"), "Iced"), .contains(try FieldPath("comment"), "好吃"),
            ]),
            text: TextQuery(query: "北京", fields: [try FieldPath("address")]),
            sort: [SortKey(field: try FieldPath("price"), descending: true), SortKey(field: try FieldPath("$createdAt"))],
            limit: 20, cursor: "c1")
        try roundTrip(SearchRequest(collection: "items", query: query))
        try roundTrip(SearchRequest(collection: "items", query: SearchQuery()))
        try roundTrip(CountRequest(collection: "items", filter: query.filter, text: query.text))
        try roundTrip(CountResponse(count: 12))
        try roundTrip(GroupRequest(collection: "pokemon", field: try FieldPath("category"), perGroup: 3))
        try roundTrip(GroupResponse(groups: [.init(key: "Ball", count: 4, records: [Self.record]),
                                             .init(key: nil, count: 1, records: [])]))
        try roundTrip(IndexRequest(collection: "items", field: try FieldPath("address.city")))
        try roundTrip(IndexResponse(name: "idx_items_1", created: true))
    }

    @Test func collectionsAndBlobs() throws {
        try roundTrip(CollectionsResponse(collections: [.init(name: "items", count: 4), .init(name: "todos", count: 3)]))
        try roundTrip(DropCollectionRequest(collection: "items"))
        try roundTrip(DropCollectionResponse(collection: "items", documents: 4, blobs: 1))
        let attachment = BlobAttachment(collection: "items", id: Self.id)
        try roundTrip(BlobPutRequest(id: Self.other, sha256: String(repeating: "ab", count: 32), attach: attachment))
        try roundTrip(BlobPutRequest())
        try roundTrip(BlobIDRequest(id: Self.other))
        let info = BlobInfo(id: Self.other, size: 112_525, sha256: String(repeating: "0f", count: 32),
                            contentType: "image/jpeg", width: 640, height: 480, createdAtMs: 1_795_998_388_123,
                            attachedTo: attachment)
        try roundTrip(info)
        try roundTrip(BlobListRequest(limit: 5, cursor: "x", attachedTo: attachment))
        try roundTrip(BlobListResponse(blobs: [info], nextCursor: nil))
        try roundTrip(BlobDeleteResponse(id: Self.other))
    }

    @Test func errorsRoundTripWithTheirDetails() throws {
        let error = LarderError(.conflict, "revision 2 is not current; read the document again and retry",
                                field: "rev", details: ["currentRev": 3])
        let back = LarderError(status: .conflict, json: try JSONParser.parse(error.json.bytes))
        #expect(back == error)
        #expect(error.json["name"] == "CONFLICT")
        #expect(error.json["code"] == 3)
    }

    @Test func statusNamesAreStableAndUnique() {
        #expect(Set(Status.all.map(\.name)).count == Status.all.count)
        #expect(Status.all.map(\.rawValue) == Array(0..<UInt16(Status.all.count)))
        #expect(Status(name: "UNSUPPORTED_MEDIA_TYPE") == .unsupportedMediaType)
        #expect(Set(Opcode.all.map(\.rawValue)).count == Opcode.all.count)
    }

    @Test func requestsRejectBadValues() {
        let id = JSON.string(MessageTests.id.wireString)
        expectError(.invalidArgument, field: "versions") { _ = try HelloRequest(json: ["versions": []]) }
        expectError(.invalidArgument, field: "limit") { _ = try ListRequest(json: ["collection": "a", "limit": 1001]) }
        expectError(.invalidArgument, field: "sha256") { _ = try BlobPutRequest(json: ["sha256": "XYZ"]) }
        expectError(.invalidArgument, field: "rev") {
            _ = try DeleteRequest(json: ["collection": "a", "id": id, "rev": 0])
        }
        expectError(.invalidArgument, field: "ids") {
            _ = try GetManyRequest(json: ["collection": "a", "ids": .array(Array(repeating: id, count: 1001))])
        }
        expectError(.invalidArgument, field: "filter.op") {
            _ = try SearchRequest(json: ["collection": "a", "filter": ["field": "x", "op": "like", "value": 1]])
        }
        expectError(.invalidArgument, field: "field") {
            _ = try GroupRequest(json: ["collection": "a", "field": "$nope"])
        }
    }

    @Test func limitsAreValidated() {
        #expect(throws: Never.self) { try Limits.default.validate() }
        var tooSmall = Limits.default
        tooSmall.maxFrameBytes = 1 << 20
        expectError(.invalidArgument) { try tooSmall.validate() }
        var zero = Limits.default
        zero.maxInFlight = 0
        expectError(.invalidArgument) { try zero.validate() }
    }
}
