/// The frame encoder. It appends to a caller-owned buffer (reused across frames) and compresses the JSON part only
/// when compression was negotiated, the part is at least `threshold` bytes, and the result is smaller.
package struct FrameEncoder {
    /// Whether the peer accepted zlib in HELLO.
    package var compressionEnabled: Bool
    /// JSON parts shorter than this are sent as they are.
    package var threshold: Int
    private let deflater: Deflater

    /// The threshold chosen from BENCHMARKS.md: below about 1 KiB zlib rarely saves a packet.
    package static let defaultThreshold = 1024
    /// The level chosen from BENCHMARKS.md.
    package static let defaultLevel: Int32 = 1

    package init(compressionEnabled: Bool = false, threshold: Int = defaultThreshold, level: Int32 = defaultLevel) {
        self.compressionEnabled = compressionEnabled
        self.threshold = threshold
        self.deflater = Deflater(level: level)
    }

    /// Appends one frame to `out`.
    package func encode(_ frame: Frame, into out: inout [UInt8]) {
        frame.json.withUnsafeBytes { json in
            frame.binary.withUnsafeBytes { binary in
                encode(
                    opcode: frame.opcode, requestID: frame.requestID, status: frame.status, flags: frame.flags,
                    json: json, binary: binary, into: &out)
            }
        }
    }

    /// Appends one frame to `out` from raw parts, without building a `Frame`. With `appendBinary` false the frame
    /// stops after its JSON part (its header still counts the binary part): the caller sends `binary` itself, right
    /// after, from its own buffer. `binaryCount`, when given, is the length of a binary part the caller sends from
    /// elsewhere (a file), and `binary` is not used.
    package func encode(
        opcode: Opcode, requestID: UInt32, status: Status = .ok, flags: Frame.Flags = [],
        json: UnsafeRawBufferPointer, binary: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
        appendBinary: Bool = true, binaryCount: Int? = nil, into out: inout [UInt8]
    ) {
        let binaryLength = binaryCount ?? binary.count
        let start = out.count
        // Appending from an array is one copy; from `repeatElement` it was a generic loop (a twentieth of a GET).
        out.append(contentsOf: FrameEncoder.zeroPrefix)
        var flags = flags.subtracting([.compressed, .binary])
        var jsonLength = json.count
        var uncompressedLength = 0
        if compressionEnabled && json.count >= threshold,
            let compressed = deflater.compress(json, into: &out, maxOutput: json.count - 1)
        {
            flags.insert(.compressed)
            jsonLength = compressed
            uncompressedLength = json.count
        } else {
            out.append(contentsOf: json)
        }
        if binaryLength > 0 {
            flags.insert(.binary)
            if appendBinary && binaryCount == nil { out.append(contentsOf: binary) }
        }
        out.withUnsafeMutableBytes { raw in
            func put16(_ value: UInt16, _ at: Int) {
                raw.storeBytes(of: value.bigEndian, toByteOffset: start + at, as: UInt16.self)
            }
            func put32(_ value: Int, _ at: Int) {
                let word = UInt32(truncatingIfNeeded: value).bigEndian
                raw.storeBytes(of: word, toByteOffset: start + at, as: UInt32.self)
            }
            put32(Frame.headerSize + jsonLength + binaryLength, 0)
            put16(Frame.magic, 4)
            raw[start + 6] = Frame.version
            raw[start + 7] = flags.rawValue
            put16(opcode.rawValue, 8)
            put16(status.rawValue, 10)
            put32(Int(requestID), 12)
            put32(jsonLength, 16)
            put32(binaryLength, 20)
            put32(uncompressedLength, 24)
        }
    }

    private static let zeroPrefix = [UInt8](repeating: 0, count: Frame.prefixSize)

    /// Encodes one frame into a new array (for tests and tools).
    package func encode(_ frame: Frame) -> [UInt8] {
        var out: [UInt8] = []
        encode(frame, into: &out)
        return out
    }
}
