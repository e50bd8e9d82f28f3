import Foundation
import LarderWire
import Testing
import LarderIO

/// Decodes every frame in `chunks` fed one after another, as a connection would see them.
func decodeAll(_ chunks: [[UInt8]], decoder: FrameDecoder = FrameDecoder()) throws(FrameError) -> [Frame] {
    var decoder = decoder
    var buffer = ByteBuffer()
    var frames: [Frame] = []
    for chunk in chunks {
        buffer.append(chunk)
        while let frame = try decoder.next(&buffer) { frames.append(frame) }
    }
    return frames
}

/// Cuts `bytes` at random points.
func randomSplits(_ bytes: [UInt8], seed: UInt64) -> [[UInt8]] {
    var rng = SplitMix64(seed: seed)
    var chunks: [[UInt8]] = []
    var index = 0
    while index < bytes.count {
        let size = Int.random(in: 1...max(1, min(bytes.count - index, 97)), using: &rng)
        chunks.append(Array(bytes[index..<(index + size)]))
        index += size
    }
    return chunks
}

func hexBytes(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var pending: UInt8?
    for ch in text.unicodeScalars {
        guard let v = ch.properties.numericType != nil ? UInt8(String(ch), radix: 16) : UInt8(String(ch), radix: 16)
        else { continue }
        if let high = pending {
            bytes.append(high << 4 | v)
            pending = nil
        } else {
            pending = v
        }
    }
    return bytes
}

func hexString(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined(separator: " ")
}

/// A header with chosen field values, for hostile-input tests.
func rawHeader(
    length: UInt32, magic: UInt16 = Frame.magic, version: UInt8 = 1, flags: UInt8 = 0, opcode: UInt16 = 2,
    status: UInt16 = 0, requestID: UInt32 = 7, jsonLength: UInt32 = 0, binaryLength: UInt32 = 0,
    uncompressedLength: UInt32 = 0
) -> [UInt8] {
    var out: [UInt8] = []
    func u16(_ v: UInt16) { out += [UInt8(v >> 8), UInt8(v & 0xFF)] }
    func u32(_ v: UInt32) { out += [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
    u32(length)
    u16(magic)
    out.append(version)
    out.append(flags)
    u16(opcode)
    u16(status)
    u32(requestID)
    u32(jsonLength)
    u32(binaryLength)
    u32(uncompressedLength)
    return out
}

/// Expects `body` to throw a `LarderError` with `status` (and `field`, when given).
func expectError(
    _ status: Status, field: String? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) {
    let error = #expect(throws: LarderError.self, sourceLocation: sourceLocation) { try body() }
    #expect(error?.status == status, "\(String(describing: error))", sourceLocation: sourceLocation)
    if let field { #expect(error?.field == field, "\(String(describing: error))", sourceLocation: sourceLocation) }
}
