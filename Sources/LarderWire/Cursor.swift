import Foundation

/// Opaque page cursors: base64url of a small JSON object. Every cursor names its kind (`k`: the request that issued
/// it) and its scope (`q`: a digest of what the page is of: the collection for LIST; the collection, filter, text and
/// sort for SEARCH; the attachment for BLOB_LIST), so a cursor given to another request or another query is refused
/// rather than answered with a page of something else. Search cursors then carry the last record's sort values and
/// id; list cursors a sequence number.
package enum Cursor {
    /// The requests that issue cursors, as their kind is written in one.
    package enum Kind: String {
        case list = "LIST"
        case search = "SEARCH"
        case blobList = "BLOB_LIST"
    }

    /// A cursor of `kind` for `scope` (see `scope(_:)`), carrying `position`.
    package static func encode(_ kind: Kind, scope: String, _ position: JSONObject) -> String {
        var object: JSONObject = ["k": .string(kind.rawValue), "q": .string(scope)]
        for (key, value) in position { object[key] = value }
        return encode(object)
    }

    package static func encode(_ object: JSONObject) -> String {
        Data(object.bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The digest that ties a cursor to what its pages are of: 16 hex digits of the SHA-256 of `parts` as JSON.
    package static func scope(_ parts: [JSON]) -> String { String(SHA256.hex(JSON.array(parts).bytes).prefix(16)) }

    /// The position a cursor of `kind` for `scope` carries; INVALID_ARGUMENT (field `cursor`) for a cursor of another
    /// request, of another query (`scopeMessage` says which), or not one this store issued.
    package static func open(_ string: String, _ kind: Kind, scope: String, scopeMessage: String) throws(LarderError)
        -> JSONObject
    {
        let object = try decode(string)
        guard case .string(let issuer)? = object["k"], let issued = Kind(rawValue: issuer) else {
            throw LarderError(
                .invalidArgument, "the cursor is not one this server issued; pass nextCursor back unchanged",
                field: "cursor")
        }
        guard issued == kind else {
            let message = "this is a \(issued.rawValue) cursor; \(kind.rawValue) takes only the nextCursor of a "
                + "\(kind.rawValue) answer"
            throw LarderError(.invalidArgument, message, field: "cursor")
        }
        guard case .string(scope)? = object["q"] else {
            throw LarderError(.invalidArgument, scopeMessage, field: "cursor")
        }
        return object
    }

    package static func decode(_ string: String) throws(LarderError) -> JSONObject {
        var base64 = string.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), let object = try? JSONParser.parseObject(Array(data)) else {
            throw LarderError(
                .invalidArgument, "the cursor is not one this server issued; pass nextCursor back unchanged",
                field: "cursor")
        }
        return object
    }
}

extension Cursor {
    /// What a SEARCH cursor is valid for: the collection, filter, text and sort (not the limit).
    package static func searchScope(_ collection: String, _ query: SearchQuery) -> String {
        Cursor.scope([
            .string(collection), query.filter?.json ?? .null, query.text?.json ?? .null,
            .array(query.sort.map(\.json)),
        ])
    }
}
