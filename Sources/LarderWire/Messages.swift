import Foundation

// Parallel table (`duplicates` pairs these on purpose): every message below is a struct with the same parts (stored fields, a public
// memberwise init, `init(json:)`, `json`), one per request and answer of Protocol.md section 5, as are
// BackupMessages.swift, Query.swift's SearchQuery and the client's option and result structs that mirror them.
/// A request or response body that maps to and from its JSON part.
public protocol WireMessage: Sendable {
    /// Reads the message, rejecting missing, mistyped and unknown fields with INVALID_ARGUMENT.
    init(json: JSONObject) throws(LarderError)
    /// The JSON object sent on the wire.
    var json: JSONObject { get }
}

/// Protocol versions this implementation speaks.
public enum ProtocolVersions {
    public static let supported: [Int] = [1]
}

/// Largest number of ids in one GET_MANY.
public let maxGetManyIDs = 1000
/// Largest page (LIST, SEARCH, BLOB_LIST): one rule for every paged answer, the one `SearchQuery` enforces.
public let maxPageLimit = SearchQuery.maxLimit
/// The page size when a request names none.
public let defaultPageLimit = SearchQuery.defaultLimit

/// The name of the compression algorithm Larder knows.
public let zlibCompression = "zlib"

// MARK: - Handshake

/// `HELLO` request: what the client offers.
public struct HelloRequest: WireMessage, Equatable {
    public var versions: [Int]
    public var compression: [String]
    public var client: String
    public var token: String?

    public init(versions: [Int] = ProtocolVersions.supported, compression: [String] = [zlibCompression],
                client: String, token: String? = nil) {
        self.versions = versions
        self.compression = compression
        self.client = client
        self.token = token
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        guard let versions = try r.optionalArray("versions", maxCount: 16), !versions.isEmpty else {
            throw .invalid("versions", "versions must list at least one protocol version, e.g. [1]")
        }
        self.versions = []
        for (n, v) in versions.enumerated() {
            guard let i = v.intValue, (0...255).contains(i) else {
                throw .invalid("versions.\(n)", "versions.\(n) must be an integer from 0 to 255")
            }
            self.versions.append(Int(i))
        }
        compression = []
        for (n, c) in (try r.optionalArray("compression", maxCount: 16) ?? []).enumerated() {
            guard let s = c.stringValue else {
                throw .invalid("compression.\(n)", "compression.\(n) must be a string such as \"zlib\"")
            }
            compression.append(s)
        }
        client = try r.optionalString("client", maxLength: 256) ?? ""
        token = try r.optionalString("token", maxLength: 4096)
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = [
            "versions": .array(versions.map { .int(Int64($0)) }),
            "compression": .array(compression.map { .string($0) }),
            "client": .string(client),
        ]
        if let token { o["token"] = .string(token) }
        return o
    }
}

/// `HELLO` response: what the server chose and every limit it enforces.
public struct HelloResponse: WireMessage, Equatable {
    public var version: Int
    /// `"zlib"` or `"none"`.
    public var compression: String
    /// JSON parts at least this long are compressed (when compression is on and it pays).
    public var compressionThreshold: Int
    public var limits: Limits
    /// The server's software version, e.g. `larder-server 0.1.0`.
    public var server: String
    public var authRequired: Bool
    /// The role of the token presented (`read`, `write` or `admin`), on a server that requires one.
    public var role: String?
    /// The only collections the token may touch, when it is limited to some.
    public var collections: [String]?
    /// True when the connection runs over TLS (absent otherwise).
    public var tls: Bool?

    public init(version: Int, compression: String, compressionThreshold: Int, limits: Limits, server: String,
                authRequired: Bool) {
        self.version = version
        self.compression = compression
        self.compressionThreshold = compressionThreshold
        self.limits = limits
        self.server = server
        self.authRequired = authRequired
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        version = Int(try r.int("version", range: 0...255))
        compression = try r.string("compression")
        compressionThreshold = Int(try r.int("compressionThreshold", range: 0...Int64(Int32.max)))
        limits = try Limits(json: try r.object("limits"))
        server = try r.string("server")
        authRequired = try r.optionalBool("authRequired") ?? false
        role = try r.optionalString("role")
        collections = try r.optionalArray("collections", maxCount: 1 << 16)?.compactMap(\.stringValue)
        tls = try r.optionalBool("tls")
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "version": .int(Int64(version)), "compression": .string(compression),
            "compressionThreshold": .int(Int64(compressionThreshold)), "limits": .object(limits.json),
            "server": .string(server), "authRequired": .bool(authRequired),
        ]
        if let role { object["role"] = .string(role) }
        if let collections { object["collections"] = .array(collections.map { .string($0) }) }
        if let tls { object["tls"] = .bool(tls) }
        return object
    }
}

/// A request or response with no fields (`PING`, `COLLECTIONS`, `STATS` requests).
public struct EmptyMessage: WireMessage, Equatable {
    public init() {}
    public init(json: JSONObject) throws(LarderError) { try FieldReader(json).finish() }
    public var json: JSONObject { [:] }
}

// MARK: - Documents

