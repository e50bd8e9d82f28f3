import Foundation
import LarderClient
import LarderServer
import LarderTestThreads
import Testing

/// The client library against a real server: every operation, typed round trips, concurrency, a dying server.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ClientLibraryTests {
    @Test func everyOperation() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let hello = try await client.connect()
        #expect(hello.version == 1)
        _ = try await client.ping()

        let created = try await client.create("items", ["item": "茶葉蛋", "price": 13, "discount": false])
        #expect(created.rev == 1)
        #expect(try await client.get("items", id: created.id) == created)
        let replaced = try await client.replace("items", id: created.id, data: ["item": "茶葉蛋", "price": 15], rev: 1)
        #expect(replaced.rev == 2)
        let conflict = await #expect(throws: LarderError.self) {
            _ = try await client.replace("items", id: created.id, data: [:], rev: 1)
        }
        #expect(conflict?.status == .conflict)
        let patched = try await client.patch("items", id: created.id, patch: ["discount": true, "price": nil])
        #expect(patched.data["discount"] == true && patched.data["price"] == nil)
        let other = try await client.create("items", ["item": "泡麵", "price": 42, "discount": true])
        let many = try await client.getMany("items", ids: [other.id, UUID(), created.id])
        #expect(many.records.map(\.id) == [other.id, created.id])
        #expect(many.missing.count == 1)
        #expect(try await client.list("items", limit: 1).nextCursor != nil)
        let page = try await client.search(
            "items", SearchQuery(filter: .compare(try FieldPath("price"), .lt, 50), limit: 10))
        #expect(page.records.map(\.id) == [other.id])
        #expect(try await client.count("items", text: TextQuery(query: "茶葉")) == 1)
        let groups = try await client.group("items", by: "discount")
        #expect(groups.groups.map(\.count).reduce(0, +) == 2)
        #expect(try await client.index("items", field: "price").name.isEmpty == false)
        #expect(try await client.collections().contains { $0.name == "items" && $0.count == 2 })

        let jpeg = try ClientFixtures.bytes("grace_hopper.jpg")
        let info = try await client.blobPut(
            Data(jpeg), sha256: ClientFixtures.sha256(jpeg),
            attachTo: BlobAttachment(collection: "items", id: other.id))
        #expect(info.size == Int64(jpeg.count))
        let blob = try await client.blobGet(info.id)
        #expect(blob.bytes == Data(jpeg))
        #expect(try await client.blobHead(info.id) == info)
        #expect(try await client.blobList().blobs.map(\.id) == [info.id])
        let loose = try await client.blobPut(Data(jpeg))
        try await client.blobDelete(loose.id)
        let looseGone = await #expect(throws: LarderError.self) { _ = try await client.blobHead(loose.id) }
        #expect(looseGone?.status == .notFound)
        let deleted = try await client.delete("items", id: other.id)
        #expect(deleted.blobsDeleted == 1)
        #expect(try await client.stats()["connections"] != nil)
        let dropped = try await client.dropCollection("items")
        #expect(dropped.documents == 1)
        let notFound = await #expect(throws: LarderError.self) { _ = try await client.get("items", id: created.id) }
        #expect(notFound?.status == .notFound)
        let watch = try await client.request(.watch, json: ["collection": "items"])
        #expect(watch.json["subscription"] != nil)
    }

    struct Profile: Codable, Sendable, Equatable {
        var name: String
        var birthday: Date
        var height: Double
        var isMale: Bool
        var tags: [String]
        var nickname: String?
    }

    @Test func typedRoundTripWithDates() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let profiles = client.collection("profiles", of: Profile.self)
        let birthday = try #require(ISO8601DateFormatter().date(from: "1995-02-14T00:00:00Z"))
        let profile = Profile(
            name: "王小明", birthday: birthday.addingTimeInterval(0.25), height: 172.5, isMale: true, tags: ["水瓶座"],
            nickname: nil)
        let before = Date()
        let stored = try await profiles.create(profile)
        let after = Date()
        #expect(stored.value == profile)
        // The server's clock (the same machine's), in seconds not milliseconds: between the moments the request left
        // and its answer came back, however long a loaded machine (or a sanitizer: 175 s under TSan) took, give or
        // take the stored timestamp's rounding to the millisecond.
        #expect(stored.createdAt >= before.addingTimeInterval(-0.001))
        #expect(stored.createdAt <= after.addingTimeInterval(0.001))
        let fetched = try await profiles.get(stored.id)
        #expect(fetched == stored)
        var edited = fetched
        edited.value.nickname = "小明"
        let saved = try await profiles.save(edited)
        #expect(saved.rev == 2 && saved.value.nickname == "小明")
        let stale = await #expect(throws: LarderError.self) { _ = try await profiles.save(edited) }
        #expect(stale?.status == .conflict)
        #expect(try await profiles.all().map(\.value) == [saved.value])
    }

    @Test func concurrentTasksShareOneConnection() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let ids = try await withThrowingTaskGroup(of: UUID.self) { group in
            for n in 0..<500 {
                group.addTask { try await client.create("todos", ["title": .string("task \(n)"), "n": .int(Int64(n))]).id }
            }
            var ids: [UUID] = []
            for try await id in group { ids.append(id) }
            return ids
        }
        #expect(Set(ids).count == 500)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for id in ids.prefix(200) {
                group.addTask {
                    let record = try await client.get("todos", id: id)
                    #expect(record.id == id)
                }
            }
            try await group.waitForAll()
        }
        #expect(try await client.count("todos") == 500)
        #expect(server.server.openConnections == 1)
    }

    @Test func aServerKilledMidRequestGivesAClearErrorThenReconnects() async throws {
        let gate = try ServerGate()
        defer { gate.open() }
        let server = try ClientTestServer(hooks: ServerHooks(search: gate.gate)) { configuration in
            configuration.shutdownGraceMs = 100
        }
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let stored = try await client.create("students", ["name": "张三", "address": "北京市海淀区"])
        // Restart once the server holds the SEARCH on the gate, however long a busy machine takes to send it: the
        // shutdown's grace period runs out with the SEARCH still in flight. The restarted server's searches pass.
        let restarter = TestThread {
            try gate.waitForHeld(1)
            try server.restart()
            gate.open()
        }
        let search = Task { try await client.search("students", SearchQuery(text: TextQuery(query: "北京"))) }
        let error = await #expect(throws: LarderError.self) { _ = try await search.value }
        try await restarter.finished()
        #expect(error?.status == .unavailable)
        #expect(error?.isConnectFailure == false)
        // The next request reconnects to the new server on the same port and data.
        #expect(try await client.get("students", id: stored.id).data["name"] == "张三")
    }

    @Test func unixSocketAndToken() async throws {
        let path = NSTemporaryDirectory() + "larder-\(UUID().uuidString.prefix(8)).sock"
        let server = try ClientTestServer { configuration in
            configuration.socketPath = path
            configuration.token = "s3cret"
        }
        defer { server.stop() }
        let client = LarderClient(socketPath: path, token: "s3cret")
        defer { client.close() }
        #expect(try await client.create("todos", ["title": "via unix socket"]).rev == 1)
        let anonymous = LarderClient(socketPath: path)
        defer { anonymous.close() }
        let error = await #expect(throws: LarderError.self) { _ = try await anonymous.collections() }
        #expect(error?.status == .unauthenticated)
    }
}
