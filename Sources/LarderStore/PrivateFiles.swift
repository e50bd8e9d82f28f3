#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderWire

/// The data directory holds every document and photo: it is made readable by the server's user alone, directories
/// 0700 and files 0600, whatever the process's umask.
package enum PrivateFiles {
    /// The mode of every file the store creates.
    package static let fileMode: mode_t = 0o600
    /// The mode of every directory the store creates.
    package static let directoryMode: mode_t = 0o700

    /// Creates `path` (and missing parents) as a directory of mode 0700; an existing one is left as it is.
    package static func makeDirectory(_ path: String) throws(LarderError) {
        var info = stat()
        if stat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFDIR else {
                throw LarderError(.internal, "'\(path)' is a file, not a directory; choose another path")
            }
            return
        }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != path {
            // Parents are ordinary directories of the operator's; only the data directory itself is private.
            try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        }
        guard mkdir(path, directoryMode) == 0 || errno == EEXIST else {
            throw LarderError(
                .internal, "cannot create the directory '\(path)': \(String(cString: strerror(errno))); "
                    + "check the path and its permissions")
        }
        // mkdir's mode passes through the umask, which may only take bits away; chmod sets exactly 0700.
        _ = chmod(path, directoryMode)
    }

    /// Creates `path` empty with mode 0600 when it does not exist (SQLite then opens it as a new database, and gives
    /// its -wal and -shm files the database file's mode).
    package static func createFile(_ path: String) throws(LarderError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, fileMode)
        guard fd >= 0 else {
            throw LarderError(.internal, "cannot create '\(path)': \(String(cString: strerror(errno)))")
        }
        close(fd)
    }

    /// Opens `path` for writing with mode 0600 (created when missing) and `flags` added; -1 and errno on failure.
    package static func openForWriting(_ path: String, flags: Int32) -> Int32 {
        open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, fileMode)
    }

    /// A warning for a directory other users may read or enter, nil when only its owner may.
    package static func exposureWarning(_ path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & 0o007 != 0 else { return nil }
        let mode = String(info.st_mode & 0o777, radix: 8)
        return "the data directory '\(path)' can be read by other users (mode \(mode)), and so every document and "
            + "photo in it: run chmod 700 on it"
    }
}
