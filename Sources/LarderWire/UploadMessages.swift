import CZlib
import Foundation

#if os(Linux) && !LARDER_PORTABLE
import CLibDeflate
#endif

// Messages in the shape of Messages.swift (see there), as
// BackupMessages.swift's are: stored fields, a memberwise init, `init(json:)`, `json`.

// MARK: - Byte ranges and resumable uploads (Protocol.md §5.4)

/// Checks a `sha256` request member: 64 lowercase hexadecimal digits.
func checkSHA256Member(_ value: String?, field: String) throws(LarderError) {
    guard let value else { return }
    if value.utf8.count != 64 || !value.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) {
        throw .invalid(field, "\(field) must be 64 lowercase hexadecimal characters")
    }
}

/// `BLOB_UPLOAD`: starts a resumable upload of a blob of `size` bytes, sent later in `BLOB_UPLOAD_CHUNK`s.
package struct BlobUploadRequest: WireMessage, Equatable {
    package var size: Int64
    /// The id the blob gets (a new one when nil); CONFLICT at once when a blob has it.
    package var id: UUID?
    /// The whole blob's SHA-256, checked by `BLOB_UPLOAD_FINISH`.
    package var sha256: String?
    package var attach: BlobAttachment?

    package init(size: Int64, id: UUID? = nil, sha256: String? = nil, attach: BlobAttachment? = nil) {
        self.size = size
        self.id = id
        self.sha256 = sha256
        self.attach = attach
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        size = try r.int("size", range: 1...Int64.max)
        id = try r.optionalUUID("id")
        sha256 = try r.optionalString("sha256", maxLength: 64)
        try checkSHA256Member(sha256, field: "sha256")
        attach = try r.optionalObject("attach").map { (o) throws(LarderError) in
            try BlobAttachment(json: o, path: "attach")
        }
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["size": .int(size)]
        if let id { o["id"] = .string(id.wireString) }
        if let sha256 { o["sha256"] = .string(sha256) }
        if let attach { o["attach"] = .object(attach.json) }
        return o
    }
}

/// `BLOB_UPLOAD_CHUNK`: the bytes of the binary part, to be written at `offset` (which must be the committed offset).
package struct BlobUploadChunkRequest: WireMessage, Equatable {
    package var upload: UUID
    package var offset: Int64
    /// CRC-32 (ISO-HDLC, as zlib and gzip compute it) of the binary part.
    package var crc32: UInt32

    package init(upload: UUID, offset: Int64, crc32: UInt32) {
        self.upload = upload
        self.offset = offset
        self.crc32 = crc32
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        upload = try r.uuid("upload")
        offset = try r.int("offset", range: 0...Int64.max)
        crc32 = UInt32(try r.int("crc32", range: 0...Int64(UInt32.max)))
        try r.finish()
    }

    package var json: JSONObject {
        ["upload": .string(upload.wireString), "offset": .int(offset), "crc32": .int(Int64(crc32))]
    }
}

/// `BLOB_UPLOAD_STATUS` and `BLOB_UPLOAD_ABORT`: name an upload.
package struct BlobUploadIDRequest: WireMessage, Equatable {
    package var upload: UUID
    package init(upload: UUID) { self.upload = upload }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        upload = try r.uuid("upload")
        try r.finish()
    }
    package var json: JSONObject { ["upload": .string(upload.wireString)] }
}

/// `BLOB_UPLOAD_FINISH`: checks the whole blob and stores it; answers its BlobInfo.
package struct BlobUploadFinishRequest: WireMessage, Equatable {
    package var upload: UUID
    /// The whole blob's SHA-256 (also or instead of the one given to `BLOB_UPLOAD`).
    package var sha256: String?

    package init(upload: UUID, sha256: String? = nil) {
        self.upload = upload
        self.sha256 = sha256
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        upload = try r.uuid("upload")
        sha256 = try r.optionalString("sha256", maxLength: 64)
        try checkSHA256Member(sha256, field: "sha256")
        try r.finish()
    }

    package var json: JSONObject {
        var o: JSONObject = ["upload": .string(upload.wireString)]
        if let sha256 { o["sha256"] = .string(sha256) }
        return o
    }
}

