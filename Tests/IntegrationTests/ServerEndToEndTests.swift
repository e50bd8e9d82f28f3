#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderClient
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// Every opcode through a real server on a real socket, and the concurrency the protocol promises.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ServerEndToEndTests {
    @Test func everyOpcode() throws {
        try withServerOnPort0 { server, port in
            let c = try RawClient.tcp(port: port)
            #expect(try c.call(.ping).status == .ok)  // PING before HELLO is allowed
            let hello = try c.hello()
            #expect(hello.version == 1 && hello.compression == "zlib" && hello.server.hasPrefix("larder-server"))

            let created = try c.call(.create, ["collection": "todos", "data": ["title": "买菜", "done": false]])
            #expect(created.status == .ok, "\(created.replyText)")
            let record = try Record(json: created.jsonObject())
            #expect(record.rev == 1 && record.data["title"] == "买菜")
            let id = record.id.wireString
            let second = try c.call(.create, ["collection": "todos", "data": ["title": "walk", "done": true]])
            let id2 = try Record(json: second.jsonObject()).id.wireString

            let got = try c.call(.get, ["collection": "todos", "id": .string(id)])
            #expect(try Record(json: got.jsonObject()) == record)
            let missing = UUID().wireString
            let many = try c.call(.getMany, ["collection": "todos", "ids": [.string(id), .string(missing)]])
            let manyResponse = try GetManyResponse(json: many.jsonObject())
            #expect(manyResponse.records.map(\.id.wireString) == [id] && manyResponse.missing.map(\.wireString) == [missing])

            let replaced = try c.call(
                .replace, ["collection": "todos", "id": .string(id), "data": ["title": "买菜", "done": true], "rev": 1])
            #expect(try Record(json: replaced.jsonObject()).rev == 2)
            let conflict = try c.call(.replace, ["collection": "todos", "id": .string(id), "data": [:], "rev": 1])
            #expect(conflict.status == .conflict)
            let patched = try c.call(.patch, ["collection": "todos", "id": .string(id), "patch": ["note": "x"]])
            #expect(try Record(json: patched.jsonObject()).data["note"] == "x")

            let list = try PageResponse(json: c.call(.list, ["collection": "todos", "limit": 1]).jsonObject())
            #expect(list.records.count == 1 && list.nextCursor != nil)
            let search = try c.call(
                .search,
                [
                    "collection": "todos", "filter": ["field": "done", "op": "eq", "value": true],
                    "sort": [["field": "title", "order": "asc"]],
                ])
            #expect(search.status == .ok, "\(search.replyText)")
            #expect(try PageResponse(json: search.jsonObject()).records.count == 2)
            let text = try c.call(.search, ["collection": "todos", "text": ["query": "菜"]])
            #expect(try PageResponse(json: text.jsonObject()).records.map(\.id.wireString) == [id])
            let count = try c.call(.count, ["collection": "todos", "filter": ["field": "done", "op": "eq", "value": true]])
            #expect(try CountResponse(json: count.jsonObject()).count == 2)
            let group = try c.call(.group, ["collection": "todos", "field": "done"])
            #expect(group.status == .ok, "\(group.replyText)")
            #expect(try GroupResponse(json: group.jsonObject()).groups.map(\.count) == [2])
            let index = try c.call(.index, ["collection": "todos", "field": "title"])
            #expect(try IndexResponse(json: index.jsonObject()).created)
            let collections = try CollectionsResponse(json: c.call(.collections).jsonObject())
            #expect(collections.collections == [.init(name: "todos", count: 2)])

            let photo = try ServerFixtures.data("rocket.jpg")
            let put = try c.call(
                .blobPut, ["attach": ["collection": "todos", "id": .string(id2)]], binary: photo)
            #expect(put.status == .ok, "\(put.replyText)")
            let info = try BlobInfo(json: put.jsonObject())
            #expect(info.size == Int64(photo.count) && info.width > 0)
            let blobGet = try c.call(.blobGet, ["id": .string(info.id.wireString)])
            #expect(blobGet.binary == photo)
            #expect(try BlobInfo(json: blobGet.jsonObject()) == info)
            #expect(try BlobInfo(json: c.call(.blobHead, ["id": .string(info.id.wireString)]).jsonObject()) == info)
            let blobList = try BlobListResponse(json: c.call(.blobList).jsonObject())
            #expect(blobList.blobs == [info])
            let second2 = try c.call(.blobPut, [:], binary: try ServerFixtures.data("grace_hopper.jpg"))
            let info2 = try BlobInfo(json: second2.jsonObject())
            #expect(try c.call(.blobDelete, ["id": .string(info2.id.wireString)]).status == .ok)
            #expect(try c.call(.blobHead, ["id": .string(info2.id.wireString)]).status == .notFound)
            let notJPEG = try c.call(.blobPut, [:], binary: Array("not a jpeg".utf8))
            #expect(notJPEG.status == .unsupportedMediaType)

            let deleted = try c.call(.delete, ["collection": "todos", "id": .string(id2)])
            #expect(try DeleteResponse(json: deleted.jsonObject()).blobsDeleted == 1)
            #expect(try c.call(.get, ["collection": "todos", "id": .string(id2)]).status == .notFound)

            // 64 more GETs of one document: all counted and timed, all but the first from the read cache.
            let kept = try c.call(.create, ["collection": "todos", "data": ["title": "cached"]])
            let keptID = kept.replyJSON["id"] ?? .null
            let getsBefore = c.statsValue()["requests"]?["byOpcode"]?["GET"]?["count"]?.intValue ?? 0
            let hitsBefore = c.statsValue()["readCache"]?["hits"]?.intValue ?? 0
            for _ in 0..<64 { #expect(try c.call(.get, ["collection": "todos", "id": keptID]).json == kept.unsequencedJSON) }
            let afterGets = c.statsValue()
            #expect(afterGets["requests"]?["byOpcode"]?["GET"]?["count"]?.intValue == getsBefore + 64)
            #expect((afterGets["readCache"]?["hits"]?.intValue ?? 0) - hitsBefore >= 63)
            let timedGets = afterGets["requests"]?["byOpcode"]?["GET"]?["latencyMicros"]?["count"]?.intValue ?? 0
            #expect(timedGets == getsBefore + 64)
            // HELLO and PING, answered without the store, are timed as well.
            for opcode in ["HELLO", "PING"] {
                let operation = afterGets["requests"]?["byOpcode"]?[opcode]
                #expect(operation?["latencyMicros"]?["count"]?.intValue == operation?["count"]?.intValue)
                #expect((operation?["count"]?.intValue ?? 0) > 0)
            }
            #expect(try c.call(.delete, ["collection": "todos", "id": keptID]).status == .ok)

            let stats = try c.call(.stats)
            #expect(stats.status == .ok)
            let value = stats.replyJSON
            #expect(value["store"]?["documents"] == 1)
            #expect(value["connections"]?["open"] == 1)
            #expect(value["requests"]?["byOpcode"]?["CREATE"]?["count"] == 3)
            #expect(value["requests"]?["byOpcode"]?["GET"]?["byStatus"]?["NOT_FOUND"] == 1)
            #expect(value["bytes"]?["inWire"]?.intValue ?? 0 > 0)
            // Three creates and a delete went through the writer, in at least one group commit, and took it some CPU.
            let writer = value["store"]?["writer"]
            #expect((writer?["writes"]?.intValue ?? 0) >= 4)
            #expect((writer?["batches"]?.intValue ?? 0) >= 1)
            #expect((writer?["batches"]?.intValue ?? 0) <= (writer?["writes"]?.intValue ?? 0))
            #expect((writer?["cpuMicros"]?.intValue ?? 0) > 0)

            let dropped = try c.call(.dropCollection, ["collection": "todos"])
            #expect(try DropCollectionResponse(json: dropped.jsonObject()).documents == 1)

            // EVENT is the server's to send; WATCH and UNWATCH are served (WatchServerTests).
            let event = try c.call(.event)
            #expect(event.status == .unknownOpcode)
            #expect(event.replyText.contains("pushed by the server"))
            #expect(try c.call(Opcode(rawValue: 0x7777)).status == .unknownOpcode)
            #expect(try c.call(.ping).status == .ok)  // still open
            #expect(server.openConnections == 1)
        }
    }

    @Test func largeRepliesAreCompressedWhenNegotiated() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            for n in 0..<40 {
                _ = try c.call(.create, ["collection": "p", "data": ["name": .string("person \(n)"), "bio": "same text"]])
            }
            let page = try c.call(.search, ["collection": "p", "limit": 40])
            #expect(c.lastFlags.contains(.compressed))
            #expect(try PageResponse(json: page.jsonObject()).records.count == 40)
            let plain = try RawClient.tcp(port: port)
            try plain.hello(compression: [])
            _ = try plain.call(.search, ["collection": "p", "limit": 40])
            #expect(!plain.lastFlags.contains(.compressed))
        }
    }

    @Test func thousandPipelinedRequestsAreMatchedByID() throws {
        try withServerOnPort0({ $0.limits.maxInFlight = 1000 }) { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            let id = try Record(json: c.call(.create, ["collection": "c", "data": ["n": 0]]).jsonObject()).id
            var batch: [UInt8] = []
            var expected: [UInt32: Opcode] = [:]
            for n in UInt32(1000)..<2000 {
                let opcode: Opcode = n % 3 == 0 ? .create : (n % 3 == 1 ? .get : .ping)
                let json: JSONObject =
                    opcode == .create ? ["collection": "c", "data": ["n": .int(Int64(n))]]
                    : opcode == .get ? ["collection": "c", "id": .string(id.wireString)] : [:]
                batch += c.encode(opcode, json, id: n)
                expected[n] = opcode
            }
            try c.writeAll(batch)
            var seen: Set<UInt32> = []
            for _ in 0..<1000 {
                guard let frame = try c.receive() else { throw ServerTestError("closed early") }
                #expect(frame.status == .ok, "\(frame.requestID): \(frame.replyText)")
                #expect(expected[frame.requestID] == frame.opcode)
                #expect(seen.insert(frame.requestID).inserted)
            }
            #expect(seen.count == 1000)
            #expect(try CountResponse(json: c.call(.count, ["collection": "c"]).jsonObject()).count == 334)
        }
    }

    /// The SEARCH is held on a gate until the GET's answer is in: a GET that waited for it would never come.
    @Test func aSlowSearchDoesNotHoldBackAGet() throws {
        let gate = try ServerGate()
        defer { gate.open() }
        try withServerOnPort0(hooks: ServerHooks(search: gate.gate)) { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello()
            let id = try Record(json: c.call(.create, ["collection": "s", "data": ["a": 1]]).jsonObject()).id
            let searchID = try c.send(.search, ["collection": "s"])
            try gate.waitForHeld(1)
            let getID = try c.send(.get, ["collection": "s", "id": .string(id.wireString)])
            let first = try #require(try c.receive(timeout: 120))
            #expect(first.requestID == getID && first.status == .ok)
            gate.open()
            let second = try #require(try c.receive(timeout: 120))
            #expect(second.requestID == searchID && second.status == .ok)
        }
    }

    @Test func hundredConcurrentConnectionsDoMixedWork() throws {
        try withServerOnPort0 { server, port in
            let clients = try (0..<100).map { _ in try RawClient.tcp(port: port) }
            // Every connection has a request in flight at once, round after round.
            for c in clients { try c.send(.hello, HelloRequest(client: "many").json) }
            for c in clients { #expect(try c.receive()?.status == .ok) }
            var ids: [UUID] = []
            for (n, c) in clients.enumerated() { try c.send(.create, ["collection": "m", "data": ["n": .int(Int64(n))]]) }
            for c in clients {
                let frame = try #require(try c.receive())
                #expect(frame.status == .ok)
                ids.append(try Record(json: frame.jsonObject()).id)
            }
            for round in 0..<5 {
                for (n, c) in clients.enumerated() {
                    switch (n + round) % 4 {
                    case 0: try c.send(.get, ["collection": "m", "id": .string(ids[(n + round) % 100].wireString)])
                    case 1: try c.send(.search, ["collection": "m", "filter": ["field": "n", "op": "lt", "value": 10]])
                    case 2: try c.send(.patch, ["collection": "m", "id": .string(ids[n].wireString), "patch": ["r": .int(Int64(round))]])
                    default: try c.send(.count, ["collection": "m"])
                    }
                }
                for c in clients {
                    let frame = try #require(try c.receive())
                    #expect(frame.status == .ok, "\(frame.opcode.name): \(frame.replyText)")
                }
            }
            #expect(server.openConnections == 100)
        }
    }

    @Test func unixDomainSocket() throws {
        let path = "/tmp/larder-test-\(UUID().uuidString.prefix(8)).sock"
        // A stale socket file from a dead server must not stop the new one.
        try withServerOnPort0({ $0.socketPath = path }) { _, _ in }
        #expect(!FileManager.default.fileExists(atPath: path))
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(path.utf8))
            raw[path.utf8.count] = 0
        }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        close(stale)
        #expect(FileManager.default.fileExists(atPath: path))
        try withServerOnPort0({ $0.socketPath = path }) { _, _ in
            let c = try RawClient.unix(path: path)
            try c.hello()
            let created = try c.call(.create, ["collection": "u", "data": ["via": "unix"]])
            let id = try Record(json: created.jsonObject()).id
            #expect(try c.call(.get, ["collection": "u", "id": .string(id.wireString)]).replyJSON["data"]?["via"] == "unix")
        }
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func authenticationOnAndOff() throws {
        try withServerOnPort0({ $0.token = "let-me-in" }) { _, port in
            let early = try RawClient.tcp(port: port)
            try early.send(.get, ["collection": "a", "id": .string(UUID().wireString)])
            #expect(try early.framesUntilClosed().map(\.status) == [.unauthenticated])

            let none = try RawClient.tcp(port: port)
            try none.send(.hello, HelloRequest(client: "t").json)
            let refused = try none.framesUntilClosed()
            #expect(refused.map(\.status) == [.unauthenticated])

            let wrong = try RawClient.tcp(port: port)
            try wrong.send(.hello, HelloRequest(client: "t", token: "let-me-out").json)
            let frames = try wrong.framesUntilClosed()
            #expect(frames.map(\.status) == [.unauthenticated])
            #expect(!frames[0].replyText.contains("let-me"))

            let right = try RawClient.tcp(port: port)
            #expect(try right.ping() == .ok)
            #expect(try right.hello(token: "let-me-in").authRequired)
            #expect(try right.call(.collections).status == .ok)
        }
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            #expect(try !c.hello().authRequired)
            #expect(try c.call(.collections).status == .ok)
            let early = try RawClient.tcp(port: port)
            try early.send(.collections)
            #expect(try early.framesUntilClosed().map(\.status) == [.protocolError])
        }
    }

    @Test func helloNegotiation() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            let bad = try c.call(.hello, HelloRequest(versions: [7], client: "t").json)
            #expect(bad.status == .unsupportedVersion)
            #expect(bad.replyJSON["supported"] == [1])
            let typo = try c.call(.hello, ["versions": [1], "clinet": "t"])
            #expect(typo.status == .invalidArgument && typo.replyJSON["field"] == "clinet")
            #expect(try c.hello().version == 1)  // the connection stayed usable
            #expect(try c.call(.hello, HelloRequest(client: "t").json).status == .invalidArgument)
        }
    }
}

