import Foundation
import LarderBench
import LarderServer
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Users signed in with ID tokens, held to the rules an admin sets per collection (RULES_SET): two users of the todo
/// app each see and change only their own todos, by every read and write and the change feed, and another user's
/// record answers exactly as a missing one; a catalogue every user reads and only an admin writes. On SQLite, and on
/// three servers sharing one PostgreSQL (the rules set through one hold on the others). Protocol.md section 10.4.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct UserRulesTests {
    static let keys = TestKeys.shared
    static let todoRules: JSONObject = ["read": "owner", "create": "owner", "update": "owner", "delete": "owner"]
    static let catalogueRules: JSONObject = ["read": "signedIn", "create": "admin", "update": "admin", "delete": "admin"]

    /// The JWKS file of the tests' issuer, in `directory`.
    static func jwksFile(in directory: URL) throws -> String {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("issuer.jwks").path
        _ = FileManager.default.createFile(
            atPath: path, contents: Data(TestKeys.jwksText([keys.jwk("rsa", id: "rsa-1")])))
        return path
    }

    /// A server configuration trusting the tests' issuer, with the admin token "admin-secret".
    static func configure(_ configuration: inout ServerConfiguration, jwks: String) {
        configuration.oidcIssuers = [OIDCIssuer(issuer: TestKeys.issuer, audiences: [TestKeys.audience], jwksFile: jwks)]
        configuration.token = "admin-secret"
    }

    /// A connection to `port` signed in as the subject `subject`.
    static func signIn(_ port: Int, _ subject: String) throws -> RawClient {
        let now = Int64(Date().timeIntervalSince1970)
        let claims = TestKeys.claims(["sub": .string(subject), "iat": .int(now - 60), "exp": .int(now + 3600)])
        let token = try keys.token(
            header: ["alg": "RS256", "typ": "JWT", "kid": "rsa-1"], claims: claims, signer: .rsa("rsa"))
        let client = try RawClient.tcp(port: port)
        let answer = try client.call(.hello, HelloRequest(client: "rules-tests", idToken: token).json)
        guard answer.status == .ok else { throw ServerTestError("sign-in failed: \(answer.replyText)") }
        return client
    }

    static func userId(_ subject: String) -> String { TestKeys.issuer + "|" + subject }

    static func ok(_ frame: Frame, _ what: String) throws -> JSON {
        guard frame.status == .ok else { throw ServerTestError("\(what): \(frame.replyText)") }
        return frame.replyJSON
    }

    static func create(_ client: RawClient, _ collection: String, _ data: JSONObject) throws -> (id: String, rev: Int64) {
        let record = try ok(client.call(.create, ["collection": .string(collection), "data": .object(data)]), "CREATE")
        return (record["id"]!.stringValue!, record["rev"]!.intValue!)
    }

    /// The ids of every record LIST hands `client`, a page of one at a time, following the cursors.
    static func listed(_ client: RawClient, _ collection: String) throws -> Set<String> {
        var ids = Set<String>()
        var cursor: JSON = .null
        repeat {
            var request: JSONObject = ["collection": .string(collection), "limit": 1]
            if !cursor.isNull { request["cursor"] = cursor }
            let page = try ok(client.call(.list, request), "LIST")
            for record in page["records"]?.arrayValue ?? [] { ids.insert(record["id"]!.stringValue!) }
            cursor = page["nextCursor"] ?? .null
        } while !cursor.isNull
        return ids
    }

    /// The message of `frame` with `id` replaced by a placeholder, to compare answers about different ids.
    static func shape(_ frame: Frame, _ id: String) -> String {
        frame.replyText.replacingOccurrences(of: id, with: "ID")
    }

    /// The todo app for Alice and Bob on the servers at `ports` (the admin on the first, Alice on the second, Bob on
    /// the third, round the list), and the catalogue.
    static func exercise(_ ports: [Int]) throws {
        let port = { (n: Int) in ports[n % ports.count] }
        let admin = try RawClient.tcp(port: port(0))
        try admin.hello(token: "admin-secret")
        let alice = try signIn(port(1), "alice")
        let bob = try signIn(port(2), "bob")

        // Without rules, users are refused, told how an admin sets them.
        let refused = try alice.call(.count, ["collection": "todos"])
        #expect(refused.status == .permissionDenied && refused.replyText.contains("no rules for users"))
        let answer = try ok(admin.call(.rulesSet, ["collection": "todos", "rules": .object(todoRules)]), "RULES_SET")
        #expect(answer["rules"] == .object(todoRules))
        #expect(try ok(alice.call(.rulesGet, ["collection": "todos"]), "RULES_GET")["rules"] == .object(todoRules))

        // Alice's todos, one with a `$owner` in its body, which the server overwrites; Bob's.
        let a1 = try create(alice, "todos", ["title": "milk", "isFinish": false])
        let a2 = try create(alice, "todos", ["title": "eggs", "isFinish": true, "$owner": .string(userId("bob"))])
        let a3 = try create(alice, "todos", ["title": "tea", "isFinish": false])
        let b1 = try create(bob, "todos", ["title": "bread", "isFinish": false])
        let b2 = try create(bob, "todos", ["title": "jam", "isFinish": false])
        let stored = try ok(admin.call(.get, ["collection": "todos", "id": .string(a2.id)]), "GET")
        #expect(stored["data"]?["$owner"]?.stringValue == userId("alice"), "a body's $owner was kept")

        for (user, own, others) in [(alice, [a1, a2, a3], [b1, b2]), (bob, [b1, b2], [a1, a2, a3])] {
            let ownIds = Set(own.map(\.id))
            #expect(try listed(user, "todos") == ownIds)
            let found = try ok(user.call(.search, ["collection": "todos", "limit": 1000]), "SEARCH")
            #expect(Set(found["records"]!.arrayValue!.map { $0["id"]!.stringValue! }) == ownIds)
            let open = try ok(
                user.call(
                    .count, ["collection": "todos", "filter": ["field": "isFinish", "op": "eq", "value": false]]),
                "COUNT")
            #expect(open["count"]?.intValue == Int64(own.count - (own.contains { $0.id == a2.id } ? 1 : 0)))
            #expect(try ok(user.call(.count, ["collection": "todos"]), "COUNT")["count"]?.intValue == Int64(own.count))
            let groups = try ok(user.call(.group, ["collection": "todos", "field": "isFinish"]), "GROUP")
            let grouped = groups["groups"]!.arrayValue!.reduce(0) { $0 + Int($1["count"]!.intValue!) }
            #expect(grouped == own.count)
            #expect(try user.call(.get, ["collection": "todos", "id": .string(own[0].id)]).status == .ok)

            // Another's record answers exactly as a missing one, for GET, PATCH, REPLACE and DELETE.
            let other = others[0].id
            let missing = UUID().uuidString.lowercased()
            let writes: [(Opcode, JSONObject)] = [
                (Opcode.get, JSONObject()), (Opcode.patch, ["patch": ["isFinish": true]]),
                (Opcode.replace, ["data": ["title": "x"]]), (Opcode.delete, JSONObject()),
            ]
            for (opcode, extra) in writes {
                var theirs: JSONObject = ["collection": "todos", "id": .string(other)]
                var nothing: JSONObject = ["collection": "todos", "id": .string(missing)]
                for (key, value) in extra {
                    theirs[key] = value
                    nothing[key] = value
                }
                let hidden: Frame = try user.call(opcode, theirs)
                let absent: Frame = try user.call(opcode, nothing)
                let bothMissing = hidden.status == Status.notFound && absent.status == Status.notFound
                #expect(bothMissing, "\(opcode.name): \(hidden.replyText)")
                let sameShape = Self.shape(hidden, other) == Self.shape(absent, missing)
                #expect(sameShape, "\(opcode.name) tells the records apart")
            }
            let many = try ok(
                user.call(.getMany, ["collection": "todos", "ids": [.string(own[0].id), .string(other), .string(missing)]]),
                "GET_MANY")
            #expect(many["records"]?.arrayValue?.map { $0["id"]!.stringValue! } == [own[0].id])
            #expect(many["missing"] == [.string(other), .string(missing)])
            // Cursors. Another user's nextCursor is another query's, refused without a word of what it points at;
            // a cursor made to point at another user's record pages on exactly as one at a missing id beside it.
            let otherUser = user === alice ? bob : alice
            let theirPage = try ok(otherUser.call(.list, ["collection": "todos", "limit": 1]), "LIST")
            let theirCursor = try #require(theirPage["nextCursor"]?.stringValue)
            let borrowed = try user.call(.list, ["collection": "todos", "limit": 1, "cursor": .string(theirCursor)])
            #expect(borrowed.status == .invalidArgument && borrowed.replyJSON["field"] == "cursor")
            let theirFirst = try #require(theirPage["records"]?.arrayValue?.first?["id"]?.stringValue)
            #expect(!borrowed.replyText.contains(theirFirst))
            let ownPage = try ok(user.call(.list, ["collection": "todos", "limit": 1]), "LIST")
            var position = try Cursor.decode(try #require(ownPage["nextCursor"]?.stringValue))
            let beside = String(other.dropLast()) + (other.last == "0" ? "1" : "0")
            var answers: [String] = []
            for id in [other, beside] {
                position["id"] = .string(id)
                let page = try user.call(.list, ["collection": "todos", "limit": 1000, "cursor": .string(Cursor.encode(position))])
                #expect(page.status == .ok, "a cursor at \(id): \(page.replyText)")
                answers.append(Self.shape(page, id))
            }
            #expect(answers[0] == answers[1], "a cursor at another user's record pages on unlike one at a missing id")
            // The writes changed nothing: the other's record is where it was, at its revision.
            let after = try ok(admin.call(.get, ["collection": "todos", "id": .string(other)]), "GET")
            #expect(after["rev"]?.intValue == others[0].rev && after["data"]?["title"] != "x")
        }

        // An edit of one's own record cannot change its `$owner`.
        let patched = try ok(
            alice.call(.patch, ["collection": "todos", "id": .string(a1.id), "patch": ["$owner": .string(userId("bob")),
                "isFinish": true]]), "PATCH")
        #expect(patched["data"]?["$owner"]?.stringValue == userId("alice") && patched["data"]?["isFinish"] == true)
        let replaced = try ok(
            alice.call(.replace, ["collection": "todos", "id": .string(a3.id), "data": ["title": "green tea",
                "$owner": .null]]), "REPLACE")
        #expect(replaced["data"]?["$owner"]?.stringValue == userId("alice"))
        #expect(try ok(alice.call(.delete, ["collection": "todos", "id": .string(a3.id)]), "DELETE")["id"] != nil)

        // The change feed: Alice's subscription sees her change and not Bob's, which committed first.
        let feed = try signIn(port(1), "alice")
        let watch = try ok(feed.call(.watch, ["collection": "todos"]), "WATCH")
        let subscription = watch["subscription"]!.intValue!
        let b3 = try create(bob, "todos", ["title": "butter", "isFinish": false])
        _ = try ok(bob.call(.delete, ["collection": "todos", "id": .string(b2.id)]), "DELETE")
        let a4 = try create(alice, "todos", ["title": "rice", "isFinish": false])
        var events: [Frame] = []
        while !events.contains(where: { $0.replyJSON["id"]?.stringValue == a4.id }),
            let frame = try feed.receive(timeout: 120)
        {
            if frame.opcode == .event && Int64(frame.requestID) == subscription { events.append(frame) }
        }
        let seen = events.compactMap { $0.replyJSON["id"]?.stringValue }
        #expect(seen == [a4.id], "Alice's feed showed \(seen); Bob's were \(b3.id), \(b2.id)")
        // Replayed from the start of the change log (`since`), the feed is still only Alice's.
        let replay = try signIn(port(1), "alice")
        let replayed = try ok(replay.call(.watch, ["collection": "todos", "since": 0]), "WATCH since 0")
        let replaying = replayed["subscription"]!.intValue!
        var again: [String] = []
        while !again.contains(a4.id), let frame = try replay.receive(timeout: 120) {
            if frame.opcode == .event && Int64(frame.requestID) == replaying, let id = frame.replyJSON["id"]?.stringValue {
                again.append(id)
            }
        }
        let bobs = Set([b1.id, b2.id, b3.id])
        #expect(again.contains(a1.id) && again.contains(a4.id), "the replay missed Alice's changes: \(again)")
        #expect(bobs.isDisjoint(with: again), "the replay showed Bob's records to Alice: \(again)")

        // A catalogue every signed-in user reads and only an admin writes.
        _ = try ok(admin.call(.rulesSet, ["collection": "catalogue", "rules": .object(catalogueRules)]), "RULES_SET")
        let item = try create(admin, "catalogue", ["name": "Poké Ball", "category": "Ball"])
        for user in [alice, bob] {
            #expect(try user.call(.get, ["collection": "catalogue", "id": .string(item.id)]).status == .ok)
            #expect(try listed(user, "catalogue") == [item.id])
            let write = try user.call(.create, ["collection": "catalogue", "data": ["name": "fake"]])
            #expect(write.status == .permissionDenied && write.replyText.contains("only an admin"))
            let patch = try user.call(.patch, ["collection": "catalogue", "id": .string(item.id), "patch": ["name": "x"]])
            #expect(patch.status == .permissionDenied)
            #expect(try user.call(.rulesSet, ["collection": "catalogue", "rules": .object(todoRules)]).status
                == .permissionDenied)
        }
        #expect(try ok(admin.call(.count, ["collection": "catalogue"]), "COUNT")["count"] == 1)
    }

    @Test func twoUsersOfTheTodoAppOnSQLite() throws {
        let directory = temporaryTestDirectory("larder-rules")
        defer { try? FileManager.default.removeItem(at: directory) }
        let jwks = try Self.jwksFile(in: directory)
        try withServerOnPort0({ Self.configure(&$0, jwks: jwks) }) { _, port in try Self.exercise([port]) }
    }

    @Test func twoUsersOfTheTodoAppOnThreeServersOfOnePostgreSQL() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let directory = temporaryTestDirectory("larder-rules-pg")
        defer { try? FileManager.default.removeItem(at: directory) }
        let jwks = try Self.jwksFile(in: directory)
        var servers: [LarderServer] = []
        defer { for server in servers { server.shutdown() } }
        var ports: [Int] = []
        for index in 0..<3 {
            var configuration = ServerConfiguration.forTests(in: directory.appendingPathComponent("s\(index)"))
            configuration.postgresURL = schema.url
            configuration.ioQueues = 1
            Self.configure(&configuration, jwks: jwks)
            let server = try LarderServer(configuration: configuration)
            servers.append(server)
            ports.append(try server.start())
        }
        try Self.exercise(ports)
    }

    /// A connection without a user on a server that accepts ID tokens and requires no token: `public` lets it read,
    /// `signedIn` and `admin` refuse it naming who may, and a WATCH must name a collection (for a user too). The rules
    /// were set by an admin while the server had a token; the server then starts on the same data without one.
    @Test func aConnectionWithoutAUserHasWhatPublicGivesAndNoMore() throws {
        let directory = temporaryTestDirectory("larder-rules-anonymous")
        defer { try? FileManager.default.removeItem(at: directory) }
        let jwks = try Self.jwksFile(in: directory)
        var configuration = ServerConfiguration.forTests(in: directory)
        Self.configure(&configuration, jwks: jwks)
        let first = try LarderServer(configuration: configuration)
        let item: (id: String, rev: Int64)
        do {
            defer { first.shutdown() }
            let admin = try RawClient.tcp(port: try first.start())
            _ = try admin.hello(token: "admin-secret")
            let publicRead: JSONObject = ["read": "public", "create": "admin", "update": "admin", "delete": "admin"]
            for (collection, rules) in [("catalogue", publicRead), ("notes", Self.catalogueRules)] {
                _ = try Self.ok(
                    admin.call(.rulesSet, ["collection": .string(collection), "rules": .object(rules)]), "RULES_SET")
            }
            item = try Self.create(admin, "catalogue", ["title": "Tea"])
            _ = try Self.create(admin, "notes", ["title": "for members"])
        }
        configuration.token = nil
        let second = try LarderServer(configuration: configuration)
        defer { second.shutdown() }
        let port = try second.start()
        let anonymous = try RawClient.tcp(port: port)
        #expect(try anonymous.call(.hello, HelloRequest(client: "rules-tests").json).status == .ok)
        let read = try anonymous.call(.get, ["collection": "catalogue", "id": .string(item.id)])
        #expect(read.status == .ok && read.replyJSON["data"]?["title"] == "Tea")
        let count = try anonymous.call(.count, ["collection": "notes"])
        #expect(count.status == .permissionDenied && count.replyText.contains("signed-in users"), "\(count.replyText)")
        let write = try anonymous.call(.create, ["collection": "catalogue", "data": ["title": "Coffee"]])
        #expect(write.status == .permissionDenied && write.replyText.contains("only an admin"), "\(write.replyText)")
        let user = try Self.signIn(port, "carol")
        #expect(try user.call(.count, ["collection": "notes"]).replyJSON["count"] == 1)
        for client in [anonymous, user] {
            let everything = try client.call(.watch, [:])
            #expect(everything.status == .permissionDenied && everything.replyText.contains("names one collection"))
        }
    }

    /// A user's write carries a request key as any write does: sent again it answers the first answer and applies
    /// nothing, a DELETE's retry included (its record is gone by then); the same key from another user is not that
    /// user's request, and is refused rather than answered with the first user's record.
    @Test func aUsersRequestKeyAppliesOnceAndIsTheirsAlone() throws {
        let directory = temporaryTestDirectory("larder-rules-keys")
        defer { try? FileManager.default.removeItem(at: directory) }
        let jwks = try Self.jwksFile(in: directory)
        try withServerOnPort0({ Self.configure(&$0, jwks: jwks) }) { _, port in
            let admin = try RawClient.tcp(port: port)
            _ = try admin.hello(token: "admin-secret")
            _ = try Self.ok(
                admin.call(.rulesSet, ["collection": "todos", "rules": .object(Self.todoRules)]), "RULES_SET")
            let (alice, bob) = (try Self.signIn(port, "alice"), try Self.signIn(port, "bob"))
            let key = JSON.string(UUID().uuidString)
            let create: JSONObject = ["collection": "todos", "data": ["title": "Milk"], "requestKey": key]
            let first = try Self.ok(alice.call(.create, create), "CREATE")
            #expect(try Self.ok(alice.call(.create, create), "CREATE again") == first)
            #expect(try Self.ok(alice.call(.count, ["collection": "todos"]), "COUNT")["count"] == 1)
            let stolen = try bob.call(.create, create)
            #expect(stolen.status == .invalidArgument && stolen.replyText.contains("requestKey"), "\(stolen.replyText)")
            #expect(!stolen.replyText.contains("Milk"))
            let delete: JSONObject = ["collection": "todos", "id": first["id"]!, "requestKey": .string(UUID().uuidString)]
            let deleted = try Self.ok(alice.call(.delete, delete), "DELETE")
            #expect(try Self.ok(alice.call(.delete, delete), "DELETE again") == deleted)
            #expect(try Self.ok(admin.call(.count, ["collection": "todos"]), "COUNT")["count"] == 0)
        }
    }

    /// A photo follows its record's rules: Alice attaches photos to her diary entries (at once and by a resumable
    /// upload), reads, lists and deletes them; Bob's every request about them answers as for a missing photo or
    /// record and changes nothing; a photo must name its record; a catalogue's photos are read by every user and
    /// attached only by an admin.
    @Test(arguments: ServerStore.allCases) func photosFollowTheirRecordsRules(_ store: ServerStore) throws {
        let directory = temporaryTestDirectory("larder-rules-photos")
        defer { try? FileManager.default.removeItem(at: directory) }
        let jwks = try Self.jwksFile(in: directory)
        let schema = store == .postgres ? try TestPostgres.newSchema() : nil
        defer { schema?.drop() }
        try withServerOnPort0({
            Self.configure(&$0, jwks: jwks)
            $0.postgresURL = schema?.url
        }) { _, port in
            let admin = try RawClient.tcp(port: port)
            _ = try admin.hello(token: "admin-secret")
            for (collection, rules) in [("diary", Self.todoRules), ("catalogue", Self.catalogueRules)] {
                _ = try Self.ok(
                    admin.call(.rulesSet, ["collection": .string(collection), "rules": .object(rules)]), "RULES_SET")
            }
            let (alice, bob) = (try Self.signIn(port, "alice"), try Self.signIn(port, "bob"))
            let entry = try Self.create(alice, "diary", ["item": "teapot"])
            let bobsEntry = try Self.create(bob, "diary", ["item": "kettle"])
            let attach: JSON = ["collection": "diary", "id": .string(entry.id)]
            let jpeg = Payloads.syntheticJPEG(size: 4096)
            let photo = try Self.ok(alice.call(.blobPut, ["attach": attach], binary: jpeg), "BLOB_PUT")["id"]!

            // Alice's own photo, by every read.
            let got = try alice.call(.blobGet, ["id": photo])
            #expect(got.status == .ok && got.binary == jpeg)
            #expect(try alice.call(.blobHead, ["id": photo]).status == .ok)
            let listed = try Self.ok(alice.call(.blobList, ["attachedTo": attach]), "BLOB_LIST")
            #expect(listed["blobs"]?.arrayValue?.map { $0["id"] } == [photo])

            // For Bob it is as missing as an id nobody used, and his requests change nothing.
            let unknown = JSON.string(UUID().uuidString.lowercased())
            for opcode in [Opcode.blobGet, .blobHead, .blobDelete] {
                let hidden = try bob.call(opcode, ["id": photo])
                let missing = try bob.call(opcode, ["id": unknown])
                #expect(hidden.status == .notFound && missing.status == .notFound, "\(opcode.name): \(hidden.replyText)")
                #expect(
                    Self.shape(hidden, photo.stringValue!) == Self.shape(missing, unknown.stringValue!),
                    "the answers tell a hidden photo from a missing one")
            }
            let bobsList = try Self.ok(bob.call(.blobList, ["attachedTo": attach]), "BLOB_LIST")
            #expect(bobsList["blobs"] == [])
            let intrude = try bob.call(.blobPut, ["attach": attach], binary: jpeg)
            let nowhere = try bob.call(
                .blobPut, ["attach": ["collection": "diary", "id": unknown]], binary: jpeg)
            #expect(intrude.status == .notFound && intrude.replyJSON["field"] == "attach.id")
            #expect(Self.shape(intrude, entry.id) == Self.shape(nowhere, unknown.stringValue!))
            let upload = try bob.call(.blobUpload, BlobUploadRequest(
                size: Int64(jpeg.count), attach: BlobAttachment(collection: "diary", id: UUID(uuidString: entry.id)!)).json)
            #expect(upload.status == .notFound)
            #expect(try alice.call(.blobGet, ["id": photo]).status == .ok, "Bob's BLOB_DELETE deleted Alice's photo")

            // A photo names its record.
            let loose = try bob.call(.blobPut, [:], binary: jpeg)
            #expect(loose.status == .permissionDenied && loose.replyText.contains("attach"), "\(loose.replyText)")

            // A resumable upload to Bob's own entry.
            let bobsAttach = BlobAttachment(collection: "diary", id: UUID(uuidString: bobsEntry.id)!)
            let begun = try Self.ok(
                bob.call(.blobUpload, BlobUploadRequest(size: Int64(jpeg.count), attach: bobsAttach).json), "UPLOAD")
            let info = try BlobUploadInfo(json: begun.objectValue!)
            let chunk = BlobUploadChunkRequest(upload: info.upload, offset: 0, crc32: CRC32.checksum(jpeg))
            _ = try Self.ok(bob.call(.blobUploadChunk, chunk.json, binary: jpeg), "CHUNK")
            let finished = try Self.ok(
                bob.call(.blobUploadFinish, BlobUploadFinishRequest(upload: info.upload).json), "FINISH")
            #expect(finished["attachedTo"]?["id"]?.stringValue == bobsEntry.id)

            // Alice deletes her photo.
            _ = try Self.ok(alice.call(.blobDelete, ["id": photo]), "BLOB_DELETE")
            #expect(try alice.call(.blobGet, ["id": photo]).status == .notFound)

            // The catalogue: the admin's photo is every user's to see, and no user's to attach to.
            let item = try Self.create(admin, "catalogue", ["title": "Tea"])
            let itemAttach: JSON = ["collection": "catalogue", "id": .string(item.id)]
            let itemPhoto = try Self.ok(admin.call(.blobPut, ["attach": itemAttach], binary: jpeg), "BLOB_PUT")["id"]!
            #expect(try alice.call(.blobGet, ["id": itemPhoto]).binary == jpeg)
            let attachToItem = try alice.call(.blobPut, ["attach": itemAttach], binary: jpeg)
            #expect(attachToItem.status == .permissionDenied && attachToItem.replyText.contains("only an admin"))
        }
    }
}
