import Foundation

// Every message below is a struct with the same parts (stored fields, a public
// memberwise init, `init(json:)`, `json`), one per request and answer of Protocol.md section 5, as are
// BackupMessages.swift, Query.swift's SearchQuery and the client's option and result structs that mirror them.
/// A request or response body that maps to and from its JSON part.
package protocol WireMessage: Sendable {
    /// Reads the message, rejecting missing, mistyped and unknown fields with INVALID_ARGUMENT.
    init(json: JSONObject) throws(LarderError)
    /// The JSON object sent on the wire.
    var json: JSONObject { get }
}

/// Protocol versions this implementation speaks.
package enum ProtocolVersions {
    package static let supported: [Int] = [1]
}

/// Largest number of ids in one GET_MANY.
public let maxGetManyIDs = 1000
/// Largest page (LIST, SEARCH, BLOB_LIST): one rule for every paged answer, the one `SearchQuery` enforces.
public let maxPageLimit = SearchQuery.maxLimit
/// The page size when a request names none.
public let defaultPageLimit = SearchQuery.defaultLimit

/// The name of the compression algorithm Larder knows.
package let zlibCompression = "zlib"

// MARK: - Handshake

/// `HELLO` request: what the client offers.
package struct HelloRequest: WireMessage, Equatable {
    package var versions: [Int]
    package var compression: [String]
    package var client: String
    package var token: String?
    /// An OpenID Connect ID token (a JWT) that signs the connection in as a user, in place of `token`.
    package var idToken: String?
    /// A session of an account Larder keeps (SIGN_IN's answer) that signs the connection in as its user, in place of
    /// `token` and `idToken`.
    package var session: String?

    /// The longest `idToken` read, in bytes (a provider's ID token is one or two kilobytes).
    package static let maxIDTokenBytes = 16 * 1024

    package init(versions: [Int] = ProtocolVersions.supported, compression: [String] = [zlibCompression],
                client: String, token: String? = nil, idToken: String? = nil, session: String? = nil) {
        self.versions = versions
        self.compression = compression
        self.client = client
        self.token = token
        self.idToken = idToken
        self.session = session
    }

    package init(json: JSONObject) throws(LarderError) {
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
        idToken = try r.optionalString("idToken", maxLength: HelloRequest.maxIDTokenBytes)
        session = try r.optionalString("session", maxLength: 256)
        if [token, idToken, session].compactMap({ $0 }).count > 1 {
            throw .invalid(
                session == nil ? "idToken" : "session",
                "give one of token (a role token), idToken (a user's ID token) or session (a user's session), not more")
        }
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = [
            "versions": .array(versions.map { .int(Int64($0)) }),
            "compression": .array(compression.map { .string($0) }),
            "client": .string(client),
        ]
        if let token { o["token"] = .string(token) }
        if let idToken { o["idToken"] = .string(idToken) }
        if let session { o["session"] = .string(session) }
        return o
    }
}

/// `HELLO` response: what the server chose and every limit it enforces.
public struct HelloResponse: WireMessage, Equatable {
    /// The protocol version the server chose (1).
    public var version: Int
    /// `"zlib"` or `"none"`.
    public var compression: String
    /// JSON parts at least this long are compressed (when compression is on and it pays).
    public var compressionThreshold: Int
    /// Every limit the server enforces on this connection.
    public var limits: Limits
    /// The server's software version, e.g. `larder-server 0.1.0`.
    public var server: String
    /// True when the server requires a token in HELLO.
    public var authRequired: Bool
    /// The role of the token presented (`read`, `write` or `admin`), on a server that requires one.
    public var role: String?
    /// The only collections the token may touch, when it is limited to some.
    public var collections: [String]?
    /// True when the connection runs over TLS (absent otherwise).
    public var tls: Bool?
    /// The user the connection is signed in as, when HELLO carried a valid ID token (absent otherwise).
    public var user: SignedInUser?

