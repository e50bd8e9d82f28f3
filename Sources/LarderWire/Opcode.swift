// Opcode, Status and Frame.Flags are the wire's named constants, each a
// RawRepresentable struct of static lets, alike by design.
/// A request type. The numeric values are part of the wire contract (Protocol.md, "Opcodes").
public struct Opcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The opcode's number on the wire.
    public let rawValue: UInt16
    /// The opcode numbered `rawValue`, known to this version or not.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Opens a connection: versions, compression, token.
    public static let hello = Opcode(rawValue: 0x0001)
    /// Checks the connection; answers at once.
    public static let ping = Opcode(rawValue: 0x0002)

    /// Stores a new document.
    public static let create = Opcode(rawValue: 0x0010)
    /// Reads one document by id.
    public static let get = Opcode(rawValue: 0x0011)
    /// Reads up to 1,000 documents by id.
    public static let getMany = Opcode(rawValue: 0x0012)
    /// Replaces a document's data.
    public static let replace = Opcode(rawValue: 0x0013)
    /// Applies an RFC 7396 merge patch to a document.
    public static let patch = Opcode(rawValue: 0x0014)
    /// Deletes a document and its attached blobs.
    public static let delete = Opcode(rawValue: 0x0015)
    /// A page of a collection in creation order.
    public static let list = Opcode(rawValue: 0x0016)
    /// A page of the records matching a filter, a text search and a sort.
    public static let search = Opcode(rawValue: 0x0017)
    /// Counts the records matching a filter and a text search.
    public static let count = Opcode(rawValue: 0x0018)
    /// Sections of a collection by a field's value.
    public static let group = Opcode(rawValue: 0x0019)

    /// Lists the collections and their sizes.
    public static let collections = Opcode(rawValue: 0x0020)
    /// Deletes a collection with its documents and their blobs.
    public static let dropCollection = Opcode(rawValue: 0x0021)
    /// Declares an index on a field path.
    public static let index = Opcode(rawValue: 0x0022)
    /// Sets or removes a collection's schema.
    public static let schemaSet = Opcode(rawValue: 0x0023)
    /// Reads a collection's schema.
    public static let schemaGet = Opcode(rawValue: 0x0024)
    /// Sets a collection's rules for signed-in users (an admin's request).
    public static let rulesSet = Opcode(rawValue: 0x0025)
    /// Reads a collection's rules for signed-in users.
    public static let rulesGet = Opcode(rawValue: 0x0026)
    /// Creates an account Larder keeps (email and password) on a server with `--users`.
    public static let signUp = Opcode(rawValue: 0x0027)
    /// Checks an account's email and password and answers a new session.
    public static let signIn = Opcode(rawValue: 0x0028)
    /// Revokes a session: the connection's, or the one named.
    public static let signOut = Opcode(rawValue: 0x0029)
    /// Changes the signed-in account's password and revokes its other sessions.
    public static let passwordChange = Opcode(rawValue: 0x002A)
    /// A page of the accounts Larder keeps (an admin's request).
    public static let usersList = Opcode(rawValue: 0x002B)
    /// Disables or enables an account (an admin's request).
    public static let userSet = Opcode(rawValue: 0x002C)
    /// Deletes an account and its sessions (an admin's request).
    public static let userDelete = Opcode(rawValue: 0x002D)
    /// A new session for the user of the connection's session, with a full lifetime.
    public static let sessionRefresh = Opcode(rawValue: 0x002E)

    /// Stores a photo (JPEG) sent in one frame.
    public static let blobPut = Opcode(rawValue: 0x0030)
    /// Reads a blob, a byte range of it or a thumbnail.
    public static let blobGet = Opcode(rawValue: 0x0031)
    /// Reads a blob's metadata.
    public static let blobHead = Opcode(rawValue: 0x0032)
    /// Deletes a blob.
    public static let blobDelete = Opcode(rawValue: 0x0033)
    /// A page of blobs, optionally only those attached to one document.
    public static let blobList = Opcode(rawValue: 0x0034)
    /// Starts a resumable upload.
    public static let blobUpload = Opcode(rawValue: 0x0035)
    /// Writes a chunk of an upload at its committed offset.
    public static let blobUploadChunk = Opcode(rawValue: 0x0036)
    /// Answers an upload's committed offset (where to resume).
    public static let blobUploadStatus = Opcode(rawValue: 0x0037)
    /// Checks an upload's SHA-256 and JPEG structure and makes it a blob.
    public static let blobUploadFinish = Opcode(rawValue: 0x0038)
    /// Drops an upload and its bytes.
    public static let blobUploadAbort = Opcode(rawValue: 0x0039)

    /// The server's statistics.
    public static let stats = Opcode(rawValue: 0x0040)
    /// Takes a consistent snapshot of the store for `larder backup`.
    public static let backup = Opcode(rawValue: 0x0041)
    /// Reads a range of a snapshot taken by `BACKUP`.
    public static let backupRead = Opcode(rawValue: 0x0042)

    /// Subscribes to the change feed.
    public static let watch = Opcode(rawValue: 0x0050)
    /// Ends a subscription.
    public static let unwatch = Opcode(rawValue: 0x0051)
    /// The opcode of pushed event frames (server to client only).
    public static let event = Opcode(rawValue: 0x0052)

    /// Every opcode this version defines.
    public static let all: [Opcode] = [
        .hello, .ping, .create, .get, .getMany, .replace, .patch, .delete, .list, .search, .count, .group,
        .collections, .dropCollection, .index, .blobPut, .blobGet, .blobHead, .blobDelete, .blobList, .stats,
        .backup, .backupRead, .watch, .unwatch, .event,
        .blobUpload, .blobUploadChunk, .blobUploadStatus, .blobUploadFinish, .blobUploadAbort,
        .schemaSet, .schemaGet, .rulesSet, .rulesGet,
        .signUp, .signIn, .signOut, .passwordChange, .usersList, .userSet, .userDelete, .sessionRefresh,
    ]

    /// The upper-snake-case name used in Protocol.md, logs and STATS.
    public var name: String {
        switch self {
        case .hello: "HELLO"
        case .ping: "PING"
        case .create: "CREATE"
        case .get: "GET"
        case .getMany: "GET_MANY"
        case .replace: "REPLACE"
        case .patch: "PATCH"
        case .delete: "DELETE"
        case .list: "LIST"
        case .search: "SEARCH"
        case .count: "COUNT"
        case .group: "GROUP"
        case .collections: "COLLECTIONS"
        case .dropCollection: "DROP_COLLECTION"
        case .index: "INDEX"
        case .schemaSet: "SCHEMA_SET"
        case .schemaGet: "SCHEMA_GET"
        case .rulesSet: "RULES_SET"
        case .rulesGet: "RULES_GET"
        case .signUp: "SIGN_UP"
        case .signIn: "SIGN_IN"
        case .signOut: "SIGN_OUT"
        case .passwordChange: "PASSWORD_CHANGE"
        case .usersList: "USERS_LIST"
        case .userSet: "USER_SET"
        case .userDelete: "USER_DELETE"
        case .sessionRefresh: "SESSION_REFRESH"
        case .blobPut: "BLOB_PUT"
        case .blobGet: "BLOB_GET"
        case .blobHead: "BLOB_HEAD"
        case .blobDelete: "BLOB_DELETE"
        case .blobList: "BLOB_LIST"
        case .blobUpload: "BLOB_UPLOAD"
        case .blobUploadChunk: "BLOB_UPLOAD_CHUNK"
        case .blobUploadStatus: "BLOB_UPLOAD_STATUS"
        case .blobUploadFinish: "BLOB_UPLOAD_FINISH"
        case .blobUploadAbort: "BLOB_UPLOAD_ABORT"
        case .stats: "STATS"
        case .backup: "BACKUP"
        case .backupRead: "BACKUP_READ"
        case .watch: "WATCH"
        case .unwatch: "UNWATCH"
        case .event: "EVENT"
        default: "0x" + String(rawValue, radix: 16, uppercase: true)
        }
    }

    /// True for operations that change stored state (they go through the store's single writer).
    package var isWrite: Bool {
        switch self {
        case .create, .replace, .patch, .delete, .dropCollection, .index, .schemaSet, .rulesSet, .blobPut, .blobDelete,
            .blobUpload,
            .blobUploadChunk, .blobUploadFinish, .blobUploadAbort:
            true
        default: false
        }
    }

    /// The opcode's name, e.g. `GET_MANY`.
    public var description: String { name }
}
