/// Every size, count and time limit a server enforces; all are announced to clients in the HELLO answer.
public struct Limits: Sendable, Equatable {
    /// Largest frame, length prefix excluded.
    public var maxFrameBytes: Int
    /// Largest JSON part after inflation (requests and responses).
    public var maxJSONBytes: Int
    /// Largest stored document (`data`, compact encoding).
    public var maxDocumentBytes: Int
    /// Largest blob. One that does not fit in a frame moves in chunks (`BLOB_UPLOAD`, ranged `BLOB_GET`).
    public var maxBlobBytes: Int
    /// Requests one connection may have unanswered at once.
    public var maxInFlight: Int
    /// Connections the server accepts at once.
    public var maxConnections: Int
    /// Milliseconds a connection may stay silent with nothing in flight before it is closed.
    public var idleTimeoutMs: Int
    /// Milliseconds a client has to finish a frame it has started (slow senders are cut).
    public var frameTimeoutMs: Int
    /// Largest frame accepted before a successful HELLO.
    public var maxHandshakeFrameBytes: Int
    /// Subscriptions (WATCH) one connection may hold at once.
    public var maxWatches: Int
    /// Unsent bytes a connection may hold when a live event is due; past it the subscription gets a gap event and
    /// ends (a subscriber that stops reading cannot make the server buffer without bound).
    public var maxWatchBufferBytes: Int
    /// The most bytes a `BLOB_UPLOAD_CHUNK` carries, and the size clients read large blobs in.
    public var blobChunkBytes: Int = 1 << 20
    /// Milliseconds an upload lives after its last chunk before it is dropped with its bytes.
    public var uploadExpiryMs: Int = 86_400_000
    /// The declared sizes of all unfinished uploads together may not pass this (RESOURCE_EXHAUSTED at `BLOB_UPLOAD`).
    public var maxUploadBytes: Int = 1 << 30
    /// Unfinished uploads one token may hold at once (one connection, on a server without tokens).
    public var maxUploadsPerToken: Int = 64
    /// The declared sizes of one token's unfinished uploads together (one connection's, on a server without tokens):
    /// a share of `maxUploadBytes`, so that no one client holds all of it.
    public var maxUploadBytesPerToken: Int = 1 << 28
    /// Requests the whole server lets wait for its work pool (searches, blob bytes, parsing writes): past it a request
    /// is answered RESOURCE_EXHAUSTED at once. Server-wide, not per connection.
    public var maxQueuedWork: Int = 10_000
    /// The thumbnail sizes (longer side, pixels) BLOB_GET makes; any other is INVALID_ARGUMENT, so that no client can
    /// fill the store with sizes. Ascending, each from 1 to `maxThumbnailSize`.
    public var thumbnailSizes: [Int]
    /// The most pixels (width × height, as the frame header declares them) of a photo a thumbnail is made of; larger
    /// ones are refused from the header, before anything is decoded.
    public var maxThumbnailSourcePixels: Int
    /// Milliseconds a server keeps a write's `requestKey` with its answer (Protocol.md section 5.10): a retry within it
    /// with the same key answers the first write's answer and applies nothing. Nil when the server takes no keys.
    public var requestKeyRetentionMs: Int? = 86_400_000
    /// The most milliseconds a read that carries `afterSeq` waits for this server to apply the change log that far
    /// before it reads the database instead (Protocol.md section 5.1); 0 reads the database at once. Nil when the
    /// server does not take `afterSeq` (one that announces no such limit).
    public var afterSeqWaitMs: Int? = 10
    /// On a server that accepts ID tokens: the milliseconds of clock difference tolerated on a token's `exp` and
    /// `nbf`. Absent (nil) on a server that accepts none.
    public var oidcLeewayMs: Int?
    /// The bounds a collection schema must stay within (SCHEMA_SET), announced under their own names.
    public var schema = SchemaLimits()
    /// On a server with password accounts (`--users`): their limits. Absent (nil) on a server without them.
    public var accounts: AccountLimits?

    /// The largest thumbnail size a server may offer.
    public static let maxThumbnailSize = 4096
    /// The most thumbnail sizes a server may offer.
    public static let maxThumbnailSizeCount = 16