    /// A HELLO answer with these members; `role`, `collections` and `tls` start nil.
    public init(version: Int, compression: String, compressionThreshold: Int, limits: Limits, server: String,
                authRequired: Bool) {
        self.version = version
        self.compression = compression
        self.compressionThreshold = compressionThreshold
        self.limits = limits
        self.server = server
        self.authRequired = authRequired
    }

    package init(json: JSONObject) throws(LarderError) {
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
        if let user = try r.optionalObject("user") {
            var u = FieldReader(user, path: "user")
            self.user = SignedInUser(
                id: try u.string("id", maxLength: 4096),
                sessionExpiresAt: try u.optionalInt("sessionExpiresAt", range: 0...Int64.max))
        }
    }

    package var json: JSONObject {
        var object: JSONObject = [
            "version": .int(Int64(version)), "compression": .string(compression),
            "compressionThreshold": .int(Int64(compressionThreshold)), "limits": .object(limits.json),
            "server": .string(server), "authRequired": .bool(authRequired),
        ]
        if let role { object["role"] = .string(role) }
        if let collections { object["collections"] = .array(collections.map { .string($0) }) }
        if let tls { object["tls"] = .bool(tls) }
        if let user {
            var member: JSONObject = ["id": .string(user.id)]
            if let expiresAt = user.sessionExpiresAt { member["sessionExpiresAt"] = .int(expiresAt) }
            object["user"] = .object(member)
        }
        return object
    }
}

/// Who a connection is signed in as: HELLO's `user` member.
public struct SignedInUser: Sendable, Equatable {
    /// The user's id, the ID token's issuer, "|", then its subject: "https://accounts.google.com|1076915035000".
    public var id: String
    /// When the session HELLO presented expires, in milliseconds since 1970; nil for a user an ID token signed in.
    public var sessionExpiresAt: Int64?

    /// The user with the id `id`, signed in until `sessionExpiresAt` by a session.
    public init(id: String, sessionExpiresAt: Int64? = nil) {
        self.id = id
        self.sessionExpiresAt = sessionExpiresAt
    }
}

/// A request or response with no fields (`PING`, `COLLECTIONS`, `STATS` requests).
package struct EmptyMessage: WireMessage, Equatable {
    package init() {}
    package init(json: JSONObject) throws(LarderError) { try FieldReader(json).finish() }
    package var json: JSONObject { [:] }
}

// MARK: - Documents

/// Collection names (Protocol.md section 3): a letter followed by up to 63 letters, digits, `_` or `-`.
package enum CollectionName {
    /// INVALID_ARGUMENT naming `field` unless `name` is a collection name.
    package static func validate(_ name: String, field: String = "collection") throws(LarderError) {
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
package struct CreateRequest: WireMessage, Equatable {
    package var collection: String
    package var id: UUID?
    package var data: JSONObject

    package init(collection: String, id: UUID? = nil, data: JSONObject) {
        self.collection = collection
        self.id = id
        self.data = data
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.optionalUUID("id")
        data = try r.object("data")
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection)]
        if let id { o["id"] = .string(id.wireString) }
        o["data"] = .object(data)
        return o
    }
}

/// `GET`, `BLOB_GET`-style requests that name one document.
package struct GetRequest: WireMessage, Equatable {
    package var collection: String
    package var id: UUID
    /// The answer must reflect every change through this sequence number (the highest the client has seen).
    package var afterSeq: Int64?

    package init(collection: String, id: UUID, afterSeq: Int64? = nil) {
        self.collection = collection
        self.id = id
        self.afterSeq = afterSeq
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        afterSeq = try r.optionalInt("afterSeq", range: 0...Int64.max)
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "id": .string(id.wireString)]
        if let afterSeq { o["afterSeq"] = .int(afterSeq) }
        return o
    }
}

