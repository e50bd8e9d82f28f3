import LarderWire

/// A connection's unsent output, in order: frames are encoded into the last buffer; a large binary part (a blob) is
/// queued as a buffer of its own and written from there instead of being copied (the shell hands the buffers to
/// `writev`, or to a sender thread).
struct OutputQueue {
    private var buffers: [[UInt8]] = [[]]
    /// The first buffer with unsent bytes, and how much of it is written.
    private var head = 0
    private var offset = 0
    /// Bytes queued and not yet written.
    private(set) var unsentBytes = 0
    /// The most unsent output ever held (for tests and STATS).
    private(set) var peakUnsentBytes = 0
    /// Binary parts at least this large are sent from their own buffer.
    static let separateBinaryBytes = 64 << 10

    /// Encodes `reply` after what is queued.
    mutating func append(_ reply: Reply, flags: Frame.Flags, encoder: FrameEncoder) {
        let separate = reply.binary.count >= OutputQueue.separateBinaryBytes
        let last = buffers.count - 1
        let before = buffers[last].count
        reply.json.withUnsafeBytes { json in
            reply.binary.withUnsafeBytes { binary in
                encoder.encode(
                    opcode: reply.opcode, requestID: reply.requestID, status: reply.status, flags: flags,
                    json: json, binary: binary, appendBinary: !separate, into: &buffers[last])
            }
        }
        unsentBytes += buffers[last].count - before
        if separate {
            // The array is shared, not copied; the next frames go into a fresh buffer after it.
            buffers.append(reply.binary)
            buffers.append([])
            unsentBytes += reply.binary.count
        }
        peakUnsentBytes = max(peakUnsentBytes, unsentBytes)
    }

    /// Whether everything not yet written is one contiguous run (no large binary part queued on its own).
    var isOneRun: Bool { head == buffers.count - 1 }

    /// Calls `body` with the first contiguous run not yet written.
    func withFirstRun<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        buffers[head].withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
    }

    /// Calls `body` with what is not yet written as up to `limit` buffers, in order.
    func withBuffers<R>(limit: Int, _ body: ([UnsafeRawBufferPointer]) -> R) -> R {
        var pointers: [UnsafeRawBufferPointer] = []
        pointers.reserveCapacity(min(limit, buffers.count - head))
        return collect(head, offset: offset, limit: limit, &pointers, body)
    }

    private func collect<R>(
        _ index: Int, offset: Int, limit: Int, _ pointers: inout [UnsafeRawBufferPointer],
        _ body: ([UnsafeRawBufferPointer]) -> R
    ) -> R {
        guard index < buffers.count, pointers.count < limit else { return body(pointers) }
        return buffers[index].withUnsafeBytes { raw in
            if raw.count > offset { pointers.append(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
            return collect(index + 1, offset: 0, limit: limit, &pointers, body)
        }
    }

    /// The buffers themselves (shared, not copied) and the offset into the first.
    func snapshot(limit: Int) -> (buffers: [[UInt8]], offset: Int) {
        let end = min(buffers.count, head + limit)
        return (Array(buffers[head..<end]), offset)
    }

    /// `count` bytes were written: buffers written in full are released (a blob's among them).
    mutating func written(_ count: Int) {
        unsentBytes -= count
        offset += count
        while head < buffers.count - 1 && offset >= buffers[head].count {
            offset -= buffers[head].count
            buffers[head] = []
            head += 1
        }
        if unsentBytes == 0 {
            if buffers.count > 1 { buffers.removeFirst(buffers.count - 1) }
            buffers[0].removeAll(keepingCapacity: buffers[0].capacity <= 64 << 10)
            head = 0
            offset = 0
        } else if head == buffers.count - 1 && offset >= 1 << 20 {
            buffers[head].removeFirst(offset)
            offset = 0
        } else if head >= 64 {
            buffers.removeFirst(head)
            head = 0
        }
    }
}

/// The frame encoders of one event loop, shared by its connections (never across loops).
package final class SharedEncoders {
    let plain: FrameEncoder
    let compressing: FrameEncoder

    package init(configuration: ConnectionStateMachine.Configuration) {
        plain = FrameEncoder(compressionEnabled: false)
        compressing = FrameEncoder(
            compressionEnabled: true, threshold: configuration.compressionThreshold, level: configuration.zlibLevel)
    }
}