/// Collection names (Protocol.md section 3): a letter followed by up to 63 letters, digits, `_` or `-`.
public enum CollectionName {
    /// INVALID_ARGUMENT naming `field` unless `name` is a collection name.
    public static func validate(_ name: String, field: String = "collection") throws(LarderError) {
        let bytes = Array(name.utf8)
        func isLetter(_ b: UInt8) -> Bool { (b >= 65 && b <= 90) || (b >= 97 && b <= 122) }
        guard let first = bytes.first, isLetter(first), bytes.count <= 64,
            bytes.allSatisfy({ isLetter($0) || ($0 >= 48 && $0 <= 57) || $0 == 95 || $0 == 45 })
        else {
            throw LarderError(
                .invalidArgument,
                "a collection name is a letter followed by up to 63 letters, digits, '_' or '-'", field: field)
        }
    }
}

private func collectionName(_ r: inout FieldReader) throws(LarderError) -> String {
    try r.string("collection", maxLength: 256)
}

private func expectedRev(_ r: inout FieldReader) throws(LarderError) -> Int64? {
    try r.optionalInt("rev", range: 1...Int64.max)
}

/// `CREATE`: store a new document; the server assigns the id unless the client supplies one.
public struct CreateRequest: WireMessage, Equatable {
    public var collection: String
    public var id: UUID?
    public var data: JSONObject

    public init(collection: String, id: UUID? = nil, data: JSONObject) {
        self.collection = collection
        self.id = id
        self.data = data
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.optionalUUID("id")
        data = try r.object("data")
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection)]
        if let id { o["id"] = .string(id.wireString) }
        o["data"] = .object(data)
        return o
    }
}

/// `GET`, `BLOB_GET`-style requests that name one document.
public struct GetRequest: WireMessage, Equatable {
    public var collection: String
    public var id: UUID

    public init(collection: String, id: UUID) {
        self.collection = collection
        self.id = id
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        try r.finish()
    }

    public var json: JSONObject { ["collection": .string(collection), "id": .string(id.wireString)] }
}

/// `GET_MANY`: up to 1,000 documents by id.
public struct GetManyRequest: WireMessage, Equatable {
    public var collection: String
    public var ids: [UUID]

    public init(collection: String, ids: [UUID]) {
        self.collection = collection
        self.ids = ids
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        ids = try r.uuidArray("ids", maxCount: maxGetManyIDs)
        try r.finish()
    }

    public var json: JSONObject {
        ["collection": .string(collection), "ids": .array(ids.map { .string($0.wireString) })]
    }
}

/// `REPLACE`: the document's data becomes `data`; `rev`, when given, must be the current revision.
public struct ReplaceRequest: WireMessage, Equatable {
    public var collection: String
    public var id: UUID
    public var data: JSONObject
    public var rev: Int64?

    public init(collection: String, id: UUID, data: JSONObject, rev: Int64? = nil) {
        self.collection = collection
        self.id = id
        self.data = data
        self.rev = rev
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        data = try r.object("data")
        rev = try expectedRev(&r)
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "id": .string(id.wireString), "data": .object(data)]
        if let rev { o["rev"] = .int(rev) }
        return o
    }
}

/// `PATCH`: an RFC 7396 merge patch (null removes a member, objects merge, anything else replaces).
public struct PatchRequest: WireMessage, Equatable {
    public var collection: String
    public var id: UUID
    public var patch: JSONObject
    public var rev: Int64?

    public init(collection: String, id: UUID, patch: JSONObject, rev: Int64? = nil) {
        self.collection = collection
        self.id = id
        self.patch = patch
        self.rev = rev
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        patch = try r.object("patch")
        rev = try expectedRev(&r)
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "id": .string(id.wireString), "patch": .object(patch)]
        if let rev { o["rev"] = .int(rev) }
        return o
    }
}

/// `DELETE`: removes a document and the blobs attached to it.
public struct DeleteRequest: WireMessage, Equatable {
    public var collection: String
    public var id: UUID
    public var rev: Int64?

    public init(collection: String, id: UUID, rev: Int64? = nil) {
        self.collection = collection
        self.id = id
        self.rev = rev
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        rev = try expectedRev(&r)
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "id": .string(id.wireString)]
        if let rev { o["rev"] = .int(rev) }
        return o
    }
}

/// `DELETE` response.
public struct DeleteResponse: WireMessage, Equatable {
    public var id: UUID
    /// The revision the document had when it was deleted.
    public var rev: Int64
    public var blobsDeleted: Int

    public init(id: UUID, rev: Int64, blobsDeleted: Int) {
        self.id = id
        self.rev = rev
        self.blobsDeleted = blobsDeleted
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
        rev = try r.int("rev", range: 0...Int64.max)
        blobsDeleted = Int(try r.int("blobsDeleted", range: 0...Int64.max))
    }

    public var json: JSONObject {
        ["id": .string(id.wireString), "rev": .int(rev), "blobsDeleted": .int(Int64(blobsDeleted))]
    }
}

/// `LIST`: documents in creation order, a page at a time.
public struct ListRequest: WireMessage, Equatable {
    public var collection: String
    public var limit: Int
    public var cursor: String?

