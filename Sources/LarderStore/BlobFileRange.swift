#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderWire

/// A range of an open blob file, to be sent by the kernel (sendfile) instead of read into memory. The descriptor
/// stays open as long as this lives: a blob deleted meanwhile (its file unlinked) still delivers the range.
public final class BlobFileRange: Sendable {
    public let fd: Int32
    public let offset: Int64
    public let count: Int

    init(fd: Int32, offset: Int64, count: Int) {
        self.fd = fd
        self.offset = offset
        self.count = count
    }

    deinit { close(fd) }

    /// The range's bytes, read into memory (for a connection that cannot send from the file: TLS).
    public func read() throws(LarderError) -> [UInt8] {
        let bytes = try BlobFiles.read(fd, at: offset, count: count, path: "a blob file")
        guard bytes.count == count else {
            throw LarderError(.internal, "a blob file ended before the \(offset + Int64(count)) bytes it was read for")
        }
        return bytes
    }
}

/// The bytes of a range for an answer: in memory, or in a file (`BlobFileRange`).
public enum BlobBody: Sendable {
    case bytes([UInt8])
    case file(BlobFileRange)

    public var count: Int {
        switch self {
        case .bytes(let bytes): bytes.count
        case .file(let range): range.count
        }
    }

    /// The bytes, read from the file when they are in one.
    public func inMemory() throws(LarderError) -> [UInt8] {
        switch self {
        case .bytes(let bytes): bytes
        case .file(let range): try range.read()
        }
    }
}

extension BlobStore {
    /// A store that keeps no blob in files answers the bytes.
    public func blobReadForSending(_ id: UUID, offset: Int64, length: Int) throws(LarderError)
        -> (meta: BlobInfo, body: BlobBody)
    {
        let (meta, bytes) = try blobRead(id, offset: offset, length: length)
        return (meta, .bytes(bytes))
    }
}
