/// Who may read, create, update and delete the records of one collection, when the caller is a signed-in user (or a
/// connection without a token on a server that accepts ID tokens). Role tokens are not held to rules (Protocol.md
/// section 10.4).
public struct CollectionRules: Sendable, Equatable {
    /// Who a rule lets in.
    public enum Access: String, Sendable, CaseIterable {
        /// Signed-in users, each to the records they created (`$owner`) only: the others' records do not exist for
        /// them.
        case owner
        /// Every signed-in user, to every record.
        case signedIn
        /// Every connection, without a token too.
        case `public`
        /// Only a role token with the admin role.
        case admin
    }

    /// GET, GET_MANY, LIST, SEARCH, COUNT, GROUP, WATCH, and reading the records' blobs.
    public var read: Access
    /// CREATE, and attaching blobs to one's records.
    public var create: Access
    /// REPLACE and PATCH.
    public var update: Access
    /// DELETE, and deleting the records' blobs.
    public var delete: Access

    /// Rules with these accesses.
    public init(read: Access, create: Access, update: Access, delete: Access) {
        self.read = read
        self.create = create
        self.update = update
        self.delete = delete
    }

    /// Reads `{"read", "create", "update", "delete"}`, each one of the accesses by name; `path` names the object in
    /// errors.
    package init(json: JSONObject, path: String = "rules") throws(LarderError) {
        var r = FieldReader(json, path: path)
        func access(_ name: String) throws(LarderError) -> Access {
            let text = try r.string(name, maxLength: 16)
            guard let access = Access(rawValue: text) else {
                throw .invalid(
                    "\(path).\(name)", "\(path).\(name) must be owner, signedIn, public or admin, not '\(text)'")
            }
            return access
        }
        read = try access("read")
        create = try access("create")
        update = try access("update")
        delete = try access("delete")
        try r.finish()
    }

    /// The JSON object of the rules.
    package var json: JSONObject {
        [
            "read": .string(read.rawValue), "create": .string(create.rawValue),
            "update": .string(update.rawValue), "delete": .string(delete.rawValue),
        ]
    }
}

/// The member of a record's data that names the user who created it (`issuer|subject`), set by the server.
public let ownerMember = "$owner"

/// `RULES_SET`: an admin sets a collection's rules.
package struct RulesSetRequest: WireMessage, Equatable {
    package var collection: String
    package var rules: CollectionRules

    package init(collection: String, rules: CollectionRules) {
        self.collection = collection
        self.rules = rules
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection", maxLength: 256)
        try CollectionName.validate(collection)
        rules = try CollectionRules(json: try r.object("rules"))
        try r.finish()
    }

    package var json: JSONObject { ["collection": .string(collection), "rules": .object(rules.json)] }
}

/// `RULES_GET`: a collection's rules.
package struct RulesGetRequest: WireMessage, Equatable {
    package var collection: String

    package init(collection: String) { self.collection = collection }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection", maxLength: 256)
        try CollectionName.validate(collection)
        try r.finish()
    }

    package var json: JSONObject { ["collection": .string(collection)] }
}

/// The answer to `RULES_SET` and `RULES_GET`: the collection and its rules (`null` when it has none).
public struct RulesResponse: WireMessage, Equatable {
    /// The collection.
    public var collection: String
    /// Its rules; nil when it has none (users may not use it).
    public var rules: CollectionRules?

    /// An answer with these members.
    public init(collection: String, rules: CollectionRules?) {
        self.collection = collection
        self.rules = rules
    }

    package init(json: JSONObject) throws(LarderError) {
        var r = FieldReader(json)
        collection = try r.string("collection")
        rules = try r.optionalObject("rules").map { (o) throws(LarderError) in try CollectionRules(json: o) }
    }

    package var json: JSONObject {
        ["collection": .string(collection), "rules": rules.map { .object($0.json) } ?? .null]
    }
}
