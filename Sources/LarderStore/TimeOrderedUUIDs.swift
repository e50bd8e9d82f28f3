import Foundation

/// Time-ordered (version 7, RFC 9562) UUIDs for the documents the writer creates without a client id: 48 bits of Unix
/// milliseconds, then a 12-bit counter that orders the ids of one millisecond (RFC 9562's method 1; it starts each
/// millisecond at a random value below 2048, and a millisecond that runs out borrows the next), then 62 random bits.
/// Their text sorts in creation order, so a new document's `(collection, id)` index entry lands at the end of the
/// index instead of on a random page: a commit of 50 creates dirties a page or two of it rather than ~50 (each one a
/// 4 KiB WAL frame), and records without a sort come back in creation order. Random bytes come from a buffer of system
/// random bytes refilled 4 KiB at a time. Not thread-safe: one owner (the writer queue).
final class TimeOrderedUUIDs {
    private var buffer: [UInt8] = []  // allocated at the first id
    private var offset = 0
    private var lastMillis: Int64 = 0
    private var counter = 0

    func next() -> UUID { next(now: nowMillis()) }

    func next(now: Int64) -> UUID {
        if offset + 10 > buffer.count {
            if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 4096) }
            buffer.withUnsafeMutableBytes { TimeOrderedUUIDs.fill($0) }
            offset = 0
        }
        if now > lastMillis {
            lastMillis = now
            counter = Int(buffer[offset]) << 3 | Int(buffer[offset + 1] & 0x07)  // below 2048
        } else {
            // The same millisecond, or the clock stepped back: keep counting from the last id.
            counter += 1
            if counter > 0xFFF {
                lastMillis += 1
                counter = 0
            }
        }
        let millis = UInt64(lastMillis)
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { raw in
            for i in 0..<6 { raw[i] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(i))) }
            raw[6] = 0x70 | UInt8(counter >> 8)  // version 7, counter's high 4 bits
            raw[7] = UInt8(truncatingIfNeeded: counter)
            buffer.withUnsafeBytes { source in
                raw.baseAddress!.advanced(by: 8).copyMemory(from: source.baseAddress! + offset + 2, byteCount: 8)
            }
            raw[8] = (raw[8] & 0x3F) | 0x80  // RFC 9562 variant
        }
        offset += 10
        return UUID(uuid: uuid)
    }

    /// Fills `bytes` from the system's cryptographic generator (/dev/urandom, what Foundation's `UUID()` reads on
    /// Linux), falling back to `SystemRandomNumberGenerator` should that fail.
    private static func fill(_ bytes: UnsafeMutableRawBufferPointer) {
        var done = 0
        let fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            while done < bytes.count {
                let n = read(fd, bytes.baseAddress! + done, bytes.count - done)
                if n > 0 {
                    done += n
                } else if n == 0 || errno != EINTR {
                    break
                }
            }
            close(fd)
        }
        var generator = SystemRandomNumberGenerator()
        for i in done..<bytes.count { bytes[i] = generator.next() }
    }
}
