#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderWire

extension LarderClient {
    /// Asks the server for a consistent online snapshot of its store (`BACKUP`), reads it in `chunkBytes` ranges
    /// (`BACKUP_READ`) into `path`, and checks its SHA-256. The file appears at `path` only once complete (it is
    /// written beside it first, then renamed). `progress` is called with the bytes written so far and the total.
    ///
    /// On the SQLite store the file is a SQLite database: start a server on a data directory holding it as
    /// `larder.sqlite` to restore it. A server on PostgreSQL answers UNKNOWN_OPCODE (use pg_dump).
    ///
    /// - Throws: `PERMISSION_DENIED` for a token that is not `admin` or is limited to collections; `UNKNOWN_OPCODE`
    ///   from a server on PostgreSQL; `INTERNAL` when `path` cannot be written or the snapshot arrives damaged;
    ///   `UNAVAILABLE` when no server answers or the connection breaks (run it again); `DEADLINE_EXCEEDED` when a read
    ///   times out or the task is cancelled.
    @discardableResult
    public func backup(
        to path: String, chunkBytes: Int = 4 << 20,
        progress: (@Sendable (_ written: Int64, _ total: Int64) -> Void)? = nil
    ) async throws(LarderError) -> BackupResponse {
        // BACKUP and every BACKUP_READ must go over one connection: the snapshot belongs to it.
        let connection = try await connection()
        let timeout = configuration.requestTimeout
        let started = try await connection.call(.backup, json: [], binary: [], timeout: nil, progress: nil)
        let snapshot = try BackupResponse(json: try started.jsonObject())
        let partial = path + ".partial"
        let fd = systemOpen(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw LarderError(.internal, "cannot create \(partial): \(String(cString: strerror(errno)))")
        }
        var closed = false
        defer {
            if !closed {
                systemClose(fd)
                unlink(partial)
            }
        }
        let limit = (try? await serverHello().limits.maxBinaryPartBytes) ?? chunkBytes
        let chunk = max(1, min(chunkBytes, limit))
        var hasher = SHA256()
        var offset: Int64 = 0
        progress?(0, snapshot.size)
        while offset < snapshot.size {
            let request = BackupReadRequest(
                backup: snapshot.backup, offset: offset, length: Int(min(Int64(chunk), snapshot.size - offset)))
            let frame = try await connection.call(
                .backupRead, json: request.json.bytes, binary: [], timeout: timeout, progress: nil)
            let bytes = frame.binary
            guard !bytes.isEmpty else {
                throw LarderError(.internal, "the server sent no bytes at offset \(offset) of \(snapshot.size)")
            }
            hasher.update(bytes)
            var written = 0
            while written < bytes.count {
                let n = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress! + written, $0.count - written) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else {
                    throw LarderError(.internal, "cannot write \(partial): \(String(cString: strerror(errno)))")
                }
                written += n
            }
            offset += Int64(bytes.count)
            progress?(offset, snapshot.size)
        }
        let digest = hasher.finalizeHex()
        guard digest == snapshot.sha256 else {
            throw LarderError(
                .internal,
                "the backup arrived damaged (SHA-256 \(digest), the server's \(snapshot.sha256)); run it again")
        }
        guard fsync(fd) == 0 else {
            throw LarderError(.internal, "cannot flush \(partial) to disk: \(String(cString: strerror(errno)))")
        }
        closed = true
        systemClose(fd)
        guard rename(partial, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(partial)
            throw LarderError(.internal, "cannot rename \(partial) to \(path): \(reason)")
        }
        return snapshot
    }
}

// The same three calls once per C library (Glibc, Darwin).
// The C library's calls under names that LarderClient's own `open` and `close` do not hide.
#if canImport(Glibc)
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 { Glibc.open(path, flags, mode) }
private func systemWrite(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { Glibc.write(fd, bytes, count) }
private func systemClose(_ fd: Int32) { _ = Glibc.close(fd) }
#else
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 { Darwin.open(path, flags, mode) }
private func systemWrite(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { Darwin.write(fd, bytes, count) }
private func systemClose(_ fd: Int32) { _ = Darwin.close(fd) }
#endif
