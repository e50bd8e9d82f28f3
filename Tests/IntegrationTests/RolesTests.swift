#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderTestThreads
import LarderWire
import LarderTestProcess
import LarderTestSupport
import Testing

/// Per-token roles (`--token-file`, Protocol.md section 10.2), on a real server over real sockets.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct RolesTests {
    /// The smallest JPEG the server accepts (Protocol.md's blob-put vector).
    static let tinyJPEG: [UInt8] = [
        0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00, 0xFF, 0xD9,
    ]

    static let tokenFile = """
        # role token [collections]
        admin   admin-token
        write   write-token
        read    read-token
        read    shelf-reader  catalogue
        write   shelf-writer  catalogue,photos
        admin   shelf-admin   catalogue

        """

    /// The rights the issue gives each role, written out here rather than taken from the server's table.
    static let readOpcodes: Set<Opcode> = [
        .get, .getMany, .list, .search, .count, .group, .collections, .blobGet, .blobHead, .blobList, .watch,
        .rulesGet,
    ]
    static let writeOpcodes: Set<Opcode> = [
        .create, .replace, .patch, .delete, .blobPut, .blobDelete, .blobUpload, .blobUploadChunk, .blobUploadStatus,
        .blobUploadFinish, .blobUploadAbort,
    ]
    static let adminOpcodes: Set<Opcode> = [
        .index, .schemaSet, .schemaGet, .rulesSet, .dropCollection, .stats, .backup, .backupRead, .usersList, .userSet,
        .userDelete,
    ]
    /// The account requests among them decide for themselves (section 10.5); on this server, without `--users`,
    /// they are UNKNOWN_OPCODE for every token.
    static let everyoneOpcodes: Set<Opcode> = [
        .ping, .unwatch, .signUp, .signIn, .signOut, .passwordChange, .sessionRefresh,
    ]

    static func withRolesServer(_ body: (LarderServer, Int) throws -> Void) throws {
        let directory = temporaryTestDirectory("larder-roles")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("tokens").path
        _ = FileManager.default.createFile(atPath: file, contents: Data(tokenFile.utf8))
        try withServerOnPort0({ $0.tokenFile = file }) { server, port in try body(server, port) }
    }

    static func connect(_ port: Int, token: String) throws -> (RawClient, HelloResponse) {
        let client = try RawClient.tcp(port: port)
        let hello = try client.hello(token: token)
        return (client, hello)
    }

    /// A request for `opcode` that a token with the right may send: it succeeds, or fails for a reason of its own
    /// (NOT_FOUND), never for want of rights.
    static func request(_ opcode: Opcode, document: String, blob: String, collection: String = "notes")
        -> (JSONObject, [UInt8])
    {
        let id = JSON.string(document)
        switch opcode {
        case .ping, .collections, .stats: return ([:], [])
        case .create: return (["collection": .string(collection), "data": ["n": 1]], [])
        case .get: return (["collection": .string(collection), "id": id], [])
        case .getMany: return (["collection": .string(collection), "ids": [id]], [])
        case .replace: return (["collection": .string(collection), "id": id, "data": ["n": 2]], [])
        case .patch: return (["collection": .string(collection), "id": id, "patch": ["n": 3]], [])
        case .delete: return (["collection": .string(collection), "id": .string(UUID().uuidString)], [])
        case .list, .search, .count: return (["collection": .string(collection)], [])
        case .group: return (["collection": .string(collection), "field": "n"], [])
        case .dropCollection: return (["collection": "nothing"], [])
        case .index: return (["collection": .string(collection), "field": "n"], [])
        case .schemaSet: return (["collection": "unchecked", "schema": nil], [])
        case .schemaGet: return (["collection": .string(collection)], [])
        case .rulesGet: return (["collection": .string(collection)], [])
        case .rulesSet:
            let rules: JSONObject = ["read": "signedIn", "create": "admin", "update": "admin", "delete": "admin"]
            return (["collection": .string(collection), "rules": .object(rules)], [])
        case .blobPut:
            return (["attach": ["collection": .string(collection), "id": id]], tinyJPEG)
        case .blobGet, .blobHead: return (["id": .string(blob)], [])
        case .blobDelete: return (["id": .string(UUID().uuidString)], [])
        case .blobList: return (["attachedTo": ["collection": .string(collection), "id": id]], [])
        case .watch: return ([:], [])
        case .unwatch: return (["subscription": 4_000_000], [])
        default: return ([:], [])
        }
    }

    /// Every opcode under every role: PERMISSION_DENIED exactly where the role falls short, nothing run then, and the
    /// connection answers the next request.
    @Test func everyOpcodeUnderEveryRole() throws {
        try Self.withRolesServer { _, port in
            let (admin, adminHello) = try Self.connect(port, token: "admin-token")
            #expect(adminHello.role == "admin" && adminHello.collections == nil && adminHello.authRequired)
            let document = try admin.call(.create, ["collection": "notes", "data": ["n": 0]])
            let documentID = try #require(document.replyJSON["id"]?.stringValue)
            let blob = try admin.call(
                .blobPut, ["attach": ["collection": "notes", "id": .string(documentID)]], binary: Self.tinyJPEG)
            let blobID = try #require(blob.replyJSON["id"]?.stringValue)
            func revision() throws -> Int64? {
                try admin.call(.get, ["collection": "notes", "id": .string(documentID)]).replyJSON["rev"]?.intValue
            }
            let before = try revision()
            let opcodes = Opcode.all.filter { $0 != .hello && $0 != .event }
            #expect(Set(opcodes) == Self.readOpcodes.union(Self.writeOpcodes).union(Self.adminOpcodes)
                .union(Self.everyoneOpcodes), "an opcode has no row in the role table")
            for (token, allowed) in [
                ("read-token", Self.readOpcodes.union(Self.everyoneOpcodes)),
                ("write-token", Self.readOpcodes.union(Self.writeOpcodes).union(Self.everyoneOpcodes)),
                ("admin-token", Set(opcodes)),
            ] {
                let (client, hello) = try Self.connect(port, token: token)
                #expect(hello.role == token.replacingOccurrences(of: "-token", with: ""))
                var subscription: JSON?
                for opcode in opcodes {
                    var (json, binary) = Self.request(opcode, document: documentID, blob: blobID)
                    // The subscription ends before the next write, whose event would come between two answers.
                    if opcode == .unwatch, let subscription { json["subscription"] = subscription }
                    let reply = try client.call(opcode, json, binary: binary)
                    if opcode == .watch { subscription = reply.replyJSON["subscription"] }
                    if allowed.contains(opcode) {
                        #expect(reply.status != .permissionDenied, "\(token) \(opcode.name): \(reply.replyText)")
                    } else {
                        #expect(reply.status == .permissionDenied, "\(token) \(opcode.name): \(reply.status.name)")
                        #expect(reply.replyJSON["opcode"]?.stringValue == opcode.name)
                        #expect(!reply.replyText.contains(token), "the token reached an error message")
                    }
                    #expect(try client.call(.ping).status == .ok, "\(token): the connection ended after \(opcode.name)")
                }
                if token == "read-token" {
                    // Nothing a refused write asked for happened.
                    #expect(try revision() == before)
                    #expect(try admin.call(.collections).replyJSON["collections"]?.arrayValue?.count == 1)
                }
            }
            #expect(try revision() ?? 0 > before ?? 0, "the write and admin tokens' REPLACE and PATCH did not apply")
        }
    }

    /// A token limited to collections names only those; COLLECTIONS lists only them; blobs go with their documents.
    @Test func collectionLimits() throws {
        try Self.withRolesServer { _, port in
            let (admin, _) = try Self.connect(port, token: "admin-token")
            var ids: [String: String] = [:]
            for collection in ["catalogue", "photos", "secret"] {
                let created = try admin.call(.create, ["collection": .string(collection), "data": ["n": 1]])
                ids[collection] = created.replyJSON["id"]?.stringValue
            }
            let secretBlob = try admin.call(
                .blobPut, ["attach": ["collection": "secret", "id": .string(ids["secret"]!)]], binary: Self.tinyJPEG)
            let loose = try admin.call(.blobPut, [:], binary: Self.tinyJPEG)

            let (reader, hello) = try Self.connect(port, token: "shelf-reader")
            #expect(hello.role == "read" && hello.collections == ["catalogue"])
            #expect(try reader.call(.list, ["collection": "catalogue"]).status == .ok)
            for collection in ["photos", "secret"] {
                let denied = try reader.call(.get, ["collection": .string(collection), "id": .string(ids[collection]!)])
                #expect(denied.status == .permissionDenied, "\(denied.replyText)")
                #expect(denied.replyText.contains("catalogue"))
            }
            let names = try reader.call(.collections).replyJSON["collections"]?.arrayValue?.compactMap {
                $0["name"]?.stringValue
            }
            #expect(names == ["catalogue"])
            #expect(try reader.call(.watch, ["collection": "secret"]).status == .permissionDenied)
            #expect(try reader.call(.list, [:]).status == .invalidArgument, "a missing collection is named as usual")

            let (writer, _) = try Self.connect(port, token: "shelf-writer")
            #expect(try writer.call(.create, ["collection": "photos", "data": [:]]).status == .ok)
            #expect(try writer.call(.create, ["collection": "secret", "data": [:]]).status == .permissionDenied)
            #expect(try writer.call(.blobPut, [:], binary: Self.tinyJPEG).status == .permissionDenied)
            let attached = try writer.call(
                .blobPut, ["attach": ["collection": "catalogue", "id": .string(ids["catalogue"]!)]],
                binary: Self.tinyJPEG)
            #expect(attached.status == .ok)
            let ownBlob = try #require(attached.replyJSON["id"]?.stringValue)
            #expect(try writer.call(.blobGet, ["id": .string(ownBlob)]).status == .ok)
            #expect(try writer.call(.blobHead, ["id": .string(ownBlob)]).status == .ok)
            for other in [secretBlob, loose] {
                let id = try #require(other.replyJSON["id"]?.stringValue)
                #expect(try writer.call(.blobGet, ["id": .string(id)]).status == .permissionDenied)
                #expect(try writer.call(.blobHead, ["id": .string(id)]).status == .permissionDenied)
            }
            #expect(try writer.call(.blobList, [:]).status == .permissionDenied)
            let list = try writer.call(
                .blobList, ["attachedTo": ["collection": "catalogue", "id": .string(ids["catalogue"]!)]])
            #expect(list.status == .ok && list.replyJSON["blobs"]?.arrayValue?.count == 1)
            // BLOB_DELETE: a blob attached to its collections goes; one attached elsewhere, or to nothing, stays.
            for other in [secretBlob, loose] {
                let id = try #require(other.replyJSON["id"]?.stringValue)
                let denied = try writer.call(.blobDelete, ["id": .string(id)])
                #expect(denied.status == .permissionDenied, "\(denied.replyText)")
                #expect(denied.replyJSON["opcode"]?.stringValue == "BLOB_DELETE")
                #expect(try admin.call(.blobHead, ["id": .string(id)]).status == .ok, "a refused delete deleted")
            }
            #expect(try writer.call(.blobDelete, ["id": .string(ownBlob)]).status == .ok)
            #expect(try admin.call(.blobHead, ["id": .string(ownBlob)]).status == .notFound)
            #expect(try writer.call(.ping).status == .ok)

            // A backup holds every collection: an admin limited to some may not take one.
            let (shelfAdmin, _) = try Self.connect(port, token: "shelf-admin")
            #expect(try shelfAdmin.call(.stats).status == .ok)
            for opcode in [Opcode.backup, .backupRead] {
                let json: JSONObject = opcode == .backup ? [:] : ["backup": 1, "offset": 0, "length": 1]
                let denied = try shelfAdmin.call(opcode, json)
                #expect(denied.status == .permissionDenied, "\(opcode.name): \(denied.replyText)")
                #expect(denied.replyJSON["opcode"]?.stringValue == opcode.name)
            }
        }
    }

    /// A WATCH on every collection by a limited token sees changes to its collections only.
    @Test func watchOnEveryCollectionSeesOnlyTheTokensCollections() throws {
        try Self.withRolesServer { _, port in
            let (reader, _) = try Self.connect(port, token: "shelf-reader")
            let watch = try reader.call(.watch, [:])
            #expect(watch.status == .ok, "\(watch.replyText)")
            let (admin, _) = try Self.connect(port, token: "admin-token")
            // Changes in commit order: the secret ones come first, so the first event proves they were left out.
            for collection in ["secret", "photos", "secret", "catalogue"] {
                #expect(try admin.call(.create, ["collection": .string(collection), "data": [:]]).status == .ok)
            }
            #expect(try admin.call(.dropCollection, ["collection": "secret"]).status == .ok)
            #expect(try admin.call(.create, ["collection": "catalogue", "data": ["last": true]]).status == .ok)
            var seen: [String] = []
            while seen.count < 2, let event = try reader.receive() {
                #expect(event.opcode == .event && event.isPush)
                seen.append(event.replyJSON["collection"]?.stringValue ?? "?")
            }
            #expect(seen == ["catalogue", "catalogue"])
        }
    }

    /// SIGHUP reads the token file again while a connection stays open: its token's new role applies from then on,
    /// a new token works, and a removed one ends the connection that held it without waiting for a request.
    @Test func sighupReloadsTheTokenFileWhileConnectionsStayOpen() async throws {
        let root = temporaryTestDirectory("larder-roles-hup")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let file = root.appendingPathComponent("tokens").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("write first-token\nread gone-token\n".utf8))
        let server = try ServerChild(
            dataDirectory: root.appendingPathComponent("data").path, arguments: ["--token-file", file])
        defer { _ = server.stop() }
        let (kept, _) = try Self.connect(server.port, token: "first-token")
        #expect(try kept.call(.create, ["collection": "t", "data": [:]]).status == .ok)
        let (revoked, _) = try Self.connect(server.port, token: "gone-token")
        #expect(try revoked.call(.list, ["collection": "t"]).status == .ok)

        _ = FileManager.default.createFile(atPath: file, contents: Data("read first-token\nadmin new-token\n".utf8))
        kill(server.pid, SIGHUP)
        // The new token works once the server has read the file.
        let accepted = try await waitUntil(120) {
            let probe = try RawClient.tcp(port: server.port)
            return try probe.call(.hello, HelloRequest(client: "probe", token: "new-token").json).status == .ok
        }
        #expect(accepted, "the reloaded token file's new token was never accepted")
        let denied = try kept.call(.create, ["collection": "t", "data": [:]])
        #expect(denied.status == .permissionDenied, "\(denied.replyText)")
        #expect(try kept.call(.list, ["collection": "t"]).status == .ok)
        let frames = try revoked.framesUntilClosed()
        #expect(frames.map(\.status) == [.unauthenticated])
        // A file that does not parse changes nothing.
        _ = FileManager.default.createFile(atPath: file, contents: Data("superuser first-token\n".utf8))
        kill(server.pid, SIGHUP)
        let log = server.logPath
        func logged() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        #expect(await waitUntil(120) { logged().contains("line 1") }, "the refused file was never logged")
        #expect(logged().contains("the tokens in force are kept"))
        #expect(try kept.call(.list, ["collection": "t"]).status == .ok)
        #expect(!logged().contains("first-token") && !logged().contains("new-token"), "a token reached the log")
    }
}
