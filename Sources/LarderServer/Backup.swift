#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderStore
import LarderSync
import LarderWire

/// `BACKUP` and `BACKUP_READ` (Protocol.md section 5.8): a connection asks for a snapshot of the store, which is
/// written to a file beside the database, then reads it in ranges. A connection holds at most one snapshot; it is
/// removed when the connection takes another or closes (and at start-up, when a server stopped abruptly left one).
final class BackupService: Sendable {
    private struct Snapshot {
        var number: Int64
        var fd: Int32
        var size: Int64
    }

    private struct State {
        var snapshots: [Int: Snapshot] = [:]
        var nextNumber: Int64 = 0
        /// Connections whose BACKUP is being written; one that closes meanwhile leaves this set, and its snapshot
        /// is dropped as soon as it is written.
        var beginning: Set<Int> = []
    }

    private let store: (any SnapshotStore)?
    private let pool: WorkPool
    private let gate: TestGate?
    private let maxChunkBytes: Int
    private let state = Locked(State())

    /// `maxChunkBytes` bounds a `BACKUP_READ` (its answer is a binary part: `Limits.maxBinaryPartBytes`).
    init(store: any DocumentStore & BlobStore, pool: WorkPool, gate: TestGate?, maxChunkBytes: Int) {
        self.store = store.snapshots
        self.pool = pool
        self.gate = gate
        self.maxChunkBytes = maxChunkBytes
        self.store?.removeStaleSnapshots()
    }

    static func handles(_ opcode: Opcode) -> Bool { opcode == .backup || opcode == .backupRead }

    /// Answers `frame` (`BACKUP` or `BACKUP_READ`) for connection `connection`, on the work pool (at once when the
    /// pool is full: RESOURCE_EXHAUSTED).
    func handle(_ frame: Frame, connection: Int, completion: @escaping @Sendable (Reply) -> Void) {
        let accepted = pool.submit { [self] in
            let result = Result { () throws(LarderError) -> ([UInt8], [UInt8]) in
                guard frame.binary.isEmpty else {
                    throw LarderError(.invalidArgument, "\(frame.opcode.name) takes no binary part")
                }
                return frame.opcode == .backup
                    ? try begin(try frame.jsonObject(), connection: connection)
                    : try read(BackupReadRequest(json: try frame.jsonObject()), connection: connection)
            }
            switch result {
            case .success(let (json, binary)):
                completion(Reply(opcode: frame.opcode, requestID: frame.requestID, json: json, binary: binary))
            case .failure(let error):
                completion(Reply(opcode: frame.opcode, requestID: frame.requestID, error: error))
            }
        }
        if !accepted { completion(Router.poolFull(frame, pool)) }
    }

    private func begin(_ json: JSONObject, connection: Int) throws(LarderError) -> ([UInt8], [UInt8]) {
        _ = try EmptyMessage(json: json)
        guard let store else {
            throw LarderError(
                .unknownOpcode, "this server's store has no BACKUP: back PostgreSQL up with pg_dump (or pg_basebackup)")
        }
        discard(connection: connection)
        state.withLock { _ = $0.beginning.insert(connection) }
        let written: (fd: Int32, size: Int64, sha256: String)
        do throws(LarderError) {
            written = try write(store)
        } catch {
            state.withLock { _ = $0.beginning.remove(connection) }
            throw error
        }
        let kept = state.withLock { s -> Int64? in
            // The connection closed while the snapshot was written: nobody will read it.
            guard s.beginning.remove(connection) != nil else { return nil }
            s.nextNumber += 1
            s.snapshots[connection] = Snapshot(number: s.nextNumber, fd: written.fd, size: written.size)
            return s.nextNumber
        }
        guard let number = kept else {
            close(written.fd)
            throw LarderError(.unavailable, "the connection closed")
        }
        let response = BackupResponse(
            backup: number, size: written.size, sha256: written.sha256, format: store.snapshotFormat)
        return (response.json.bytes, [])
    }

    /// Writes a snapshot, opens it and unlinks it (the descriptor keeps it readable, and a crash leaves nothing
    /// behind), and reads it once for its size and SHA-256.
    private func write(_ store: any SnapshotStore) throws(LarderError) -> (fd: Int32, size: Int64, sha256: String) {
        var hold: (@Sendable () -> Void)?
        if let gate { hold = { gate.pass() } }
        let path = try store.snapshot(whileReading: hold)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            unlink(path)
            throw LarderError(.internal, "the backup was written but cannot be read back (errno \(errno))")
        }
        unlink(path)
        var hasher = SHA256()
        var size: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(size)) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else {
                close(fd)
                throw LarderError(.internal, "the backup could not be read back (errno \(errno))")
            }
            if n == 0 { break }
            hasher.update(Array(buffer[0..<n]))
            size += Int64(n)
        }
        return (fd, size, hasher.finalizeHex())
    }

    private func read(_ request: BackupReadRequest, connection: Int) throws(LarderError) -> ([UInt8], [UInt8]) {
        guard request.length <= maxChunkBytes else {
            throw LarderError(
                .payloadTooLarge,
                "a BACKUP_READ answers at most \(maxChunkBytes) bytes (what a frame carries); ask for less",
                field: "length", details: ["limit": .int(Int64(maxChunkBytes))])
        }
        guard let snapshot = state.withLock({ $0.snapshots[connection] }), snapshot.number == request.backup else {
            throw LarderError(
                .notFound, "this connection holds no backup \(request.backup); send BACKUP first", field: "backup")
        }
        guard request.offset <= snapshot.size else {
            throw LarderError(
                .invalidArgument, "offset \(request.offset) is past the end of the backup (\(snapshot.size) bytes)",
                field: "offset")
        }
        let length = Int(min(Int64(request.length), snapshot.size - request.offset))
        var bytes = [UInt8](repeating: 0, count: length)
        var done = 0
        while done < length {
            let n = bytes.withUnsafeMutableBytes {
                pread(snapshot.fd, $0.baseAddress! + done, length - done, off_t(request.offset) + off_t(done))
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw LarderError(.internal, "the backup could not be read (errno \(errno))") }
            done += n
        }
        let json = BackupReadRequest(backup: request.backup, offset: request.offset, length: length).json
        return (json.bytes, bytes)
    }

    /// Removes the connection's snapshot, if any.
    private func discard(connection: Int) {
        let old = state.withLock { $0.snapshots.removeValue(forKey: connection) }
        if let old { close(old.fd) }
    }

    /// Called when a connection closes: its snapshot goes (now, or as soon as a BACKUP in progress ends).
    func connectionClosed(_ connection: Int) {
        state.withLock { _ = $0.beginning.remove(connection) }
        discard(connection: connection)
    }

    /// Snapshots held now (for tests).
    var held: Int { state.withLock { $0.snapshots.count } }
}
