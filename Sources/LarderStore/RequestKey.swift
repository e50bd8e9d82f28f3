import CXXHash
import Foundation
import LarderWire

/// A write's request key (Protocol.md section 5.10): a UUID the client makes for one logical write and sends again with
/// each retry of it. The store keeps the key with the write's answer, in the write's transaction, so that the same key
/// again answers that answer and writes nothing; a key sent with another request is refused.
public struct RequestKey: Sendable, Equatable {
    /// The key the client sent.
    public var key: UUID
    /// The request's opcode.
    private let opcode: Opcode
    /// A CREATE's or REPLACE's collection, id and expected revision, from which the canonical form's head is made
    /// when needed (empty for another write, whose `bytes` hold its whole canonical form).
    private let collection: String
    private let id: UUID?
    private let rev: Int64?
    /// A CREATE's or REPLACE's document as stored (the request's own buffer, not a copy); another write's whole
    /// canonical form.
    private let bytes: [UInt8]
    /// Whether `bytes` is a CREATE's or REPLACE's document.
    private let isDocument: Bool

    /// The request in a canonical form, without its key: its opcode (2 bytes), its collection and id each ended by a
    /// NUL byte, and the rest (for a CREATE or REPLACE its expected revision, a NUL and the document; for the others
    /// the request's JSON). Two requests with one key are the same request when their `request` and `canonical` are
    /// equal.
    public var canonical: [UInt8] { isDocument ? head + bytes : bytes }