    /// Limits with these values; each default is the one Protocol.md documents (`Limits.default`).
    public init(
        maxFrameBytes: Int = 40 << 20, maxJSONBytes: Int = 4 << 20, maxDocumentBytes: Int = 1 << 20,
        maxBlobBytes: Int = 256 << 20, maxInFlight: Int = 128, maxConnections: Int = 10_000,
        idleTimeoutMs: Int = 300_000, frameTimeoutMs: Int = 30_000, maxHandshakeFrameBytes: Int = 64 << 10,
        maxWatches: Int = 16, maxWatchBufferBytes: Int = 1 << 20, thumbnailSizes: [Int] = [64, 128, 256, 512, 1024],
        maxThumbnailSourcePixels: Int = 100_000_000
    ) {
        self.thumbnailSizes = thumbnailSizes
        self.maxThumbnailSourcePixels = maxThumbnailSourcePixels
        self.maxFrameBytes = maxFrameBytes
        self.maxJSONBytes = maxJSONBytes
        self.maxDocumentBytes = maxDocumentBytes
        self.maxBlobBytes = maxBlobBytes
        self.maxInFlight = maxInFlight
        self.maxConnections = maxConnections
        self.idleTimeoutMs = idleTimeoutMs
        self.frameTimeoutMs = frameTimeoutMs
        self.maxHandshakeFrameBytes = maxHandshakeFrameBytes
        self.maxWatches = maxWatches
        self.maxWatchBufferBytes = maxWatchBufferBytes
    }

    /// The defaults documented in Protocol.md.
    public static let `default` = Limits()

    /// The names and values as announced in HELLO.
    package var json: JSONObject {
        var object: JSONObject = [
            "maxFrameBytes": .int(Int64(maxFrameBytes)), "maxJSONBytes": .int(Int64(maxJSONBytes)),
            "maxDocumentBytes": .int(Int64(maxDocumentBytes)), "maxBlobBytes": .int(Int64(maxBlobBytes)),
            "maxInFlight": .int(Int64(maxInFlight)), "maxConnections": .int(Int64(maxConnections)),
            "idleTimeoutMs": .int(Int64(idleTimeoutMs)), "frameTimeoutMs": .int(Int64(frameTimeoutMs)),
            "maxHandshakeFrameBytes": .int(Int64(maxHandshakeFrameBytes)), "maxWatches": .int(Int64(maxWatches)),
            "maxWatchBufferBytes": .int(Int64(maxWatchBufferBytes)), "blobChunkBytes": .int(Int64(blobChunkBytes)),
            "uploadExpiryMs": .int(Int64(uploadExpiryMs)), "maxUploadBytes": .int(Int64(maxUploadBytes)),
            "maxUploadsPerToken": .int(Int64(maxUploadsPerToken)),
            "maxUploadBytesPerToken": .int(Int64(maxUploadBytesPerToken)), "maxQueuedWork": .int(Int64(maxQueuedWork)),
            "maxThumbnailSourcePixels": .int(Int64(maxThumbnailSourcePixels)),
            "thumbnailSizes": .array(thumbnailSizes.map { .int(Int64($0)) }),
        ]
        if let afterSeqWaitMs { object["afterSeqWaitMs"] = .int(Int64(afterSeqWaitMs)) }
        if let requestKeyRetentionMs { object["requestKeyRetentionMs"] = .int(Int64(requestKeyRetentionMs)) }
        if let oidcLeewayMs { object["oidcLeewayMs"] = .int(Int64(oidcLeewayMs)) }
        for (name, value) in schema.named { object[name] = .int(Int64(value)) }
        if let accounts { for (name, value) in accounts.json { object[name] = value } }
        return object
    }

    /// Reads announced limits; a missing member keeps its default.
    package init(json: JSONObject) throws(LarderError) {
        self.init()
        var reader = FieldReader(json, path: "limits")
        try reader.limit("maxFrameBytes", into: &maxFrameBytes)
        try reader.limit("maxJSONBytes", into: &maxJSONBytes)
        try reader.limit("maxDocumentBytes", into: &maxDocumentBytes)
        try reader.limit("maxBlobBytes", into: &maxBlobBytes)
        try reader.limit("maxInFlight", into: &maxInFlight)
        try reader.limit("maxConnections", into: &maxConnections)
        try reader.limit("idleTimeoutMs", into: &idleTimeoutMs)
        try reader.limit("frameTimeoutMs", into: &frameTimeoutMs)
        try reader.limit("maxHandshakeFrameBytes", into: &maxHandshakeFrameBytes)
        try reader.limit("maxWatches", into: &maxWatches)
        try reader.limit("maxWatchBufferBytes", into: &maxWatchBufferBytes)
        try reader.limit("blobChunkBytes", into: &blobChunkBytes)
        try reader.limit("uploadExpiryMs", into: &uploadExpiryMs)
        try reader.limit("maxUploadBytes", into: &maxUploadBytes)
        try reader.limit("maxUploadsPerToken", into: &maxUploadsPerToken)
        try reader.limit("maxUploadBytesPerToken", into: &maxUploadBytesPerToken)
        try reader.limit("maxQueuedWork", into: &maxQueuedWork)
        try reader.limit("maxThumbnailSourcePixels", into: &maxThumbnailSourcePixels)
        afterSeqWaitMs = try reader.optionalInt("afterSeqWaitMs", range: 0...Int64.max).map { Int(clamping: $0) }
        for (name, _) in SchemaLimits.default.named {
            if let v = try reader.optionalInt(name, range: 0...Int64.max) { _ = schema.set(name, Int(clamping: v)) }
        }
        // Absent: the server takes no request keys.
        requestKeyRetentionMs = try reader.optionalInt("requestKeyRetentionMs", range: 1...Int64.max)
            .map { Int(clamping: $0) }
        oidcLeewayMs = try reader.optionalInt("oidcLeewayMs", range: 0...Int64.max).map { Int(clamping: $0) }
        accounts = try AccountLimits(limits: &reader)
        if let sizes = try reader.optionalArray("thumbnailSizes", maxCount: Limits.maxThumbnailSizeCount) {
            thumbnailSizes = []
            for (n, size) in sizes.enumerated() {
                guard let value = size.intValue, (1...Int64(Limits.maxThumbnailSize)).contains(value) else {
                    throw .invalid(
                        "limits.thumbnailSizes.\(n)",
                        "thumbnailSizes.\(n) must be an integer from 1 to \(Limits.maxThumbnailSize)")
                }
                thumbnailSizes.append(Int(value))
            }
        }
    }

