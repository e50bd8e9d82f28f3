import Foundation
import LarderClient
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// The five apps Larder was made for (AppsTests' models), used offline through `LarderReplica`: a `larder-server`
/// process behind a relay that goes silent, every write and read made while it is, the app restarted on its file, then
/// the network back: the server ends up holding what the phone holds, and the app's queries answer the same on both.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct AppsOfflineTests {
    /// An app's replica, offline, on a server of `store`; `body` runs offline, then the network comes back and the
    /// replica drains.
    static func offline(
        _ store: ServerStore, _ collection: String,
        _ body: (ReplicaTestServer, LarderReplica) async throws -> Void,
        online: (ReplicaTestServer, LarderReplica) async throws -> Void
    ) async throws {
        let server = try ReplicaTestServer(store)
        defer { server.stop() }
        let (relay, client) = try server.relayed()
        defer {
            relay.stop()
            client.close()
        }
        relay.blackhole(true)
        let replica = try server.replica(client, name: collection)
        try await body(server, replica)
        replica.close()
        // The app starts again on its file, and the network comes back.
        let again = try server.replica(client, name: collection)
        again.start()
        relay.blackhole(false)
        relay.cutAll()
        // Checked before the online half reads what the server holds (which it indexes).
        // Generous: the whole suite beside it can hold the machine for minutes; the error says what was waiting.
        try await again.synchronize(timeout: .seconds(300))
        try await online(server, again)
        again.close()
    }

    @Test(arguments: ServerStore.allCases) func profileBookOffline(_ store: ServerStore) async throws {
        typealias Profile = AppsTests.Profile
        let date = { (text: String) in ISO8601DateFormatter().date(from: text)! }
        try await AppsOfflineTests.offline(store, "profiles") { _, replica in
            let book = replica.collection("profiles", of: Profile.self)
            let ming = try book.create(
                Profile(
                    name: "王小明", phone: "0912-345-678", height: 172.5, weight: 64.2,
                    birthday: date("1995-02-14T00:00:00Z"), zodiacSign: "Aquarius 水瓶座", isMale: true))
            let lin = try book.create(
                Profile(
                    name: "林怡君", phone: "0988-111-222", height: 160, weight: 50.5,
                    birthday: date("1998-08-30T00:00:00Z"), zodiacSign: "Virgo 處女座", isMale: false))
            let emily = try book.create(
                Profile(
                    name: "Emily Chen", phone: "+1 415 555 0101", height: 165.3, weight: 55,
                    birthday: date("2001-12-25T00:00:00Z"), zodiacSign: "Capricorn 摩羯座", isMale: false))
            try book.update(lin) {
                $0.weight = 51.0
                $0.phone = "0988-000-111"
            }
            try book.delete(emily.id)
            #expect(try book.all().map(\.id) == [ming.id, lin.id])
        } online: { server, replica in
            let book = replica.collection("profiles", of: Profile.self)
            let remote = try await server.direct.collection("profiles", of: Profile.self).all()
            #expect(remote.map(\.value) == (try book.all().map(\.value)))
            #expect(remote.map(\.rev) == [1, 2])
            #expect(remote[1].value.phone == "0988-000-111")
        }
    }

    @Test(arguments: ServerStore.allCases) func shopDiaryOffline(_ store: ServerStore) async throws {
        typealias Purchase = AppsTests.Purchase
        let photoFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Fixtures/rocket.jpg")
        let cheap = Field("price") < 50 && Field("discount") == true
        try await AppsOfflineTests.offline(store, "items") { _, replica in
            let diary = replica.collection("items", of: Purchase.self)
            let onigiri = try diary.create(
                Purchase(
                    store: "7-Eleven", item: "鮪魚飯糰", date: Date(timeIntervalSince1970: 1_700_000_000), price: 35,
                    discount: true, comment: "lunch", photoName: "rocket.jpg", photo: nil))
            _ = try diary.create(
                Purchase(
                    store: "全聯", item: "牛奶", date: Date(timeIntervalSince1970: 1_700_000_100), price: 89,
                    discount: false, comment: "", photoName: nil, photo: nil))
            let blob = try diary.attachPhoto(contentsOf: photoFile, to: onigiri.id)
            try diary.update(onigiri) { $0.photo = blob }
            #expect(try diary.search(cheap).values.map(\.item) == ["鮪魚飯糰"])
        } online: { server, replica in
            let diary = replica.collection("items", of: Purchase.self)
            let remote = server.direct.collection("items", of: Purchase.self)
            let found = try await remote.search(cheap, limit: 20).collect()
            #expect(found.map(\.value.item) == ["鮪魚飯糰"])
            let blob = try #require(found.first?.value.photo)
            let stored = try await server.direct.blobGet(blob)
            #expect(stored.bytes == (try Data(contentsOf: photoFile)), "the photo, byte for byte")
            #expect(stored.info.attachedTo?.id == found.first?.id)
            #expect(try diary.search(cheap).values == found.map(\.value))
        }
    }

    @Test(arguments: ServerStore.allCases) func todoListOffline(_ store: ServerStore) async throws {
        typealias Todo = AppsTests.Todo
        let open = Field("isFinish") == false
        try await AppsOfflineTests.offline(store, "todos") { _, replica in
            let todos = replica.collection("todos", of: Todo.self)
            var made: [ReplicaRecord<Todo>] = []
            for title in ["Walk the dog", "Buy milk 買牛奶", "Call mom", "Pay rent", "Fix bike"] {
                made.append(try todos.create(Todo(title: title, isFinish: false)))
            }
            try todos.update(made[1]) { $0.isFinish = true }
            try todos.update(made[3]) { $0.isFinish = true }
            try todos.delete(made[4].id)
            let titles = try todos.search(open, sortedBy: [Field("title").ascending]).values.map(\.title)
            #expect(titles == ["Call mom", "Walk the dog"])
        } online: { server, replica in
            let todos = replica.collection("todos", of: Todo.self)
            let remote = server.direct.collection("todos", of: Todo.self)
            let titles = try await remote.search(open, sortedBy: [Field("title").ascending]).collect().map(\.value.title)
            #expect(titles == ["Call mom", "Walk the dog"])
            #expect(try await remote.count() == 4)
            #expect(try todos.search(open, sortedBy: [Field("title").ascending]).values.map(\.title) == titles)
        }
    }

    @Test(arguments: ServerStore.allCases) func studentRegisterOffline(_ store: ServerStore) async throws {
        typealias Student = AppsTests.Student
        let students = AppsTests.students
        let searches: [(String, [Field]?, [String])] = [
            ("北京", [Field("address")], ["张三", "王五"]), ("北京", [Field("name")], ["北京 Fan"]),
            ("北京", nil, ["张三", "王五", "北京 Fan"]), ("hedon", nil, ["Hedon"]), ("TIANHE", [Field("address")], ["Hedon"]),
            ("王", [Field("name")], ["王五"]), ("1", [Field("address")], ["张三", "李四"]), ("區", nil, []),
        ]
        let ranked = ["张三", "李四", "Hedon", "北京 Fan", "王五"]
        try await AppsOfflineTests.offline(store, "students") { _, replica in
            let register = replica.collection("students", of: Student.self)
            for student in students { try register.create(student) }
            for (text, fields, names) in searches {
                let local = try register.search(containing: text, in: fields, sortedBy: [Field("$createdAt").ascending])
                #expect(local.values.map(\.name) == names, "\(text)")
            }
            #expect(try register.search(sortedBy: [Field("score").descending]).values.map(\.name) == ranked)
            #expect(try register.count(containing: "北京", in: [Field("address")]) == 2)
        } online: { server, replica in
            let register = replica.collection("students", of: Student.self)
            let remote = server.direct.collection("students", of: Student.self)
            for (text, fields, names) in searches {
                let order = [Field("$createdAt").ascending]
                let found = try await remote.search(containing: text, in: fields, sortedBy: order).collect()
                #expect(found.map(\.value.name) == names, "\(text)")
                #expect(try register.search(containing: text, in: fields, sortedBy: order).records.map(\.id)
                    == found.map(\.id))
            }
            let best = try await remote.search(sortedBy: [Field("score").descending]).collect()
            #expect(best.map(\.value.name) == ranked)
        }
    }

    @Test(arguments: ServerStore.allCases) func catalogueOffline(_ store: ServerStore) async throws {
        typealias Item = AppsTests.CatalogueItem
        let balls = ["poke", "great", "ultra", "master", "safari", "net", "dive", "nest", "repeat", "timer", "luxury",
                     "premier", "dusk"].map { "\($0)-ball" }
        let medicines = ["antidote", "awakening", "full-restore"]
        try await AppsOfflineTests.offline(store, "pokemon_items") { _, replica in
            let catalogue = replica.collection("pokemon_items", of: Item.self)
            for (n, name) in balls.enumerated() {
                try catalogue.create(Item(category: "Ball", name: name, imageName: name, description: "About \(name)"))
                if n < medicines.count {
                    try catalogue.create(
                        Item(category: "Medicine", name: medicines[n], imageName: medicines[n], description: "About"))
                }
            }
            let sections = try catalogue.group(by: Field("category"))
            #expect(sections.map(\.key) == ["Ball", "Medicine"])
            #expect(sections.map(\.count) == [13, 3])
            #expect(sections[0].records.map(\.value.name) == Array(balls.prefix(10)))
        } online: { server, replica in
            let catalogue = replica.collection("pokemon_items", of: Item.self)
            let remote = try await server.direct.collection("pokemon_items", of: Item.self).group(by: Field("category"))
            let local = try catalogue.group(by: Field("category"))
            #expect(remote.map(\.key) == local.map(\.key))
            #expect(remote.map(\.count) == local.map(\.count))
            #expect(remote.map { $0.records.map(\.id) } == local.map { $0.records.map(\.id) })
        }
    }
}