    /// What the request was, for the refusal of a key reused for another: the opcode's name, and its collection and
    /// id when it names them (`CREATE todos 3f25…`), read from `canonical`.
    public var request: String {
        let canonical = isDocument ? head : bytes
        guard canonical.count >= 2 else { return "" }
        let name = Opcode(rawValue: UInt16(canonical[0]) << 8 | UInt16(canonical[1])).name
        var text = Array(name.utf8)
        var start = 2
        for _ in 0..<2 {
            guard let end = canonical[start...].firstIndex(of: 0) else { break }
            if end > start {
                text.append(UInt8(ascii: " "))
                text.append(contentsOf: canonical[start..<end])
            }
            start = end + 1
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// `canonical`'s fingerprint as stored with the key: XXH3's 128-bit hash, 32 hex digits. The request it was made
    /// for is not an adversary's (a client retries its own write), so a fast hash does what a cryptographic one
    /// would; keys stored by older servers hold a SHA-256 (64 hex digits) instead, which `answer` checks too.
    public var digest: String { RequestKey.hex(fingerprint) }

    /// `canonical`'s 128-bit hash (`digest`), made without making `canonical` on the heap.
    private var fingerprint: XXH128_hash_t {
        isDocument ? Self.fingerprint(opcode, collection, id, rev, bytes) : XXH3_128bits(bytes, bytes.count)
    }

    /// The fingerprint of a CREATE or REPLACE from its parts: its canonical form made on the stack when it is at most
    /// 4 KiB, else its head on the stack and the document streamed after it. (A static function of the parts: a
    /// closure over the request would copy it.)
    private static func fingerprint(
        _ opcode: Opcode, _ collection: String, _ id: UUID?, _ rev: Int64?, _ document: [UInt8]
    ) -> XXH128_hash_t {
        withHeadParts(collection, rev) { collection, revision in
            document.withUnsafeBytes { document in
                let head = headCount(collection, id, revision)
                let total = head + document.count
                if total <= 4096 {
                    return withUnsafeTemporaryAllocation(byteCount: total, alignment: 8) { buffer in
                        let out = buffer.baseAddress!
                        writeHead(opcode, collection, id, revision, into: out)
                        if let base = document.baseAddress {
                            (out + head).copyMemory(from: base, byteCount: document.count)
                        }
                        return XXH3_128bits(out, total)
                    }
                }
                return withUnsafeTemporaryAllocation(byteCount: head, alignment: 8) { buffer in
                    writeHead(opcode, collection, id, revision, into: buffer.baseAddress!)
                    return larder_xxh3_128_pair(buffer.baseAddress, head, document.baseAddress, document.count)
                }
            }
        }
    }

    /// The document a CREATE or REPLACE brought.
    private var document: [UInt8]? { isDocument ? bytes : nil }

    /// Calls `body` with the UTF-8 of a CREATE's or REPLACE's collection and expected revision (empty when none).
    private static func withHeadParts<R>(
        _ collection: String, _ rev: Int64?, _ body: (UnsafeBufferPointer<UInt8>, UnsafeBufferPointer<UInt8>) -> R
    ) -> R {
        func withRevision(_ collection: UnsafeBufferPointer<UInt8>) -> R {
            guard let rev else { return body(collection, UnsafeBufferPointer(start: nil, count: 0)) }
            var revision = String(rev)
            return revision.withUTF8 { body(collection, $0) }
        }
        if let done = collection.utf8.withContiguousStorageIfAvailable(withRevision) { return done }
        var collection = collection
        return collection.withUTF8(withRevision)
    }

    /// The canonical head of a CREATE or REPLACE, made on the heap (for the rare uses that need it whole).
    private var head: [UInt8] {
        let (opcode, id) = (opcode, id)
        return Self.withHeadParts(collection, rev) { collection, revision in
            let length = Self.headCount(collection, id, revision)
            return [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
                Self.writeHead(opcode, collection, id, revision, into: UnsafeMutableRawPointer(buffer.baseAddress!))
                count = length
            }
        }
    }

    /// The length of the canonical head (`writeHead`).
    private static func headCount(
        _ collection: UnsafeBufferPointer<UInt8>, _ id: UUID?, _ revision: UnsafeBufferPointer<UInt8>
    ) -> Int {
        2 + collection.count + 1 + (id == nil ? 0 : 36) + 1 + revision.count + 1
    }

    /// Writes the canonical head of a CREATE or REPLACE at `out` (`headCount` bytes): the opcode, the collection and
    /// id each ended by NUL, the expected revision and a NUL.
    private static func writeHead(
        _ opcode: Opcode, _ collection: UnsafeBufferPointer<UInt8>, _ id: UUID?, _ revision: UnsafeBufferPointer<UInt8>,
        into out: UnsafeMutableRawPointer
    ) {
        out.storeBytes(of: UInt8(truncatingIfNeeded: opcode.rawValue >> 8), as: UInt8.self)
        out.storeBytes(of: UInt8(truncatingIfNeeded: opcode.rawValue), toByteOffset: 1, as: UInt8.self)
        var at = out + 2
        if let base = collection.baseAddress { at.copyMemory(from: base, byteCount: collection.count) }
        at += collection.count
        at.storeBytes(of: 0, as: UInt8.self)
        at += 1
        if let id {
            id.withWireUTF8 { at.copyMemory(from: $0.baseAddress!, byteCount: 36) }
            at += 36
        }
        at.storeBytes(of: 0, as: UInt8.self)
        at += 1
        if let base = revision.baseAddress { at.copyMemory(from: base, byteCount: revision.count) }
        at += revision.count
        at.storeBytes(of: 0, as: UInt8.self)
    }

    public init(key: UUID, canonical: [UInt8]) {
        self.key = key
        self.opcode = Opcode(rawValue: canonical.count >= 2 ? UInt16(canonical[0]) << 8 | UInt16(canonical[1]) : 0)
        self.collection = ""
        self.id = nil
        self.rev = nil
        self.bytes = canonical
        self.isDocument = false
    }

    private init(key: UUID, opcode: Opcode, collection: String, id: UUID?, rev: Int64?, document: [UInt8]) {
        self.key = key
        self.opcode = opcode
        self.collection = collection
        self.id = id
        self.rev = rev
        self.bytes = document
        self.isDocument = true
    }

    /// The key of a parsed request, taken out of it (the request's own parser then sees the members it knows); nil
    /// when it carries none. INVALID_ARGUMENT (field `requestKey`) when the member is not a UUID string.
    package static func take(from object: inout JSONObject) throws(LarderError) -> UUID? {
        guard let value = object["requestKey"] else { return nil }
        object["requestKey"] = nil
        if value == .null { return nil }
        guard let text = value.stringValue, let key = try? FieldReader.uuid(text, field: "requestKey") else {
            throw LarderError(
                .invalidArgument, "requestKey must be a UUID string (36 characters), made anew for each write",
                field: "requestKey")
        }
        return key
    }

    /// A CREATE's or REPLACE's key: the request is its collection, id and expected revision, and the document as
    /// stored (so the tree-free reader and the general one, which read one request alike, fingerprint it alike).
    package static func document(
        _ key: UUID, _ opcode: Opcode, collection: String, id: UUID?, rev: Int64?, data: [UInt8]
    ) -> RequestKey {
        RequestKey(key: key, opcode: opcode, collection: collection, id: id, rev: rev, document: data)
    }

    /// Any other write's key: the request is its JSON without the key, in compact form (member order kept).
    package static func request(_ key: UUID, _ opcode: Opcode, _ object: JSONObject) -> RequestKey {
        var collection = object["collection"]?.stringValue ?? ""
        var id = (object["id"] ?? object["upload"])?.stringValue.map { $0.lowercased() } ?? ""
        let rest = object.bytes
        var canonical: [UInt8] = []
        canonical.reserveCapacity(2 + collection.utf8.count + 1 + id.utf8.count + 1 + rest.count)
        canonical.append(UInt8(truncatingIfNeeded: opcode.rawValue >> 8))
        canonical.append(UInt8(truncatingIfNeeded: opcode.rawValue))
        collection.withUTF8 { canonical.append(contentsOf: $0) }
        canonical.append(0)
        id.withUTF8 { canonical.append(contentsOf: $0) }
        canonical.append(0)
        canonical.append(contentsOf: rest)
        return RequestKey(key: key, canonical: canonical)
    }

    /// Whether the request is a CREATE (of a document as stored, which it holds): a store may keep its key in the row
    /// the CREATE makes (`rowMark`).
    var createsDocument: Bool { isDocument && opcode == .create }

    /// Whether a CREATE or REPLACE names its id.
    private var namesId: Bool { isDocument && id != nil }

    /// What the row this CREATE makes keeps of its key (`RowMark`); nil for any other request.
    var rowMark: RowMark? {
        guard createsDocument else { return nil }
        let named: UInt64 = namesId ? 1 << 63 : 0
        return RowMark(key: key, document: bytes, bits: named | shortFingerprint)
    }

    /// What the row a CREATE makes keeps of its key (`documents.createKey`), made before the row is written. 24
    /// bytes: the key's 16 bytes, then 8 bytes (big-endian) whose top bit is set when the CREATE named its id and
    /// whose other 63 bits are the request's short fingerprint (`shortFingerprint`). (Rows written by the previous
    /// version keep 33 bytes: the key, the whole 128-bit fingerprint, and a byte for the id; both are read.)
    struct RowMark: Sendable {
        let key: UUID
        /// The document the CREATE brought.
        let document: [UInt8]
        /// The last 8 bytes' value.
        let bits: UInt64

        /// Calls `body` with the mark's 24 bytes, made on the stack.
        func withBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
            var mark: (uuid_t, UInt64) = (key.uuid, bits.bigEndian)
            return try withUnsafeBytes(of: &mark) { (raw) throws(E) -> R in try body(raw) }
        }

        /// Whether `data`, the document the CREATE's row keeps, is the one the request brought: only then can the
        /// CREATE's answer be made again from the row for a retry (`tableRow`).
        func isBrought(_ data: [UInt8]) -> Bool {
            guard document.count == data.count else { return false }
            return document.withUnsafeBytes { own in
                data.withUnsafeBytes { row in
                    own.isEmpty || own.baseAddress == row.baseAddress
                        || memcmp(own.baseAddress!, row.baseAddress!, own.count) == 0
                }
            }
        }
    }

    /// The short fingerprint a CREATE's row mark keeps: 63 bits of XXH3's 64-bit hash of the document, seeded with a
    /// hash of the collection's exact bytes and the expected revision. The rest of the request is compared as text
    /// (`request`: the opcode, the collection and the named id) before the fingerprint, and that text alone cannot
    /// tell `todos` naming id X from a collection named `todos X`: the seed does. So a retry matches, and another
    /// request with the key matches only by a chance of one in 2^63. (For another write, the hash of its whole
    /// canonical form.)
    private var shortFingerprint: UInt64 {
        guard isDocument else { return XXH3_64bits(bytes, bytes.count) & ~(1 << 63) }
        let revision = rev.map { UInt64(bitPattern: $0) ^ 1 << 63 } ?? 0
        var collection = collection
        let seed = collection.withUTF8 { XXH3_64bits_withSeed($0.baseAddress, $0.count, revision) }
        return XXH3_64bits_withSeed(bytes, bytes.count, seed) & ~(1 << 63)
    }

    /// The key a row's mark (`rowMark`) holds.
    static func key(ofMark mark: [UInt8]) -> UUID? {
        guard mark.count == 24 || mark.count == 33 else { return nil }
        return mark.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }

    /// The key table's row for a CREATE's key kept in the row of document `id` (`rowMark`): what `storeRequestKey`
    /// would have stored, its answer (the record at revision 1) without the document. `answer` puts back the
    /// document a retry brings. The digest is the mark's fingerprint: 16 hex digits for a short one, 32 for a whole.
    static func tableRow(collection: String, id: UUID, createdAt: Int64, mark: [UInt8])
        -> (request: String, digest: String, answer: [UInt8])
    {
        var answer: [UInt8] = []
        StoredRecord(id: id, rev: 1, createdAt: createdAt, updatedAt: createdAt, data: []).write(into: &answer)
        let cut = "@" + String(answer.count - 1)
        let (named, digest) = mark.withUnsafeBytes { bytes -> (Bool, String) in
            let high = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
            guard bytes.count == 33 else { return (high >> 63 == 1, hex(high & ~(1 << 63), cut)) }
            let low = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
            return (bytes[32] == 1, hex(XXH128_hash_t(low64: low, high64: high), cut))
        }
        let request = named ? "CREATE \(collection) \(id.wireString)" : "CREATE \(collection)"
        return (request, digest, answer)
    }

    /// A 128-bit hash as 32 lowercase hex digits, high half first, followed by `suffix`.
    private static func hex(_ hash: XXH128_hash_t, _ suffix: String = "") -> String {
        hex(hash.high64, hash.low64, suffix)
    }

    /// A short fingerprint (`shortFingerprint`) as 16 lowercase hex digits, followed by `suffix`.
    private static func hex(_ short: UInt64, _ suffix: String = "") -> String { hex(short, nil, suffix) }

    /// `high`, then `low` when given, as 16 lowercase hex digits each, followed by `suffix`.
    private static func hex(_ high: UInt64, _ low: UInt64?, _ suffix: String) -> String {
        var suffix = suffix
        let digits = low == nil ? 16 : 32
        return suffix.withUTF8 { tail in
            String(unsafeUninitializedCapacity: digits + tail.count) { buffer in
                let out = UnsafeMutableRawPointer(buffer.baseAddress!)
                HexDigits.write(high, into: out)
                if let low { HexDigits.write(low, into: out + 16) }
                _ = UnsafeMutableBufferPointer(rebasing: buffer[digits...]).initialize(from: tail)
                return digits + tail.count
            }
        }
    }

    /// INVALID_ARGUMENT for a key that went with another request.
    func reused(for stored: String) -> LarderError {
        LarderError(
            .invalidArgument, "requestKey \(key.wireString) was used for another request (\(stored)); a key names one "
                + "write: make a new key for a new write", field: "requestKey")
    }

    /// The answer stored under this key, when `stored` (request, digest, answer) is the same request; the refusal
    /// when it is another.
    func answer(_ stored: (request: String, digest: String, answer: [UInt8])) throws(LarderError) -> [UInt8] {
        let (fingerprint, cut) = Self.split(stored.digest)
        let same =
            switch fingerprint.utf8.count {
            case 64: SHA256.hex(canonical) == fingerprint
            case 16: Self.hex(shortFingerprint) == fingerprint
            default: digest == fingerprint
            }
        guard stored.request == request, same else { throw reused(for: stored.request) }
        guard let cut else { return stored.answer }
        // The same request: its document is the one cut out of the answer.
        guard let document, cut >= 0, cut <= stored.answer.count else { throw reused(for: stored.request) }
        var answer: [UInt8] = []
        answer.reserveCapacity(stored.answer.count + document.count)
        answer.append(contentsOf: stored.answer[..<cut])
        answer.append(contentsOf: document)
        answer.append(contentsOf: stored.answer[cut...])
        return answer
    }

    /// `answer` as a key table may keep it, with the digest to keep beside it. When the answer holds the request's
    /// document verbatim (a CREATE's or REPLACE's record ends with it and a closing brace), the document is cut out
    /// and the digest says where it goes back (`<32 hex digits>@<offset>`): a retry is the same request, so it
    /// brings the document again, and the key's row is a fraction of the size. A server that does not know this form
    /// finds the digest different and refuses such a retry rather than answer it wrongly.
    func kept(_ answer: [UInt8]) -> (answer: [UInt8], digest: String) {
        guard let document, !document.isEmpty, answer.count > document.count else { return (answer, digest) }
        let cut = answer.count - 1 - document.count
        let holds = answer.withUnsafeBufferPointer { a in
            document.withUnsafeBufferPointer { d in memcmp(a.baseAddress! + cut, d.baseAddress!, d.count) == 0 }
        }
        guard holds else { return (answer, digest) }
        var kept: [UInt8] = []
        kept.reserveCapacity(answer.count - document.count)
        kept.append(contentsOf: answer[..<cut])
        kept.append(contentsOf: answer[(cut + document.count)...])
        return (kept, Self.hex(fingerprint, "@" + String(cut)))
    }

    /// A stored digest's fingerprint, and the offset of the document cut out of its answer, if one was (`kept`).
    private static func split(_ stored: String) -> (fingerprint: Substring, cut: Int?) {
        guard let at = stored.utf8.firstIndex(of: UInt8(ascii: "@")),
            let cut = Int(Substring(stored.utf8[stored.utf8.index(after: at)...]))
        else { return (stored[...], nil) }
        return (Substring(stored.utf8[..<at]), cut)
    }

    /// `body` keyed: the answer stored under the key when the same request committed with it before (nothing is
    /// written), else the body's answer, stored under the key in the same transaction. A body that throws stores
    /// nothing: its retry runs again.
    package func wrap(_ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8]))
        -> @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8])
    {
        let key = self
        return { (context) throws(LarderError) in
            if let stored = try context.claimRequestKey(key) { return (stored, []) }
            let answer = try body(context)
            try context.storeRequestKey(key, answer: answer.0)
            return answer
        }
    }

    /// A keyed CREATE (this key's request) of `document` in `collection`, answered with the record it makes
    /// (`StoredRecord.bytes`) as `wrap` would answer it. Because the answer is that record, a store may keep the key
    /// in the record's own row and make the answer again from the row for a retry (`WriteContext.keyed`).
    package func create(_ collection: String, id: UUID?, document: PreparedDocument)
        -> @Sendable (any WriteContext) throws(LarderError) -> ([UInt8], [UInt8])
    {
        let key = self
        return { (context) throws(LarderError) in
            if let stored = try context.claimRequestKey(key) { return (stored, []) }
            let record = try context.keyed(key) { () throws(LarderError) in
                try context.create(collection, id: id, document: document)
            }
            let answer = record.bytes
            try context.storeRequestKey(key, answer: answer)
            return (answer, [])
        }
    }
}
