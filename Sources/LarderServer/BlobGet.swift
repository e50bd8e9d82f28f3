import Foundation
import LarderStore
import LarderThumbnails
import LarderWire

/// A blob file's range is what the output queue sends with sendfile.
extension BlobFileRange: FileRegion {}

extension Router {
    /// BLOB_GET, on the work queue: the blob, or with `thumbnail` a thumbnail of it (Protocol.md §5.4).
    ///
    /// A thumbnail comes from the store's cache when it holds one; otherwise it is made here, on the work queue (never
    /// on an event loop: decoding a photo takes milliseconds), cached through the writer, and answered after that
    /// commit, so that the next request finds it. A photo that cannot give a thumbnail is answered with the error and
    /// left as it is.
    ///
    /// With `sendFiles`, a large range of a blob kept in a file is answered as that file's range, which the connection
    /// sends with sendfile (no copy through this process); otherwise it is read into the answer.
    ///
    /// With `collections` (a token limited to them), the request's own errors come first, then the blob is refused
    /// unless it is attached to one of them (`visibleBlob`), before anything is read or made of it.
    func answerBlobGet(
        _ frame: Frame, sendFiles: Bool = false, collections: Set<String>? = nil,
        completion: @escaping @Sendable (Reply) -> Void
    ) {
        let request: BlobGetRequest
        do throws(LarderError) {
            request = try BlobGetRequest(json: try frame.jsonObject())
            if let maxSide = request.thumbnail, !thumbnailSizes.contains(maxSide) {
                throw LarderError(
                    .invalidArgument,
                    "thumbnail must be one of the sizes this server makes: "
                        + thumbnailSizes.map(String.init).joined(separator: ", ") + " (HELLO's limits.thumbnailSizes)",
                    field: "thumbnail", details: ["sizes": .array(thumbnailSizes.map { .int(Int64($0)) })])
            }
            if let collections { _ = try visibleBlob(request.id, .blobGet, collections) }
        } catch {
            return completion(reply(to: frame, .failure(error)))
        }
        guard let maxSide = request.thumbnail else {
            guard sendFiles, request.isRange else {
                return completion(reply(to: frame, Result { () throws(LarderError) in try blobGet(request) }))
            }
            do throws(LarderError) {
                let (json, body) = try blobRange(request, sendFiles: true)
                guard case .file(let range) = body else {
                    return completion(reply(to: frame, .success((json, try body.inMemory()))))
                }
                var answered = reply(to: frame, .success((json, [])))
                if answered.status == .ok { answered.file = range }
                return completion(answered)
            } catch {
                return completion(reply(to: frame, .failure(error)))
            }
        }
        let made: (meta: BlobInfo, thumbnail: StoredThumbnail)
        do throws(LarderError) {
            let cached = try store.thumbnail(request.id, maxSide: maxSide)
            if let thumbnail = cached.thumbnail {
                stats.thumbnailServed(fromCache: true)
                return completion(thumbnailReply(frame, cached.meta, maxSide, thumbnail))
            }
            // The stored dimensions are the header's: a photo over the limit is refused without reading its bytes.
            try Thumbnailer.checkPixels(
                width: cached.meta.width, height: cached.meta.height, limit: maxThumbnailSourcePixels)
            // Past this wait, the photo's bytes and its decode are in memory: at most `thumbnailThreads` at once.
            thumbnailSlots.wait()
            defer { thumbnailSlots.signal() }
            let (meta, bytes) = try store.blobGet(request.id)
            let thumbnail = try Thumbnailer.make(bytes, size: maxSide, maxSourcePixels: maxThumbnailSourcePixels)
            made = (meta, StoredThumbnail(width: thumbnail.width, height: thumbnail.height, bytes: thumbnail.jpeg))
        } catch {
            return completion(reply(to: frame, .failure(error)))
        }
        stats.thumbnailServed(fromCache: false)
        let (meta, thumbnail) = made
        store.submitWrite({ (c) throws(LarderError) in
            try c.thumbnailPut(meta.id, sha256: meta.sha256, maxSide: maxSide, thumbnail: thumbnail)
        }) { [self] _ in
            // Answered whether or not it was cached: a blob deleted meanwhile, or a store that refused the write,
            // costs the next request a new thumbnail, not this one its answer.
            completion(thumbnailReply(frame, meta, maxSide, thumbnail))
        }
    }

    private func thumbnailReply(_ frame: Frame, _ meta: BlobInfo, _ maxSide: Int, _ thumbnail: StoredThumbnail)
        -> Reply
    {
        var info = meta
        info.thumbnail = ThumbnailInfo(
            maxSide: maxSide, width: thumbnail.width, height: thumbnail.height, size: Int64(thumbnail.bytes.count))
        return reply(to: frame, .success((info.json.bytes, thumbnail.bytes)))
    }
}
