import Foundation
import LarderWire

extension SQLiteStore {
    /// `blobRead`, with a range of a blob file answered as that file open (checked to be long enough), not read.
    public func blobReadForSending(_ id: UUID, offset: Int64, length: Int) throws(LarderError)
        -> (meta: BlobInfo, body: BlobBody)
    {
        let (meta, stored) = try storedRange(id, offset: offset, length: length)
        guard case .file(let name, let range) = stored else { return (meta, .bytes(try bytes(id, stored))) }
        let path = files.path(name)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            // Deleted since its row was read (NOT_FOUND), or lost (INTERNAL, naming the file).
            if errno == ENOENT { throw explainMissing(id, name) }
            throw BlobFiles.ioError("open", path)
        }
        let file = BlobFileRange(fd: fd, offset: range.lowerBound, count: range.count)
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw BlobFiles.ioError("stat", path) }
        // A file shorter than its row says would end the send midway, after the answer's header went out.
        guard Int64(info.st_size) >= range.upperBound else {
            throw SQLiteStore.damagedFile(path, size: range.upperBound)
        }
        return (meta, .file(file))
    }

    /// Blob `id`'s metadata and where the range's bytes are. One transaction: both come from the same snapshot.
    func storedRange(_ id: UUID, offset: Int64, length: Int) throws(LarderError)
        -> (meta: BlobInfo, bytes: StoredBytes)
    {
        try chunkReaders.read(transaction: true) { db throws(LarderError) in
            try SQLiteStore.readBlob(db, id) { (meta) throws(LarderError) -> Range<Int64>? in
                try UploadRules.range(offset: offset, length: length, size: meta.size)
            }
        }
    }
}
