import Foundation
import LarderIO
import Synchronization

/// The bytes the load is made of: document ids and bodies, JPEG blobs, Redis keys and values.
///
/// Preloaded documents and blobs get deterministic ids derived from the payload sizes, so a second run with the same
/// sizes finds them already there (their CREATE answers CONFLICT, which preloading accepts) and a run with other
/// sizes never reads stale ones. Documents created during a run get ids from a per-run nonce.
public struct Payloads: Sendable {
    /// Every document (and Redis value) is `docSize` bytes, or with `docSizeMax` between the two: each key's size is
    /// fixed by the key (`documentSize`), so a document read, replaced or preloaded always has the same size.
    public let docSize: Int
    public let docSizeMax: Int
    /// The blobs to upload, used in turn; never empty.
    public let blobs: [[UInt8]]
    /// 32 bits that tell preloaded datasets of different shapes apart.
    let datasetTag: UInt32
    /// Random per run: the ids of documents and blobs created during the run.
    let runNonce: UInt32
    /// Where created documents' and blobs' ids come from.
    public let ids: IDSource
    /// Every write carries a fresh `requestKey` (Protocol.md section 5.10).
    public let requestKeys: Bool
    /// With `--after-seq`: the highest `seq` the run's writes were answered with, which every GET carries as
    /// `afterSeq` (Protocol.md section 5.1), as one LarderClient tracks it over all its connections.
    public let seenSeq: SeenSeq?
    /// Filler for padding documents and Redis values.
    let filler: [UInt8]

    public init(
        docSize: Int, docSizeMax: Int? = nil, blobs: [[UInt8]], runNonce: UInt32, ids: IDSource = .streams,
        requestKeys: Bool = false, afterSeq: Bool = false
    ) {
        self.ids = ids
        self.requestKeys = requestKeys
        seenSeq = afterSeq ? SeenSeq() : nil
        self.docSize = docSize
        self.docSizeMax = max(docSize, docSizeMax ?? docSize)
        self.blobs = blobs.isEmpty ? [Payloads.syntheticJPEG(size: 1024)] : blobs
        var hash: UInt32 = 2_166_136_261  // FNV-1a over the shape of the data
        func mix(_ v: Int) {
            for shift in stride(from: 0, to: 64, by: 8) {
                hash = (hash ^ UInt32(truncatingIfNeeded: v >> shift)) &* 16_777_619
            }
        }
        mix(docSize)
        if self.docSizeMax != docSize { mix(self.docSizeMax) }
        mix(self.blobs.count)
        for blob in self.blobs { mix(blob.count) }
        datasetTag = hash
        self.runNonce = runNonce
        var rng = SplitMix64(seed: UInt64(docSize))
        filler = (0..<(self.docSizeMax + 64)).map { _ in UInt8(ascii: "a") + UInt8(rng.below(26)) }
    }

    /// The size of document `key`: `docSize`, or with `--doc-size MIN-MAX` one drawn uniformly from the range by a
    /// hash of the key.
    @inline(__always)
    public func documentSize(_ key: UInt64) -> Int {
        guard docSizeMax > docSize else { return docSize }
        var z = key &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return docSize + Int(z % UInt64(docSizeMax - docSize + 1))
    }

    // MARK: Ids

    static let hexDigits = Array("0123456789abcdef".utf8)

    @inline(__always)
    static func appendHex(_ value: UInt64, digits: Int, into out: inout [UInt8]) {
        var shift = (digits - 1) * 4
        while shift >= 0 {
            out.append(hexDigits[Int((value >> UInt64(shift)) & 0xF)])
            shift -= 4
        }
    }

    /// `tttttttt-0000-4000-8000-kkkkkkkkkkkk`: preloaded document `key`.
    @inline(__always)
    func appendDocumentID(_ key: UInt64, into out: inout [UInt8]) {
        Payloads.appendHex(UInt64(datasetTag), digits: 8, into: &out)
        out.append(contentsOf: Payloads.documentMiddle)
        Payloads.appendHex(key, digits: 12, into: &out)
    }

    /// `tttttttt-0000-4000-9000-kkkkkkkkkkkk`: preloaded blob `key`.
    @inline(__always)
    func appendBlobID(_ key: UInt64, into out: inout [UInt8]) {
        Payloads.appendHex(UInt64(datasetTag), digits: 8, into: &out)
        out.append(contentsOf: Payloads.blobMiddle)
        Payloads.appendHex(key, digits: 12, into: &out)
    }

