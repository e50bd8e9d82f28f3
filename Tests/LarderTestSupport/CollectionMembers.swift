import Foundation
import LarderWire

/// The request members that name a collection, and a value of every JSON kind for them: the table the role check's
/// unit test (TokenTableTests) and the server's (RoleLimitTests) share, so that both hold the same rule.
public enum CollectionMembers {
    /// The opcodes whose request names a collection in `collection`, and those naming one in `attach` or
    /// `attachedTo` (`member`); every other opcode with a role is named by id, lists, or is refused whole.
    public static let collectionOpcodes: [Opcode] = [
        .get, .getMany, .list, .search, .count, .group, .watch, .create, .replace, .patch, .delete, .index,
        .dropCollection, .schemaSet, .schemaGet, .rulesSet, .rulesGet,
    ]
    public static let attachOpcodes: [Opcode] = [.blobPut, .blobUpload, .blobList]
    public static func member(_ opcode: Opcode) -> String { opcode == .blobList ? "attachedTo" : "attach" }

    /// A value of a collection member, of every kind JSON has, and what a token limited to `alpha` gets for it.
    public enum Shape: CaseIterable, Sendable {
        case absent, null, inScope, outOfScope, number, bool, array, object, startsWithDigit, hasSpace, tooLong

        /// The `collection` member, or nil for none.
        public var collection: JSON? {
            switch self {
            case .absent: nil
            case .null: .null
            case .inScope: "alpha"
            case .outOfScope: "beta"
            case .number: 5
            case .bool: true
            case .array: ["alpha"]
            case .object: ["collection": "alpha"]
            case .startsWithDigit: "9bad"
            case .hasSpace: "bad name"
            case .tooLong: .string("a" + String(repeating: "b", count: 64))
            }
        }

        /// The `attach` or `attachedTo` member naming document `id`: an object for the collection names, the value
        /// itself for the other kinds (a string `alpha` for `inScope` would name no document).
        public func attachment(_ id: String) -> JSON? {
            switch self {
            case .absent: nil
            case .null: .null
            case .number, .bool, .array: collection
            case .object: ["collection": ["alpha"], "id": .string(id)]
            default: ["collection": collection!, "id": .string(id)]
            }
        }
    }

    /// Whether the check refuses `shape` in `opcode`'s collection member: a well-formed name outside the token's
    /// collections, or no name at all where a limited token must give one (`attach`, `attachedTo`). A malformed
    /// member passes, for the router to answer INVALID_ARGUMENT as for any token.
    public static func refused(_ opcode: Opcode, _ shape: Shape) -> Bool {
        switch shape {
        case .outOfScope: true
        case .absent, .null: attachOpcodes.contains(opcode)
        default: false
        }
    }
}
