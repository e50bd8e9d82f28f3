#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderIO
import LarderWire

// The SQLite store's uploads with their bytes in files (`BlobFiles` states the rules): each chunk is written once,
// with pwrite from the received frame's bytes, and hashed as it arrives; FINISH reads only what the JPEG check needs.

extension BlobFiles {
    /// Writes a chunk of `upload` at `offset` (fdatasync'ed when every chunk is); NOT_FOUND when its file is gone.
    /// Otherwise the chunk's writeback starts now, so that FINISH's fdatasync waits only for the last chunks: the disk
    /// works while the rest of the upload arrives. That changes no guarantee (FINISH still syncs the whole file).
    func writeChunk(_ upload: UUID, offset: Int64, bytes: [UInt8]) throws(LarderError) {
        let name = upload.wireString
        try withFile(name, writing: true, missing: { UploadRules.noUpload(upload) }) { fd throws(LarderError) in
            try BlobFiles.write(fd, bytes, at: offset, path: path(name))
            if syncEachChunk {
                try BlobFiles.sync(fd, path: path(name))
            } else {
                startWriteback(fd, offset: offset, count: bytes.count)
            }
        }
    }
}

extension SQLiteStore {
    var files: BlobFiles { core.blobFiles! }

    /// Unlinks the files named in `blob_files_deleted` (their rows' deletion committed), then forgets the names; on
    /// the writer's connection, between transactions. Nothing while a backup holds the files: it runs again after.
    static func collectFiles(_ files: BlobFiles, _ db: SQLiteConnection) {
        guard !files.isHeld, let names = try? db.query("SELECT name FROM blob_files_deleted", [], { $0.text(0) }),
            !names.isEmpty
        else { return }
        for name in names { files.remove(name) }
        let list = String(decoding: JSON.array(names.map { .string($0) }).bytes, as: UTF8.self)
        // Should this fail, the names stay and are unlinked again (harmlessly) next time.
        _ = try? db.run("DELETE FROM blob_files_deleted WHERE name IN (SELECT value FROM json_each(?1))", [.text(list)])
    }

    /// Runs `collectFiles` on the writer (after a backup let go of the files).
    func collectFiles() {
        let files = self.files
        writer.exclusive { connection in
            if let connection { SQLiteStore.collectFiles(files, connection) }
        }
    }

    package func uploadBegin(_ request: BlobUploadRequest, owner: String) throws(LarderError) -> BlobUploadInfo {
        let upload = try newUpload(request)
        // The file first: a crash before the row commits leaves a file no row names, which the next start removes.
        try files.create(upload.upload.wireString)
        do throws(LarderError) {
            try insertUpload(upload, owner: owner)
        } catch {
            files.remove(upload.upload.wireString)
            throw error
        }
        return upload
    }

    /// Writes the chunk to the upload's file, then commits its offset. One upload's chunks go one at a time (its
    /// hash's lock), and each is checked against the committed offset before a byte is written, so a stale chunk
    /// never overwrites committed bytes.
    package func uploadChunk(_ upload: UUID, offset: Int64, bytes: [UInt8], crc32: UInt32) throws(LarderError)
        -> BlobUploadInfo
    {
        try checkChunkCRC(upload, offset: offset, bytes: bytes, crc32: crc32)
        let files = self.files
        do throws(LarderError) {
            return try appendChunk(upload, offset: offset, bytes: bytes)
        } catch where error.status == .notFound {
            // An id that names no upload leaves no state behind (a client cannot fill the map with made-up ids).
            files.forget(upload.wireString)
            throw error
        }
    }

    private func appendChunk(_ upload: UUID, offset: Int64, bytes: [UInt8]) throws(LarderError) -> BlobUploadInfo {
        let files = self.files
        return try files.hash(upload).state.withLock { (state) throws(LarderError) -> BlobUploadInfo in
            let now = core.configuration.clock()
            guard let record = try uploadRecord(upload), record.expiresAt > now else {
                throw UploadRules.noUpload(upload)
            }
            try WriteRules.checkChunk(record, offset: offset, count: bytes.count)
            try files.writeChunk(upload, offset: offset, bytes: bytes)
            let expiresAt = now + core.configuration.uploadExpiryMs
            let count = bytes.count
            let after = try syncWrite { (context) throws(LarderError) -> BlobUploadInfo in
                try (context as! SQLiteWriteContext).advanceUpload(
                    upload, offset: offset, count: count, now: now, expiresAt: expiresAt)
            }
            if state.valid && state.hashed == offset {
                state.hasher.update(bytes)
                state.hashed += Int64(count)
            } else {
                state.valid = false  // begun before this process: FINISH hashes the file
            }
            return after
        }
    }