/// `GET_MANY`: up to 1,000 documents by id.
package struct GetManyRequest: WireMessage, Equatable {
    package var collection: String
    package var ids: [UUID]

    package init(collection: String, ids: [UUID]) {
        self.collection = collection
        self.ids = ids
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        ids = try r.uuidArray("ids", maxCount: maxGetManyIDs)
        try r.finish()
    }

    package var json: JSONObject {
        ["collection": .string(collection), "ids": .array(ids.map { .string($0.wireString) })]
    }
}

/// `REPLACE`: the document's data becomes `data`; `rev`, when given, must be the current revision.
package struct ReplaceRequest: WireMessage, Equatable {
    package var collection: String
    package var id: UUID
    package var data: JSONObject
    package var rev: Int64?

    package init(collection: String, id: UUID, data: JSONObject, rev: Int64? = nil) {
        self.collection = collection
        self.id = id
        self.data = data
        self.rev = rev
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        data = try r.object("data")
        rev = try expectedRev(&r)
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "id": .string(id.wireString), "data": .object(data)]
        if let rev { o["rev"] = .int(rev) }
        return o
    }
}

/// `PATCH`: an RFC 7396 merge patch (null removes a member, objects merge, anything else replaces).
package struct PatchRequest: WireMessage, Equatable {
    package var collection: String
    package var id: UUID
    package var patch: JSONObject
    package var rev: Int64?

    package init(collection: String, id: UUID, patch: JSONObject, rev: Int64? = nil) {
        self.collection = collection
        self.id = id
        self.patch = patch
        self.rev = rev
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        patch = try r.object("patch")
        rev = try expectedRev(&r)
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "id": .string(id.wireString), "patch": .object(patch)]
        if let rev { o["rev"] = .int(rev) }
        return o
    }
}

/// `DELETE`: removes a document and the blobs attached to it.
package struct DeleteRequest: WireMessage, Equatable {
    package var collection: String
    package var id: UUID
    package var rev: Int64?

    package init(collection: String, id: UUID, rev: Int64? = nil) {
        self.collection = collection
        self.id = id
        self.rev = rev
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        id = try r.uuid("id")
        rev = try expectedRev(&r)
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "id": .string(id.wireString)]
        if let rev { o["rev"] = .int(rev) }
        return o
    }
}

/// `DELETE` response.
public struct DeleteResponse: WireMessage, Equatable {
    /// The deleted document's id.
    public var id: UUID
    /// The revision the document had when it was deleted.
    public var rev: Int64
    /// How many blobs attached to the document were deleted with it.
    public var blobsDeleted: Int

    /// A DELETE answer with these members.
    public init(id: UUID, rev: Int64, blobsDeleted: Int) {
        self.id = id
        self.rev = rev
        self.blobsDeleted = blobsDeleted
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
        rev = try r.int("rev", range: 0...Int64.max)
        blobsDeleted = Int(try r.int("blobsDeleted", range: 0...Int64.max))
    }

    package var json: JSONObject {
        ["id": .string(id.wireString), "rev": .int(rev), "blobsDeleted": .int(Int64(blobsDeleted))]
    }
}

/// `LIST`: documents in creation order, a page at a time.
package struct ListRequest: WireMessage, Equatable {
    package var collection: String
    package var limit: Int
    package var cursor: String?

    package init(collection: String, limit: Int = defaultPageLimit, cursor: String? = nil) {
        self.collection = collection
        self.limit = limit
        self.cursor = cursor
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        limit = Int(try r.optionalInt("limit", range: 1...Int64(maxPageLimit)) ?? Int64(defaultPageLimit))
        cursor = try r.optionalString("cursor", maxLength: 4096)
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection), "limit": .int(Int64(limit))]
        if let cursor { o["cursor"] = .string(cursor) }
        return o
    }
}

/// A stored document as a client reads it: the envelope plus the app's data.
public struct Record: WireMessage, Equatable {
    /// The document's id (a UUID the server assigned or the client chose).
    public var id: UUID
    /// The document's revision: 1 when created, one more at every write; pass it as `rev` to write only over it.
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
    /// The app's document: the JSON object it stored.
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

