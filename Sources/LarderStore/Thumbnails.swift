import Foundation
import LarderWire

// Thumbnails are cached with their blob: a `thumbnails` table keyed by (blob id, longer side), written through the
// group-commit writer like every other write and deleted with the blob, whatever deletes it (BLOB_DELETE, the
// document it is attached to, DROP_COLLECTION): a trigger on SQLite, a foreign key ON DELETE CASCADE on PostgreSQL,
// so no deleting path has to remember them.

// The store's twin of LarderThumbnails' `Thumbnail` (what the
// thumbnailer makes), kept apart because LarderStore does not link the thumbnailer (libturbojpeg); its
// memberwise init has the shape of every small value type's (`Group`, `GroupResponse.Section`).
/// A thumbnail as the store keeps it.
public struct StoredThumbnail: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// The baseline JPEG.
    public var bytes: [UInt8]

    public init(width: Int, height: Int, bytes: [UInt8]) {
        self.width = width
        self.height = height
        self.bytes = bytes
    }
}

/// The thumbnail cache's reads (its write is `WriteContext.thumbnailPut`).
public protocol ThumbnailStore: Sendable {
    /// The blob's metadata and its cached thumbnail of `maxSide`, when there is one, from one snapshot; NOT_FOUND for
    /// an unknown blob.
    func thumbnail(_ id: UUID, maxSide: Int) throws(LarderError) -> (meta: BlobInfo, thumbnail: StoredThumbnail?)
    /// How many thumbnails the store holds (STATS).
    func thumbnailCount() throws(LarderError) -> Int
}