    public init(collection: String, limit: Int = defaultPageLimit, cursor: String? = nil) {
        self.collection = collection
        self.limit = limit
        self.cursor = cursor
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        limit = Int(try r.optionalInt("limit", range: 1...Int64(maxPageLimit)) ?? Int64(defaultPageLimit))
        cursor = try r.optionalString("cursor", maxLength: 4096)
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "limit": .int(Int64(limit))]
        if let cursor { o["cursor"] = .string(cursor) }
        return o
    }
}

/// A stored document as a client reads it: the envelope plus the app's data.
public struct Record: WireMessage, Equatable {
    public var id: UUID
    public var rev: Int64
    /// When the document was created (millisecond precision, server clock).
    public var createdAt: Date {
        get { Timestamp.date(createdAtMs) }
        set { createdAtMs = Timestamp.milliseconds(newValue) }
    }
    /// When the document was last written (millisecond precision, server clock).
    public var updatedAt: Date {
        get { Timestamp.date(updatedAtMs) }
        set { updatedAtMs = Timestamp.milliseconds(newValue) }
    }
    /// `createdAt` in milliseconds since 1970, UTC, as the wire carries it.
    package var createdAtMs: Int64
    /// `updatedAt` in milliseconds since 1970, UTC, as the wire carries it.
    package var updatedAtMs: Int64
    public var data: JSONObject

    /// A record with this envelope and data; the times are kept to the millisecond, as the wire carries them.
    public init(id: UUID, rev: Int64, createdAt: Date, updatedAt: Date, data: JSONObject) {
        self.init(
            id: id, rev: rev, createdAtMs: Timestamp.milliseconds(createdAt),
            updatedAtMs: Timestamp.milliseconds(updatedAt), data: data)
    }

    /// A record with its times in milliseconds since 1970.
    package init(id: UUID, rev: Int64, createdAtMs: Int64, updatedAtMs: Int64, data: JSONObject) {
        self.id = id
        self.rev = rev
        self.createdAtMs = createdAtMs
        self.updatedAtMs = updatedAtMs
        self.data = data
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
        rev = try r.int("rev", range: 0...Int64.max)
        createdAtMs = try Record.timestamp(&r, "createdAt")
        updatedAtMs = try Record.timestamp(&r, "updatedAt")
        data = try r.object("data")
    }

    private static func timestamp(_ r: inout FieldReader, _ name: String) throws(LarderError) -> Int64 {
        let text = try r.string(name, maxLength: 64)
        guard let ms = Timestamp.parse(text) else {
            throw .invalid(name, "\(name) must be an ISO 8601 UTC timestamp such as 2026-11-30T00:26:28.123Z")
        }
        return ms
    }

    public var json: JSONObject {
        [
            "id": .string(id.wireString), "rev": .int(rev), "createdAt": .string(Timestamp.string(createdAtMs)),
            "updatedAt": .string(Timestamp.string(updatedAtMs)), "data": .object(data),
        ]
    }
}

/// `GET_MANY` response: the records found, in request order, and the ids that were not.
public struct GetManyResponse: WireMessage, Equatable {
    public var records: [Record]
    public var missing: [UUID]

    public init(records: [Record], missing: [UUID]) {
        self.records = records
        self.missing = missing
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        records = try Record.array(&r, "records")
        missing = try r.uuidArray("missing", maxCount: Int.max)
    }

    public var json: JSONObject {
        ["records": .array(records.map { .object($0.json) }), "missing": .array(missing.map { .string($0.wireString) })]
    }
}

extension Record {
    static func array(_ r: inout FieldReader, _ name: String) throws(LarderError) -> [Record] {
        var records: [Record] = []
        for (n, item) in (try r.optionalArray(name, maxCount: Int.max) ?? []).enumerated() {
            guard case .object(let o) = item else { throw .invalid("\(name).\(n)", "\(name).\(n) must be an object") }
            records.append(try Record(json: o))
        }
        return records
    }
}

/// A page of records (`LIST`, `SEARCH`): pass `nextCursor` back to get the next page; nil means the last page.
public struct PageResponse: WireMessage, Equatable {
    public var records: [Record]
    public var nextCursor: String?

    public init(records: [Record], nextCursor: String?) {
        self.records = records
        self.nextCursor = nextCursor
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        records = try Record.array(&r, "records")
        // As long as the server makes them (a sort on a long text field makes long cursors).
        nextCursor = try r.optionalString("nextCursor", maxLength: SearchQuery.maxCursorBytes)
    }

    public var json: JSONObject {
        var o: JSONObject = ["records": .array(records.map { .object($0.json) })]
        o["nextCursor"] = nextCursor.map { .string($0) } ?? .null
        return o
    }
}

/// `COUNT` response.
public struct CountResponse: WireMessage, Equatable {
    public var count: Int
    public init(count: Int) { self.count = count }
    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        count = Int(try r.int("count", range: 0...Int64.max))
    }
    public var json: JSONObject { ["count": .int(Int64(count))] }
}

// MARK: - Collections

/// `DROP_COLLECTION` request.
public struct DropCollectionRequest: WireMessage, Equatable {
    public var collection: String
    public init(collection: String) { self.collection = collection }
    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        try r.finish()
    }
    public var json: JSONObject { ["collection": .string(collection)] }
}

