import CZlib

/// A reusable zlib (RFC 1950) compressor. The `z_stream` lives at a stable heap address for its whole life.
package final class Deflater {
    private let stream: UnsafeMutablePointer<z_stream>
    package let level: Int32

    /// - Parameter level: 0 (store) to 9 (smallest); 1 is the Larder default (see BENCHMARKS.md).
    package init(level: Int32 = 1) {
        self.level = max(0, min(9, level))
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let rc = larder_deflateInit(stream, self.level)
        precondition(rc == Z_OK, "deflateInit failed with \(rc): out of memory")
    }

    deinit {
        deflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Appends the compressed form of `input` to `out` and returns the compressed size, or returns nil (leaving
    /// `out` as it was) when the result would not be smaller than `maxOutput` bytes.
    package func compress(_ input: UnsafeRawBufferPointer, into out: inout [UInt8], maxOutput: Int) -> Int? {
        guard input.count > 0, maxOutput > 0 else { return nil }
        deflateReset(stream)
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: maxOutput))
        let produced: Int? = out.withUnsafeMutableBufferPointer { buffer in
            stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress!.assumingMemoryBound(to: Bytef.self))
            stream.pointee.avail_in = uInt(input.count)
            stream.pointee.next_out = buffer.baseAddress! + start
            stream.pointee.avail_out = uInt(maxOutput)
            let rc = deflate(stream, Z_FINISH)
            guard rc == Z_STREAM_END else { return nil }
            return maxOutput - Int(stream.pointee.avail_out)
        }
        guard let produced else {
            out.removeLast(maxOutput)
            return nil
        }
        out.removeLast(maxOutput - produced)
        return produced
    }

    /// Compresses `input` into a new array (for tests and tools).
    package func compress(_ input: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        let bound = Int(deflateBound(stream, uLong(input.count)))
        _ = input.withUnsafeBytes { compress($0, into: &out, maxOutput: bound) }
        return out
    }
}

/// A reusable zlib decompressor with a ceiling: it never produces more than the size it is told to expect.
package final class Inflater {
    private let stream: UnsafeMutablePointer<z_stream>

    package init() {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let rc = larder_inflateInit(stream)
        precondition(rc == Z_OK, "inflateInit failed with \(rc): out of memory")
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Inflates `input`, which must decompress to exactly `expectedLength` bytes and end there.
    ///
    /// The output buffer is allocated once at `expectedLength` (which the caller has already checked against its
    /// limit); a stream that wants to write more, ends early, is corrupt, or has bytes after its end is rejected.
    package func inflate(_ input: UnsafeRawBufferPointer, expectedLength: Int) throws(LarderError) -> [UInt8] {
        inflateReset(stream)
        var out = [UInt8](repeating: 0, count: expectedLength)
        let result: Int32 = out.withUnsafeMutableBufferPointer { buffer in
            stream.pointee.next_in = UnsafeMutablePointer(
                mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
            stream.pointee.avail_in = uInt(input.count)
            stream.pointee.next_out = buffer.baseAddress
            stream.pointee.avail_out = uInt(expectedLength)
            return CZlib.inflate(stream, Z_FINISH)
        }
        switch result {
        case Z_STREAM_END:
            guard stream.pointee.avail_out == 0 else {
                throw LarderError(
                    .protocolError, "compressed JSON part inflated to \(expectedLength - Int(stream.pointee.avail_out)) "
                        + "bytes, less than the declared \(expectedLength)")
            }
            guard stream.pointee.avail_in == 0 else {
                throw LarderError(.protocolError, "compressed JSON part has bytes after the end of its zlib stream")
            }
            return out
        case Z_BUF_ERROR where stream.pointee.avail_out == 0, Z_OK where stream.pointee.avail_out == 0:
            throw LarderError(
                .protocolError, "compressed JSON part inflates past its declared length of \(expectedLength) bytes")
        case Z_BUF_ERROR:
            throw LarderError(.protocolError, "compressed JSON part is truncated: its zlib stream does not end")
        default:
            throw LarderError(.protocolError, "compressed JSON part is not a valid zlib stream (zlib error \(result))")
        }
    }
}
