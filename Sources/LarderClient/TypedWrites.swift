import Foundation
import LarderWire

/// `Stored` values are identified by their document's id, so SwiftUI's `List` and `ForEach` take them as they are:
///
/// ```swift
/// List(todos) { todo in Text(todo.value.title) }   // todos: [Stored<Todo>]
/// ```
extension Stored: Identifiable {}

extension LarderCollection {
    /// Edits a stored value and writes back only what the edit changed, as an RFC 7396 merge patch, if no one wrote
    /// the document since it was read (its `rev`).
    ///
    /// The patch is the difference between `stored.value` and the edited value, each encoded as it would be stored:
    /// members that changed are sent with their new value, members the edit removed (an optional set to nil) are sent
    /// as `null` (the server removes them), nested objects are compared member by member, and arrays are sent whole.
    /// Members of the stored document that `Model` does not know are left as they are, which `save(_:)` (a REPLACE)
    /// would drop. When the edit changes nothing, nothing is sent and `stored` is returned as it is.
    ///
    /// ```swift
    /// do {
    ///     let updated = try await items.update(item) { $0.price = 42; $0.discount = nil }   // PATCH at item.rev
    ///     show(updated)
    /// } catch where error.status == .conflict {
    ///     let current = try error.currentVersion(as: Item.self)   // what the other writer left: edit it again
    ///     show(current)
    /// }
    /// ```
    ///
    /// - Throws: `CONFLICT` when the document's revision is no longer `stored.rev`; its `currentVersion(as:)` is the
    ///   document as the server holds it now, read right after the refusal (`details["currentRev"]` is its revision;
    ///   when that read fails, the CONFLICT comes without a version).
    ///   `NOT_FOUND` when the document was deleted; `DECODING_FAILED` when the new value does not decode as `Model`;
    ///   `INVALID_ARGUMENT` when `Model` does not encode as a JSON object; `PAYLOAD_TOO_LARGE`, `UNAVAILABLE` and
    ///   the other errors of any request.
    @discardableResult
    public func update(
        _ stored: Stored<Model>, _ edit: (inout Model) -> Void
    ) async throws(LarderError) -> Stored<Model> {
        var value = stored.value
        edit(&value)
        let patch = MergePatchDiff.diff(from: try ModelCoding.encode(stored.value), to: try ModelCoding.encode(value))
        if patch.isEmpty { return stored }
        do throws(LarderError) {
            return try Stored(try await client.patch(name, id: stored.id, patch: patch, rev: stored.rev))
        } catch where error.status == .conflict {
            throw await withCurrentVersion(error, id: stored.id)
        }
    }

    /// A CONFLICT refusal with the document as the server holds it now attached (`LarderError.currentVersion`),
    /// read with a GET; when the document is gone meanwhile, the GET's NOT_FOUND instead.
    func withCurrentVersion(_ conflict: LarderError, id: UUID) async -> LarderError {
        let current: Record
        do throws(LarderError) {
            current = try await client.get(name, id: id)
        } catch where error.status == .notFound {
            return error
        } catch {
            return conflict
        }
        var details = conflict.details
        details["currentRev"] = .int(current.rev)
        details[LarderError.currentVersionKey] = .object(current.json)
        return LarderError(
            .conflict, "\(name)/\(id.wireString) was written by someone else since it was read: it is at revision "
                + "\(current.rev) now; apply the edit to error.currentVersion() and write again",
            field: conflict.field ?? "rev", details: details)
    }
}

extension LarderError {
    /// The member of `details` that holds the current version of a document a typed write was refused for.
    static let currentVersionKey = "current"

    /// The document as the server held it when a typed write (`LarderCollection.update`) was refused with
    /// `CONFLICT`, decoded as `Model`; nil for any other error, and for a CONFLICT whose version could not be read.
    /// Apply the edit to it and write again.
    ///
    /// ```swift
    /// } catch where error.status == .conflict {
    ///     if let current = try error.currentVersion(as: Item.self) { try await items.update(current, edit) }
    /// }
    /// ```
    ///
    /// - Throws: `DECODING_FAILED` when the current document does not decode as `Model`.
    public func currentVersion<Model: Codable & Sendable>(
        as type: Model.Type = Model.self
    ) throws(LarderError) -> Stored<Model>? {
        guard status == .conflict, case .object(let object)? = details[LarderError.currentVersionKey] else {
            return nil
        }
        return try Stored(try Record(json: object))
    }
}

/// The RFC 7396 merge patch that turns one JSON object into another.
package enum MergePatchDiff {
    /// The patch that makes `before` into `after` when applied to it: changed members with their new values, removed
    /// members as `null`, objects on both sides diffed member by member (left out when equal), anything else (arrays
    /// included) replaced whole. Empty when the two are equal.
    ///
    /// A merge patch cannot set a member to `null` (that removes it): a `null` in `after` removes the member, and an
    /// object replacing a non-object loses its `null` members, as RFC 7396 applies them.
    package static func diff(from before: JSONObject, to after: JSONObject) -> JSONObject {
        var patch = JSONObject()
        for (key, old) in before where after[key] == nil {
            if !old.isNull { patch[key] = .null }
        }
        for (key, new) in after {
            let old = before[key]
            if old == new { continue }
            if case .object(let newObject) = new, case .object(let oldObject)? = old {
                let inner = diff(from: oldObject, to: newObject)
                if !inner.isEmpty { patch[key] = .object(inner) }
            } else if new.isNull {
                if old != nil { patch[key] = .null }
            } else {
                patch[key] = new
            }
        }
        return patch
    }
}