/// `DROP_COLLECTION` response: what was removed.
public struct DropCollectionResponse: WireMessage, Equatable {
    public var collection: String
    public var documents: Int
    public var blobs: Int

    public init(collection: String, documents: Int, blobs: Int) {
        self.collection = collection
        self.documents = documents
        self.blobs = blobs
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection")
        documents = Int(try r.int("documents", range: 0...Int64.max))
        blobs = Int(try r.int("blobs", range: 0...Int64.max))
    }

    public var json: JSONObject {
        ["collection": .string(collection), "documents": .int(Int64(documents)), "blobs": .int(Int64(blobs))]
    }
}

/// `COLLECTIONS` response.
public struct CollectionsResponse: WireMessage, Equatable {
    public struct Entry: Sendable, Equatable {
        public var name: String
        public var count: Int
        public init(name: String, count: Int) {
            self.name = name
            self.count = count
        }
    }
    public var collections: [Entry]

    public init(collections: [Entry]) { self.collections = collections }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collections = []
        for (n, item) in (try r.optionalArray("collections", maxCount: Int.max) ?? []).enumerated() {
            guard case .object(let o) = item else { throw .invalid("collections.\(n)", "must be an object") }
            var e = FieldReader(o, path: "collections.\(n)")
            collections.append(Entry(name: try e.string("name"), count: Int(try e.int("count", range: 0...Int64.max))))
        }
    }

    public var json: JSONObject {
        ["collections": .array(collections.map { .object(["name": .string($0.name), "count": .int(Int64($0.count))]) })]
    }
}

// MARK: - Blobs

/// A document that a blob is attached to; deleting the document deletes the blob.
public struct BlobAttachment: Sendable, Hashable {
    public var collection: String
    public var id: UUID

    public init(collection: String, id: UUID) {
        self.collection = collection
        self.id = id
    }

    init(json: JSONObject, path: String) throws(LarderError) {
        var r = FieldReader(json, path: path)
        collection = try r.string("collection", maxLength: 256)
        id = try r.uuid("id")
        try r.finish()
    }

    public var json: JSONObject { ["collection": .string(collection), "id": .string(id.wireString)] }
}

/// `BLOB_PUT` request; the JPEG bytes travel in the frame's binary part.
public struct BlobPutRequest: WireMessage, Equatable {
    public var id: UUID?
    /// Lowercase hex SHA-256 the server checks the bytes against.
    public var sha256: String?
    public var attach: BlobAttachment?

    public init(id: UUID? = nil, sha256: String? = nil, attach: BlobAttachment? = nil) {
        self.id = id
        self.sha256 = sha256
        self.attach = attach
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.optionalUUID("id")
        sha256 = try r.optionalString("sha256", maxLength: 64)
        try checkSHA256Member(sha256, field: "sha256")
        attach = try r.optionalObject("attach").map { (o) throws(LarderError) in try BlobAttachment(json: o, path: "attach") }
        try r.finish()
    }

    public var json: JSONObject {
        var o = JSONObject()
        if let id { o["id"] = .string(id.wireString) }
        if let sha256 { o["sha256"] = .string(sha256) }
        if let attach { o["attach"] = .object(attach.json) }
        return o
    }
}

/// `BLOB_GET`, `BLOB_HEAD` and `BLOB_DELETE` requests.
public struct BlobIDRequest: WireMessage, Equatable {
    public var id: UUID
    public init(id: UUID) { self.id = id }
    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
        try r.finish()
    }
    public var json: JSONObject { ["id": .string(id.wireString)] }
}

/// `BLOB_GET` request: the blob; with `offset` and/or `length` only those bytes; or with `thumbnail` a thumbnail of it
/// whose longer side is that many pixels (one of the sizes HELLO announces in `limits.thumbnailSizes`). A thumbnail
/// and a range cannot be asked together.
public struct BlobGetRequest: WireMessage, Equatable {
    public var id: UUID
    /// First byte of the range (0 when only `length` is given).
    public var offset: Int64?
    /// Bytes in the range (to the end when only `offset` is given).
    public var length: Int64?
    public var thumbnail: Int?

    public init(id: UUID, offset: Int64? = nil, length: Int64? = nil, thumbnail: Int? = nil) {
        self.id = id
        self.offset = offset
        self.length = length
        self.thumbnail = thumbnail
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
        offset = try r.optionalInt("offset", range: 0...Int64.max)
        length = try r.optionalInt("length", range: 1...Int64.max)
        // Any integer: the server refuses a size it does not make (0 and negative ones included) naming those it
        // does (`limits.thumbnailSizes`), which only it knows.
        thumbnail = try r.optionalInt("thumbnail", range: Int64.min...Int64.max).map { Int(clamping: $0) }
        try r.finish()
        if thumbnail != nil, offset != nil || length != nil {
            throw LarderError(
                .invalidArgument, "a thumbnail is sent whole: ask for `thumbnail` or for a range, not both",
                field: "thumbnail")
        }
    }

    public var isRange: Bool { offset != nil || length != nil }

    public var json: JSONObject {
        var o: JSONObject = ["id": .string(id.wireString)]
        if let offset { o["offset"] = .int(offset) }
        if let length { o["length"] = .int(length) }
        if let thumbnail { o["thumbnail"] = .int(Int64(thumbnail)) }
        return o
    }
}

