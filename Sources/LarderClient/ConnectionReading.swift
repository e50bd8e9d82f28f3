import Foundation
import LarderIO
import LarderSync
import LarderWire

// What a client connection's I/O thread does with what it reads, and when its loop ends.
extension Connection {
    // MARK: - Reading

    /// What the I/O thread does with the bytes it reads: frames out of them, each delivered; an error ends the
    /// connection.
    func readerStep() -> (UnsafeRawBufferPointer) -> LarderError? {
        var decoder = FrameDecoder()
        decoder.acceptsCompressed = false  // until the server's HELLO answer agrees to zlib
        var buffer = ByteBuffer()
        return { [unowned self] bytes in
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
                if let header = try decoder.peekHeader(buffer), header.binaryLength >= 1 << 20 {
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
