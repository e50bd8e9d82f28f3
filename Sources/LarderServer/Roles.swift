import LarderWire

/// What a token may do: each role includes the rights of the ones before it (Protocol.md section 10.2).
package enum Role: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// Reads and the change feed.
    case read
    /// Also the writes and the blob writes.
    case write
    /// Also INDEX, DROP_COLLECTION and STATS.
    case admin

// Name to case and back, as LogLevel's (Logger.swift).
    package init?(name: String) {
        switch name {
        case "read": self = .read
        case "write": self = .write
        case "admin": self = .admin
        default: return nil
        }
    }

    package var description: String {
        switch self {
        case .read: "read"
        case .write: "write"
        case .admin: "admin"
        }
    }

    package static func < (lhs: Role, rhs: Role) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The least role that may send `opcode`; nil for the opcodes every authenticated client may send (HELLO, PING,
    /// UNWATCH) and for those the router answers UNKNOWN_OPCODE.
    package static func required(for opcode: Opcode) -> Role? {
        switch opcode {
        case .hello, .ping, .unwatch, .event: nil
        // Account requests decide for themselves who may send them (`PasswordAccounts`).
        case .signUp, .signIn, .signOut, .passwordChange, .sessionRefresh: nil
        case .get, .getMany, .list, .search, .count, .group, .collections, .blobGet, .blobHead, .blobList, .watch,
            .rulesGet:
            .read
        case .create, .replace, .patch, .delete, .blobPut, .blobDelete: .write
        case .blobUpload, .blobUploadChunk, .blobUploadStatus, .blobUploadFinish, .blobUploadAbort: .write
        case .index, .schemaSet, .schemaGet, .rulesSet, .dropCollection, .stats, .backup, .backupRead: .admin
        // An opcode added later is an administrator's until the table says otherwise.
        default: Opcode.all.contains(opcode) ? .admin : nil
        }
    }
}

/// The rights HELLO gave a connection: a role and, optionally, the only collections it may touch.
package struct Grant: Sendable, Equatable {
    package var role: Role
    /// nil: every collection.
    package var collections: Set<String>?

    package init(role: Role, collections: Set<String>? = nil) {
        self.role = role
        self.collections = collections
    }

    package static let unrestricted = Grant(role: .admin)

    private func denied(_ opcode: Opcode, _ why: String) -> LarderError {
        LarderError(.permissionDenied, "this token may not \(why)", details: ["opcode": .string(opcode.name)])
    }

    /// Whether `frame` is within these rights: nil when it is, else the PERMISSION_DENIED to answer.
    ///
    /// A limited token's request is refused when it names a well-formed collection outside its own, or, for
    /// BLOB_PUT, BLOB_UPLOAD and BLOB_LIST, when it names none (`attach`, `attachedTo` missing or `null`: unattached
    /// blobs belong to no collection). `null` is a member's absence (Protocol.md section 3), here as in the router.
    /// A member that is there but malformed (a number, an array, `9bad`) passes, so that the router names the field
    /// as it would for any token: the router refuses it before it reaches the store, so it touches no collection.
    package func check(_ frame: Frame) -> LarderError? {
        let opcode = frame.opcode
        guard let required = Role.required(for: opcode) else { return nil }
        if role < required {
            return denied(opcode, "send \(opcode.name): it needs the \(required) role and holds \(role)")
        }
        guard let collections else { return nil }
        func outside(_ value: JSON?) -> LarderError? {
            guard let name = Grant.wellFormedCollection(value), !collections.contains(name) else { return nil }
            return denied(opcode, "use the collection \(name) (it is limited to \(Grant.list(collections)))")
        }
        let object = try? frame.jsonObject()
        switch opcode {
        case .collections, .stats:
            return nil
        case .backup, .backupRead:
            return denied(opcode, "take a backup while it is limited to collections: a backup holds every collection")
        case .usersList, .userSet, .userDelete:
            return denied(opcode, "manage users while it is limited to collections: a user belongs to none")
        case .blobGet, .blobHead, .blobDelete:
            // Named by id: the router looks the blob up and refuses it before any other work (`Router.blobAccess`).
            return nil
        case .blobPut, .blobList, .blobUpload:
            // An upload's later requests name it by its id, which only the client that began it knows.
            let member = opcode == .blobList ? "attachedTo" : "attach"
            guard let target = Grant.present(object?[member]) else {
                return denied(
                    opcode, "\(opcode == .blobList ? "list" : "store") blobs outside its collections; "
                        + "give \(member) with one of \(Grant.list(collections))")
            }
            return outside(target["collection"])
        case .watch:
            // A WATCH on every collection (no `collection`, or `null`) is narrowed to these (`Subscription.allowed`).
            return outside(object?["collection"])
        default:
            return outside(object?["collection"])
        }
    }

    /// `value` unless it is missing or `null`, which a request means as the member's absence.
    static func present(_ value: JSON?) -> JSON? {
        guard let value, !value.isNull else { return nil }
        return value
    }

    /// The collection `value` names when it is a well-formed collection name; nil when it is absent, `null`, not a
    /// string, or not a name the store accepts (the router answers those INVALID_ARGUMENT).
    static func wellFormedCollection(_ value: JSON?) -> String? {
        guard let name = present(value)?.stringValue, (try? CollectionName.validate(name)) != nil else {
            return nil
        }
        return name
    }

    /// An answer seen through these rights: a limited token's COLLECTIONS lists only its collections, and a blob
    /// attached elsewhere (or to nothing) is refused rather than shown.
    package func screen(_ reply: Reply) -> Reply {
        guard let collections, reply.status == .ok else { return reply }
        switch reply.opcode {
        case .collections:
            guard let object = try? JSONParser.parseObject(reply.json, maxDepth: JSONParser.maxAnswerDepth),
                let list = object["collections"]?.arrayValue
            else { return reply }
            let kept = list.filter { $0["name"]?.stringValue.map(collections.contains) ?? false }
            let json: JSONObject = ["collections": .array(kept)]
            return Reply(opcode: reply.opcode, requestID: reply.requestID, json: json.bytes)
        case .blobGet, .blobHead:
            // The router refused such a blob before reading it (`Router.visibleBlob`); this holds if it changed since.
            let object = try? JSONParser.parseObject(reply.json, maxDepth: JSONParser.maxAnswerDepth)
            if let owner = object?["attachedTo"]?["collection"]?.stringValue, collections.contains(owner) {
                return reply
            }
            return Reply(
                opcode: reply.opcode, requestID: reply.requestID, error: Grant.blobRefused(reply.opcode, collections))
        default:
            return reply
        }
    }

    /// The one answer a token limited to `collections` gets for a blob it may not see: attached elsewhere, attached
    /// to nothing, or no blob at all. The same bytes whatever the blob is, so that it tells nothing about it, not even
    /// whether it exists (Protocol.md section 10.2).
    static func blobRefused(_ opcode: Opcode, _ collections: Set<String>) -> LarderError {
        let verb = opcode == .blobDelete ? "delete" : "read"
        return LarderError(
            .permissionDenied,
            "this token may not \(verb) that blob: it may only \(verb) blobs attached to documents of "
                + "\(Grant.list(collections))", details: ["opcode": .string(opcode.name)])
    }

    static func list(_ collections: Set<String>) -> String { collections.sorted().joined(separator: ", ") }
}