/// What a `BLOB_GET` with `thumbnail` answers besides the blob's own metadata: the thumbnail's size requested, its
/// width and height as shown (EXIF orientation applied) and its length in bytes.
public struct ThumbnailInfo: Sendable, Equatable {
    /// The size asked for: the longer side, or the photo's own when that is smaller (photos are never enlarged).
    public var maxSide: Int
    public var width: Int
    public var height: Int
    public var size: Int64

    public init(maxSide: Int, width: Int, height: Int, size: Int64) {
        self.maxSide = maxSide
        self.width = width
        self.height = height
        self.size = size
    }

    init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json, path: "thumbnail")
        maxSide = Int(try r.int("maxSide", range: 1...65535))
        width = Int(try r.int("width", range: 1...65535))
        height = Int(try r.int("height", range: 1...65535))
        size = try r.int("size", range: 0...Int64.max)
    }

    public var json: JSONObject {
        [
            "maxSide": .int(Int64(maxSide)), "width": .int(Int64(width)), "height": .int(Int64(height)),
            "size": .int(size),
        ]
    }
}

/// A blob's metadata, as `BLOB_PUT`, `BLOB_GET`, `BLOB_HEAD` and `BLOB_LIST` answer it.
public struct BlobInfo: WireMessage, Equatable {
    public var id: UUID
    public var size: Int64
    public var sha256: String
    public var contentType: String
    public var width: Int
    public var height: Int
    /// When the blob was stored (millisecond precision, server clock).
    public var createdAt: Date {
        get { Timestamp.date(createdAtMs) }
        set { createdAtMs = Timestamp.milliseconds(newValue) }
    }
    /// `createdAt` in milliseconds since 1970, UTC, as the wire and the stores carry it.
    package var createdAtMs: Int64
    public var attachedTo: BlobAttachment?
    /// Set in the answer to a `BLOB_GET` with `thumbnail`: the thumbnail the binary part holds (the other members
    /// still describe the stored photo).
    public var thumbnail: ThumbnailInfo?

    /// A blob's metadata; `createdAt` is kept to the millisecond, as the wire carries it.
    public init(id: UUID, size: Int64, sha256: String, contentType: String, width: Int, height: Int,
                createdAt: Date, attachedTo: BlobAttachment?) {
        self.init(
            id: id, size: size, sha256: sha256, contentType: contentType, width: width, height: height,
            createdAtMs: Timestamp.milliseconds(createdAt), attachedTo: attachedTo)
    }

    /// A blob's metadata with its creation time in milliseconds since 1970.
    package init(id: UUID, size: Int64, sha256: String, contentType: String, width: Int, height: Int,
                 createdAtMs: Int64, attachedTo: BlobAttachment?) {
        self.id = id
        self.size = size
        self.sha256 = sha256
        self.contentType = contentType
        self.width = width
        self.height = height
        self.createdAtMs = createdAtMs
        self.attachedTo = attachedTo
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
        size = try r.int("size", range: 0...Int64.max)
        sha256 = try r.string("sha256")
        contentType = try r.string("contentType")
        width = Int(try r.int("width", range: 0...65535))
        height = Int(try r.int("height", range: 0...65535))
        guard let ms = Timestamp.parse(try r.string("createdAt")) else {
            throw .invalid("createdAt", "createdAt must be an ISO 8601 UTC timestamp")
        }
        createdAtMs = ms
        attachedTo = try r.optionalObject("attachedTo").map { (o) throws(LarderError) in
            try BlobAttachment(json: o, path: "attachedTo")
        }
        thumbnail = try r.optionalObject("thumbnail").map { (o) throws(LarderError) in try ThumbnailInfo(json: o) }
    }

    public var json: JSONObject {
        var o: JSONObject = [
            "id": .string(id.wireString), "size": .int(size), "sha256": .string(sha256),
            "contentType": .string(contentType), "width": .int(Int64(width)), "height": .int(Int64(height)),
            "createdAt": .string(Timestamp.string(createdAtMs)),
        ]
        o["attachedTo"] = attachedTo.map { .object($0.json) } ?? .null
        if let thumbnail { o["thumbnail"] = .object(thumbnail.json) }
        return o
    }
}

/// `BLOB_LIST` request: blobs in id order, optionally only those attached to one document.
public struct BlobListRequest: WireMessage, Equatable {
    public var limit: Int
    public var cursor: String?
    public var attachedTo: BlobAttachment?

    public init(limit: Int = defaultPageLimit, cursor: String? = nil, attachedTo: BlobAttachment? = nil) {
        self.limit = limit
        self.cursor = cursor
        self.attachedTo = attachedTo
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        limit = Int(try r.optionalInt("limit", range: 1...Int64(maxPageLimit)) ?? Int64(defaultPageLimit))
        cursor = try r.optionalString("cursor", maxLength: 4096)
        attachedTo = try r.optionalObject("attachedTo").map { (o) throws(LarderError) in
            try BlobAttachment(json: o, path: "attachedTo")
        }
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["limit": .int(Int64(limit))]
        if let cursor { o["cursor"] = .string(cursor) }
        if let attachedTo { o["attachedTo"] = .object(attachedTo.json) }
        return o
    }
}