    /// The id of the `counter`th object created by worker `worker` in this run: with `.random` ids a version 4 UUID
    /// whose 122 bits are a hash of the three (so a later patch or delete of the object finds the same id without a
    /// table), otherwise `nnnnnnnn-wwww-4000-a000-cccccccccccc`.
    @inline(__always)
    func appendCreatedID(worker: Int, counter: UInt64, into out: inout [UInt8]) {
        if ids == .random { return appendRandomID(worker: worker, counter: counter, into: &out) }
        Payloads.appendHex(UInt64(runNonce), digits: 8, into: &out)
        out.append(UInt8(ascii: "-"))
        Payloads.appendHex(UInt64(worker), digits: 4, into: &out)
        out.append(contentsOf: Payloads.createdMiddle)
        Payloads.appendHex(counter, digits: 12, into: &out)
    }

    /// `xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx` (V one of 8, 9, a, b) from two SplitMix64 steps over the run, the
    /// worker and the counter.
    @inline(__always)
    func appendRandomID(worker: Int, counter: UInt64, into out: inout [UInt8]) {
        let seed = (UInt64(runNonce) << 32 | UInt64(UInt32(truncatingIfNeeded: worker))) ^ (counter &* 0xD6E8_FEB8_6659_FD93)
        var mixer = SplitMix64(seed: seed)
        let high = mixer.next()
        let low = mixer.next()
        Payloads.appendHex(high >> 32, digits: 8, into: &out)
        out.append(UInt8(ascii: "-"))
        Payloads.appendHex((high >> 16) & 0xFFFF, digits: 4, into: &out)
        out.append(UInt8(ascii: "-"))
        Payloads.appendHex(0x4000 | (high & 0x0FFF), digits: 4, into: &out)
        out.append(UInt8(ascii: "-"))
        Payloads.appendHex(0x8000 | (low >> 48) & 0x3FFF, digits: 4, into: &out)
        out.append(UInt8(ascii: "-"))
        Payloads.appendHex(low & 0xFFFF_FFFF_FFFF, digits: 12, into: &out)
    }

    static let documentMiddle = Array("-0000-4000-8000-".utf8)
    static let blobMiddle = Array("-0000-4000-9000-".utf8)
    static let createdMiddle = Array("-4000-a000-".utf8)

