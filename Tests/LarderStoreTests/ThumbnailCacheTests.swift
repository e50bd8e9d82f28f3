import Foundation
import LarderTestThreads
import LarderThumbnails
import LarderWire
import Testing

@testable import LarderStore

/// The thumbnails table on both stores: written through the writer, read with the blob's metadata, and deleted with
/// the blob whatever deletes it.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ThumbnailCacheTests {
    static func thumbnail(_ jpeg: [UInt8], _ size: Int) throws -> StoredThumbnail {
        let made = try Thumbnailer.make(jpeg, size: size)
        return StoredThumbnail(width: made.width, height: made.height, bytes: made.jpeg)
    }

    static func put(
        _ store: AnyStore, _ meta: BlobInfo, _ size: Int, _ thumbnail: StoredThumbnail, sha256: String? = nil
    ) async throws -> Bool {
        try await store.write { (c) throws(LarderError) in
            try c.thumbnailPut(meta.id, sha256: sha256 ?? meta.sha256, maxSide: size, thumbnail: thumbnail)
        }
    }

    @Test(arguments: StoreKind.allCases) func cachedThenDeletedWithTheBlob(_ kind: StoreKind) async throws {
        let rocket = try fixture("rocket.jpg")
        try await withStoreAsync(kind) { store in
            let meta = try store.blobPut(id: nil, bytes: rocket, expectedSHA256: nil, attachTo: nil)
            let before = try store.thumbnail(meta.id, maxSide: 128)
            #expect(before.meta == meta && before.thumbnail == nil)
            let small = try Self.thumbnail(rocket, 128)
            #expect(try await Self.put(store, meta, 128, small))
            // Cached once: a second write of the same size keeps the first.
            #expect(try await !Self.put(store, meta, 128, try Self.thumbnail(rocket, 64)))
            #expect(try await Self.put(store, meta, 256, try Self.thumbnail(rocket, 256)))
            let read = try store.thumbnail(meta.id, maxSide: 128)
            #expect(read.meta == meta && read.thumbnail == small)
            #expect(try store.thumbnailCount() == 2)
            // The blob's bytes are untouched by its thumbnails.
            #expect(try store.blobGet(meta.id).bytes == rocket)
            try store.blobDelete(meta.id)
            #expect(try store.thumbnailCount() == 0)
            #expect(throws: LarderError.self) { try store.thumbnail(meta.id, maxSide: 128) }
            // A thumbnail made while its blob was being deleted is not kept.
            #expect(try await !Self.put(store, meta, 128, small))
            #expect(try store.thumbnailCount() == 0)
        }
    }

    /// A thumbnail of other bytes (the blob deleted and put again under its id meanwhile) is not kept.
    @Test(arguments: StoreKind.allCases) func staleThumbnailIsNotKept(_ kind: StoreKind) async throws {
        let rocket = try fixture("rocket.jpg")
        let grace = try fixture("grace_hopper.jpg")
        try await withStoreAsync(kind) { store in
            let old = try store.blobPut(id: nil, bytes: rocket, expectedSHA256: nil, attachTo: nil)
            try store.blobDelete(old.id)
            let new = try store.blobPut(id: old.id, bytes: grace, expectedSHA256: nil, attachTo: nil)
            #expect(try await !Self.put(store, new, 64, try Self.thumbnail(rocket, 64), sha256: old.sha256))
            #expect(try store.thumbnailCount() == 0)
        }
    }

    /// Deleting the document a blob is attached to, and dropping its collection, delete its thumbnails; those of other
    /// blobs stay.
    @Test(arguments: StoreKind.allCases) func deletedWithTheDocumentAndTheCollection(_ kind: StoreKind) async throws {
        let rocket = try fixture("rocket.jpg")
        let thumbnail = try Self.thumbnail(rocket, 64)
        try await withStoreAsync(kind) { store in
            let kept = try store.blobPut(id: nil, bytes: rocket, expectedSHA256: nil, attachTo: nil)
            #expect(try await Self.put(store, kept, 64, thumbnail))
            let document = try store.create("purchases", id: nil, data: ["item": "茶葉蛋"])
            let onDocument = try store.blobPut(
                id: nil, bytes: rocket, expectedSHA256: nil,
                attachTo: BlobAttachment(collection: "purchases", id: document.id))
            #expect(try await Self.put(store, onDocument, 64, thumbnail))
            #expect(try store.thumbnailCount() == 2)
            _ = try store.delete("purchases", id: document.id, expectedRev: nil)
            #expect(try store.thumbnailCount() == 1)

            let other = try store.create("receipts", id: nil, data: ["n": 1])
            for _ in 0..<3 {
                let blob = try store.blobPut(
                    id: nil, bytes: rocket, expectedSHA256: nil,
                    attachTo: BlobAttachment(collection: "receipts", id: other.id))
                #expect(try await Self.put(store, blob, 64, thumbnail))
                #expect(try await Self.put(store, blob, 128, try Self.thumbnail(rocket, 128)))
            }
            #expect(try store.thumbnailCount() == 7)
            let dropped = try store.dropCollection("receipts")
            #expect(dropped.blobs == 3)
            #expect(try store.thumbnailCount() == 1)
            #expect(try store.thumbnail(kept.id, maxSide: 64).thumbnail == thumbnail)
        }
    }
}
