import Foundation
import LarderIO
import LarderSync
import LarderWire

// What a client connection's I/O thread does with what it reads, and when its loop ends.
extension Connection {
    // MARK: - Reading

    /// What the I/O thread does with the bytes it reads: frames out of them, each delivered; an error ends the
    /// connection. A large binary part (a blob's range) is read straight into an array of its own, sized from the
    /// header: one copy from the socket's read buffer, instead of growing the stream's buffer to the frame's size,
    /// moving what follows it to the front and cutting the part out again.
    func readerStep() -> (UnsafeRawBufferPointer) -> LarderError? {
        var decoder = FrameDecoder()
        decoder.acceptsCompressed = false  // until the server's HELLO answer agrees to zlib
        var buffer = ByteBuffer()
        var large: LargePart?
        return { [unowned self] bytes in
            var bytes = bytes
            if large != nil {
                bytes = UnsafeRawBufferPointer(rebasing: bytes[large!.fill(bytes)...])
                guard large!.isComplete else {
                    reportProgress(large!.header, received: large!.received)
                    return nil
                }
                let (header, frame) = large!.frame
                large = nil
                if header.binaryLength >= 1 << 20 { reportProgress(header, received: nil) }
                deliver(frame)
            }
            buffer.append(bytes)
            do throws(FrameError) {
                while let header = try decoder.peekHeader(buffer), let frame = try decoder.next(&buffer) {
                    // A large reply's progress ends at its whole size, before its caller has it.
                    if header.binaryLength >= 1 << 20 { reportProgress(header, received: nil) }
                    if frame.opcode == .hello, frame.status == .ok,
                        let hello = try? HelloResponse(json: frame.jsonObject())
                    {
                        // Accept replies as large as the server may send, not just the defaults.
                        decoder.maxFrameBytes = max(decoder.maxFrameBytes, hello.limits.maxFrameBytes)
                        decoder.maxJSONBytes = max(decoder.maxJSONBytes, hello.limits.maxJSONBytes)
                        decoder.maxBinaryBytes = max(decoder.maxBinaryBytes, hello.limits.maxBlobBytes)
                        decoder.acceptsCompressed = hello.compression == zlibCompression
                    }
                    deliver(frame)
                }
                if let header = try decoder.peekHeader(buffer), header.binaryLength >= LargePart.threshold,
                    let (header, json) = try decoder.nextHead(&buffer)
                {
                    // The rest of the frame is not in yet (`next` would have taken it): all the buffer holds is its.
                    var part = LargePart(header, json: json)
                    let held = buffer.readableCount
                    buffer.withUnsafeReadableBytes { _ = part.fill($0) }
                    buffer.moveReader(by: held)
                    large = part
                }
                if let large, large.header.binaryLength >= 1 << 20 {
                    reportProgress(large.header, received: large.received)
                } else if let header = try decoder.peekHeader(buffer), header.binaryLength >= 1 << 20 {
                    reportProgress(header, received: buffer.readableCount)
                }
                return nil
            } catch {
                return LarderError(
                    error.error.status, "the server at \(endpoint) sent a frame the client cannot read: "
                        + error.error.message)
            }
        }
    }

    /// The I/O thread's loop ended: every request in flight fails with why (and whether it was sent).
    func ended(_ end: IOThread.End) {
        func lost(_ why: String) -> LarderError { LarderError(.unavailable, "lost the connection to \(endpoint): \(why)") }
        switch end {
        case .peerClosed: close(lost("the server closed the connection"), lost: true)
        case .readFailed(let code): close(lost(ClientSocket.errnoText(code)), lost: true)
        case .writeFailed(let code, let name):
            close(
                LarderError(
                    .unavailable, "the connection to \(endpoint) broke while sending \(name) ("
                        + ClientSocket.errnoText(code) + ")"), lost: true)
        case .invalid(let error): close(error, lost: true)
        case .tlsFailed(let message): close(lost(message), lost: true)
        case .stopped: close()
        }
    }
}

/// A frame whose header and JSON part are in and whose large binary part is still arriving, into its own array.
struct LargePart {
    /// Binary parts from this size on are read this way (smaller ones are a read or two of the socket).
    static let threshold = 64 << 10

    let header: FrameHeader
    private let json: [UInt8]
    private var binary: [UInt8]
    private var filled = 0

    init(_ header: FrameHeader, json: [UInt8]) {
        self.header = header
        self.json = json
        binary = [UInt8](repeating: 0, count: Int(header.binaryLength))
    }

    var isComplete: Bool { filled == binary.count }

    /// Bytes of the whole frame received so far (its length prefix included), for progress.
    var received: Int { 4 + Int(header.length) - (binary.count - filled) }

    /// Copies the start of `bytes` into the part: how many bytes it took.
    mutating func fill(_ bytes: UnsafeRawBufferPointer) -> Int {
        let count = min(bytes.count, binary.count - filled)
        guard count > 0 else { return 0 }
        binary.withUnsafeMutableBytes { target in
            (target.baseAddress! + filled).copyMemory(from: bytes.baseAddress!, byteCount: count)
        }
        filled += count
        return count
    }

    /// The whole frame (once complete).
    var frame: (header: FrameHeader, frame: Frame) {
        (
            header,
            Frame(
                opcode: header.opcode, requestID: header.requestID, status: header.status, flags: header.flags,
                json: json, binary: binary)
        )
    }
}