    package init(json: JSONObject) throws(LarderError) {
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

    package var json: JSONObject {
        [
            "id": .string(id.wireString), "rev": .int(rev), "createdAt": .string(Timestamp.string(createdAtMs)),
            "updatedAt": .string(Timestamp.string(updatedAtMs)), "data": .object(data),
        ]
    }
}

/// `GET_MANY` response: the records found, in request order, and the ids that were not.
public struct GetManyResponse: WireMessage, Equatable {
    /// The records found, in the order their ids were asked for.
    public var records: [Record]
    /// The ids asked for that have no document.
    public var missing: [UUID]

    /// A GET_MANY answer with these members.
    public init(records: [Record], missing: [UUID]) {
        self.records = records
        self.missing = missing
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        records = try Record.array(&r, "records")
        missing = try r.uuidArray("missing", maxCount: Int.max)
    }

    package var json: JSONObject {
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
    /// The page's records.
    public var records: [Record]
    /// The cursor of the next page; nil on the last page.
    public var nextCursor: String?

    /// A page with these records and cursor.
    public init(records: [Record], nextCursor: String?) {
        self.records = records
        self.nextCursor = nextCursor
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        records = try Record.array(&r, "records")
        // As long as the server makes them (a sort on a long text field makes long cursors).
        nextCursor = try r.optionalString("nextCursor", maxLength: SearchQuery.maxCursorBytes)
    }

    package var json: JSONObject {
        var o: JSONObject = ["records": .array(records.map { .object($0.json) })]
        o["nextCursor"] = nextCursor.map { .string($0) } ?? .null
        return o
    }
}

/// `COUNT` response.
package struct CountResponse: WireMessage, Equatable {
    package var count: Int
    package init(count: Int) { self.count = count }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        count = Int(try r.int("count", range: 0...Int64.max))
    }
    package var json: JSONObject { ["count": .int(Int64(count))] }
}

// MARK: - Collections

/// `DROP_COLLECTION` request.
package struct DropCollectionRequest: WireMessage, Equatable {
    package var collection: String
    package init(collection: String) { self.collection = collection }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        try r.finish()
    }
    package var json: JSONObject { ["collection": .string(collection)] }
}

/// `DROP_COLLECTION` response: what was removed.
public struct DropCollectionResponse: WireMessage, Equatable {
    /// The collection dropped.
    public var collection: String
    /// How many documents were removed with it.
    public var documents: Int
    /// How many blobs attached to its documents were removed with it.
    public var blobs: Int

    /// A DROP_COLLECTION answer with these members.
    public init(collection: String, documents: Int, blobs: Int) {
        self.collection = collection
        self.documents = documents
        self.blobs = blobs
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection")
        documents = Int(try r.int("documents", range: 0...Int64.max))
        blobs = Int(try r.int("blobs", range: 0...Int64.max))
    }

    package var json: JSONObject {
        ["collection": .string(collection), "documents": .int(Int64(documents)), "blobs": .int(Int64(blobs))]
    }
}

/// `COLLECTIONS` response.
public struct CollectionsResponse: WireMessage, Equatable {
    /// One collection and how many documents it holds.
    public struct Entry: Sendable, Equatable {
        /// The collection's name.
        public var name: String
        /// How many documents it holds.
        public var count: Int
        /// An entry with this name and count.
        public init(name: String, count: Int) {
            self.name = name
            self.count = count
        }
    }
    /// Every collection that holds documents, by name.
    public var collections: [Entry]

    /// A COLLECTIONS answer with these entries.
    public init(collections: [Entry]) { self.collections = collections }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collections = []
        for (n, item) in (try r.optionalArray("collections", maxCount: Int.max) ?? []).enumerated() {
            guard case .object(let o) = item else { throw .invalid("collections.\(n)", "must be an object") }
            var e = FieldReader(o, path: "collections.\(n)")
            collections.append(Entry(name: try e.string("name"), count: Int(try e.int("count", range: 0...Int64.max))))
        }
    }

    package var json: JSONObject {
        ["collections": .array(collections.map { .object(["name": .string($0.name), "count": .int(Int64($0.count))]) })]
    }
}

