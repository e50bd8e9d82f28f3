import Foundation
import LarderClient
import Testing

/// The five apps Larder was made for, replayed through the typed client with their own model structs.
@Suite struct AppsTests {
    struct Profile: Codable, Sendable, Equatable {
        var name: String
        var phone: String
        var height: Double
        var weight: Double
        var birthday: Date
        var zodiacSign: String
        var isMale: Bool
    }

    @Test(arguments: ServerStore.allCases) func profileBookSurvivesARestart(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let book = client.collection("profiles", of: Profile.self)
        let date = { (text: String) in ISO8601DateFormatter().date(from: text)! }
        let ming = try await book.create(
            Profile(
                name: "王小明", phone: "0912-345-678", height: 172.5, weight: 64.2, birthday: date("1995-02-14T00:00:00Z"),
                zodiacSign: "Aquarius 水瓶座", isMale: true))
        let lin = try await book.create(
            Profile(
                name: "林怡君", phone: "0988-111-222", height: 160, weight: 50.5, birthday: date("1998-08-30T00:00:00Z"),
                zodiacSign: "Virgo 處女座", isMale: false))
        let emily = try await book.create(
            Profile(
                name: "Emily Chen", phone: "+1 415 555 0101", height: 165.3, weight: 55,
                birthday: date("2001-12-25T00:00:00Z"), zodiacSign: "Capricorn 摩羯座", isMale: false))
        var edited = lin
        edited.value.weight = 51.0
        edited.value.phone = "0988-000-111"
        let saved = try await book.save(edited)
        try await book.delete(emily.id)

        try server.restart()
        let after = try await book.all()
        #expect(after.map(\.id) == [ming.id, lin.id])
        #expect(after[0].value == ming.value)
        #expect(after[1].value == saved.value && after[1].rev == 2)
        await #expect(throws: LarderError.self) { _ = try await book.get(emily.id) }
    }

    struct Purchase: Codable, Sendable, Equatable {
        var store: String
        var item: String
        var date: Date
        var price: Int
        var discount: Bool
        var comment: String
        var photo: UUID?
    }

