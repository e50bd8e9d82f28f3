import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

/// The token file and the role checks, without sockets (RolesTests runs them on a server).
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct TokenTableTests {
    @Test func parsesRolesTokensAndCollections() throws {
        let table = try TokenTable.parse(
            "# comment\n\nadmin  a-token\nwrite\tw-token  notes,photos\nread r-token\n", path: "tokens")
        #expect(table.entries.count == 3)
        #expect(table.grant(for: Array("a-token".utf8)) == Grant(role: .admin))
        #expect(table.grant(for: Array("w-token".utf8)) == Grant(role: .write, collections: ["notes", "photos"]))
        #expect(table.grant(for: Array("r-token".utf8)) == Grant(role: .read))
        for wrong in ["", "a-toke", "a-token ", "A-token", "r-token-longer"] {
            #expect(table.grant(for: Array(wrong.utf8)) == nil, "\(wrong) was accepted")
        }
    }

    /// Each mistake names its line and what to do, and never the token (a swapped column would put it first).
    @Test(arguments: [
        ("s3cret-token\n", "line 1: has 1 field; each line is ROLE TOKEN [COLLECTION,...]"),
        ("s3cret-token admin\n", "line 1: the first field must be the role: read, write or admin"),
        ("read s3cret-token\nwrite s3cret-token\n", "line 2: repeats the token of line 1"),
        ("read s3cret-token notes,9bad\n", "line 1: '9bad' is not a collection name"),
        ("read s3cret-token a b\n", "line 1: has 4 fields"),
        ("# nothing\n\n", "holds no token"),
    ])
    func mistakesNameTheLineAndNeverTheToken(text: String, message: String) {
        do {
            _ = try TokenTable.parse(text, path: "tokens")
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.message.contains(message), "\(error.message)")
            #expect(!error.message.contains("s3cret"), "the token reached the message: \(error.message)")
        }
    }

    static func frame(_ opcode: Opcode, _ json: JSONObject = [:]) -> Frame {
        Frame(opcode: opcode, requestID: 9, json: json.bytes)
    }

    /// The PERMISSION_DENIED answer of Protocol.md's vector is the one the check makes.
    @Test func deniedAnswerIsTheProtocolVector() throws {
        let error = try #require(Grant(role: .read).check(Self.frame(.create, ["collection": "notes", "data": [:]])))
        #expect(error.status == .permissionDenied)
        #expect(error.message == "this token may not send CREATE: it needs the write role and holds read")
        #expect(error.details == ["opcode": "CREATE"])
    }

    /// Every opcode that names a collection, under a token limited to `alpha`, with the member absent, `null`, and
    /// each kind of JSON value: `null` is the member's absence, and only a well-formed name outside `alpha` (or no
    /// name where a blob needs one) is refused.
    @Test func nullIsAbsentAndOnlyWellFormedNamesAreCheckedInEveryCollectionMember() {
        let covered = Set(CollectionMembers.collectionOpcodes + CollectionMembers.attachOpcodes + [.blobGet, .blobHead, .blobDelete])
            .union([.collections, .stats, .backup, .backupRead, .usersList, .userSet, .userDelete])
            .union([.blobUploadChunk, .blobUploadStatus, .blobUploadFinish, .blobUploadAbort])
        for opcode in Opcode.all where Role.required(for: opcode) != nil {
            #expect(covered.contains(opcode), "\(opcode.name) has no row here: say which member names its collection")
        }
        let id = UUID().uuidString
        for grant in [Grant(role: .admin, collections: ["alpha"]), Grant(role: .write, collections: ["alpha", "gamma"])]
        {
            for shape in CollectionMembers.Shape.allCases {
                for opcode in CollectionMembers.collectionOpcodes + CollectionMembers.attachOpcodes {
                    var json: JSONObject = [:]
                    if CollectionMembers.attachOpcodes.contains(opcode) {
                        if let value = shape.attachment(id) { json[CollectionMembers.member(opcode)] = value }
                    } else if let value = shape.collection {
                        json["collection"] = value
                    }
                    guard Role.required(for: opcode)! <= grant.role else { continue }
                    let error = grant.check(Self.frame(opcode, json))
                    #expect((error != nil) == CollectionMembers.refused(opcode, shape), "\(opcode.name) \(shape): \(json)")
                    if let error {
                        #expect(error.status == .permissionDenied && error.details == ["opcode": .string(opcode.name)])
                    }
                }
            }
        }
    }

    /// The admin's account requests need an admin token that is not limited to collections: a user belongs to none.
    @Test func aLimitedAdminTokenManagesNoUsers() {
        for opcode in [Opcode.usersList, .userSet, .userDelete] {
            #expect(Grant(role: .admin).check(Self.frame(opcode, ["user": "a@b.c"])) == nil)
            let error = Grant(role: .admin, collections: ["alpha"]).check(Self.frame(opcode, ["user": "a@b.c"]))
            #expect(error?.status == .permissionDenied && error?.details == ["opcode": .string(opcode.name)])
            #expect(Grant(role: .write).check(Self.frame(opcode))?.status == .permissionDenied)
        }
    }

    @Test func everyKnownOpcodeHasARole() {
        // The account requests but the admin's decide for themselves (Protocol.md section 10.5).
        let ownDecision: Set<Opcode> = [
            .hello, .ping, .unwatch, .event, .signUp, .signIn, .signOut, .passwordChange, .sessionRefresh,
        ]
        for opcode in Opcode.all where !ownDecision.contains(opcode) {
            #expect(Role.required(for: opcode) != nil, "\(opcode.name)")
        }
        #expect(Role.required(for: Opcode(rawValue: 0x7777)) == nil, "an unknown opcode is the router's to refuse")
    }

    /// A token's grant is looked up again after a reload: a new role applies, a removed token ends the connection.
    @Test func reloadAppliesToOpenConnections() throws {
        let tokens = Tokens(try TokenTable.parse("write w\nread r\n", path: "t"))
        var machine = ConnectionStateMachine(configuration: .init(tokens: tokens), now: 0)
        func send(_ opcode: Opcode, _ json: JSONObject, id: UInt32) -> [ConnectionStateMachine.Action] {
            FrameEncoder().encode(Frame(opcode: opcode, requestID: id, json: json.bytes)).withUnsafeBytes {
                machine.bytesReceived($0, now: 0)
            }
        }
        _ = send(.hello, HelloRequest(client: "t", token: "w").json, id: 1)
        #expect(machine.grant == Grant(role: .write))
        let create: JSONObject = ["collection": "c", "data": [:]]
        #expect(send(.create, create, id: 2).contains { if case .execute = $0 { true } else { false } })
        tokens.replace(with: try TokenTable.parse("read w\n", path: "t"))
        #expect(!send(.create, create, id: 3).contains { if case .execute = $0 { true } else { false } })
        #expect(machine.grant == Grant(role: .read))
        tokens.replace(with: try TokenTable.parse("read other\n", path: "t"))
        let actions = send(.get, ["collection": "c", "id": .string(UUID().uuidString)], id: 4)
        #expect(!actions.contains { if case .execute = $0 { true } else { false } })
        #expect(actions.contains(.record(.get, .unauthenticated, requestID: 4)))
    }
}