/// `BLOB_LIST` response.
public struct BlobListResponse: WireMessage, Equatable {
    public var blobs: [BlobInfo]
    public var nextCursor: String?

    public init(blobs: [BlobInfo], nextCursor: String?) {
        self.blobs = blobs
        self.nextCursor = nextCursor
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        blobs = []
        for (n, item) in (try r.optionalArray("blobs", maxCount: Int.max) ?? []).enumerated() {
            guard case .object(let o) = item else { throw .invalid("blobs.\(n)", "blobs.\(n) must be an object") }
            blobs.append(try BlobInfo(json: o))
        }
        nextCursor = try r.optionalString("nextCursor")
    }

    public var json: JSONObject {
        var o: JSONObject = ["blobs": .array(blobs.map { .object($0.json) })]
        o["nextCursor"] = nextCursor.map { .string($0) } ?? .null
        return o
    }
}

/// `BLOB_DELETE` response.
public struct BlobDeleteResponse: WireMessage, Equatable {
    public var id: UUID
    public init(id: UUID) { self.id = id }
    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
    }
    public var json: JSONObject { ["id": .string(id.wireString), "deleted": true] }
}

// MARK: - Search

/// `SEARCH`: `{"collection", "filter"?, "text"?, "sort"?, "limit"?, "cursor"?}` (see `SearchQuery`).
public struct SearchRequest: WireMessage, Equatable {
    public var collection: String
    public var query: SearchQuery

    public init(collection: String, query: SearchQuery) {
        self.collection = collection
        self.query = query
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        query = try SearchQuery(json: json)
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection)]
        for (key, value) in query.json { o[key] = value }
        return o
    }
}

private func optionalFilter(_ r: inout FieldReader) throws(LarderError) -> Filter? {
    try r.optionalJSON("filter").map { (value) throws(LarderError) in try Filter(json: value) }
}

private func optionalText(_ r: inout FieldReader) throws(LarderError) -> TextQuery? {
    try r.optionalJSON("text").map { (value) throws(LarderError) in try TextQuery(json: value) }
}

/// `COUNT`: how many records match `filter` and `text`.
public struct CountRequest: WireMessage, Equatable {
    public var collection: String
    public var filter: Filter?
    public var text: TextQuery?

    public init(collection: String, filter: Filter? = nil, text: TextQuery? = nil) {
        self.collection = collection
        self.filter = filter
        self.text = text
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        filter = try optionalFilter(&r)
        text = try optionalText(&r)
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection)]
        if let filter { o["filter"] = filter.json }
        if let text { o["text"] = text.json }
        return o
    }
}

/// `GROUP`: sections by the value of `field`, each with its count and first `perGroup` records (default 10).
public struct GroupRequest: WireMessage, Equatable {
    public static let defaultPerGroup = 10
    public static let maxPerGroup = 100

    public var collection: String
    public var field: FieldPath
    public var filter: Filter?
    public var text: TextQuery?
    public var perGroup: Int

    public init(collection: String, field: FieldPath, filter: Filter? = nil, text: TextQuery? = nil,
                perGroup: Int = GroupRequest.defaultPerGroup) {
        self.collection = collection
        self.field = field
        self.filter = filter
        self.text = text
        self.perGroup = perGroup
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        field = try FieldPath(try r.string("field", maxLength: FieldPath.maxBytes), field: "field")
        filter = try optionalFilter(&r)
        text = try optionalText(&r)
        perGroup = Int(try r.optionalInt("perGroup", range: 0...Int64(GroupRequest.maxPerGroup))
            ?? Int64(GroupRequest.defaultPerGroup))
        try r.finish()
    }

    public var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "field": .string(field.description)]
        if let filter { o["filter"] = filter.json }
        if let text { o["text"] = text.json }
        o["perGroup"] = .int(Int64(perGroup))
        return o
    }
}

/// `GROUP` response: sections in the order of an ascending sort on the field (Protocol.md §5.2); `key` is null for
/// records without the field.
public struct GroupResponse: WireMessage, Equatable {
    public struct Section: Sendable, Equatable {
        public var key: JSON
        public var count: Int
        public var records: [Record]
        public init(key: JSON, count: Int, records: [Record]) {
            self.key = key
            self.count = count
            self.records = records
        }
    }
    public var groups: [Section]

    public init(groups: [Section]) { self.groups = groups }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        groups = []
        for (n, item) in (try r.optionalArray("groups", maxCount: Int.max) ?? []).enumerated() {
            guard case .object(let o) = item else { throw .invalid("groups.\(n)", "groups.\(n) must be an object") }
            var g = FieldReader(o, path: "groups.\(n)")
            let key = g.optionalJSON("key") ?? .null
            let count = Int(try g.int("count", range: 0...Int64.max))
            groups.append(Section(key: key, count: count, records: try Record.array(&g, "records")))
        }
    }

    public var json: JSONObject {
        [
            "groups": .array(groups.map {
                .object(["key": $0.key, "count": .int(Int64($0.count)), "records": .array($0.records.map { .object($0.json) })])
            })
        ]
    }
}

