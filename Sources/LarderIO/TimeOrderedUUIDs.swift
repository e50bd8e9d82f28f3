import Foundation

/// Time-ordered (version 7, RFC 9562) UUIDs, for the documents the store's writer creates without a client id and for
/// the request keys clients make: 48 bits of Unix milliseconds, then a 12-bit counter that orders the ids of one
/// millisecond (RFC 9562's method 1; it starts each millisecond at a random value below 2048, and a millisecond that
/// runs out borrows the next), then 62 random bits. Their text sorts in creation order, so a new document's
/// `(collection, id)` index entry, or a new request key's, lands at the end of its index instead of on a random page: a
/// commit of 50 creates dirties a page or two of it rather than ~50 (each one a 4 KiB WAL frame), and records without
/// a sort come back in creation order. Random bytes come from a buffer of system random bytes refilled 4 KiB at a
/// time. A value: one owner mutates it (behind a lock where threads share it; `TimeOrderedUUIDs` to share it by
/// reference).
package struct TimeOrderedUUIDGenerator: Sendable {
    private var buffer: [UInt8] = []  // allocated at the first id
    private var offset = 0
    private var lastMillis: Int64 = 0
    private var counter = 0

    package init() {}

    package mutating func next() -> UUID {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return next(now: Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000)
    }

    package mutating func next(now: Int64) -> UUID {
        if offset + 10 > buffer.count {
            if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 4096) }
            buffer.withUnsafeMutableBytes { TimeOrderedUUIDGenerator.fill($0) }
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

/// A `TimeOrderedUUIDGenerator` shared by reference, so that every writer context of one store draws from one sequence.
/// Not thread-safe: one owner (the writer queue).
package final class TimeOrderedUUIDs {
    private var generator = TimeOrderedUUIDGenerator()

    package init() {}

    package func next() -> UUID { generator.next() }

    package func next(now: Int64) -> UUID { generator.next(now: now) }
}
