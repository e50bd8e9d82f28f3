import Foundation
import LarderStore
import LarderWire

/// What a blob request of a caller held to the collections' rules must pass before it runs as any other (Protocol.md
/// section 10.4): a photo follows the record it is attached to. Reading it (`BLOB_GET`, `BLOB_HEAD`, `BLOB_LIST` of the
/// record) needs the record's collection's `read` rule; attaching (`BLOB_PUT`, `BLOB_UPLOAD`) or deleting one needs
/// its `update` rule; under `owner`, the record must be the caller's. A blob the caller may not read answers as a
/// missing one, and a record the caller may not see as a missing record, so no answer tells them apart.
enum RuledBlobGate {
    /// What the gate decided: run the request as usual, refuse it, or answer it without running it.
    enum Outcome: Sendable {
        case proceed
        case refused(LarderError)
        case answered([UInt8])
    }

    /// The requests the gate decides.
    static let checked = UserAccess.checkedBlobOpcodes

    /// Every blob request a caller held to the rules may send (`UserAccess.blobOpcodes`).
    static let opcodes = UserAccess.blobOpcodes

    /// The blob id a request names, or nil when its `id` is missing or malformed: the request's own parser then
    /// answers that mistake, before anything is read.
    static func blobID(_ object: JSONObject) -> UUID? {
        guard let text = object["id"]?.stringValue else { return nil }
        return try? FieldReader.uuid(text, field: "id")
    }

    /// The record `member` names (`attach`, `attachedTo`): `.some(nil)` when absent or null, nil when malformed (the
    /// request's own parser answers it).
    static func attachment(_ object: JSONObject, _ member: String) -> BlobAttachment?? {
        guard let value = object[member], !value.isNull else { return .some(nil) }
        guard let fields = value.objectValue, let attachment = try? BlobAttachment(json: fields, path: member) else {
            return nil
        }
        return .some(attachment)
    }

    /// PERMISSION_DENIED for a blob request of a caller held to the rules that names no record.
    static func needsRecord(_ opcode: Opcode, _ member: String) -> LarderError {
        LarderError(
            .permissionDenied,
            "a signed-in user's \(opcode.name) names the record the photo belongs to: send \(member) "
                + "{\"collection\", \"id\"}; a photo attached to no record needs a role token",
            field: member, details: ["opcode": .string(opcode.name)])
    }
}

extension Router {
    /// Runs `RuledBlobGate` for `frame` on the work pool and calls `completion` exactly once, on any thread.
    func submitRuledBlobGate(
        _ frame: Frame, caller: RuledCaller, completion: @escaping @Sendable (RuledBlobGate.Outcome) -> Void
    ) {
        let accepted = pool.submit { [self] in
            do throws(LarderError) {
                completion(try ruledBlobGate(frame, caller))
            } catch {
                completion(.refused(error))
            }
        }
        if !accepted { completion(.refused(Router.poolFullError(pool))) }
    }

    private func ruledBlobGate(_ frame: Frame, _ caller: RuledCaller) throws(LarderError) -> RuledBlobGate.Outcome {
        let object = try frame.jsonObject()
        switch frame.opcode {
        case .blobGet, .blobHead, .blobDelete:
            guard let id = RuledBlobGate.blobID(object) else { return .proceed }
            let access: Opcode = frame.opcode == .blobDelete ? .patch : .get
            guard let attachment = try store.blobHead(id).attachedTo,
                (try? visibleRecord(attachment, access, caller)) == true
            else {
                throw StoreRules.blobNotFound(id)
            }
            return .proceed
        case .blobList:
            guard let member = RuledBlobGate.attachment(object, "attachedTo") else { return .proceed }
            guard let attachment = member else { throw RuledBlobGate.needsRecord(.blobList, "attachedTo") }
            // A record the caller may not see lists as a missing record does: no blob.
            guard try visibleRecord(attachment, .get, caller) else {
                return .answered(BlobListResponse(blobs: [], nextCursor: nil).json.bytes)
            }
            return .proceed
        case .blobPut, .blobUpload:
            guard let member = RuledBlobGate.attachment(object, "attach") else { return .proceed }
            guard let attachment = member else { throw RuledBlobGate.needsRecord(frame.opcode, "attach") }
            guard try visibleRecord(attachment, .patch, caller) else { throw WriteRules.attachMissing(attachment) }
            return .proceed
        default:
            return .proceed
        }
    }

    /// Whether the rules let `caller` send `access` (a read or an update) about the record `attachment` names and
    /// that record is theirs to see: false for a record another user owns under `owner`, and for a missing one.
    /// PERMISSION_DENIED when the collection's rules refuse the request whoever owns the record.
    private func visibleRecord(_ attachment: BlobAttachment, _ access: Opcode, _ caller: RuledCaller)
        throws(LarderError) -> Bool
    {
        try caller.checkSession(self.access)
        let rules = try self.access.rules(attachment.collection)
        let owner = try RulesGate.admit(rules, access, collection: attachment.collection, caller: caller)
        guard let owner else { return true }
        do throws(LarderError) {
            return RulesGate.visible(try store.get(attachment.collection, id: attachment.id), to: owner)
        } catch where error.status == .notFound {
            return false
        }
    }
}
