#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderSync
import LarderWire

/// The SQLite store's upload and blob bytes, one file per upload in the data directory's `blobs/`, named by the
/// upload's id; a finished upload's file becomes its blob's (the row names it: nothing is copied).
///
/// The rules that keep a file and its row in step (OPERATING.md, "Data directory"):
/// - A file is created before the row that names it commits, and removed only after the row's deleting transaction
///   committed: that transaction records the name in `blob_files_deleted` (a trigger on `blobs`, `uploadDelete` for
///   uploads), and `collect` unlinks the names recorded there, then forgets them. A crash in between leaves the names
///   to the next start, which also removes files no row names (a crash between creating a file and its row).
/// - A chunk's bytes are written before the row that records its offset commits; with `synchronous=FULL` they are
///   also fdatasync'ed first, and a finished upload's file always is, before its blob row commits. With NORMAL (the
///   default) a chunk survives a process crash, as a commit does, and after a power loss an upload's offset is read
///   as the smaller of its row's and its file's length.
/// - A backup in progress holds the files of the blobs it copies (`hold`): no name is unlinked meanwhile.
final class BlobFiles: @unchecked Sendable {
    let directory: String
    /// Whether every chunk is fdatasync'ed before its offset commits (the store's `synchronous=FULL`).
    let syncEachChunk: Bool
    /// Backups copying blob files now; while any is, `collect` unlinks nothing.
    private let holds = Locked(0)
    /// When the sweeper last looked for files no row names (seconds since 1970; 0: never).
    private let lastOrphanScan = Locked(0)
    /// The SHA-256 of each upload's bytes so far, kept as its chunks arrive in order; an upload started before this
    /// process has none, and is hashed from its file at FINISH.
    private let hashes = Locked([UUID: UploadHash]())

    /// Where an upload's bytes stand in this process. Its lock also keeps one upload's chunks from writing its file
    /// at the same time (a client that resumed while its old connection's chunk was still being handled).
    final class UploadHash: @unchecked Sendable {
        struct State {
            var hasher = SHA256()
            /// Bytes hashed so far (the committed offset, once the chunk that reached it committed).
            var hashed: Int64 = 0
            /// False once a chunk failed after its bytes were written: the hash no longer follows the file.
            var valid = true
        }
        let state = Locked(State())
    }

    init(directory: String, syncEachChunk: Bool) throws(LarderError) {
        self.directory = (directory as NSString).appendingPathComponent("blobs")
        self.syncEachChunk = syncEachChunk
        guard mkdir(self.directory, PrivateFiles.directoryMode) == 0 || errno == EEXIST else {
            throw LarderError(
                .internal, "cannot create \(self.directory) for the blobs' files: \(String(cString: strerror(errno)))")
        }
    }

    func path(_ name: String) -> String { directory + "/" + name }

    static func ioError(_ what: String, _ path: String, _ code: Int32 = errno) -> LarderError {
        LarderError(.internal, "cannot \(what) \(path): \(String(cString: strerror(code))); check the data directory")
    }

    /// Creates the empty file of upload `name`, durable once this returns (the directory entry too).
    func create(_ name: String) throws(LarderError) {
        let path = self.path(name)
        let fd = PrivateFiles.openForWriting(path, flags: O_EXCL)
        guard fd >= 0 else { throw BlobFiles.ioError("create", path) }
        close(fd)
        try syncDirectory()
    }

    /// The open descriptor of `name` for `body`; NOT_FOUND through `missing` when there is no such file.
    func withFile<R>(
        _ name: String, writing: Bool, missing: () -> LarderError, _ body: (Int32) throws(LarderError) -> R
    ) throws(LarderError) -> R {
        let path = self.path(name)
        let fd = open(path, (writing ? O_WRONLY : O_RDONLY) | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { throw missing() }
            throw BlobFiles.ioError("open", path)
        }
        defer { close(fd) }
        return try body(fd)
    }

    /// Writes `bytes` at `offset` of the open file `fd` (`path` names it in errors), all of them.
    static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: String) throws(LarderError) {
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw BlobFiles.ioError("write", path)
            }
            done += n
        }
    }

    /// `write` of an array's bytes.
    static func write(_ fd: Int32, _ bytes: [UInt8], at offset: Int64, path: String) throws(LarderError) {
        let failure = bytes.withUnsafeBytes { raw -> LarderError? in
            do throws(LarderError) {
                try write(fd, raw, at: offset, path: path)
                return nil
            } catch {
                return error
            }
        }
        if let failure { throw failure }
    }

    /// Opens `path` to be written whole (created, emptied).
    static func openEmptied(_ path: String) throws(LarderError) -> Int32 {
        let fd = PrivateFiles.openForWriting(path, flags: O_TRUNC)
        guard fd >= 0 else { throw BlobFiles.ioError("create", path) }
        return fd
    }

    static func closeFile(_ fd: Int32) { close(fd) }

    /// `count` bytes at `offset` of the open file `fd`; fewer only when the file ends sooner.
    static func read(_ fd: Int32, at offset: Int64, count: Int, path: String) throws(LarderError) -> [UInt8] {
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            initialized = 0
            while initialized < count {
                let n = pread(
                    fd, buffer.baseAddress! + initialized, count - initialized, off_t(offset) + off_t(initialized))
                if n < 0 && errno == EINTR { continue }
                if n < 0 { failure = errno }
                if n <= 0 { break }
                initialized += n
            }
        }
        if failure != 0 { throw BlobFiles.ioError("read", path, failure) }
        return bytes
    }

    static func sync(_ fd: Int32, path: String) throws(LarderError) {
        guard fdatasync(fd) == 0 else { throw BlobFiles.ioError("sync", path) }
    }

    func syncDirectory() throws(LarderError) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw BlobFiles.ioError("open", directory) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw BlobFiles.ioError("sync", directory) }
    }

    /// The length of file `name`; nil when it is missing.
    func length(_ name: String) -> Int64? {
        var info = stat()
        guard stat(path(name), &info) == 0 else { return nil }
        return Int64(info.st_size)
    }

    /// Every file in `blobs/`.
    func names() -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    }

    func remove(_ name: String) {
        unlink(path(name))
        forget(name)
    }

    // MARK: Hashes of uploads under way

    /// Upload `name`'s hash state, made empty when this process has none.
    func hash(_ upload: UUID) -> UploadHash {
        hashes.withLock { all in
            if let known = all[upload] { return known }
            let made = UploadHash()
            all[upload] = made
            return made
        }
    }

    /// The hash state of `upload` when this process followed it from its first byte.
    func existingHash(_ upload: UUID) -> UploadHash? { hashes.withLock { $0[upload] } }

    /// How many uploads this process keeps a hash for.
    var followed: Int { hashes.withLock { $0.count } }

    func forget(_ name: String) {
        guard let upload = UUID(uuidString: name) else { return }
        _ = hashes.withLock { $0.removeValue(forKey: upload) }
    }

    /// Whether the sweeper's hourly look for files no row names is due at `now` (seconds); if so, it is noted as done.
    func orphanScanDue(now: Int) -> Bool {
        lastOrphanScan.withLock { last in
            guard last == 0 || now - last >= 3600 else { return false }
            last = now
            return true
        }
    }

    // MARK: Holds

    /// Runs `body` while no file is unlinked (a backup copying blob files).
    func holding<R>(_ body: () throws(LarderError) -> R) throws(LarderError) -> R {
        holds.withLock { $0 += 1 }
        defer { holds.withLock { $0 -= 1 } }
        return try body()
    }

    var isHeld: Bool { holds.withLock { $0 > 0 } }
}