/// An upload as `BLOB_UPLOAD`, `BLOB_UPLOAD_CHUNK` and `BLOB_UPLOAD_STATUS` answer it: where to resume (`offset`).
package struct BlobUploadInfo: WireMessage, Equatable {
    package var upload: UUID
    /// The id the blob will have.
    package var id: UUID
    package var size: Int64
    /// Bytes committed so far: the next chunk starts here.
    package var offset: Int64
    /// The most bytes a chunk may carry.
    package var chunkBytes: Int
    /// When the upload is dropped if no chunk arrives before (milliseconds since the epoch).
    package var expiresAt: Int64
    package var sha256: String?
    package var attach: BlobAttachment?

    package init(
        upload: UUID, id: UUID, size: Int64, offset: Int64, chunkBytes: Int, expiresAt: Int64, sha256: String?,
        attach: BlobAttachment?
    ) {
        self.upload = upload
        self.id = id
        self.size = size
        self.offset = offset
        self.chunkBytes = chunkBytes
        self.expiresAt = expiresAt
        self.sha256 = sha256
        self.attach = attach
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        upload = try r.uuid("upload")
        id = try r.uuid("id")
        size = try r.int("size", range: 0...Int64.max)
        offset = try r.int("offset", range: 0...Int64.max)
        chunkBytes = Int(try r.int("chunkBytes", range: 1...Int64(Int32.max)))
        guard let ms = Timestamp.parse(try r.string("expiresAt")) else {
            throw .invalid("expiresAt", "expiresAt must be an ISO 8601 UTC timestamp")
        }
        expiresAt = ms
        sha256 = try r.optionalString("sha256")
        attach = try r.optionalObject("attach").map { (o) throws(LarderError) in
            try BlobAttachment(json: o, path: "attach")
        }
    }

    package var json: JSONObject {
        var o: JSONObject = [
            "upload": .string(upload.wireString), "id": .string(id.wireString), "size": .int(size),
            "offset": .int(offset), "chunkBytes": .int(Int64(chunkBytes)),
            "expiresAt": .string(Timestamp.string(expiresAt)),
        ]
        if let sha256 { o["sha256"] = .string(sha256) }
        if let attach { o["attach"] = .object(attach.json) }
        return o
    }
}

/// `BLOB_UPLOAD_ABORT` response.
package struct BlobUploadAbortResponse: WireMessage, Equatable {
    package var upload: UUID
    package init(upload: UUID) { self.upload = upload }
    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        upload = try r.uuid("upload")
    }
    package var json: JSONObject { ["upload": .string(upload.wireString), "aborted": true] }
}

/// CRC-32 as zlib computes it (ISO-HDLC: the checksum of `BLOB_UPLOAD_CHUNK`), incremental. On Linux libdeflate's,
/// which folds with carry-less multiplication: about 12 GB/s per core here, against 3.6 for zlib 1.2.13's `crc32_z`;
/// elsewhere (Apple platforms, which have no libdeflate, and the portable configuration) zlib's. Both give the same
/// results (CRC32Tests).
///
/// ```swift
/// CRC32.checksum(Array("123456789".utf8))  // 0xCBF43926
/// let crc = CRC32.checksum(secondHalf, continuing: CRC32.checksum(firstHalf))  // the CRC-32 of both in order
/// ```
package enum CRC32 {
    /// The CRC-32 of `bytes`, continuing from `crc`, the CRC-32 of the bytes before them (0 for none).
    package static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        #if os(Linux) && !LARDER_PORTABLE
        libdeflate(bytes, continuing: crc)
        #else
        zlib(bytes, continuing: crc)
        #endif
    }

    /// The CRC-32 of `bytes`.
    package static func checksum(_ bytes: [UInt8]) -> UInt32 { bytes.withUnsafeBytes { checksum($0) } }

    /// zlib's `crc32_z`.
    package static func zlib(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return crc }
        return UInt32(truncatingIfNeeded: crc32_z(uLong(crc), base.assumingMemoryBound(to: Bytef.self), bytes.count))
    }

    #if os(Linux) && !LARDER_PORTABLE
    /// libdeflate's `libdeflate_crc32`.
    package static func libdeflate(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress else { return crc }
        return libdeflate_crc32(crc, base, bytes.count)
    }
    #endif
}
