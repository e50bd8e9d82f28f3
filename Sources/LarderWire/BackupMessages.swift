// Messages in the shape of Messages.swift (see there).
/// The answer to `BACKUP`: a snapshot the connection may now read with `BACKUP_READ` (Protocol.md section 5.8).
public struct BackupResponse: WireMessage, Equatable {
    /// The snapshot's number on this connection.
    public var backup: Int64
    /// The snapshot's size in bytes.
    public var size: Int64
    /// The SHA-256 of the whole snapshot, 64 lowercase hex digits, for the client to check what it wrote.
    public var sha256: String
    /// What the snapshot is: `"sqlite"`, a SQLite database file.
    public var format: String

    /// A backup answer with these members.
    public init(backup: Int64, size: Int64, sha256: String, format: String) {
        self.backup = backup
        self.size = size
        self.sha256 = sha256
        self.format = format
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        backup = try r.int("backup", range: 1...Int64(UInt32.max))
        size = try r.int("size", range: 0...Int64.max)
        sha256 = try r.string("sha256", maxLength: 64)
        format = try r.string("format", maxLength: 64)
        try r.finish()
    }

    package var json: JSONObject {
        [
            "backup": .int(backup), "size": .int(size), "sha256": .string(sha256), "format": .string(format),
        ]
    }
}

/// `BACKUP_READ`: `length` bytes of snapshot `backup` from `offset`, answered in the binary part.
package struct BackupReadRequest: WireMessage, Equatable {
    package var backup: Int64
    package var offset: Int64
    package var length: Int

    package init(backup: Int64, offset: Int64, length: Int) {
        self.backup = backup
        self.offset = offset
        self.length = length
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        backup = try r.int("backup", range: 1...Int64(UInt32.max))
        offset = try r.int("offset", range: 0...Int64.max)
        length = Int(try r.int("length", range: 1...Int64(Int32.max)))
        try r.finish()
    }

    package var json: JSONObject { ["backup": .int(backup), "offset": .int(offset), "length": .int(Int64(length))] }
}
