import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct BlobTests {
    @Test(arguments: StoreKind.allCases, [
        ("rocket.jpg", "c2dd0de7c538df8d111e479619b129464d0269d0ae5fd18ca91d33a7fdfea95c", 640, 427),
        ("grace_hopper.jpg", "a8ca6d734765703b09728ab47fe59f473d93ae3967fc24c7c0288c3c7adb7130", 512, 600),
    ])
    func realPhotosRoundTrip(_ kind: StoreKind, photo: (name: String, sha256: String, width: Int, height: Int)) throws {
        let (name, sha256, width, height) = photo
        let bytes = try fixture(name)
        try withStore(kind) { store in
            let meta = try store.blobPut(id: nil, bytes: bytes, expectedSHA256: sha256.uppercased(), attachTo: nil)
            #expect(meta.sha256 == sha256)
            #expect(meta.width == width)
            #expect(meta.height == height)
            #expect(meta.size == Int64(bytes.count))
            #expect(meta.contentType == "image/jpeg")
            let (read, readBytes) = try store.blobGet(meta.id)
            #expect(read == meta)
            #expect(readBytes == bytes)
            #expect(try store.blobHead(meta.id) == meta)
        }
    }

    @Test(arguments: StoreKind.allCases) func rejectsWhatIsNotAJPEG(_ kind: StoreKind) throws {
        let rocket = try fixture("rocket.jpg")
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]
        try withStore(kind) { store in
            for bad in [[], png, Array(rocket.prefix(rocket.count / 2)), Array(rocket.dropLast(2)), [0xFF, 0xD8, 0xFF, 0xD9],
                Array(rocket.prefix(20)) + [0xFF, 0xD9]]
            {
                expectError(.unsupportedMediaType) { _ = try store.blobPut(id: nil, bytes: bad, expectedSHA256: nil, attachTo: nil) }
            }
            let stored = try store.stats().blobs
            #expect(stored == 0)
        }
    }

    @Test(arguments: StoreKind.allCases) func rejectsOversizedBlobs(_ kind: StoreKind) throws {
        let rocket = try fixture("rocket.jpg")
        try withStore(kind, { $0.maxBlobBytes = rocket.count - 1 }) { store in
            expectError(.payloadTooLarge) { _ = try store.blobPut(id: nil, bytes: rocket, expectedSHA256: nil, attachTo: nil) }
        }
    }

    @Test(arguments: StoreKind.allCases) func checksExpectedSHA256AndIds(_ kind: StoreKind) throws {
        let rocket = try fixture("rocket.jpg")
        try withStore(kind) { store in
            expectError(.invalidArgument, field: "sha256") {
                _ = try store.blobPut(id: nil, bytes: rocket, expectedSHA256: String(repeating: "0", count: 64), attachTo: nil)
            }
            let id = UUID()
            let meta = try store.blobPut(id: id, bytes: rocket, expectedSHA256: nil, attachTo: nil)
            #expect(meta.id == id)
            expectError(.conflict, field: "id") { _ = try store.blobPut(id: id, bytes: rocket, expectedSHA256: nil, attachTo: nil) }
            try store.blobDelete(id)
            expectError(.notFound) { try store.blobDelete(id) }
            expectError(.notFound) { _ = try store.blobGet(id) }
            expectError(.notFound) { _ = try store.blobHead(id) }
        }
    }

    @Test(arguments: StoreKind.allCases) func attachmentsFollowTheirDocument(_ kind: StoreKind) throws {
        let rocket = try fixture("rocket.jpg")
        let grace = try fixture("grace_hopper.jpg")
        try withStore(kind) { store in
            let purchase = try store.create("items", id: nil, data: ["item": "茶葉蛋"])
            let other = try store.create("items", id: nil, data: ["item": "泡麵"])
            let attachment = BlobAttachment(collection: "items", id: purchase.id)
            expectError(.notFound, field: "attach.id") {
                _ = try store.blobPut(
                    id: nil, bytes: rocket, expectedSHA256: nil, attachTo: BlobAttachment(collection: "items", id: UUID()))
            }
            let photo = try store.blobPut(id: nil, bytes: rocket, expectedSHA256: nil, attachTo: attachment)
            let second = try store.blobPut(id: nil, bytes: grace, expectedSHA256: nil, attachTo: attachment)
            let kept = try store.blobPut(
                id: nil, bytes: grace, expectedSHA256: nil, attachTo: BlobAttachment(collection: "items", id: other.id))
            let loose = try store.blobPut(id: nil, bytes: grace, expectedSHA256: nil, attachTo: nil)
            #expect(photo.attachedTo == attachment)
            #expect(photo.json["attachedTo"] != nil)
            #expect(try store.blobList(limit: 10, cursor: nil, attachedTo: attachment).blobs.map(\.id) == [photo.id, second.id])

            let deleted = try store.delete("items", id: purchase.id, expectedRev: nil)
            #expect(deleted.blobsDeleted == 2)
            expectError(.notFound) { _ = try store.blobGet(photo.id) }
            expectError(.notFound) { _ = try store.blobHead(second.id) }
            #expect(try store.blobList(limit: 10, cursor: nil, attachedTo: nil).blobs.map(\.id) == [kept.id, loose.id])

            let dropped = try store.dropCollection("items")
            #expect(dropped == (documents: 1, blobs: 1) ? true : false)
            #expect(try store.blobList(limit: 10, cursor: nil, attachedTo: nil).blobs.map(\.id) == [loose.id])
        }
    }

    @Test(arguments: StoreKind.allCases) func blobListPages(_ kind: StoreKind) throws {
        let rocket = try fixture("rocket.jpg")
        try withStore(kind) { store in
            var ids: [UUID] = []
            for _ in 0..<7 { ids.append(try store.blobPut(id: nil, bytes: rocket, expectedSHA256: nil, attachTo: nil).id) }
            var seen: [UUID] = []
            var cursor: String?
            repeat {
                let page = try store.blobList(limit: 3, cursor: cursor, attachedTo: nil)
                seen += page.blobs.map(\.id)
                cursor = page.nextCursor
            } while cursor != nil
            #expect(seen == ids)
            expectError(.invalidArgument, field: "cursor") { _ = try store.blobList(limit: 3, cursor: "xx", attachedTo: nil) }
        }
    }

    @Test func sha256TestVectors() {
        #expect(SHA256.hex([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            SHA256.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            SHA256.hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        // Fed in uneven pieces, the digest is the same.
        var hasher = SHA256()
        let message = Array((0..<1000).map { UInt8($0 % 251) })
        var offset = 0
        for size in [1, 63, 64, 65, 7, 300] where offset < message.count {
            let end = min(message.count, offset + size)
            hasher.update(Array(message[offset..<end]))
            offset = end
        }
        hasher.update(Array(message[offset...]))
        #expect(hasher.finalizeHex() == SHA256.hex(message))
    }

    @Test func jpegInspectorReadsFrameHeaders() throws {
        #expect(try JPEG.inspect(try fixture("rocket.jpg")) == JPEGInfo(width: 640, height: 427))
        // A minimal hand-made JPEG: SOI, SOF0 (3x2), EOI.
        let tiny: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x02, 0x00, 0x03, 0x01, 0x01, 0x11, 0x00, 0xFF, 0xD9]
        #expect(try JPEG.inspect(tiny) == JPEGInfo(width: 3, height: 2))
    }
}