// MARK: - Blobs

/// A document that a blob is attached to; deleting the document deletes the blob.
public struct BlobAttachment: Sendable, Hashable {
    /// The collection of the document.
    public var collection: String
    /// The document's id.
    public var id: UUID

    /// The document `id` of `collection`: `BlobAttachment(collection: "diary", id: entry.id)`.
    public init(collection: String, id: UUID) {
        self.collection = collection
        self.id = id
    }

    package init(json: JSONObject, path: String) throws(LarderError) {
        var r = FieldReader(json, path: path)
        collection = try r.string("collection", maxLength: 256)
        id = try r.uuid("id")
        try r.finish()
    }

    package var json: JSONObject { ["collection": .string(collection), "id": .string(id.wireString)] }
}

/// `BLOB_PUT` request; the JPEG bytes travel in the frame's binary part.
package struct BlobPutRequest: WireMessage, Equatable {
    package var id: UUID?
    /// Lowercase hex SHA-256 the server checks the bytes against.
    package var sha256: String?
    package var attach: BlobAttachment?

    package init(id: UUID? = nil, sha256: String? = nil, attach: BlobAttachment? = nil) {
        self.id = id
        self.sha256 = sha256
        self.attach = attach
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.optionalUUID("id")
        sha256 = try r.optionalString("sha256", maxLength: 64)
        try checkSHA256Member(sha256, field: "sha256")
        attach = try r.optionalObject("attach").map { (o) throws(LarderError) in try BlobAttachment(json: o, path: "attach") }
        try r.finish()
    }

    package var json: JSONObject {
        var o = JSONObject()
        if let id { o["id"] = .string(id.wireString) }
        if let sha256 { o["sha256"] = .string(sha256) }
        if let attach { o["attach"] = .object(attach.json) }
        return o
    }
}

/// `BLOB_GET`, `BLOB_HEAD` and `BLOB_DELETE` requests.
package struct BlobIDRequest: WireMessage, Equatable {
    package var id: UUID
    package init(id: UUID) { self.id = id }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
        try r.finish()
    }
    package var json: JSONObject { ["id": .string(id.wireString)] }
}