    /// Checks and commits a complete upload: its SHA-256 kept as the chunks came (or, for an upload begun before this
    /// process, read once from its file), its JPEG structure read from the file's header segments and last bytes,
    /// and the file synced before the blob's row commits.
    public func uploadFinish(_ upload: UUID, sha256: String?, requestKey: RequestKey?) throws(LarderError)
        -> BlobInfo
    {
        let files = self.files
        let name = upload.wireString
        // Finished, dropped, or never there: this process keeps nothing of it.
        defer { if (try? uploadRecord(upload)) == nil { files.forget(name) } }
        let meta = try files.hash(upload).state.withLock { (state) throws(LarderError) -> BlobInfo in
            let record = try finishableUpload(upload)
            let path = files.path(name)
            return try files.withFile(name, writing: false, missing: { UploadRules.noUpload(upload) }) {
                (fd) throws(LarderError) -> BlobInfo in
                var hasher = state.hasher
                if !state.valid || state.hashed != record.size {
                    hasher = SHA256()
                    var at: Int64 = 0
                    while at < record.size {
                        let bytes = try BlobFiles.read(fd, at: at, count: Int(min(1 << 20, record.size - at)), path: path)
                        guard !bytes.isEmpty else { throw SQLiteStore.damagedFile(path, size: record.size) }
                        hasher.update(bytes)
                        at += Int64(bytes.count)
                    }
                }
                try BlobFiles.sync(fd, path: path)
                return try completeUpload(record, digest: hasher.finalizeHex(), sha256: sha256, requestKey: requestKey) {
                    () throws(LarderError) -> JPEGInfo in
                    try SQLiteStore.inspectJPEG(fd, size: record.size, path: path)
                }
            }
        }
        return meta
    }

    /// `JPEG.inspect` over an open file, through a small window of it: it reads the last two bytes and the segment
    /// headers up to the frame header, a few kilobytes of any photo.
    static func inspectJPEG(_ fd: Int32, size: Int64, path: String) throws(LarderError) -> JPEGInfo {
        let window = 4096
        var cached: (start: Int64, bytes: [UInt8]) = (0, [])
        return try JPEG.inspect(count: Int(size)) { (index) throws(LarderError) -> UInt8 in
            let at = Int64(index)
            if at < cached.start || at >= cached.start + Int64(cached.bytes.count) {
                let start = max(0, min(at, size - Int64(window)))
                cached = (start, try BlobFiles.read(fd, at: start, count: Int(min(Int64(window), size)), path: path))
                guard at < cached.start + Int64(cached.bytes.count) else { throw damagedFile(path, size: size) }
            }
            return cached.bytes[Int(at - cached.start)]
        }
    }

    static func damagedFile(_ path: String, size: Int64) -> LarderError {
        LarderError(
            .internal, "\(path) is shorter than the \(size) bytes its row records: the data directory was damaged; "
                + "restore it from a backup")
    }

    static func missingFile(_ id: UUID, _ path: String) -> LarderError {
        LarderError(
            .internal, "blob \(id.wireString) has no bytes: its file \(path) is missing from the data directory; "
                + "restore the data directory from a backup, or delete the blob")
    }

    /// `range` of blob `id`'s file `name`, read straight into the answer's buffer. A file that is gone is NOT_FOUND
    /// when the blob was deleted meanwhile (its file is unlinked after that commit), otherwise an INTERNAL error
    /// that names the missing file.
    func readFile(_ id: UUID, _ name: String, _ range: Range<Int64>) throws(LarderError) -> [UInt8] {
        let path = files.path(name)
        let bytes = try files.withFile(name, writing: false, missing: { BlobFiles.missingMarker }) {
            (fd) throws(LarderError) -> [UInt8] in
            try BlobFiles.read(fd, at: range.lowerBound, count: range.count, path: path)
        }
        if bytes.count == range.count { return bytes }
        throw SQLiteStore.damagedFile(path, size: range.upperBound)
    }

    /// `readFile`'s missing file, told apart: the blob deleted since the caller read its row, or a file lost.
    func explainMissing(_ id: UUID, _ name: String) -> LarderError {
        guard (try? blobHead(id)) != nil else { return StoreRules.blobNotFound(id) }
        return SQLiteStore.missingFile(id, files.path(name))
    }

    // MARK: Start-up

