import Foundation
import LarderSync
import LarderWire

// LarderClient's blob calls in one frame each: put, get (whole or as a thumbnail), head, delete, list.
extension LarderClient {
    // MARK: - Blobs

    /// A blob's metadata and bytes.
    public struct Blob: Sendable, Equatable {
        /// The blob's metadata.
        public var info: BlobInfo
        /// The JPEG bytes (for `UIImage(data:)`, `Data.write(to:)`).
        public var bytes: Data

        /// A blob with this metadata and these bytes.
        public init(info: BlobInfo, bytes: Data) {
            self.info = info
            self.bytes = bytes
        }
    }

    /// Stores a JPEG, optionally attached to a document (deleting the document then deletes the blob).
    ///
    /// `sha256` (lowercase hex), when given, is checked by the server. `progress` is called while a blob of 1 MiB
    /// or more is sent, with the bytes sent so far and the request's size, last with both the same. A photo larger
    /// than the server's `maxBlobBytes` goes by `putBlob(contentsOf:)`.
    ///
    /// ```swift
    /// let photo = try await client.blobPut(jpegData, attachTo: BlobAttachment(collection: "diary", id: entry.id))
    /// ```
    ///
    /// - Throws: `UNSUPPORTED_MEDIA_TYPE` for bytes that are not a JPEG; `PAYLOAD_TOO_LARGE` for more than
    ///   `maxBlobBytes` (before anything is sent); `INVALID_ARGUMENT` when `sha256` does not match; `CONFLICT` when
    ///   `id` is taken; `NOT_FOUND` when the attachment's document does not exist; `PERMISSION_DENIED` for a `read`
    ///   token, or a token limited to collections without `attachTo` one of them; and `UNAVAILABLE` or
    ///   `DEADLINE_EXCEEDED` as any request.
    public func blobPut(
        _ bytes: Data, id: UUID? = nil, sha256: String? = nil, attachTo attachment: BlobAttachment? = nil,
        progress: (@Sendable (_ sent: Int, _ total: Int) -> Void)? = nil
    ) async throws(LarderError) -> BlobInfo {
        let request = BlobPutRequest(id: id, sha256: sha256, attach: attachment)
        return try BlobInfo(
            json: try await call(.blobPut, request.json, binary: Array(bytes), progress: progress).jsonObject())
    }

    /// Reads a blob's metadata and bytes; `progress` is called while a blob of 1 MiB or more arrives, with the bytes
    /// received so far and the reply's size, last with both the same.
    ///
    /// - Throws: `NOT_FOUND` when no such blob; `PAYLOAD_TOO_LARGE` for a blob larger than one answer carries (read it
    ///   with `writeBlob(_:to:…)` or by ranges); and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any
    ///   request.
    public func blobGet(
        _ id: UUID, progress: (@Sendable (_ received: Int, _ total: Int) -> Void)? = nil
    ) async throws(LarderError) -> Blob {
        let frame = try await call(.blobGet, BlobIDRequest(id: id).json, progress: progress)
        return Blob(info: try BlobInfo(json: try frame.jsonObject()), bytes: Data(frame.binary))
    }

    /// A thumbnail of a photo: a baseline JPEG whose longer side is `maxSide` pixels (or the photo's own when that is
    /// smaller: photos are never enlarged), EXIF orientation applied. `maxSide` must be one of the sizes the server
    /// announces (`limits.thumbnailSizes` in HELLO, 64, 128, 256, 512 and 1024 by default). `info` describes the
    /// stored photo, `info.thumbnail` the thumbnail in `bytes`.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a `maxSide` the server does not announce; `NOT_FOUND` when no such blob;
    ///   `PAYLOAD_TOO_LARGE` for a photo over the server's pixel limit (`maxThumbnailSourcePixels`);
    ///   `UNSUPPORTED_MEDIA_TYPE` for one that does not decode; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or
    ///   `PERMISSION_DENIED` as any request.
    public func thumbnail(_ id: UUID, maxSide: Int) async throws(LarderError) -> Blob {
        let frame = try await call(.blobGet, BlobGetRequest(id: id, thumbnail: maxSide).json)
        return Blob(info: try BlobInfo(json: try frame.jsonObject()), bytes: Data(frame.binary))
    }

    /// Reads a blob's metadata only.
    ///
    /// - Throws: `NOT_FOUND` when no such blob; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any
    ///   request.
    public func blobHead(_ id: UUID) async throws(LarderError) -> BlobInfo {
        try await message(BlobInfo.self, .blobHead, BlobIDRequest(id: id).json)
    }

    /// Deletes a blob.
    ///
    /// - Throws: `NOT_FOUND` when no such blob; and `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `PERMISSION_DENIED` as any
    ///   request.
    @discardableResult
    public func blobDelete(_ id: UUID) async throws(LarderError) -> BlobDeleteResponse {
        try await message(BlobDeleteResponse.self, .blobDelete, BlobIDRequest(id: id).json)
    }

    /// One page of blobs in id order, optionally only those attached to one document.
    ///
    /// - Throws: `INVALID_ARGUMENT` for a `limit` outside 1...1000 or a cursor of another listing; `PERMISSION_DENIED`
    ///   for a token limited to collections without `attachedTo` one of them; and `UNAVAILABLE` or `DEADLINE_EXCEEDED`
    ///   as any request.
    public func blobList(
        limit: Int = defaultPageLimit, cursor: String? = nil, attachedTo: BlobAttachment? = nil
    ) async throws(LarderError) -> BlobListResponse {
        try await message(
            BlobListResponse.self, .blobList, BlobListRequest(limit: limit, cursor: cursor, attachedTo: attachedTo).json)
    }
}