/// `INDEX`: declare an expression index on a field path of a collection.
public struct IndexRequest: WireMessage, Equatable {
    public var collection: String
    public var field: FieldPath

    public init(collection: String, field: FieldPath) {
        self.collection = collection
        self.field = field
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        field = try FieldPath(try r.string("field", maxLength: FieldPath.maxBytes), field: "field")
        try r.finish()
    }

    public var json: JSONObject { ["collection": .string(collection), "field": .string(field.description)] }
}

/// `INDEX` response: the index's name and whether this call created it.
public struct IndexResponse: WireMessage, Equatable {
    public var name: String
    public var created: Bool
    public init(name: String, created: Bool) {
        self.name = name
        self.created = created
    }
    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        name = try r.string("name")
        created = try r.optionalBool("created") ?? false
    }
    public var json: JSONObject { ["name": .string(name), "created": .bool(created)] }
}

// MARK: - Change feed

/// `WATCH`: subscribe to the committed changes of one collection (or all), optionally filtered, optionally replaying
/// what happened after `since`.
public struct WatchRequest: WireMessage, Equatable {
    /// The collection to follow; nil follows every collection.
    public var collection: String?
    /// Only changes whose document matches (the SEARCH filter language, evaluated on the document as written).
    public var filter: Filter?
    /// Replay the changes after this sequence number from the change log before following live ones.
    public var since: Int64?
    /// Leave `record` out of the events (ids, revisions and sequence numbers only).
    public var idsOnly: Bool

    /// A subscription request; every member is optional.
    public init(collection: String? = nil, filter: Filter? = nil, since: Int64? = nil, idsOnly: Bool = false) {
        self.collection = collection
        self.filter = filter
        self.since = since
        self.idsOnly = idsOnly
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.optionalString("collection", maxLength: 256)
        filter = try r.optionalJSON("filter").map { (value) throws(LarderError) in try Filter(json: value) }
        since = try r.optionalInt("since", range: 0...Int64.max)
        idsOnly = try r.optionalBool("idsOnly") ?? false
        try r.finish()
    }

    public var json: JSONObject {
        var o = JSONObject()
        if let collection { o["collection"] = .string(collection) }
        if let filter { o["filter"] = filter.json }
        if let since { o["since"] = .int(since) }
        if idsOnly { o["idsOnly"] = true }
        return o
    }
}

/// `WATCH` response: the subscription's id (the request id of its event frames) and the last committed sequence
/// number when it started.
public struct WatchResponse: WireMessage, Equatable {
    /// Chosen by the server, unique on its connection; events carry it as their request id.
    public var subscription: UInt32
    /// The last committed change when the subscription started; live events follow it.
    public var seq: Int64

    /// A WATCH answer.
    public init(subscription: UInt32, seq: Int64) {
        self.subscription = subscription
        self.seq = seq
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        subscription = UInt32(try r.int("subscription", range: 1...Int64(UInt32.max)))
        seq = try r.int("seq", range: 0...Int64.max)
    }

    public var json: JSONObject { ["subscription": .int(Int64(subscription)), "seq": .int(seq)] }
}

/// `UNWATCH` request, and (with `ended: true`) its response.
public struct UnwatchRequest: WireMessage, Equatable {
    /// The id a WATCH answered.
    public var subscription: UInt32

    /// An UNWATCH of `subscription`.
    public init(subscription: UInt32) { self.subscription = subscription }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        subscription = UInt32(try r.int("subscription", range: 1...Int64(UInt32.max)))
        try r.finish()
    }

    public var json: JSONObject { ["subscription": .int(Int64(subscription))] }
}

/// `UNWATCH` response: no event of the subscription follows it.
public struct UnwatchResponse: WireMessage, Equatable {
    /// The subscription that ended.
    public var subscription: UInt32

    /// An UNWATCH answer.
    public init(subscription: UInt32) { self.subscription = subscription }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        subscription = UInt32(try r.int("subscription", range: 1...Int64(UInt32.max)))
    }

    public var json: JSONObject { ["subscription": .int(Int64(subscription)), "ended": true] }
}

/// What an event reports. A struct rather than an enum so that a client keeps working when a later server adds a
/// kind (Protocol.md: clients ignore kinds they do not know).
public struct ChangeKind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A document was created; the event carries the record.
    public static let create = ChangeKind(rawValue: "create")
    /// A document's data was replaced; the event carries the new record.
    public static let replace = ChangeKind(rawValue: "replace")
    /// A document was patched; the event carries the new record.
    public static let patch = ChangeKind(rawValue: "patch")
    /// A document was deleted (with its blobs); `rev` is the revision it had.
    public static let delete = ChangeKind(rawValue: "delete")
    /// A blob was attached to the document (`BLOB_PUT` with `attach`); the event carries the blob.
    public static let blobAttach = ChangeKind(rawValue: "blobAttach")
    /// A blob attached to the document was deleted (`BLOB_DELETE`); the event carries the blob.
    public static let blobDelete = ChangeKind(rawValue: "blobDelete")
    /// The collection was dropped: every document in it is gone.
    public static let drop = ChangeKind(rawValue: "drop")
    /// Control: `since` is older than the change log keeps; reload, then follow the events after `seq`.
    public static let resync = ChangeKind(rawValue: "resync")
    /// Control: the subscriber fell behind its buffer and the subscription ended; WATCH again with `since: seq`.
    public static let gap = ChangeKind(rawValue: "gap")

    /// The kinds that record a committed write (the rest are control events).
    public static let changes: [ChangeKind] = [.create, .replace, .patch, .delete, .blobAttach, .blobDelete, .drop]

    /// True for `resync` and `gap`, which report on the subscription rather than on a write.
    public var isControl: Bool { self == .resync || self == .gap }

    public var description: String { rawValue }
}

