import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// CREATE and REPLACE in their usual form, read without building a tree: the document goes straight to its stored
/// form (`CompactDocument`).
package struct DocumentWrite: Sendable, Equatable {
    package var collection: String
    package var id: UUID?
    package var data: CompactDocument
    package var rev: Int64?
    /// The request's `requestKey` (Protocol.md section 5.10), when it carries one.
    package var requestKey: UUID?

    /// `{"collection": "…", "id": "…", "data": {…}}` (CREATE: `id` optional; REPLACE: `id` required and `rev`
    /// allowed): member names and the collection and id without escapes, each member once, the id in its strict
    /// form, `rev` a positive integer, `data` as `CompactJSON` reads it, `requestKey` a UUID in its strict form; an
    /// optional member (CREATE's `id`, `rev`, `requestKey`) may be `null`, which is its absence. Anything else is nil: then use `CreateRequest(json:)` or
    /// `ReplaceRequest(json:)`, which give the same request or the error.
    package static func fast(_ json: [UInt8], opcode: Opcode) -> DocumentWrite? {
        guard opcode == .create || opcode == .replace else { return nil }
        return json.withUnsafeBufferPointer { buffer -> DocumentWrite? in
            var input = ByteScanner(buffer: buffer)
            var collection: String?
            var id: UUID?
            var data: CompactDocument?
            var rev: Int64?
            var requestKey: UUID?
            // `"id": null` (CREATE), `"rev": null`, `"requestKey": null`: absent, once each.
            var optionalNull = (id: false, rev: false, requestKey: false)
            guard input.take(UInt8(ascii: "{")) else { return nil }
            repeat {
                guard let name = input.plainString(), input.take(UInt8(ascii: ":")) else { return nil }
                if input.equal(name, "id") && opcode == .create && id == nil && !optionalNull.id
                    && input.takeLiteral("null")
                {
                    optionalNull.id = true
                } else if input.equal(name, "rev") && opcode == .replace && rev == nil && !optionalNull.rev
                    && input.takeLiteral("null")
                {
                    optionalNull.rev = true
                } else if input.equal(name, "collection") && collection == nil {
                    guard let value = input.plainString(), value.count <= 256,
                        let string = String(validating: input.bytes(value), as: UTF8.self)
                    else { return nil }
                    collection = string
                } else if input.equal(name, "id") && id == nil && !optionalNull.id {
                    guard let value = input.plainString(), let uuid = FieldReader.strictUUID(utf8: input.bytes(value))
                    else { return nil }
                    id = uuid
                } else if input.equal(name, "data") && data == nil {
                    guard let document = CompactJSON.object(buffer, at: &input.index, depth: 2) else { return nil }
                    data = document
                } else if input.equal(name, "rev") && rev == nil && !optionalNull.rev && opcode == .replace {
                    guard let value = input.smallInteger(minimum: 1) else { return nil }
                    rev = value
                } else if input.equal(name, "requestKey") && requestKey == nil && !optionalNull.requestKey {
                    if input.takeLiteral("null") {
                        optionalNull.requestKey = true
                    } else {
                        guard let value = input.plainString(),
                            let key = FieldReader.strictUUID(utf8: input.bytes(value))
                        else { return nil }
                        requestKey = key
                    }
                } else {
                    return nil
                }
            } while input.take(UInt8(ascii: ","))
            guard input.take(UInt8(ascii: "}")) else { return nil }
            input.skipWhitespace()
            guard input.atEnd, let collection, let data, opcode == .create || id != nil else { return nil }
            return DocumentWrite(collection: collection, id: id, data: data, rev: rev, requestKey: requestKey)
        }
    }
}

extension DocumentWrite {
    /// The JSON part of a CREATE (`rev` nil) or REPLACE request whose document is already compact JSON (a client's
    /// encoded model), written around its bytes: the form `fast` reads.
    package static func request(collection: String, id: UUID?, document: [UInt8], rev: Int64? = nil) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(document.count + collection.utf8.count + 80)
        out.append(contentsOf: #"{"collection":"#.utf8)
        JSONWriter.writeString(collection, into: &out)
        if let id {
            out.append(contentsOf: #","id":""#.utf8)
            out.append(contentsOf: id.wireString.utf8)
            out.append(UInt8(ascii: "\""))
        }
        out.append(contentsOf: #","data":"#.utf8)
        out.append(contentsOf: document)
        if let rev {
            out.append(contentsOf: #","rev":"#.utf8)
            JSONWriter.writeInt(rev, into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}
