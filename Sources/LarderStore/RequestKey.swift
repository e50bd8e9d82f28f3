import CXXHash
import Foundation
import LarderWire

/// A write's request key (Protocol.md section 5.10): a UUID the client makes for one logical write and sends again with
/// each retry of it. The store keeps the key with the write's answer, in the write's transaction, so that the same key
/// again answers that answer and writes nothing; a key sent with another request is refused.
public struct RequestKey: Sendable, Equatable {
    /// The key the client sent.
    public var key: UUID
    /// What the request was, for the refusal of a key reused for another: the opcode's name, and its collection and
    /// id when it names them (`CREATE todos 3f25…`).
    public var request: String
    /// The request in a canonical form, without its key: its opcode, collection, id and the rest (`document`,
    /// `request`). Two requests with one key are the same request when their `request` and `canonical` are equal.
    public var canonical: [UInt8]

    /// `canonical`'s fingerprint as stored with the key: XXH3's 128-bit hash, 32 hex digits. The request it was made
    /// for is not an adversary's (a client retries its own write), so a fast hash does what a cryptographic one
    /// would; keys stored by older servers hold a SHA-256 (64 hex digits) instead, which `answer` checks too.
    public var digest: String { RequestKey.hex(XXH3_128bits(canonical, canonical.count)) }

    public init(key: UUID, request: String, canonical: [UInt8]) {
        self.key = key
        self.request = request
        self.canonical = canonical
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

    /// `key` for a request of `opcode` naming `collection` and `id` (when it does), whose other members `rest`
    /// holds (in the canonical form's order).
    private init(_ key: UUID, _ opcode: Opcode, collection: String?, id: String?, rest: [UInt8]...) {
        var request = opcode.name
        for part in [collection, id] { if let part { request += " " + part } }
        var collection = collection ?? ""
        var id = id ?? ""
        let size = 2 + collection.utf8.count + 1 + id.utf8.count + 1 + rest.reduce(0) { $0 + $1.count }
        let canonical = [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            buffer[0] = UInt8(truncatingIfNeeded: opcode.rawValue >> 8)
            buffer[1] = UInt8(truncatingIfNeeded: opcode.rawValue)
            var at = 2
            func append(_ bytes: UnsafeBufferPointer<UInt8>) {
                guard let base = bytes.baseAddress, bytes.count > 0 else { return }
                (buffer.baseAddress! + at).update(from: base, count: bytes.count)
                at += bytes.count
            }
            collection.withUTF8 { append($0) }
            buffer[at] = 0
            at += 1
            id.withUTF8 { append($0) }
            buffer[at] = 0
            at += 1
            for bytes in rest { bytes.withUnsafeBufferPointer { append($0) } }
            initialized = at
        }
        self.init(key: key, request: request, canonical: canonical)
    }

    /// A CREATE's or REPLACE's key: the request is its collection, id and expected revision, and the document as
    /// stored (so the tree-free reader and the general one, which read one request alike, fingerprint it alike).
    package static func document(
        _ key: UUID, _ opcode: Opcode, collection: String, id: UUID?, rev: Int64?, data: [UInt8]
    ) -> RequestKey {
        RequestKey(key, opcode, collection: collection, id: id?.wireString, rest: Array((rev.map(String.init) ?? "").utf8) + [0], data)
    }

    /// Any other write's key: the request is its JSON without the key, in compact form (member order kept).
    package static func request(_ key: UUID, _ opcode: Opcode, _ object: JSONObject) -> RequestKey {
        let collection = object["collection"]?.stringValue
        let id = (object["id"] ?? object["upload"])?.stringValue.map { $0.lowercased() }
        return RequestKey(key, opcode, collection: collection, id: id, rest: object.bytes)
    }

    /// A 128-bit hash as 32 lowercase hex digits, high half first.
    private static func hex(_ hash: XXH128_hash_t) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 32) { buffer in
            for (half, value) in [hash.high64, hash.low64].enumerated() {
                for nibble in 0..<16 {
                    buffer[half * 16 + nibble] = digits[Int((value >> (60 - 4 * UInt64(nibble))) & 0xf)]
                }
            }
            return 32
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
        let same = stored.digest.utf8.count == 64 ? SHA256.hex(canonical) == stored.digest : digest == stored.digest
        guard stored.request == request, same else { throw reused(for: stored.request) }
        return stored.answer
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
}
