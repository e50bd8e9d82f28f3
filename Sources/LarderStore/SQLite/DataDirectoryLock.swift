#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// One process per data directory: an exclusive `flock` on `larder.lock`, held while any store of this process has
/// the directory open, and released by the kernel when the process dies (a crash leaves no stale lock behind).
///
/// A second process would break what the store and the server rely on: the server's read cache is only told of its
/// own writes, and the trigram index's passes are numbered by one writer. Stores opened twice in one process (tests,
/// an embedding app) share the lock.
final class DataDirectoryLock: Sendable {
    static let fileName = "larder.lock"

    /// The locks this process holds, by the directory's device and inode (one directory under any path, and a
    /// directory deleted and made again is a new one): the descriptor and how many stores use it.
    private static let held = Locked<[String: (fd: Int32, users: Int)]>([:])

    private let key: String
    private let released = Atomic<Bool>(false)

    /// What names the file or directory at `path` however it is reached, and tells it from one made again there: its
    /// device and inode (`path` itself when it cannot be read).
    static func identity(_ path: String) -> String {
        var info = stat()
        return stat(path, &info) == 0 ? "\(info.st_dev):\(info.st_ino)" : path
    }

    /// Takes the lock on `directory` (which exists), or throws UNAVAILABLE naming the process that holds it.
    init(directory: String) throws(LarderError) {
        key = DataDirectoryLock.identity(directory)
        let path = (directory as NSString).appendingPathComponent(DataDirectoryLock.fileName)
        let key = key
        // A lock this process gave up (its last store closed) is held on a while by any child it was starting at that
        // moment: between fork and exec a child has a copy of every descriptor, the lock's too. Such a holder is this
        // process by the lock file's pid, and goes at exec: wait for it (another process's lock is refused at once).
        let deadline = ContinuousClock.now + .seconds(10)
        var result: Result<Void, LarderError>
        var heldByThisProcess = false
        repeat {
            if heldByThisProcess { usleep(1_000) }
            (result, heldByThisProcess) = DataDirectoryLock.attempt(key: key, path: path, directory: directory)
        } while heldByThisProcess && ContinuousClock.now < deadline
        if case .failure = result { released.store(true, ordering: .relaxed) }  // nothing to give back at deinit
        try result.get()
    }

    /// One try at the lock; `heldByThisProcess` when it is refused and the lock file names this process.
    private static func attempt(key: String, path: String, directory: String)
        -> (result: Result<Void, LarderError>, heldByThisProcess: Bool)
    {
        held.withLock { held in
            if let entry = held[key] {
                held[key] = (entry.fd, entry.users + 1)
                return (.success(()), false)
            }
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, PrivateFiles.fileMode)
            guard fd >= 0 else {
                return (
                    .failure(
                        LarderError(
                            .internal,
                            "cannot open '\(path)' (errno \(errno)): check the data directory's permissions")),
                    false
                )
            }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                let holder = DataDirectoryLock.holder(fd)
                close(fd)
                guard code == EWOULDBLOCK else {
                    return (
                        .failure(
                            LarderError(
                                .internal, "cannot lock '\(path)': \(String(cString: strerror(code))) (errno \(code)); "
                                    + "the data directory must be on a file system with flock(2)")),
                        false
                    )
                }
                let pid = holder.map { " (pid \($0))" } ?? ""
                return (
                    .failure(
                        LarderError(
                            .unavailable,
                            "the data directory '\(directory)' is in use by another Larder process\(pid); stop it, or "
                                + "give this one a data directory of its own")),
                    holder == getpid()
                )
            }
            // Who holds it, for the message above (informational: the lock itself is the flock).
            let pid = Array("\(getpid())\n".utf8)
            if ftruncate(fd, 0) == 0 { _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } }
            held[key] = (fd, 1)
            return (.success(()), false)
        }
    }

    /// The pid the lock file names, if any.
    private static func holder(_ fd: Int32) -> pid_t? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        let text = count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
        return pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Gives this store's use of the lock back (once); the last user of the directory in this process unlocks it.
    func release() {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        DataDirectoryLock.held.withLock { held in
            guard let entry = held[key] else { return }
            if entry.users > 1 {
                held[key] = (entry.fd, entry.users - 1)
            } else {
                held[key] = nil
                close(entry.fd)  // closing the last descriptor of the open file releases the flock
            }
        }
    }

    deinit { release() }
}
