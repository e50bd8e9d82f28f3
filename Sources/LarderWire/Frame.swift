/// One protocol frame: a fixed header, a JSON part and an optional raw binary part (Protocol.md, "Frame layout").
///
/// In a decoded frame `json` is always the uncompressed JSON bytes; compression exists only on the wire.
package struct Frame: Sendable, Equatable {
    /// Bit flags of the header's flags byte.
    package struct Flags: OptionSet, Sendable, Hashable {
        package let rawValue: UInt8
        package init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The JSON part is zlib-compressed (RFC 1950).
        package static let compressed = Flags(rawValue: 0x01)
        /// A binary part follows the JSON part.
        package static let binary = Flags(rawValue: 0x02)
        /// The frame answers a request (it echoes the request id).
        package static let response = Flags(rawValue: 0x04)
        /// The server sends the frame unasked (change feed events).
        package static let push = Flags(rawValue: 0x08)
        /// Every bit this version defines; any other bit set is a protocol error.
        package static let known: Flags = [.compressed, .binary, .response, .push]
    }

    /// `"LR"`: the first two header bytes after the length.
    package static let magic: UInt16 = 0x4C52
    /// The frame layout version this implementation speaks.
    package static let version: UInt8 = 1
    /// Bytes of the header after the 4-byte length prefix.
    package static let headerSize = 24
    /// Bytes before the JSON part: the length prefix and the header.
    package static let prefixSize = 4 + headerSize

    package var opcode: Opcode
    package var requestID: UInt32
    /// The status of a response; `.ok` in requests.
    package var status: Status
    /// `.response` and `.push`; the encoder sets `.compressed` and `.binary` itself.
    package var flags: Flags
    /// The uncompressed JSON part; empty means `{}`.
    package var json: [UInt8]
    /// The raw binary part (a JPEG); never compressed.
    package var binary: [UInt8]

    package init(
        opcode: Opcode, requestID: UInt32, status: Status = .ok, flags: Flags = [], json: [UInt8] = [],
        binary: [UInt8] = []
    ) {
        self.opcode = opcode
        self.requestID = requestID
        self.status = status
        self.flags = flags.subtracting([.compressed, .binary])
        self.json = json
        self.binary = binary
    }

    package var isResponse: Bool { flags.contains(.response) }
    package var isPush: Bool { flags.contains(.push) }

    /// The JSON part parsed as an object (an empty part is `{}`). Nesting is capped at `maxDepth`, by default as a
    /// request's (64 levels) or, for an answer or an event, as theirs (`JSONParser.maxAnswerDepth`).
    package func jsonObject(maxDepth: Int? = nil) throws(LarderError) -> JSONObject {
        if json.isEmpty { return JSONObject() }
        let depth = maxDepth ?? (isResponse || isPush ? JSONParser.maxAnswerDepth : JSONParser.defaultMaxDepth)
        return try JSONParser.parseObject(json, maxDepth: depth)
    }
}

/// The parsed fixed header of a frame; exposed for tests and tools that inspect raw traffic.
package struct FrameHeader: Sendable, Equatable {
    /// Bytes after the length prefix: `headerSize + jsonLength + binaryLength`.
    package var length: UInt32
    package var magic: UInt16
    package var version: UInt8
    package var flags: Frame.Flags
    package var opcode: Opcode
    package var status: Status
    package var requestID: UInt32
    /// Bytes of the JSON part on the wire (compressed size when compressed).
    package var jsonLength: UInt32
    package var binaryLength: UInt32
    /// The JSON part's size after inflation; 0 when not compressed.
    package var uncompressedLength: UInt32

    /// Reads the header from the first `Frame.prefixSize` bytes of `bytes` (no validation).
    package init(_ bytes: UnsafeRawBufferPointer) {
        func u16(_ at: Int) -> UInt16 { UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1]) }
        func u32(_ at: Int) -> UInt32 {
            UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8 | UInt32(bytes[at + 3])
        }
        length = u32(0)
        magic = u16(4)
        version = bytes[6]
        flags = Frame.Flags(rawValue: bytes[7])
        opcode = Opcode(rawValue: u16(8))
        status = Status(rawValue: u16(10))
        requestID = u32(12)
        jsonLength = u32(16)
        binaryLength = u32(20)
        uncompressedLength = u32(24)
    }
}