/// One pushed `EVENT` frame's JSON part: a committed change, or a control event (`resync`, `gap`).
///
/// Which members are present depends on `kind` (Protocol.md, section 5.7): `collection` and `time` on every change,
/// `id` and `rev` on document and blob changes, `record` on create / replace / patch unless the subscription asked
/// for ids only, `blob` on blob changes, `oldestSeq` on resync, `matches: false` on a change that took the document
/// out of the subscription's filter.
public struct ChangeEvent: WireMessage, Equatable {
    /// The subscription the event belongs to (also the frame's request id).
    public var subscription: UInt32
    /// The change's sequence number. For `resync`, the position live events follow; for `gap`, the last change the
    /// subscription had processed (pass it as `since` to resume).
    public var seq: Int64
    public var kind: ChangeKind
    /// The collection written to.
    public var collection: String?
    /// The document written to (for blob kinds, the document the blob is attached to).
    public var id: UUID?
    /// The document's revision after the write (for `delete`, the revision it had).
    public var rev: Int64?
    /// When the write was applied (millisecond precision, server clock).
    public var time: Date? {
        get { timeMs.map(Timestamp.date) }
        set { timeMs = newValue.map(Timestamp.milliseconds) }
    }
    /// `time` in milliseconds since 1970, UTC, as the wire carries it.
    package var timeMs: Int64?
    /// The document after the write.
    public var record: Record?
    /// The blob attached or deleted.
    public var blob: BlobInfo?
    /// For `resync`: the oldest change the log still holds.
    public var oldestSeq: Int64?
    /// False when the write made the document stop matching the subscription's filter: a filtered view drops it.
    public var matches: Bool
    /// For a `gap` that is not about falling behind: why the subscription ended (PERMISSION_DENIED when a reload of
    /// the server's token file took the subscription's collections away from its token).
    public var error: LarderError?

    /// An event; members that do not apply to `kind` stay nil.
    public init(
        subscription: UInt32, seq: Int64, kind: ChangeKind, collection: String? = nil, id: UUID? = nil,
        rev: Int64? = nil, time: Date? = nil, record: Record? = nil, blob: BlobInfo? = nil, oldestSeq: Int64? = nil,
        matches: Bool = true, error: LarderError? = nil
    ) {
        self.matches = matches
        self.error = error
        self.subscription = subscription
        self.seq = seq
        self.kind = kind
        self.collection = collection
        self.id = id
        self.rev = rev
        self.timeMs = time.map(Timestamp.milliseconds)
        self.record = record
        self.blob = blob
        self.oldestSeq = oldestSeq
    }

    public init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        subscription = UInt32(try r.int("subscription", range: 1...Int64(UInt32.max)))
        seq = try r.int("seq", range: 0...Int64.max)
        kind = ChangeKind(rawValue: try r.string("kind", maxLength: 64))
        collection = try r.optionalString("collection")
        id = try r.optionalUUID("id")
        rev = try r.optionalInt("rev", range: 0...Int64.max)
        if let text = try r.optionalString("time", maxLength: 64) {
            guard let ms = Timestamp.parse(text) else {
                throw .invalid("time", "time must be an ISO 8601 UTC timestamp such as 2026-11-30T00:26:28.123Z")
            }
            timeMs = ms
        } else {
            timeMs = nil
        }
        record = try r.optionalObject("record").map { (o) throws(LarderError) in try Record(json: o) }
        blob = try r.optionalObject("blob").map { (o) throws(LarderError) in try BlobInfo(json: o) }
        oldestSeq = try r.optionalInt("oldestSeq", range: 0...Int64.max)
        matches = try r.optionalBool("matches") ?? true
        error = try r.optionalObject("error").map { object in
            let code = object["code"]?.intValue.flatMap { UInt16(exactly: $0) } ?? Status.internal.rawValue
            return LarderError(status: Status(rawValue: code), json: .object(object))
        }
    }

    public var json: JSONObject {
        var o: JSONObject = ["subscription": .int(Int64(subscription)), "seq": .int(seq), "kind": .string(kind.rawValue)]
        if let collection { o["collection"] = .string(collection) }
        if let id { o["id"] = .string(id.wireString) }
        if let rev { o["rev"] = .int(rev) }
        if let timeMs { o["time"] = .string(Timestamp.string(timeMs)) }
        if let record { o["record"] = .object(record.json) }
        if let blob { o["blob"] = .object(blob.json) }
        if let oldestSeq { o["oldestSeq"] = .int(oldestSeq) }
        if !matches { o["matches"] = false }
        if let error { o["error"] = error.json }
        return o
    }
}
