import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Tokens limited to collections (Protocol.md section 10.2) against what a request can hide in them: `null` for a
/// member, malformed names, and blobs they may not see, on a real server.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct RoleLimitTests {
    static let tokenFile = """
        admin   admin-token
        read    alpha-reader  alpha
        write   alpha-writer  alpha
        admin   alpha-admin   alpha

        """

    static func withServer(_ body: (Int) throws -> Void) throws {
        let directory = temporaryTestDirectory("larder-role-limits")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("tokens").path
        _ = FileManager.default.createFile(atPath: file, contents: Data(tokenFile.utf8))
        try withServerOnPort0({ $0.tokenFile = file }) { _, port in try body(port) }
    }

    static func connect(_ port: Int, _ token: String) throws -> RawClient {
        let client = try RawClient.tcp(port: port)
        try client.hello(token: token)
        return client
    }

    static func id(_ frame: Frame) throws -> String { try #require(frame.replyJSON["id"]?.stringValue) }

    static func blobCount(_ admin: RawClient) -> Int64? { admin.statsValue()["store"]?["blobs"]?.intValue }

    /// The reported cases: `null` is the member's absence, and a limited token must name one of its collections, so
    /// `attachedTo: null` lists nothing and `attach: null` stores nothing.
    @Test func nullNamesNoCollection() throws {
        try Self.withServer { port in
            let admin = try Self.connect(port, "admin-token")
            let beta = try Self.id(try admin.call(.create, ["collection": "beta", "data": [:]]))
            _ = try admin.call(.blobPut, ["attach": ["collection": "beta", "id": .string(beta)]], binary: RolesTests.tinyJPEG)
            _ = try admin.call(.blobPut, [:], binary: RolesTests.tinyJPEG)
            let blobs = Self.blobCount(admin)
            #expect(blobs == 2)

            let reader = try Self.connect(port, "alpha-reader")
            let list = try reader.call(.blobList, ["attachedTo": .null])
            #expect(list.status == .permissionDenied, "\(list.replyText)")
            #expect(list.replyJSON["blobs"] == nil, "a limited token listed every blob")

            let writer = try Self.connect(port, "alpha-writer")
            let put = try writer.call(.blobPut, ["attach": .null], binary: RolesTests.tinyJPEG)
            #expect(put.status == .permissionDenied, "\(put.replyText)")
            let upload = try writer.call(.blobUpload, ["size": 17, "attach": .null])
            #expect(upload.status == .permissionDenied, "\(upload.replyText)")
            #expect(Self.blobCount(admin) == blobs, "a refused BLOB_PUT stored a blob")
            // Nothing was begun: the whole quota is free for a request that names its collection.
            let alpha = try Self.id(try writer.call(.create, ["collection": "alpha", "data": [:]]))
            let begun = try writer.call(.blobUpload, ["size": 17, "attach": ["collection": "alpha", "id": .string(alpha)]])
            #expect(begun.status == .ok, "\(begun.replyText)")
        }
    }

    /// The other members of a request for `opcode` (besides its collection member).
    static func rest(_ opcode: Opcode, document: String) -> JSONObject {
        switch opcode {
        case .get: ["id": .string(document)]
        case .replace: ["id": .string(document), "data": ["n": 1]]
        case .patch: ["id": .string(document), "patch": ["n": 2]]
        case .getMany: ["ids": [.string(document)]]
        case .create: ["data": ["n": 1]]
        case .delete: ["id": .string(UUID().uuidString)]
        case .group, .index: ["field": "n"]
        case .blobUpload: ["size": 17]
        case .schemaSet: ["schema": nil]
        case .rulesSet: ["rules": ["read": "owner", "create": "owner", "update": "owner", "delete": "owner"]]
        default: [:]
        }
    }

    /// Every opcode that names a collection, with the member absent, `null`, and each kind of JSON value, under an
    /// admin token limited to `alpha`: a name outside `alpha` (or none, where a blob needs one) is PERMISSION_DENIED;
    /// a malformed member is INVALID_ARGUMENT naming it, as for any token; a name in `alpha` is served.
    @Test func everyCollectionMemberUnderALimitedToken() throws {
        typealias Table = CollectionMembers
        try Self.withServer { port in
            let admin = try Self.connect(port, "admin-token")
            let alphaDocument = try Self.id(try admin.call(.create, ["collection": "alpha", "data": ["n": 0]]))
            _ = try admin.call(.create, ["collection": "beta", "data": ["n": 0]])
            let client = try Self.connect(port, "alpha-admin")
            // DROP_COLLECTION last: the document stays for the others.
            let opcodes = Table.collectionOpcodes.filter { $0 != .dropCollection } + Table.attachOpcodes
                + [.dropCollection]
            for opcode in opcodes {
                for shape in Table.Shape.allCases {
                    var json = Self.rest(opcode, document: alphaDocument)
                    let member = Table.attachOpcodes.contains(opcode) ? Table.member(opcode) : "collection"
                    let value = member == "collection" ? shape.collection : shape.attachment(alphaDocument)
                    if let value { json[member] = value }
                    let binary = opcode == .blobPut ? RolesTests.tinyJPEG : []
                    let answer = try client.call(opcode, json, binary: binary)
                    let what = "\(opcode.name) \(shape): \(answer.status.name) \(answer.replyText)"
                    if opcode == .watch, answer.status == .ok, let subscription = answer.replyJSON["subscription"] {
                        #expect(try client.call(.unwatch, ["subscription": subscription]).status == .ok)
                    }
                    if Table.refused(opcode, shape) {
                        #expect(answer.status == .permissionDenied, "\(what)")
                        #expect(answer.replyJSON["opcode"]?.stringValue == opcode.name, "\(what)")
                    } else if shape == .inScope || (opcode == .watch && (shape == .absent || shape == .null)) {
                        #expect(answer.status != .permissionDenied && answer.status != .invalidArgument, "\(what)")
                    } else {
                        #expect(answer.status == .invalidArgument, "\(what)")
                        let field = answer.replyJSON["field"]?.stringValue ?? ""
                        #expect(field == member || field.hasPrefix(member + "."), "\(what)")
                    }
                }
            }
        }
    }

    /// A malformed collection name is INVALID_ARGUMENT (field `collection`) under a limited token as under any
    /// other (section 10.2): the same answer, byte for byte, as the unlimited token's.
    @Test(arguments: ["9bad", "bad name", "a" + String(repeating: "b", count: 64)])
    func aMalformedNameIsInvalidForALimitedToken(_ name: String) throws {
        try Self.withServer { port in
            let admin = try Self.connect(port, "admin-token")
            let reader = try Self.connect(port, "alpha-reader")
            let writer = try Self.connect(port, "alpha-writer")
            let requests: [(RawClient, Opcode, JSONObject)] = [
                (reader, .get, ["collection": .string(name), "id": .string(UUID().uuidString)]),
                (reader, .list, ["collection": .string(name)]),
                (reader, .watch, ["collection": .string(name)]),
                (writer, .create, ["collection": .string(name), "data": [:]]),
            ]
            for (client, opcode, json) in requests {
                let limited = try client.call(opcode, json)
                #expect(limited.status == .invalidArgument, "\(opcode.name) \(name): \(limited.replyText)")
                #expect(limited.replyJSON["field"]?.stringValue == "collection", "\(limited.replyText)")
                let unlimited = try admin.call(opcode, json)
                #expect(limited.json == unlimited.json, "\(opcode.name): \(limited.replyText) vs \(unlimited.replyText)")
            }
        }
    }

    /// A limited token's reads of a blob it may not see are refused before any work (no thumbnail is made or
    /// cached), and every such refusal is the same answer, byte for byte: whatever the blob is, whatever was asked of
    /// it, and whether or not it exists.
    @Test func refusedBlobReadsDoNoWorkAndAnswerAlike() throws {
        try Self.withServer { port in
            let admin = try Self.connect(port, "admin-token")
            let alpha = try Self.id(try admin.call(.create, ["collection": "alpha", "data": [:]]))
            let beta = try Self.id(try admin.call(.create, ["collection": "beta", "data": [:]]))
            let rocket = try ServerFixtures.data("rocket.jpg")
            func put(_ bytes: [UInt8], _ collection: String?, _ document: String) throws -> String {
                let attach: JSONObject = collection.map {
                    ["attach": ["collection": .string($0), "id": .string(document)]]
                } ?? [:]
                return try Self.id(try admin.call(.blobPut, attach, binary: bytes))
            }
            let hidden = [
                try put(rocket, "beta", beta),
                try put(withFrameSize(rocket, width: 60_000, height: 60_000), "beta", beta),
                try put(Array(rocket[0..<(rocket.count / 2)]) + [0xFF, 0xD9], "beta", beta),
                try put(rocket, nil, beta),
                UUID().uuidString.lowercased(),
            ]
            let visible = try put(rocket, "alpha", alpha)
            func thumbnails() -> (JSON?, JSON?) {
                let stats = admin.statsValue()["thumbnails"]
                return (stats?["made"], stats?["stored"])
            }
            let before = thumbnails()
            #expect(before.0 == 0 && before.1 == 0)

            let reader = try Self.connect(port, "alpha-reader")
            var bodies: [Opcode: Set<[UInt8]>] = [:]
            for id in hidden {
                let asks: [(Opcode, JSONObject)] = [
                    (.blobGet, ["id": .string(id)]),
                    (.blobGet, ["id": .string(id), "offset": 0, "length": 10]),
                    (.blobGet, ["id": .string(id), "offset": 100_000_000]),
                    (.blobGet, ["id": .string(id), "length": 100_000_000]),
                    (.blobGet, ["id": .string(id), "thumbnail": 64]),
                    (.blobGet, ["id": .string(id), "thumbnail": 1024]),
                    (.blobHead, ["id": .string(id)]),
                ]
                for (opcode, json) in asks {
                    let answer = try reader.call(opcode, json)
                    #expect(answer.status == .permissionDenied, "\(opcode.name) \(json): \(answer.replyText)")
                    #expect(answer.binary.isEmpty)
                    bodies[opcode, default: []].insert(answer.json)
                }
            }
            #expect(bodies[.blobGet]?.count == 1, "refusals differ: \(bodies[.blobGet].map { $0.map { String(decoding: $0, as: UTF8.self) } } ?? [])")
            #expect(bodies[.blobHead]?.count == 1)
            #expect(thumbnails() == before, "a refused thumbnail was made or cached")

            // A refused delete answers alike too, and deletes nothing.
            let writer = try Self.connect(port, "alpha-writer")
            var deletes: Set<[UInt8]> = []
            for id in hidden {
                let answer = try writer.call(.blobDelete, ["id": .string(id)])
                #expect(answer.status == .permissionDenied, "\(answer.replyText)")
                deletes.insert(answer.json)
            }
            #expect(deletes.count == 1)
            #expect(Self.blobCount(admin) == 5)

            // The request's own mistakes are answered first, as for any token; the token's own blob is served.
            let size = try reader.call(.blobGet, ["id": .string(hidden[4]), "thumbnail": 0])
            #expect(size.status == .invalidArgument && size.replyJSON["sizes"] != nil, "\(size.replyText)")
            let own = try reader.call(.blobGet, ["id": .string(visible), "thumbnail": 64])
            #expect(own.status == .ok, "\(own.replyText)")
            #expect(thumbnails().0 == 1)
        }
    }
}