    /// The preloaded document id of `key` as a string (tests, diagnostics).
    public func documentID(_ key: UInt64) -> String {
        var out: [UInt8] = []
        appendDocumentID(key, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: Documents

    /// Appends the data object of document `key`: `{"n":K,"group":G,"name":"doc K","pad":"..."}`, padded so that
    /// it is `documentSize(key)` bytes long.
    @inline(__always)
    func appendDocument(_ key: UInt64, into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: Payloads.docN)
        appendDecimal(key, into: &out)
        out.append(contentsOf: Payloads.docGroup)
        appendDecimal(key % 100, into: &out)
        out.append(contentsOf: Payloads.docName)
        appendDecimal(key, into: &out)
        out.append(contentsOf: Payloads.docPad)
        let written = out.count - start + 2
        let pad = max(0, documentSize(key) - written)
        let offset = Int(key % 64)
        filler.withUnsafeBufferPointer {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: $0[offset..<offset + pad]))
        }
        out.append(contentsOf: Payloads.docEnd)
    }

    static let docN = Array(#"{"n":"#.utf8)
    static let docGroup = Array(#","group":"#.utf8)
    static let docName = Array(#","name":"doc "#.utf8)
    static let docPad = Array(#"","pad":""#.utf8)
    static let docEnd = Array(#""}"#.utf8)

    /// A Redis value of `documentSize(key)` bytes.
    func redisValue(_ key: UInt64) -> ArraySlice<UInt8> {
        let offset = Int(key % 64)
        return filler[offset..<offset + documentSize(key)]
    }

    // MARK: Blobs

    /// A JPEG of exactly `size` bytes (at least 32) that any structural validator accepts: SOI, a baseline frame
    /// header (SOF0, 1x1 grey), filler in comment (COM) segments of at most 64 KiB each, and EOI. Nothing is decoded,
    /// so no scan data is needed.
    public static func syntheticJPEG(size: Int, seed: UInt64 = 7) -> [UInt8] {
        precondition(size >= 21)
        let sof: [UInt8] = [0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00]
        var out: [UInt8] = [0xFF, 0xD8] + sof
        out.reserveCapacity(size)
        var remaining = size - out.count - 2  // bytes for COM segments, each 4 + payload
        var rng = SplitMix64(seed: seed)
        while remaining > 0 {
            var segment = min(remaining, 4 + 65_533)
            // Never leave 1 to 3 bytes: too few for another segment header.
            if (1...3).contains(remaining - segment) { segment -= 4 }
            let payload = segment - 4
            out += [0xFF, 0xFE, UInt8((payload + 2) >> 8), UInt8(truncatingIfNeeded: payload + 2)]
            // Filler without 0xFF, so that no byte of it looks like a marker to a careless scanner.
            for _ in 0..<payload { out.append(UInt8(truncatingIfNeeded: rng.next() % 0xFF)) }
            remaining -= segment
        }
        out += [0xFF, 0xD9]
        return out
    }

    /// The `*.jpg` and `*.jpeg` files of `directory`, in name order; each must start with SOI and end with EOI.
    public static func loadJPEGs(from directory: String) throws(UsageError) -> [[UInt8]] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        } catch {
            throw UsageError("--jpeg-dir: cannot read the directory \(directory)")
        }
        var blobs: [[UInt8]] = []
        for name in names where name.lowercased().hasSuffix(".jpg") || name.lowercased().hasSuffix(".jpeg") {
            let path = (directory as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: path) else {
                throw UsageError("--jpeg-dir: cannot read \(path)")
            }
            let bytes = [UInt8](data)
            guard bytes.count >= 4, bytes[0] == 0xFF, bytes[1] == 0xD8, bytes[bytes.count - 2] == 0xFF,
                bytes[bytes.count - 1] == 0xD9
            else {
                throw UsageError("--jpeg-dir: \(path) is not a JPEG (no SOI at the start or no EOI at the end)")
            }
            blobs.append(bytes)
        }
        if blobs.isEmpty { throw UsageError("--jpeg-dir: no .jpg files in \(directory)") }
        return blobs
    }
}

/// Appends `value` in decimal.
@inline(__always)
func appendDecimal(_ value: UInt64, into out: inout [UInt8]) {
    if value < 10 {
        out.append(UInt8(ascii: "0") + UInt8(value))
        return
    }
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { tmp in
        var v = value
        var n = 0
        while v > 0 {
            tmp[19 - n] = UInt8(ascii: "0") + UInt8(v % 10)
            v /= 10
            n += 1
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: tmp[(20 - n)..<20]))
    }
}

/// The number of decimal digits of `value`.
func decimalDigits(_ value: UInt64) -> Int {
    var n = 1
    var v = value
    while v >= 10 {
        v /= 10
        n += 1
    }
    return n
}

/// The highest change sequence number seen in write answers, shared by every connection of a run.
public final class SeenSeq: Sendable {
    private let highest = Atomic<Int64>(0)

    /// The highest seen so far (0 before any write was answered).
    public var value: Int64 { highest.load(ordering: .relaxed) }

    /// Raises the highest to `seq` when it is higher.
    func saw(_ seq: Int64) {
        var current = highest.load(ordering: .relaxed)
        while seq > current {
            let (exchanged, original) = highest.compareExchange(
                expected: current, desired: seq, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }

    /// The `seq` a write answer's JSON ends with (`…,"seq":N}`), given its last bytes; nil for any other answer.
    static func parse(tail: [UInt8]) -> Int64? {
        guard tail.last == UInt8(ascii: "}") else { return nil }
        var value: Int64 = 0
        var scale: Int64 = 1
        var index = tail.count - 2
        while index >= 0, let digit = tail[index].wholeNumberDigit {
            guard scale <= 1_000_000_000_000_000 else { return nil }
            value += Int64(digit) * scale
            scale *= 10
            index -= 1
        }
        let member = Array(#""seq":"#.utf8)
        guard scale > 1, index + 1 >= member.count, Array(tail[(index + 1 - member.count)...index]) == member else {
            return nil
        }
        return value
    }
}

extension UInt8 {
    fileprivate var wholeNumberDigit: UInt8? { (48...57).contains(self) ? self - 48 : nil }
}