    /// Brings the files and the rows into step after whatever ended the last run (on the writer's connection, before
    /// any other work): the chunk rows of uploads under way move to files; the files of committed deletions are
    /// unlinked; files no row names (a crash between a file and its row) are removed; an upload's offset is cut back
    /// to its file's length (bytes lost with the page cache in a power loss). Answers the warnings to log: blobs whose
    /// file is missing.
    static func recoverFiles(_ files: BlobFiles, _ db: SQLiteConnection) throws(LarderError) -> [String] {
        try moveUploadChunksToFiles(files, db)
        collectFiles(files, db)
        try removeOrphans(files, db, olderThan: nil)
        let uploads = try db.query("SELECT id, received FROM uploads", [], { ($0.text(0), $0.int(1)) })
        for (name, received) in uploads {
            let length = files.length(name)
            if length == nil { try files.create(name) }
            if let length, length >= received { continue }
            try db.run("UPDATE uploads SET received = ?2 WHERE id = ?1", [.text(name), .int(length ?? 0)])
        }
        var warnings: [String] = []
        let blobs = try db.query("SELECT id, file FROM blobs WHERE file IS NOT NULL", [], { ($0.text(0), $0.text(1)) })
        for (id, name) in blobs where files.length(name) == nil {
            warnings.append(
                "blob \(id) has no bytes: its file \(files.path(name)) is missing; BLOB_GET of it fails until the "
                    + "data directory is restored from a backup or the blob is deleted")
        }
        return warnings
    }

    /// Removes the files in `blobs/` that no blob or upload row names (those named by an id: any other file is not
    /// the store's), when last changed before `olderThan` (seconds since 1970; nil: all). The rows are read after the
    /// directory is listed, so a file listed is named by a row the read sees unless it has none: an upload's file is
    /// made just before its row commits (a running store passes a time well in the past for that), and a finishing
    /// upload's row and its blob's are swapped in one transaction.
    static func removeOrphans(_ files: BlobFiles, _ db: SQLiteConnection, olderThan: Int?) throws(LarderError) {
        let listed = files.names().filter { UUID(uuidString: $0) != nil }
        guard !listed.isEmpty else { return }
        let named = Set(
            try db.query("SELECT file FROM blobs WHERE file IS NOT NULL", [], { $0.text(0) })
                + db.query("SELECT id FROM uploads", [], { $0.text(0) }))
        for name in listed where !named.contains(name) {
            if let olderThan {
                var info = stat()
                guard stat(files.path(name), &info) == 0, info.st_mtim.tv_sec < olderThan else { continue }
            }
            unlink(files.path(name))
        }
    }

    /// Drops the expired uploads (their files go after the commit), then, at most once an hour, removes files no row
    /// names that are more than ten minutes old: a crash's leftovers, should any escape the start-up. That scan reads
    /// every blob's file name, on a reader: the writer never waits for it.
    public func expireUploads() throws(LarderError) -> Int {
        let now = core.configuration.clock()
        let dropped = try syncWrite { (context) throws(LarderError) -> Int in
            try (context as! SQLiteWriteContext).uploadsExpire(now: now)
        }
        let files = self.files
        let wall = time(nil)
        if files.orphanScanDue(now: wall) {
            try readers.read(transaction: true) { db throws(LarderError) in
                try SQLiteStore.removeOrphans(files, db, olderThan: wall - 600)
            }
        }
        return dropped
    }

    /// The uploads begun before migration 12 keep their chunks in `blob_chunks`: written to their files (synced),
    /// then the rows go, in one transaction; run again after a crash, it writes the same files again.
    private static func moveUploadChunksToFiles(_ files: BlobFiles, _ db: SQLiteConnection) throws(LarderError) {
        let owners = try db.query(
            "SELECT id FROM uploads WHERE EXISTS (SELECT 1 FROM blob_chunks WHERE owner = uploads.id)", [],
            { $0.text(0) })
        for owner in owners {
            let path = files.path(owner)
            let fd = try BlobFiles.openEmptied(path)
            defer { BlobFiles.closeFile(fd) }
            let chunks = try db.query(
                "SELECT start, bytes FROM blob_chunks WHERE owner = ?1 ORDER BY start", [.text(owner)],
                { ($0.int(0), $0.bytes(1)) })
            for (start, bytes) in chunks {
                try BlobFiles.write(fd, bytes, at: start, path: path)
            }
            try BlobFiles.sync(fd, path: path)
            try files.syncDirectory()
            try db.run("DELETE FROM blob_chunks WHERE owner = ?1", [.text(owner)])
        }
    }
}

extension BlobFiles {
    /// Thrown by `readFile` for a missing file, and explained by `explainMissing` outside the read's transaction.
    static let missingMarker = LarderError(.notFound, "blob file missing", field: "larder.blobFile")
}
