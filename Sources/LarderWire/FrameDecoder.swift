/// The failure of a byte stream: the connection cannot go on. `requestID` is the id of the frame at fault when its
/// header could be read (0 otherwise), so the error frame can name it.
package struct FrameError: Error, Sendable, Equatable {
    package var error: LarderError
    package var requestID: UInt32
    package var opcode: Opcode

    package init(_ error: LarderError, requestID: UInt32 = 0, opcode: Opcode = Opcode(rawValue: 0)) {
        self.error = error
        self.requestID = requestID
        self.opcode = opcode
    }
}

/// The incremental frame decoder: a pure value, fed bytes, returning whole frames.
///
/// `next` returns nil when it needs more bytes and consumes nothing in that case. Every limit is checked as soon as
/// the 28-byte prefix is available, before any body byte is buffered or allocated for.
package struct FrameDecoder {
    /// Largest frame accepted (length prefix excluded); servers lower it before HELLO.
    package var maxFrameBytes: Int
    /// Largest JSON part accepted, on the wire and after inflation.
    package var maxJSONBytes: Int
    /// Largest binary part accepted.
    package var maxBinaryBytes: Int
    /// Whether compressed JSON parts are accepted: only once both sides agreed to zlib in HELLO (a receiver that
    /// tracks the handshake clears it until then). A compressed part otherwise is a protocol error, found at the header.
    package var acceptsCompressed = true
    /// Created on the first compressed frame: most connections never send one, and a zlib stream costs ~7 KiB.
    private var inflater: Inflater?

    package init(limits: Limits = .default) {
        maxFrameBytes = limits.maxFrameBytes
        maxJSONBytes = limits.maxJSONBytes
        maxBinaryBytes = limits.maxBlobBytes
    }

    package init(maxFrameBytes: Int, maxJSONBytes: Int, maxBinaryBytes: Int) {
        self.maxFrameBytes = maxFrameBytes
        self.maxJSONBytes = maxJSONBytes
        self.maxBinaryBytes = maxBinaryBytes
    }

    /// The header of the next frame if its prefix is complete, validated against the limits.
    package func peekHeader(_ buffer: ByteBuffer) throws(FrameError) -> FrameHeader? {
        let result = buffer.withUnsafeReadableBytes { raw in Result { () throws(FrameError) in try peekHeader(raw) } }
        return try result.get()
    }

    /// `peekHeader` over the bytes at the start of `raw`.
    package func peekHeader(_ raw: UnsafeRawBufferPointer) throws(FrameError) -> FrameHeader? {
        guard raw.count >= Frame.prefixSize else {
            // A stranger (an HTTP request, TLS) and a hopeless length are refused once the first 6 bytes (length and
            // magic) are in, the magic first, as for a whole header: the same bytes get the same error however they
            // arrive, and a stranger hears that it is not speaking Larder rather than that its "length" is too large.
            if raw.count >= 6 {
                let length = UInt32(raw[0]) << 24 | UInt32(raw[1]) << 16 | UInt32(raw[2]) << 8 | UInt32(raw[3])
                let magic = UInt16(raw[4]) << 8 | UInt16(raw[5])
                if magic != Frame.magic { throw FrameDecoder.badMagic }
                try checkLength(length, requestID: 0, opcode: Opcode(rawValue: 0))
            }
            return nil
        }
        let header = FrameHeader(raw)
        try validate(header)
        return header
    }

    private static let badMagic = FrameError(
        LarderError(.protocolError, "bad magic: this is not a Larder frame (bytes 4-5 must be 0x4C52, \"LR\")"))

    private func checkLength(_ length: UInt32, requestID: UInt32, opcode: Opcode) throws(FrameError) {
        if Int(length) > maxFrameBytes {
            throw FrameError(
                LarderError(
                    .payloadTooLarge, "frame of \(length) bytes exceeds the limit of \(maxFrameBytes) bytes",
                    details: ["limit": .int(Int64(maxFrameBytes))]), requestID: requestID, opcode: opcode)
        }
        if Int(length) < Frame.headerSize {
            throw FrameError(
                LarderError(.protocolError, "frame length \(length) is shorter than the \(Frame.headerSize)-byte header"),
                requestID: requestID, opcode: opcode)
        }
    }

    private func validate(_ h: FrameHeader) throws(FrameError) {
        func fail(_ status: Status, _ message: String, _ details: JSONObject = [:]) -> FrameError {
            FrameError(LarderError(status, message, details: details), requestID: h.requestID, opcode: h.opcode)
        }
        guard h.magic == Frame.magic else { throw FrameDecoder.badMagic }
        guard h.version == Frame.version else {
            throw fail(
                .unsupportedVersion, "frame version \(h.version) is not supported; this server speaks version 1",
                ["supported": [1]])
        }
        try checkLength(h.length, requestID: h.requestID, opcode: h.opcode)
        guard h.flags.isSubset(of: .known) else {
            throw fail(.protocolError, "unknown flag bits 0x\(String(h.flags.rawValue, radix: 16)) are set")
        }
        guard acceptsCompressed || !h.flags.contains(.compressed) else {
            throw fail(
                .protocolError, "a compressed JSON part, but zlib was not agreed in HELLO (and HELLO itself is never "
                    + "compressed): send it uncompressed, or offer \"zlib\" in HELLO")
        }
        guard UInt64(h.length) == UInt64(Frame.headerSize) + UInt64(h.jsonLength) + UInt64(h.binaryLength) else {
            throw fail(.protocolError, "frame length \(h.length) does not equal 24 + JSON length + binary length")
        }
        guard h.flags.contains(.binary) == (h.binaryLength > 0) else {
            throw fail(.protocolError, "the binary flag and the binary length disagree")
        }
        if Int(h.jsonLength) > maxJSONBytes {
            throw fail(
                .payloadTooLarge, "JSON part of \(h.jsonLength) bytes exceeds the limit of \(maxJSONBytes) bytes",
                ["limit": .int(Int64(maxJSONBytes))])
        }
        if Int(h.binaryLength) > maxBinaryBytes {
            throw fail(
                .payloadTooLarge, "binary part of \(h.binaryLength) bytes exceeds the limit of \(maxBinaryBytes) bytes",
                ["limit": .int(Int64(maxBinaryBytes))])
        }
        if h.flags.contains(.compressed) {
            guard h.jsonLength > 0, h.uncompressedLength > 0 else {
                throw fail(.protocolError, "a compressed JSON part needs non-zero compressed and uncompressed lengths")
            }
            if Int(h.uncompressedLength) > maxJSONBytes {
                throw fail(
                    .payloadTooLarge, "JSON part inflates to \(h.uncompressedLength) bytes, over the limit of "
                        + "\(maxJSONBytes) bytes", ["limit": .int(Int64(maxJSONBytes))])
            }
        } else if h.uncompressedLength != 0 {
            throw fail(.protocolError, "uncompressed length must be 0 when the JSON part is not compressed")
        }
    }

    /// Decodes the next whole frame from `buffer`, or returns nil (consuming nothing) when more bytes are needed.
    package mutating func next(_ buffer: inout ByteBuffer) throws(FrameError) -> Frame? {
        let result = buffer.withUnsafeReadableBytes { raw in Result { () throws(FrameError) in try next(in: raw) } }
        guard let (frame, size) = try result.get() else { return nil }
        buffer.moveReader(by: size)
        return frame
    }

    /// The header and (inflated) JSON part of the next frame, consumed, or nil (consuming nothing) until both are in
    /// `buffer`. The frame's `header.binaryLength` bytes of binary part follow in the stream, for the caller to read
    /// into a buffer of its own: a large part is then copied once, not gathered and cut out of the stream's buffer.
    package mutating func nextHead(_ buffer: inout ByteBuffer) throws(FrameError) -> (FrameHeader, json: [UInt8])? {
        guard let header = try peekHeader(buffer) else { return nil }
        let end = Frame.prefixSize + Int(header.jsonLength)
        guard buffer.readableCount >= end else { return nil }
        if header.flags.contains(.compressed) && inflater == nil { inflater = Inflater() }
        let json = try buffer.withUnsafeReadableBytes { raw in jsonPart(header, raw) }.get()
        buffer.moveReader(by: end)
        return (header, json)
    }

    /// The JSON part of the frame `raw` starts with, inflated if compressed.
    /// (The inflater exists already when the part is compressed.)
    private func jsonPart(_ header: FrameHeader, _ raw: UnsafeRawBufferPointer) -> Result<[UInt8], FrameError> {
        let bytes = UnsafeRawBufferPointer(rebasing: raw[Frame.prefixSize..<(Frame.prefixSize + Int(header.jsonLength))])
        guard header.flags.contains(.compressed) else { return .success(Array(bytes)) }
        do throws(LarderError) {
            return .success(try inflater!.inflate(bytes, expectedLength: Int(header.uncompressedLength)))
        } catch {
            return .failure(FrameError(error, requestID: header.requestID, opcode: header.opcode))
        }
    }

    /// Decodes the frame at the start of `raw` and says how many bytes it took, or returns nil when `raw` holds less
    /// than a whole frame. For a receiver that decodes straight from the bytes it read while it has nothing buffered,
    /// and buffers only what is left: the same frames and errors as `next(_:)` over the same bytes.
    package mutating func next(in raw: UnsafeRawBufferPointer) throws(FrameError) -> (frame: Frame, size: Int)? {
        guard let header = try peekHeader(raw) else { return nil }
        let total = 4 + Int(header.length)
        guard raw.count >= total else { return nil }
        let jsonLength = Int(header.jsonLength)
        if header.flags.contains(.compressed) && inflater == nil { inflater = Inflater() }
        let json = try jsonPart(header, raw).get()
        let binary = Array(UnsafeRawBufferPointer(rebasing: raw[(Frame.prefixSize + jsonLength)..<total]))
        let frame = Frame(
            opcode: header.opcode, requestID: header.requestID, status: header.status, flags: header.flags, json: json,
            binary: binary)
        return (frame, total)
    }
}