    @Test(arguments: ServerStore.allCases) func shopDiaryPhotosGoWithTheirPurchase(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let diary = client.collection("items", of: Purchase.self)
        var purchase = try await diary.create(
            Purchase(
                store: "7-Eleven", item: "鮪魚飯糰", date: Date(timeIntervalSince1970: 1_714_566_600), price: 35,
                discount: true, comment: "好吃，但有點小", photo: nil))
        let jpeg = try ClientFixtures.bytes("rocket.jpg")
        let photo = try await client.blobPut(jpeg, attachTo: BlobAttachment(collection: "items", id: purchase.id))
        purchase.value.photo = photo.id
        purchase = try await diary.save(purchase)
        let shown = try await diary.get(purchase.id)
        let bytes = try await client.blobGet(try #require(shown.value.photo)).bytes
        #expect(ClientFixtures.sha256(bytes) == ClientFixtures.sha256(jpeg))
        #expect(photo.width > 0 && photo.height > 0)
        let deleted = try await diary.delete(purchase.id)
        #expect(deleted.blobsDeleted == 1)
        let gone = await #expect(throws: LarderError.self) { _ = try await client.blobHead(photo.id) }
        #expect(gone?.status == .notFound)
    }

    struct Todo: Codable, Sendable, Equatable {
        var id: UUID
        var title: String
        var isFinish: Bool
    }

    @Test(arguments: ServerStore.allCases) func todoListWithClientMadeIDs(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let todos = client.collection("todos", of: Todo.self)
        let items = [
            Todo(id: UUID(), title: "Buy milk 買牛奶", isFinish: false),
            Todo(id: UUID(), title: "Finish SwiftUI chapter 13", isFinish: true),
            Todo(id: UUID(), title: "預約牙醫", isFinish: false),
        ]
        for todo in items { #expect(try await todos.create(todo, id: todo.id).id == todo.id) }
        let duplicate = await #expect(throws: LarderError.self) { _ = try await todos.create(items[0], id: items[0].id) }
        #expect(duplicate?.status == .conflict)
        let toggled = try await todos.patch(items[0].id, ["isFinish": true])
        #expect(toggled.value.isFinish && toggled.rev == 2)
        let back = try await todos.patch(items[0].id, ["isFinish": false], rev: 2)
        #expect(!back.value.isFinish)
        try await todos.delete(items[2].id)
        let open = try await todos.search(filter: .compare(try FieldPath("isFinish"), .eq, false))
        #expect(open.values.map(\.id) == [items[0].id])
        #expect(try await todos.get([items[0].id, items[1].id, items[2].id]).map(\.id) == [items[0].id, items[1].id])
    }

    struct Student: Codable, Sendable, Equatable {
        var name: String
        var birthday: String
        var score: String
        var address: String
    }

    enum Scope { case all, name, address }

    @Test(arguments: ServerStore.allCases) func studentRegisterSearchScopes(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let register = client.collection("students", of: Student.self)
        let students = [
            Student(name: "张三", birthday: "2000-01-01", score: "92", address: "北京市海淀区中关村大街1号"),
            Student(name: "李四", birthday: "2001-03-15", score: "85", address: "上海市浦东新区世纪大道100号"),
            Student(name: "Hedon", birthday: "1999-11-11", score: "78", address: "Guangzhou Tianhe Road 208"),
            Student(name: "王五", birthday: "2002-07-07", score: "66", address: "北京市朝阳区建国路88号"),
            Student(name: "北京 Fan", birthday: "2003-03-03", score: "70", address: "Taipei"),
        ]
        for student in students { _ = try await register.create(student) }
        func names(_ text: String, _ scope: Scope) async throws -> Set<String> {
            let fields: [FieldPath]? =
                switch scope {
                case .all: nil
                case .name: [try FieldPath("name")]
                case .address: [try FieldPath("address")]
                }
            return Set(try await register.search(text: TextQuery(query: text, fields: fields)).values.map(\.name))
        }
        #expect(try await names("北京", .address) == ["张三", "王五"])
        #expect(try await names("北京", .name) == ["北京 Fan"])
        #expect(try await names("北京", .all) == ["张三", "王五", "北京 Fan"])
        #expect(try await names("hedon", .all) == ["Hedon"])
        #expect(try await names("TIANHE", .address) == ["Hedon"])
        #expect(try await register.count(text: TextQuery(query: "北京", fields: [try FieldPath("address")])) == 2)
    }

    struct CatalogueItem: Codable, Sendable, Equatable {
        var category: String
        var name: String
        var imageName: String
        var description: String
    }

    @Test(arguments: ServerStore.allCases) func catalogueSectionsAndDetail(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let catalogue = client.collection("pokemon_items", of: CatalogueItem.self)
        let items: [(String, String)] = [
            ("Ball", "poke-ball"), ("Ball", "great-ball"), ("Ball", "ultra-ball"), ("Ball", "master-ball"),
            ("Medicine", "antidote"), ("Medicine", "awakening"), ("Medicine", "full-restore"),
        ]
        for (category, name) in items {
            _ = try await catalogue.create(
                CatalogueItem(category: category, name: name, imageName: name, description: "About \(name) Pokémon"))
        }
        let sections = try await catalogue.group(by: "category")
        #expect(sections.map(\.key) == ["Ball", "Medicine"])
        #expect(sections.map(\.count) == [4, 3])
        #expect(Set(sections[1].records.map(\.value.name)) == ["antidote", "awakening", "full-restore"])
        let row = try #require(sections[0].records.first)
        let detail = try await catalogue.get(row.id)
        #expect(detail.value == row.value)
        #expect(detail.value.description.hasPrefix("About"))
    }
}
