/// A growable byte buffer with a read position; what the decoder reads from.
package struct ByteBuffer: Sendable {
    package private(set) var storage: [UInt8] = []
    package private(set) var readerIndex = 0

    package init() {}
    package init(_ bytes: [UInt8]) { storage = bytes }

    /// Bytes not yet consumed.
    package var readableCount: Int { storage.count - readerIndex }

    /// Appends bytes read from the network.
    package mutating func append(_ bytes: some Sequence<UInt8>) {
        compactIfWorthIt()
        storage.append(contentsOf: bytes)
    }

    /// Appends bytes from a raw buffer (e.g. a `read(2)` destination).
    package mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compactIfWorthIt()
        storage.append(contentsOf: bytes)
    }

    /// Marks `count` bytes as consumed.
    package mutating func moveReader(by count: Int) {
        precondition(count <= readableCount)
        readerIndex += count
        if readerIndex == storage.count {
            storage.removeAll(keepingCapacity: storage.capacity <= 1 << 20)
            readerIndex = 0
        }
    }

    /// Makes room for `count` unread bytes in all (what is unread moved to the front first when that is most of the
    /// buffer), so that a large frame arriving a read at a time is gathered in one allocation, not a doubling series
    /// of them with a copy each. The memory is only touched as bytes arrive.
    package mutating func reserveReadable(_ count: Int) {
        guard count > storage.capacity - readerIndex else { return }
        compactIfWorthIt()
        storage.reserveCapacity(readerIndex + count)
    }

    /// Calls `body` with the unread bytes.
    package func withUnsafeReadableBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[readerIndex...])) }
    }

    private mutating func compactIfWorthIt() {
        if readerIndex > 0 && readerIndex >= storage.count / 2 {
            storage.removeFirst(readerIndex)
            readerIndex = 0
        }
    }
}
