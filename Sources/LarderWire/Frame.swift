/// One protocol frame: a fixed header, a JSON part and an optional raw binary part (Protocol.md, "Frame layout").
///
/// In a decoded frame `json` is always the uncompressed JSON bytes; compression exists only on the wire.
public struct Frame: Sendable, Equatable {
    /// Bit flags of the header's flags byte.
    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The JSON part is zlib-compressed (RFC 1950).
        public static let compressed = Flags(rawValue: 0x01)
        /// A binary part follows the JSON part.
        public static let binary = Flags(rawValue: 0x02)
        /// The frame answers a request (it echoes the request id).
        public static let response = Flags(rawValue: 0x04)
        /// The server sends the frame unasked (change feed events).
        public static let push = Flags(rawValue: 0x08)
        /// Every bit this version defines; any other bit set is a protocol error.
        public static let known: Flags = [.compressed, .binary, .response, .push]
    }

    /// `"LR"`: the first two header bytes after the length.
    public static let magic: UInt16 = 0x4C52
    /// The frame layout version this implementation speaks.
    public static let version: UInt8 = 1
    /// Bytes of the header after the 4-byte length prefix.
    public static let headerSize = 24
    /// Bytes before the JSON part: the length prefix and the header.
    public static let prefixSize = 4 + headerSize

    public var opcode: Opcode
    public var requestID: UInt32
    /// The status of a response; `.ok` in requests.
    public var status: Status
    /// `.response` and `.push`; the encoder sets `.compressed` and `.binary` itself.
    public var flags: Flags
    /// The uncompressed JSON part; empty means `{}`.
    public var json: [UInt8]
    /// The raw binary part (a JPEG); never compressed.
    public var binary: [UInt8]

    public init(
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

    public var isResponse: Bool { flags.contains(.response) }
    public var isPush: Bool { flags.contains(.push) }

    /// The JSON part parsed as an object (an empty part is `{}`). Nesting is capped at `maxDepth`, by default as a
    /// request's (64 levels) or, for an answer or an event, as theirs (`JSONParser.maxAnswerDepth`).
    public func jsonObject(maxDepth: Int? = nil) throws(LarderError) -> JSONObject {
        if json.isEmpty { return JSONObject() }
        let depth = maxDepth ?? (isResponse || isPush ? JSONParser.maxAnswerDepth : JSONParser.defaultMaxDepth)
        return try JSONParser.parseObject(json, maxDepth: depth)
    }
}

/// The parsed fixed header of a frame; exposed for tests and tools that inspect raw traffic.
public struct FrameHeader: Sendable, Equatable {
    /// Bytes after the length prefix: `headerSize + jsonLength + binaryLength`.
    public var length: UInt32
    public var magic: UInt16
    public var version: UInt8
    public var flags: Frame.Flags
    public var opcode: Opcode
    public var status: Status
    public var requestID: UInt32
    /// Bytes of the JSON part on the wire (compressed size when compressed).
    public var jsonLength: UInt32
    public var binaryLength: UInt32
    /// The JSON part's size after inflation; 0 when not compressed.
    public var uncompressedLength: UInt32

    /// Reads the header from the first `Frame.prefixSize` bytes of `bytes` (no validation).
    public init(_ bytes: UnsafeRawBufferPointer) {
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