    /// Checks that the limits fit together; the message names the limit to change.
    package func validate() throws(LarderError) {
        let positive: [(String, Int)] = [
            ("maxFrameBytes", maxFrameBytes), ("maxJSONBytes", maxJSONBytes), ("maxDocumentBytes", maxDocumentBytes),
            ("maxBlobBytes", maxBlobBytes), ("maxInFlight", maxInFlight), ("maxConnections", maxConnections),
            ("idleTimeoutMs", idleTimeoutMs), ("frameTimeoutMs", frameTimeoutMs),
            ("maxHandshakeFrameBytes", maxHandshakeFrameBytes), ("maxWatches", maxWatches),
            ("maxWatchBufferBytes", maxWatchBufferBytes), ("blobChunkBytes", blobChunkBytes),
            ("uploadExpiryMs", uploadExpiryMs), ("maxUploadBytes", maxUploadBytes),
            ("maxUploadsPerToken", maxUploadsPerToken), ("maxUploadBytesPerToken", maxUploadBytesPerToken),
            ("maxQueuedWork", maxQueuedWork),
            ("maxThumbnailSourcePixels", maxThumbnailSourcePixels), ("requestKeyRetentionMs", requestKeyRetentionMs ?? 1),
        ] + schema.named
        for (name, value) in positive where value <= 0 {
            throw LarderError(.invalidArgument, "\(name) must be greater than 0", field: name)
        }
        if thumbnailSizes.count > Limits.maxThumbnailSizeCount
            || thumbnailSizes.contains(where: { !(1...Limits.maxThumbnailSize).contains($0) })
            || thumbnailSizes != Array(Set(thumbnailSizes)).sorted()
        {
            throw LarderError(
                .invalidArgument, "thumbnailSizes must be at most \(Limits.maxThumbnailSizeCount) different sizes, "
                    + "each from 1 to \(Limits.maxThumbnailSize), in ascending order", field: "thumbnailSizes")
        }
        if schema.patternMatchSteps > SchemaLimits.maxPatternMatchSteps {
            throw LarderError(
                .invalidArgument, "schemaPatternMatchSteps must be at most \(SchemaLimits.maxPatternMatchSteps)",
                field: "schemaPatternMatchSteps")
        }
        if maxFrameBytes > Int(UInt32.max) - 4 {
            throw LarderError(.invalidArgument, "maxFrameBytes must be below 4 GiB", field: "maxFrameBytes")
        }
        if maxDocumentBytes > maxJSONBytes / 2 {
            throw LarderError(
                .invalidArgument, "maxJSONBytes must be at least twice maxDocumentBytes so a record fits in a reply",
                field: "maxJSONBytes")
        }
        if maxFrameBytes < Frame.headerSize + maxJSONBytes + blobChunkBytes {
            throw LarderError(
                .invalidArgument, "maxFrameBytes must hold a full JSON part plus a blob chunk (at least "
                    + "\(Frame.headerSize + maxJSONBytes + blobChunkBytes))", field: "maxFrameBytes")
        }
    }

    /// The largest binary part one frame carries beside a full JSON part: a blob or range larger than this moves in
    /// chunks (a whole `BLOB_GET` of a larger blob is refused with PAYLOAD_TOO_LARGE).
    public var maxBinaryPartBytes: Int { max(0, min(maxBlobBytes, maxFrameBytes - Frame.headerSize - maxJSONBytes)) }
}
