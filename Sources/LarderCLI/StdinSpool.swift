#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient

/// Standard input read for `blob put -`, with its SHA-256 computed as it is read, and memory bounded whatever its size.
///
/// A resumable upload declares its size in `BLOB_UPLOAD`, before the first chunk, and a pipe's size is known only at
/// its end; and after a broken connection the upload must go on from the server's committed offset, which may be
/// behind anything still in memory, while stdin cannot be read again. So an input that does not fit the one-frame
/// `BLOB_PUT` is written to an unnamed temporary file as it arrives (1 MiB at a time) and uploaded from there like
/// `blob put FILE`, which resumes from any offset. An input over the server's `maxBlobBytes` is refused as soon as it
/// passes the limit, so a runaway pipe cannot fill the disk.
final class StdinSpool {
    /// The input when it fits one frame.
    private(set) var bytes: [UInt8] = []
    /// The temporary file holding the input when it does not (an open descriptor; the name is already removed).
    private(set) var fd: Int32 = -1
    /// The input's size and SHA-256 (lowercase hex).
    private(set) var size: Int64 = 0
    private(set) var sha256 = ""

    /// Reads `input` to its end. Up to `inMemory` bytes stay in memory; more go to a file in `directory`.
    init(input: Int32 = 0, inMemory: Int, limit: Int, directory: String = NSTemporaryDirectory()) throws {
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        do {
            while true {
                let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress!, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n >= 0 else {
                    throw CommandFailure(message: "cannot read stdin: \(String(cString: strerror(errno)))")
                }
                if n == 0 { break }
                let chunk = buffer[0..<n]
                size += Int64(n)
                guard size <= Int64(limit) else {
                    throw CommandFailure(
                        message: "stdin passed the server's limit for a blob (maxBlobBytes, \(limit) bytes); "
                            + "the server's --max-blob-bytes sets it")
                }
                hasher.update(chunk)
                if fd < 0 && size <= Int64(inMemory) {
                    bytes.append(contentsOf: chunk)
                    continue
                }
                if fd < 0 {
                    fd = try Self.temporaryFile(in: directory)
                    try write(bytes[...])
                    bytes = []
                }
                try write(chunk)
            }
        } catch {
            if fd >= 0 { close(fd) }
            fd = -1
            throw error
        }
        sha256 = hasher.finalizeHex()
    }

    deinit { if fd >= 0 { close(fd) } }

    /// The path the upload reads the spooled input from: the open descriptor's, as the file has no name of its own.
    var path: String? {
        guard fd >= 0 else { return nil }
        #if os(Linux)
        return "/proc/self/fd/\(fd)"
        #else
        return "/dev/fd/\(fd)"
        #endif
    }

    /// An unnamed file for the input: created, opened, and unlinked at once, so nothing is left behind however the
    /// command ends.
    private static func temporaryFile(in directory: String) throws -> Int32 {
        var template = Array((directory.hasSuffix("/") ? directory : directory + "/").utf8CString.dropLast())
            + Array("larder-stdin-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else {
            throw CommandFailure(
                message: "cannot create a temporary file in \(directory) for stdin: "
                    + "\(String(cString: strerror(errno))) (TMPDIR chooses the directory)")
        }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        return fd
    }

    private func write(_ bytes: ArraySlice<UInt8>) throws {
        do {
            try FileHandle(fileDescriptor: fd, closeOnDealloc: false).write(contentsOf: bytes)
        } catch {
            throw CommandFailure(
                message: "cannot write stdin to a temporary file: \(error.localizedDescription) "
                    + "(TMPDIR chooses the directory; it needs room for the whole input)")
        }
    }
}
