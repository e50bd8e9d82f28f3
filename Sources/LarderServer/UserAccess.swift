import LarderWire

/// What a connection held to the collections' rules (a signed-in user, or an anonymous connection on a server that
/// accepts ID tokens) may send, before the rules of the collection it names are looked up.
enum UserAccess {
    /// The PERMISSION_DENIED for `frame` from a user (`user`, nil for an anonymous connection) that no rule can allow
    /// (it needs a role token); nil when the collection's rules decide.
    static func precheck(_ frame: Frame, user: String?) -> LarderError? {
        let opcode = frame.opcode
        guard Role.required(for: opcode) != nil, !ruled.contains(opcode) else { return nil }
        return noRules(opcode, collection: nil, user: user)
    }

    /// The requests the collections' rules decide (`RulesGate`, and for photos `RuledBlobGate`); every other one
    /// that needs a role is refused.
    static let ruled: Set<Opcode> = Set<Opcode>([
        .get, .getMany, .list, .search, .count, .group, .watch, .create, .replace, .patch, .delete, .rulesGet,
    ]).union(blobOpcodes)

    /// The blob requests whose photo's record the rules decide (`RuledBlobGate`).
    static let checkedBlobOpcodes: Set<Opcode> = [.blobGet, .blobHead, .blobList, .blobPut, .blobDelete, .blobUpload]

    /// Every blob request a caller held to the rules may send: those `RuledBlobGate` checks, and an upload's later
    /// requests (`BLOB_UPLOAD_CHUNK`, `_STATUS`, `_FINISH`, `_ABORT`), which name the upload by its id, as on every
    /// connection.
    static let blobOpcodes: Set<Opcode> = checkedBlobOpcodes.union([
        .blobUploadChunk, .blobUploadStatus, .blobUploadFinish, .blobUploadAbort,
    ])

    /// The answer to a request on `collection` (nil: the request names none) that has no rules for users.
    static func noRules(_ opcode: Opcode, collection: String?, user: String?) -> LarderError {
        let who = user == nil ? "a connection without a token" : "a signed-in user"
        guard let collection else {
            return LarderError(
                .permissionDenied, "\(who) may not send \(opcode.name): it needs a role token",
                details: ["opcode": .string(opcode.name)])
        }
        return LarderError(
            .permissionDenied,
            "the collection \(collection) has no rules for users, so \(who) may not use it; an admin sets them with "
                + "RULES_SET (larder rules set \(collection) --read owner --create owner --update owner --delete owner)",
            details: ["opcode": .string(opcode.name), "collection": .string(collection)])
    }
}