/// `BLOB_GET` request: the blob; with `offset` and/or `length` only those bytes; or with `thumbnail` a thumbnail of it
/// whose longer side is that many pixels (one of the sizes HELLO announces in `limits.thumbnailSizes`). A thumbnail
/// and a range cannot be asked together.
package struct BlobGetRequest: WireMessage, Equatable {
    package var id: UUID
    /// First byte of the range (0 when only `length` is given).
    package var offset: Int64?
    /// Bytes in the range (to the end when only `offset` is given).
    package var length: Int64?
    package var thumbnail: Int?

    package init(id: UUID, offset: Int64? = nil, length: Int64? = nil, thumbnail: Int? = nil) {
        self.id = id
        self.offset = offset
        self.length = length
        self.thumbnail = thumbnail
    }

    package init(json: JSONObject) throws(LarderError) {
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

    package var isRange: Bool { offset != nil || length != nil }

    package var json: JSONObject {
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
    /// The thumbnail's width in pixels, as shown.
    public var width: Int
    /// The thumbnail's height in pixels, as shown.
    public var height: Int
    /// The thumbnail's length in bytes (the binary part).
    public var size: Int64

    /// A thumbnail description with these members.
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

    package var json: JSONObject {
        [
            "maxSide": .int(Int64(maxSide)), "width": .int(Int64(width)), "height": .int(Int64(height)),
            "size": .int(size),
        ]
    }
}

/// A blob's metadata, as `BLOB_PUT`, `BLOB_GET`, `BLOB_HEAD` and `BLOB_LIST` answer it.
public struct BlobInfo: WireMessage, Equatable {
    /// The blob's id.
    public var id: UUID
    /// The blob's length in bytes.
    public var size: Int64
    /// The SHA-256 of the bytes, 64 lowercase hex digits.
    public var sha256: String
    /// The media type; `image/jpeg` for every blob Larder stores.
    public var contentType: String
    /// The photo's width in pixels, as stored (EXIF orientation not applied).
    public var width: Int
    /// The photo's height in pixels, as stored (EXIF orientation not applied).
    public var height: Int
    /// When the blob was stored (millisecond precision, server clock).
    public var createdAt: Date {
        get { Timestamp.date(createdAtMs) }
        set { createdAtMs = Timestamp.milliseconds(newValue) }
    }
    /// `createdAt` in milliseconds since 1970, UTC, as the wire and the stores carry it.
    package var createdAtMs: Int64
    /// The document the blob is attached to, if any: deleting that document deletes the blob.
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

    package init(json: JSONObject) throws(LarderError) {
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

    package var json: JSONObject {
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
package struct BlobListRequest: WireMessage, Equatable {
    package var limit: Int
    package var cursor: String?
    package var attachedTo: BlobAttachment?

    package init(limit: Int = defaultPageLimit, cursor: String? = nil, attachedTo: BlobAttachment? = nil) {
        self.limit = limit
        self.cursor = cursor
        self.attachedTo = attachedTo
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        limit = Int(try r.optionalInt("limit", range: 1...Int64(maxPageLimit)) ?? Int64(defaultPageLimit))
        cursor = try r.optionalString("cursor", maxLength: 4096)
        attachedTo = try r.optionalObject("attachedTo").map { (o) throws(LarderError) in
            try BlobAttachment(json: o, path: "attachedTo")
        }
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["limit": .int(Int64(limit))]
        if let cursor { o["cursor"] = .string(cursor) }
        if let attachedTo { o["attachedTo"] = .object(attachedTo.json) }
        return o
    }
}

/// `BLOB_LIST` response.
public struct BlobListResponse: WireMessage, Equatable {
    /// The page's blobs, in id order.
    public var blobs: [BlobInfo]
    /// The cursor of the next page; nil on the last page.
    public var nextCursor: String?

    /// A BLOB_LIST answer with these members.
    public init(blobs: [BlobInfo], nextCursor: String?) {
        self.blobs = blobs
        self.nextCursor = nextCursor
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        blobs = []
        for (n, item) in (try r.optionalArray("blobs", maxCount: Int.max) ?? []).enumerated() {
            guard case .object(let o) = item else { throw .invalid("blobs.\(n)", "blobs.\(n) must be an object") }
            blobs.append(try BlobInfo(json: o))
        }
        nextCursor = try r.optionalString("nextCursor")
    }

    package var json: JSONObject {
        var o: JSONObject = ["blobs": .array(blobs.map { .object($0.json) })]
        o["nextCursor"] = nextCursor.map { .string($0) } ?? .null
        return o
    }
}

/// `BLOB_DELETE` response.
public struct BlobDeleteResponse: WireMessage, Equatable {
    /// The deleted blob's id.
    public var id: UUID
    /// A BLOB_DELETE answer for `id`.
    public init(id: UUID) { self.id = id }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        id = try r.uuid("id")
    }
    package var json: JSONObject { ["id": .string(id.wireString), "deleted": true] }
}

// MARK: - Search

/// `SEARCH`: `{"collection", "filter"?, "text"?, "sort"?, "limit"?, "cursor"?}` (see `SearchQuery`).
package struct SearchRequest: WireMessage, Equatable {
    package var collection: String
    package var query: SearchQuery

    package init(collection: String, query: SearchQuery) {
        self.collection = collection
        self.query = query
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        query = try SearchQuery(json: json)
    }

    package var json: JSONObject {
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
package struct CountRequest: WireMessage, Equatable {
    package var collection: String
    package var filter: Filter?
    package var text: TextQuery?

    package init(collection: String, filter: Filter? = nil, text: TextQuery? = nil) {
        self.collection = collection
        self.filter = filter
        self.text = text
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        filter = try optionalFilter(&r)
        text = try optionalText(&r)
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["collection": .string(collection)]
        if let filter { o["filter"] = filter.json }
        if let text { o["text"] = text.json }
        return o
    }
}

/// `GROUP`: sections by the value of `field`, each with its count and first `perGroup` records (default 10).
public struct GroupRequest: WireMessage, Equatable {
    /// How many records each section carries when a GROUP names no `perGroup`.
    public static let defaultPerGroup = 10
    /// The most records a GROUP may ask for per section.
    public static let maxPerGroup = 100

    package var collection: String
    package var field: FieldPath
    package var filter: Filter?
    package var text: TextQuery?
    package var perGroup: Int

    package init(collection: String, field: FieldPath, filter: Filter? = nil, text: TextQuery? = nil,
                perGroup: Int = GroupRequest.defaultPerGroup) {
        self.collection = collection
        self.field = field
        self.filter = filter
        self.text = text
        self.perGroup = perGroup
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        field = try FieldPath(try r.string("field", maxLength: FieldPath.maxBytes), field: "field")
        filter = try optionalFilter(&r)
        text = try optionalText(&r)
        perGroup = Int(try r.optionalInt("perGroup", range: 0...Int64(GroupRequest.maxPerGroup))
            ?? Int64(GroupRequest.defaultPerGroup))
        try r.finish()
    }

    package var json: JSONObject {
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
    /// One section: the records whose field holds `key`.
    public struct Section: Sendable, Equatable {
        /// The field's value shared by the section's records; null for records without the field.
        public var key: JSON
        /// How many records of the collection (matching the filter) hold `key`; more than `records` when they were cut.
        public var count: Int
        /// The section's first records, at most `perGroup`, in id order.
        public var records: [Record]
        /// A section with these members.
        public init(key: JSON, count: Int, records: [Record]) {
            self.key = key
            self.count = count
            self.records = records
        }
    }
    /// The sections, in ascending order of `key`.
    public var groups: [Section]

    /// A GROUP answer with these sections.
    public init(groups: [Section]) { self.groups = groups }

    package init(json: JSONObject) throws(LarderError) {
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

    package var json: JSONObject {
        [
            "groups": .array(groups.map {
                .object(["key": $0.key, "count": .int(Int64($0.count)), "records": .array($0.records.map { .object($0.json) })])
            })
        ]
    }
}

/// `INDEX`: declare an expression index on a field path of a collection.
package struct IndexRequest: WireMessage, Equatable {
    package var collection: String
    package var field: FieldPath
    /// The ICU collation the index orders the field's strings by (`SortKey.collation`), to serve sorts under it.
    package var collation: String?
    /// The collation's strength (`SortKey.strength`).
    package var strength: Int?

    package init(collection: String, field: FieldPath, collation: String? = nil, strength: Int? = nil) {
        self.collection = collection
        self.field = field
        self.collation = collation
        self.strength = strength
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try collectionName(&r)
        field = try FieldPath(try r.string("field", maxLength: FieldPath.maxBytes), field: "field")
        collation = try r.optionalString("collation", maxLength: SortKey.maxCollationBytes)
        strength = try r.optionalInt("strength", range: 1...5).map { Int($0) }
        try r.finish()
        if collation != nil || strength != nil {
            // The sort key's own checks, naming this request's members.
            do {
                _ = try SortKey(
                    json: SortKey(field: field, collation: collation, strength: strength).json, path: "index")
            } catch {
                throw LarderError(
                    error.status, error.message, field: error.field.map { String($0.dropFirst("index.".count)) })
            }
        }
    }

    package var json: JSONObject {
        var object: JSONObject = ["collection": .string(collection), "field": .string(field.description)]
        if let collation { object["collation"] = .string(collation) }
        if let strength { object["strength"] = .int(Int64(strength)) }
        return object
    }
}

/// `INDEX` response: the index's name and whether this call created it.
public struct IndexResponse: WireMessage, Equatable {
    /// The index's name in the store.
    public var name: String
    /// True when this call created the index, false when it already existed.
    public var created: Bool
    /// An INDEX answer with these members.
    public init(name: String, created: Bool) {
        self.name = name
        self.created = created
    }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        name = try r.string("name")
        created = try r.optionalBool("created") ?? false
    }
    package var json: JSONObject { ["name": .string(name), "created": .bool(created)] }
}

// MARK: - Change feed

/// `WATCH`: subscribe to the committed changes of one collection (or all), optionally filtered, optionally replaying
/// what happened after `since`.
package struct WatchRequest: WireMessage, Equatable {
    /// The collection to follow; nil follows every collection.
    package var collection: String?
    /// Only changes whose document matches (the SEARCH filter language, evaluated on the document as written).
    package var filter: Filter?
    /// Replay the changes after this sequence number from the change log before following live ones.
    package var since: Int64?
    /// Leave `record` out of the events (ids, revisions and sequence numbers only).
    package var idsOnly: Bool

    /// A subscription request; every member is optional.
    package init(collection: String? = nil, filter: Filter? = nil, since: Int64? = nil, idsOnly: Bool = false) {
        self.collection = collection
        self.filter = filter
        self.since = since
        self.idsOnly = idsOnly
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.optionalString("collection", maxLength: 256)
        filter = try r.optionalJSON("filter").map { (value) throws(LarderError) in try Filter(json: value) }
        since = try r.optionalInt("since", range: 0...Int64.max)
        idsOnly = try r.optionalBool("idsOnly") ?? false
        try r.finish()
    }

    package var json: JSONObject {
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
package struct WatchResponse: WireMessage, Equatable {
    /// Chosen by the server, unique on its connection; events carry it as their request id.
    package var subscription: UInt32
    /// The last committed change when the subscription started; live events follow it.
    package var seq: Int64

    /// A WATCH answer.
    package init(subscription: UInt32, seq: Int64) {
        self.subscription = subscription
        self.seq = seq
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        subscription = UInt32(try r.int("subscription", range: 1...Int64(UInt32.max)))
        seq = try r.int("seq", range: 0...Int64.max)
    }

    package var json: JSONObject { ["subscription": .int(Int64(subscription)), "seq": .int(seq)] }
}

/// `UNWATCH` request, and (with `ended: true`) its response.
package struct UnwatchRequest: WireMessage, Equatable {
    /// The id a WATCH answered.
    package var subscription: UInt32

    /// An UNWATCH of `subscription`.
    package init(subscription: UInt32) { self.subscription = subscription }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        subscription = UInt32(try r.int("subscription", range: 1...Int64(UInt32.max)))
        try r.finish()
    }

    package var json: JSONObject { ["subscription": .int(Int64(subscription))] }
}

/// `UNWATCH` response: no event of the subscription follows it.
package struct UnwatchResponse: WireMessage, Equatable {
    /// The subscription that ended.
    package var subscription: UInt32

    /// An UNWATCH answer.
    package init(subscription: UInt32) { self.subscription = subscription }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        subscription = UInt32(try r.int("subscription", range: 1...Int64(UInt32.max)))
    }

    package var json: JSONObject { ["subscription": .int(Int64(subscription)), "ended": true] }
}

/// What an event reports. A struct rather than an enum so that a client keeps working when a later server adds a
/// kind (Protocol.md: clients ignore kinds they do not know).
public struct ChangeKind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The kind's name on the wire, e.g. `create`.
    public let rawValue: String
    /// The kind named `rawValue`; one this version does not know is kept as it is.
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

    /// The kind's name on the wire.
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
    /// What happened: a write's kind, or a control event (`resync`, `gap`).
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

    package init(json: JSONObject) throws(LarderError) {
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

    package var json: JSONObject {
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
