import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// The SQLite store's blob files (`BlobFiles`): removed only after the deleting commit, mended at start-up after a
/// crash, reported when missing, read from older data directories' chunk rows, and carried by backups.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct BlobFileTests {
    /// Uploads `bytes` in chunks of 16 KiB and finishes it.
    static func upload(_ store: SQLiteStore, _ bytes: [UInt8]) throws -> BlobInfo {
        let begun = try store.uploadBegin(BlobUploadRequest(size: Int64(bytes.count)))
        _ = try UploadTests.send(store, begun, bytes, chunk: 16 << 10)
        return try store.uploadFinish(begun.upload, sha256: SHA256.hex(bytes))
    }

    static func fileName(_ store: SQLiteStore, _ id: UUID) throws -> String {
        try store.readers.read { db throws(LarderError) in
            try db.query("SELECT file FROM blobs WHERE id = ?1", [.text(id.wireString)]) { $0.text(0) }.first ?? ""
        }
    }

    static func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    static func fresh() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("larder-files-\(UUID().wireString)").path
    }

    @Test func aBlobsFileGoesOnlyAfterTheDeletingCommit() throws {
        let jpeg = syntheticJPEG(size: 100_000)
        try withStore({ $0.blobChunkBytes = 16 << 10 }) { store, _ in
            let blob = try Self.upload(store, jpeg)
            let path = store.files.path(try Self.fileName(store, blob.id))
            #expect(Self.exists(path))
            // A deletion undone with its write: the file stays, the blob reads as before.
            expectError(.conflict) {
                _ = try store.syncWrite { (c) throws(LarderError) -> Bool in
                    try c.blobDelete(blob.id)
                    throw LarderError(.conflict, "undone on purpose")
                }
            }
            #expect(Self.exists(path))
            #expect(try store.blobRead(blob.id, offset: 0, length: jpeg.count).bytes == jpeg)
            // Inside the deleting transaction, before its commit, the file is still there; after it, gone.
            let seenBeforeCommit = try store.syncWrite { (c) throws(LarderError) -> Bool in
                try c.blobDelete(blob.id)
                return access(path, F_OK) == 0
            }
            #expect(seenBeforeCommit)
            // Nothing is kept for a finished upload, nor for a chunk of an upload that does not exist.
            #expect(store.files.followed == 0)
            expectError(.notFound, field: "upload") {
                _ = try store.uploadChunk(UUID(), offset: 0, bytes: [1], crc32: CRC32.checksum([1]))
            }
            #expect(store.files.followed == 0)
            #expect(!Self.exists(path))
            let pending = try store.readers.read { db throws(LarderError) in
                try db.scalar("SELECT count(*) FROM blob_files_deleted")
            }
            #expect(pending == 0)
            expectError(.notFound, field: "id") { _ = try store.blobRead(blob.id, offset: 0, length: 1) }
        }
    }

    @Test func aCrashsLeftoversAreMendedAtStartUp() throws {
        let directory = Self.fresh()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let jpeg = syntheticJPEG(size: 60_000)
        var kept: BlobInfo?
        var doomed = ""
        var underWay: BlobUploadInfo?
        try withStore({
            $0.dataDirectory = directory
            $0.blobChunkBytes = 16 << 10
        }) { store, _ in
            kept = try Self.upload(store, jpeg)
            let gone = try Self.upload(store, jpeg)
            doomed = try Self.fileName(store, gone.id)
            let begun = try store.uploadBegin(BlobUploadRequest(size: Int64(jpeg.count)))
            underWay = try UploadTests.send(store, begun, Array(jpeg[0..<(16 << 10)]), chunk: 16 << 10)
        }
        let blobs = directory + "/blobs/"
        // What a crash leaves: a deletion committed whose file was not yet unlinked, a file whose upload row never
        // committed. A file that is not the store's (not named by an id) is left alone.
        do {
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.run("DELETE FROM blobs WHERE file = ?1", [.text(doomed)])
        }
        #expect(Self.exists(blobs + doomed))
        let orphan = UUID().wireString
        _ = FileManager.default.createFile(atPath: blobs + orphan, contents: Data([1, 2, 3]))
        _ = FileManager.default.createFile(atPath: blobs + "notes.txt", contents: Data([1]))
        try withStore({
            $0.dataDirectory = directory
            $0.blobChunkBytes = 16 << 10
        }) { store, _ in
            #expect(!Self.exists(blobs + doomed))
            #expect(!Self.exists(blobs + orphan))
            #expect(Self.exists(blobs + "notes.txt"))
            #expect(store.startupWarnings.isEmpty)
            let kept = try #require(kept)
            #expect(try store.blobGet(kept.id).bytes == jpeg)
            // The upload under way resumes from its committed offset; its hash is made from its file at FINISH.
            let upload = try #require(underWay)
            #expect(try store.uploadStatus(upload.upload).offset == 16 << 10)
            _ = try UploadTests.send(store, upload, jpeg, from: 16 << 10, chunk: 16 << 10)
            let finished = try store.uploadFinish(upload.upload, sha256: SHA256.hex(jpeg))
            #expect(finished.sha256 == SHA256.hex(jpeg))
            #expect(try store.blobRead(finished.id, offset: 1000, length: 30_000).bytes == Array(jpeg[1000..<31_000]))
        }
    }

    /// The upload sweeper removes files no row names once they are ten minutes old (a file younger than that may be
    /// an upload whose row is about to commit), and frees an expired upload's file.
    @Test func theSweeperRemovesOldOrphansAndExpiredUploadsFiles() throws {
        let clock = ManualClock()
        try withStore({
            $0.clock = clock.read
            $0.uploadExpiryMs = 60_000
        }) { store, _ in
            let old = store.files.path(UUID().wireString)
            let young = store.files.path(UUID().wireString)
            for path in [old, young] { _ = FileManager.default.createFile(atPath: path, contents: Data([1])) }
            var times = [timeval(tv_sec: time(nil) - 3600, tv_usec: 0), timeval(tv_sec: time(nil) - 3600, tv_usec: 0)]
            #expect(utimes(old, &times) == 0)
            let upload = try store.uploadBegin(BlobUploadRequest(size: 50_000))
            let part = Array(syntheticJPEG(size: 50_000)[0..<1000])
            _ = try store.uploadChunk(upload.upload, offset: 0, bytes: part, crc32: CRC32.checksum(part))
            let uploadFile = store.files.path(upload.upload.wireString)
            #expect(Self.exists(uploadFile))
            #expect(try store.expireUploads() == 0)
            #expect(!Self.exists(old) && Self.exists(young) && Self.exists(uploadFile))
            clock.advance(ms: 60_000)
            #expect(try store.expireUploads() == 1)
            #expect(!Self.exists(uploadFile) && Self.exists(young))
        }
    }

    @Test func aBlobWithoutItsFileIsAClearErrorNotACrash() throws {
        let directory = Self.fresh()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let jpeg = syntheticJPEG(size: 40_000)
        var lost: BlobInfo?
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            let blob = try Self.upload(store, jpeg)
            lost = blob
            unlink(store.files.path(try Self.fileName(store, blob.id)))
            // While the server runs: the read says which file is missing.
            expectError(.internal) { _ = try store.blobRead(blob.id, offset: 0, length: 10) }
        }
        let blob = try #require(lost)
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            #expect(store.startupWarnings.count == 1)
            #expect(store.startupWarnings.first?.contains(blob.id.wireString) == true)
            do {
                _ = try store.blobGet(blob.id)
                Issue.record("a blob without its file was read")
            } catch let error as LarderError {
                #expect(error.status == .internal)
                #expect(error.message.contains("missing") && error.message.contains("restore"))
            }
            #expect(try store.blobHead(blob.id).size == Int64(jpeg.count))
            try store.blobDelete(blob.id)
            expectError(.notFound, field: "id") { _ = try store.blobHead(blob.id) }
        }
    }

    @Test func anOlderDataDirectoryServesItsChunkRowsAndResumesItsUploads() throws {
        let directory = Self.fresh()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let jpeg = syntheticJPEG(size: 50_000)
        let old = UUID()
        let upload = UUID()
        do {
            // Migration 11's schema, as its store wrote a finished upload and one under way: chunk rows.
            let db = try SQLiteConnection(path: directory + "/larder.sqlite", readOnly: false)
            try db.execute("PRAGMA journal_mode=WAL")
            try SQLiteSchema.migrate(db, trigram: false, through: 11)
            let owner = UUID().wireString
            try db.run(
                "INSERT INTO blobs(id, size, sha256, contentType, width, height, createdAt, bytes, chunks) "
                    + "VALUES (?1, ?2, ?3, 'image/jpeg', 4000, 3000, ?4, X'', ?5)",
                [.text(old.wireString), .int(Int64(jpeg.count)), .text(SHA256.hex(jpeg)), .int(nowMillis()),
                    .text(owner)])
            for start in stride(from: 0, to: jpeg.count, by: 20_000) {
                let part = Array(jpeg[start..<min(start + 20_000, jpeg.count)])
                try db.run(
                    "INSERT INTO blob_chunks(owner, start, bytes) VALUES (?1, ?2, ?3)",
                    [.text(owner), .int(Int64(start)), .blob(part)])
            }
            try db.run(
                "INSERT INTO uploads(id, blobId, size, received, chunkBytes, createdAt, expiresAt) "
                    + "VALUES (?1, ?2, ?3, 20000, 20000, ?4, ?5)",
                [.text(upload.wireString), .text(UUID().wireString), .int(Int64(jpeg.count)), .int(nowMillis()),
                    .int(nowMillis() + 3_600_000)])
            try db.run(
                "INSERT INTO blob_chunks(owner, start, bytes) VALUES (?1, 0, ?2)",
                [.text(upload.wireString), .blob(Array(jpeg[0..<20_000]))])
        }
        try withStore({ $0.dataDirectory = directory }) { store, _ in
            #expect(try store.blobGet(old).bytes == jpeg)
            #expect(try store.blobRead(old, offset: 19_990, length: 20).bytes == Array(jpeg[19_990..<20_010]))
            // The upload's chunk rows moved to its file at start-up; it goes on from its offset.
            let status = try store.uploadStatus(upload)
            #expect(status.offset == 20_000)
            _ = try UploadTests.send(store, status, jpeg, from: 20_000, chunk: 20_000)
            let blob = try store.uploadFinish(upload, sha256: SHA256.hex(jpeg))
            #expect(try store.blobGet(blob.id).bytes == jpeg)
            #expect(Self.exists(store.files.path(upload.wireString)))
            try store.blobDelete(old)
            let rows = try store.readers.read { db throws(LarderError) in
                try db.scalar("SELECT count(*) FROM blob_chunks")
            }
            #expect(rows == 0)
        }
    }

    @Test func aBackupCarriesTheBlobFilesAndARestoredCopyServesThem() throws {
        let a = syntheticJPEG(size: 70_000, seed: 1)
        let b = syntheticJPEG(size: 90_000, seed: 2)
        let restored = Self.fresh()
        defer { try? FileManager.default.removeItem(atPath: restored) }
        let (first, second, upload) = try withStore({ $0.blobChunkBytes = 16 << 10 }) {
            (store, _) throws -> (BlobInfo, BlobInfo, UUID) in
            let first = try Self.upload(store, a)
            let second = try Self.upload(store, b)
            let secondFile = store.files.path(try Self.fileName(store, second.id))
            let begun = try store.uploadBegin(BlobUploadRequest(size: Int64(a.count)))
            _ = try UploadTests.send(store, begun, Array(a[0..<(16 << 10)]), chunk: 16 << 10)
            // A blob deleted while the backup reads: the copy holds it (its snapshot began first), so its file must
            // outlive the copy; it goes once the backup is done.
            let path = try store.snapshot(whileReading: { try? store.blobDelete(second.id) })
            defer { unlink(path) }
            #expect(!Self.exists(secondFile))
            // Private, as a data directory should be: no warning about its mode.
            try FileManager.default.createDirectory(
                atPath: restored, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try FileManager.default.copyItem(atPath: path, toPath: restored + "/larder.sqlite")
            return (first, second, begun.upload)
        }
        try withStore({ $0.dataDirectory = restored }) { (copy, _) throws in
            #expect(try copy.blobGet(first.id).bytes == a)
            #expect(try copy.blobGet(second.id).bytes == b)
            #expect(try copy.blobRead(second.id, offset: 50_000, length: 100).bytes == Array(b[50_000..<50_100]))
            expectError(.notFound, field: "upload") { _ = try copy.uploadStatus(upload) }
            #expect(copy.startupWarnings.isEmpty)
        }
    }
}
