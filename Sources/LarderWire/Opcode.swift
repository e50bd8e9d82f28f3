// Parallel table (`duplicates` pairs these on purpose): Opcode, Status and Frame.Flags are the wire's named constants, each a
// RawRepresentable struct of static lets, alike by design.
/// A request type. The numeric values are part of the wire contract (Protocol.md, "Opcodes").
public struct Opcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let hello = Opcode(rawValue: 0x0001)
    public static let ping = Opcode(rawValue: 0x0002)

    public static let create = Opcode(rawValue: 0x0010)
    public static let get = Opcode(rawValue: 0x0011)
    public static let getMany = Opcode(rawValue: 0x0012)
    public static let replace = Opcode(rawValue: 0x0013)
    public static let patch = Opcode(rawValue: 0x0014)
    public static let delete = Opcode(rawValue: 0x0015)
    public static let list = Opcode(rawValue: 0x0016)
    public static let search = Opcode(rawValue: 0x0017)
    public static let count = Opcode(rawValue: 0x0018)
    public static let group = Opcode(rawValue: 0x0019)

    public static let collections = Opcode(rawValue: 0x0020)
    public static let dropCollection = Opcode(rawValue: 0x0021)
    public static let index = Opcode(rawValue: 0x0022)

    public static let blobPut = Opcode(rawValue: 0x0030)
    public static let blobGet = Opcode(rawValue: 0x0031)
    public static let blobHead = Opcode(rawValue: 0x0032)
    public static let blobDelete = Opcode(rawValue: 0x0033)
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
    public var isWrite: Bool {
        switch self {
        case .create, .replace, .patch, .delete, .dropCollection, .index, .blobPut, .blobDelete, .blobUpload,
            .blobUploadChunk, .blobUploadFinish, .blobUploadAbort:
            true
        default: false
        }
    }

    public var description: String { name }
}
