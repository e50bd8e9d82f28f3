import LarderStore
import LarderWire

// The resumable upload's requests, run on the connection's write lane in the order sent.
extension Router {
    /// The requests of a resumable upload (BLOB_UPLOAD, its chunks, FINISH and ABORT).
    static func isUpload(_ opcode: Opcode) -> Bool {
        opcode == .blobUpload || opcode == .blobUploadChunk || opcode == .blobUploadFinish || opcode == .blobUploadAbort
    }

    /// The writes of a resumable upload: each waits for its COMMIT on the calling thread (a write lane's). `uploader`
    /// names who begins an upload, for its share of the upload quota (`ConnectionIdentity.uploader`).
    func upload(_ frame: Frame, uploader: String) throws(LarderError) -> ([UInt8], [UInt8]) {
        let object = try frame.jsonObject()
        switch frame.opcode {
        case .blobUpload:
            return (try store.uploadBegin(try BlobUploadRequest(json: object), owner: uploader).json.bytes, [])
        case .blobUploadChunk:
            let r = try BlobUploadChunkRequest(json: object)
            let info = try store.uploadChunk(r.upload, offset: r.offset, bytes: frame.binary, crc32: r.crc32)
            return (info.json.bytes, [])
        case .blobUploadFinish:
            var object = object
            let requestKey = try RequestKey.take(from: &object)
            let r = try BlobUploadFinishRequest(json: object)
            guard let requestKey else { return (try store.uploadFinish(r.upload, sha256: r.sha256).json.bytes, []) }
            let key = RequestKey.request(requestKey, frame.opcode, object)
            // A FINISH that committed made its upload a blob: its retry finds the upload gone, and the key's answer.
            if let stored = try store.requestKeyAnswer(key) { return (stored, []) }
            do {
                return (try store.uploadFinish(r.upload, sha256: r.sha256, requestKey: key).json.bytes, [])
            } catch where error.status == .notFound {
                if let stored = try store.requestKeyAnswer(key) { return (stored, []) }
                throw error
            }
        case .blobUploadAbort:
            let r = try BlobUploadIDRequest(json: object)
            try store.uploadAbort(r.upload)
            return (BlobUploadAbortResponse(upload: r.upload).json.bytes, [])
        default:
            throw LarderError(.internal, "\(frame.opcode.name) is no upload request")
        }
    }
}