extension RawClient {
    func ping() throws -> Status { try call(.ping).status }
}

/// A server dropped without `shutdown()` (an embedding that forgot) must not leave its clients hanging.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DroppedServerTests {
    @Test func droppingAStartedServerClosesItsConnections() throws {
        let directory = temporaryTestDirectory("larder-drop")
        defer { try? FileManager.default.removeItem(at: directory) }
        var server: LarderServer? = try LarderServer(configuration: .forTests(in: directory))
        let port = try server!.start()
        let client = try RawClient.tcp(port: port)
        try client.hello()
        #expect(try client.call(.ping).status == .ok)
        server = nil
        // The connection ends (EOF or reset) instead of staying open with nobody serving it.
        #expect(try client.framesUntilClosed().isEmpty)
        #expect(throws: (any Error).self) { _ = try RawClient.tcp(port: port) }
    }
}

/// `--host` takes IPv6 addresses: `::1`, and `::` for every interface (IPv4 clients included).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct IPv6ListenerTests {
    @Test(arguments: ["::1", "::"])
    func anIPv6ListenerServesClients(host: String) async throws {
        let directory = temporaryTestDirectory("larder-ipv6")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.host = host
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        let client = LarderClient(host: "::1", port: port)
        defer { client.close() }
        let created = try await client.create("notes", ["text": "over IPv6"])
        #expect(try await client.get("notes", id: created.id) == created)
        if host == "::" {  // dual stack: an IPv4 client reaches it too
            let v4 = try RawClient.tcp(port: port)
            try v4.hello()
            #expect(try v4.call(.ping).status == .ok)
        }
    }

    @Test func aHostThatIsNotAnAddressIsRefusedAtStart() throws {
        let directory = temporaryTestDirectory("larder-bad-host")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.host = "not-an-address"
        let server = try LarderServer(configuration: configuration)
        #expect(throws: (any Error).self) { try server.start() }
    }
}
