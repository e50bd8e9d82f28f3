import LarderWire

/// A range of an open file that the kernel sends to the socket itself (sendfile): a blob's range. The file stays open
/// while anything holds the range.
package protocol FileRegion: AnyObject, Sendable {
    var fd: Int32 { get }
    var offset: Int64 { get }
    var count: Int { get }
}

/// A connection's unsent output, in order: frames are encoded into the last buffer; a large binary part (a blob) is
/// queued as a buffer of its own and written from there instead of being copied (the shell hands the buffers to
/// `writev`, or to a sender thread), or as a range of an open file, which the kernel sends (sendfile).
struct OutputQueue {
    /// A piece of output: bytes, or a file's range.
    enum Item {
        case bytes([UInt8])
        case file(any FileRegion)

        var count: Int {
            switch self {
            case .bytes(let bytes): bytes.count
            case .file(let range): range.count
            }
        }
    }

    /// Never empty; the last item is always bytes (where the next frames are encoded).
    private var items: [Item] = [.bytes([])]
    /// The first item with unsent bytes, and how much of it is written.
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
        let separate = reply.file != nil || reply.binary.count >= OutputQueue.separateBinaryBytes
        var last = takeLast()
        let before = last.count
        reply.json.withUnsafeBytes { json in
            reply.binary.withUnsafeBytes { binary in
                encoder.encode(
                    opcode: reply.opcode, requestID: reply.requestID, status: reply.status, flags: flags,
                    json: json, binary: binary, appendBinary: !separate, binaryCount: reply.file?.count, into: &last)
            }
        }
        unsentBytes += last.count - before
        items[items.count - 1] = .bytes(last)
        if separate {
            // The array (or the open file) is shared, not copied; the next frames go into a fresh buffer after it.
            items.append(reply.file.map(Item.file) ?? .bytes(reply.binary))
            items.append(.bytes([]))
            unsentBytes += reply.binaryCount
        }
        peakUnsentBytes = max(peakUnsentBytes, unsentBytes)
    }

    /// The last buffer, taken out of the queue so that it is appended to in place (its slot holds an empty one).
    private mutating func takeLast() -> [UInt8] {
        guard case .bytes(let last) = items[items.count - 1] else { return [] }
        items[items.count - 1] = .bytes([])
        return last
    }

    /// Whether everything not yet written is one contiguous run (no large binary part queued on its own).
    var isOneRun: Bool { head == items.count - 1 }

    /// Calls `body` with the first contiguous run of bytes not yet written (empty when a file's range is first).
    func withFirstRun<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        guard case .bytes(let bytes) = items[head] else { return body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
    }

    /// Calls `body` with what is not yet written as up to `limit` buffers, in order, up to the first file's range.
    func withBuffers<R>(limit: Int, _ body: ([UnsafeRawBufferPointer]) -> R) -> R {
        var pointers: [UnsafeRawBufferPointer] = []
        pointers.reserveCapacity(min(limit, items.count - head))
        return OutputQueue.collect(items[head...], offset: offset, limit: limit, &pointers, body)
    }

    static func collect<R>(
        _ items: ArraySlice<Item>, offset: Int, limit: Int, _ pointers: inout [UnsafeRawBufferPointer],
        _ body: ([UnsafeRawBufferPointer]) -> R
    ) -> R {
        guard let first = items.first, pointers.count < limit, case .bytes(let bytes) = first else {
            return body(pointers)
        }
        return bytes.withUnsafeBytes { raw in
            if raw.count > offset { pointers.append(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
            return collect(items.dropFirst(), offset: 0, limit: limit, &pointers, body)
        }
    }

    /// The items themselves (shared, not copied: an open file stays open while a sender holds them) and the offset
    /// into the first.
    func snapshot(limit: Int) -> (items: [Item], offset: Int) {
        let end = min(items.count, head + limit)
        return (Array(items[head..<end]), offset)
    }

    /// `count` bytes were written: items written in full are released (a blob's buffer or open file among them).
    mutating func written(_ count: Int) {
        unsentBytes -= count
        offset += count
        while head < items.count - 1 && offset >= items[head].count {
            offset -= items[head].count
            items[head] = .bytes([])
            head += 1
        }
        if unsentBytes == 0 {
            if items.count > 1 { items.removeFirst(items.count - 1) }
            var last = takeLast()
            last.removeAll(keepingCapacity: last.capacity <= 64 << 10)
            items[0] = .bytes(last)
            head = 0
            offset = 0
        } else if head == items.count - 1 && offset >= 1 << 20 {
            var last = takeLast()
            last.removeFirst(offset)
            items[head] = .bytes(last)
            offset = 0
        } else if head >= 64 {
            items.removeFirst(head)
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