/// The tokens a server accepts, each with its grant: `--token` (one admin token) and the lines of `--token-file`.
package struct TokenTable: Sendable {
    package struct Entry: Sendable {
        var token: [UInt8]
        var grant: Grant
    }

    package internal(set) var entries: [Entry]

    package init(entries: [Entry] = []) { self.entries = entries }

    /// One admin token (`--token T`).
    package init(adminToken: String) {
        entries = [Entry(token: Array(adminToken.utf8), grant: .unrestricted)]
    }

    package var isEmpty: Bool { entries.isEmpty }

    /// The grant of `presented`, or nil. Every entry is compared in full, in constant time, whichever matches: the
    /// time taken says neither which token matched nor how much of a guess was right.
    package func grant(for presented: [UInt8]) -> Grant? {
        var found: Grant?
        for entry in entries where HelloNegotiation.constantTimeEqual(presented, entry.token) {
            found = entry.grant
        }
        return found
    }

    /// Adds `other`'s tokens after these (a token in both keeps the grant given here).
    package func merging(_ other: TokenTable) -> TokenTable {
        var merged = self
        for entry in other.entries where !entries.contains(where: { $0.token == entry.token }) {
            merged.entries.append(entry)
        }
        return merged
    }

    /// Largest token accepted, as HELLO's `token` member (Protocol.md section 4).
    static let maxTokenBytes = 4096
}

/// Where a connection finds the token table in force and its generation, which changes at each reload.
package protocol TokenSource: Sendable {
    var current: (table: TokenTable, generation: Int) { get }
    /// Read on every request: cheap, without a lock.
    var generation: Int { get }
}

/// A token table that never changes (`--token T` alone, and tests).
package struct FixedTokens: TokenSource {
    package let table: TokenTable
    package init(_ table: TokenTable) { self.table = table }
    package var current: (table: TokenTable, generation: Int) { (table, 0) }
    package var generation: Int { 0 }
}
