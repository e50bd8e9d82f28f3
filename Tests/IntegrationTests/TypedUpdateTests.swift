import Foundation
import LarderClient
import LarderStore
import LarderTestThreads
import Testing

/// `LarderCollection.update`: an edit of a stored model goes out as a merge patch of only what changed, seen on the
/// wire through a proxy, and a stale one comes back as a CONFLICT holding the server's version.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TypedUpdateTests {
    struct Item: Codable, Sendable, Equatable {
        struct Maker: Codable, Sendable, Equatable {
            var name: String
            var city: String?
        }

        var name: String
        var price: Int
        var discount: Int?
        var tags: [String]
        var maker: Maker
    }

    static let ball = Item(
        name: "Poké Ball 精靈球", price: 200, discount: 10, tags: ["ball"], maker: .init(name: "Silph", city: "Saffron"))

    @Test(arguments: ServerStore.allCases) func anUpdateSendsOnlyWhatChanged(_ store: ServerStore) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let proxy = try RecordingProxy(upstream: server.port)
        defer { proxy.stop() }
        let client = LarderClient(port: proxy.port)
        let other = server.client()
        defer {
            client.close()
            other.close()
        }
        let items = client.collection("items", of: Item.self)
        let created = try await items.create(Self.ball)
        // A member this version of the app does not know, written by another: an update leaves it alone.
        _ = try await other.patch("items", id: created.id, patch: ["barcode": "4902370"])
        let stored = try await items.get(created.id)
        #expect(stored.rev == 2 && stored.value == Self.ball)

        let updated = try await items.update(stored) { item in
            item.price = 42
            item.discount = nil
            item.tags.append("sale")
            item.maker.city = "Celadon"
        }
        // On the wire: one PATCH, at the revision read, holding the changed members alone; the removed optional as
        // null, the nested object by its changed member, the array whole.
        let patches = proxy.sent(.patch)
        #expect(patches.count == 1)
        #expect(patches.first?["rev"] == 2 && patches.first?["id"] == .string(created.id.wireString))
        #expect(
            patches.first?["patch"]
                == ["price": 42, "discount": nil, "tags": ["ball", "sale"], "maker": ["city": "Celadon"]])
        #expect(proxy.sent(.replace).isEmpty)
        var expected = Self.ball
        expected.price = 42
        expected.discount = nil
        expected.tags = ["ball", "sale"]
        expected.maker.city = "Celadon"
        #expect(updated.value == expected && updated.rev == 3 && updated.id == created.id)
        #expect(updated.createdAt == created.createdAt && updated.updatedAt >= stored.updatedAt)
        let onServer = try await other.get("items", id: created.id)
        #expect(onServer.data["discount"] == nil && onServer.data["barcode"] == "4902370" && onServer.rev == 3)
        #expect(onServer.data["maker"] == ["name": "Silph", "city": "Celadon"])

        // An edit that changes nothing sends nothing and gives the stored value back.
        let before = proxy.requests.count
        let same = try await items.update(updated) { $0.price = 42 }
        #expect(same == updated)
        #expect(proxy.requests.count == before)
        // Setting the nested optional to nil removes it from the nested object alone.
        let cityless = try await items.update(updated) { $0.maker.city = nil }
        #expect(proxy.sent(.patch).last?["patch"] == ["maker": ["city": nil]])
        #expect(try await other.get("items", id: created.id).data["maker"] == ["name": "Silph"])
        #expect(cityless.value.maker == Item.Maker(name: "Silph", city: nil) && cityless.rev == 4)
    }

    @Test(arguments: ServerStore.allCases) func aStaleUpdateGetsTheTypedConflictWithTheServersVersion(
        _ store: ServerStore
    ) async throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let phone = server.client()
        let tablet = server.client()
        defer {
            phone.close()
            tablet.close()
        }
        let onPhone = phone.collection("items", of: Item.self)
        let onTablet = tablet.collection("items", of: Item.self)
        let read = try await onPhone.create(Self.ball)
        let tablets = try await onTablet.update(try await onTablet.get(read.id)) { $0.price = 150 }

        // The phone's copy is a revision behind: its edit is refused, and the error holds what the tablet wrote.
        do throws(LarderError) {
            _ = try await onPhone.update(read) { $0.discount = 20 }
            Issue.record("a stale update was applied")
        } catch {
            #expect(error.status == .conflict && error.field == "rev")
            #expect(error.details["currentRev"] == 2)
            let current = try #require(try error.currentVersion(as: Item.self))
            #expect(current == tablets)
            #expect(error.localizedDescription.contains("revision 2"))
            #expect(!error.localizedDescription.contains("Poké"), "the message never prints the document")
            // Edited again on the server's version, it goes through, and keeps the tablet's price.
            let merged = try await onPhone.update(current) { $0.discount = 20 }
            #expect(merged.value.price == 150 && merged.value.discount == 20 && merged.rev == 3)
        }
        #expect(try await onTablet.get(read.id).value.discount == 20)

        // A document deleted meanwhile is NOT_FOUND, not a conflict; other errors carry no version.
        try await phone.delete("items", id: read.id)
        let gone = await #expect(throws: LarderError.self) { _ = try await onTablet.update(tablets) { $0.price = 1 } }
        #expect(gone?.status == .notFound)
        #expect(try gone?.currentVersion(as: Item.self) == nil)
    }

    /// The patch an update computes, applied as the server applies merge patches, gives the edited document back.
    @Test func theDiffAppliedGivesTheEditedDocument() {
        let cases: [(JSONObject, JSONObject)] = [
            ([:], [:]),
            (["a": 1], ["a": 1]),
            (["a": 1], ["a": 2]),
            (["a": 1, "b": "x"], ["b": "x"]),
            (["a": ["b": 1, "c": 2]], ["a": ["b": 1, "c": 3, "d": 4]]),
            (["a": ["b": ["c": 1]]], ["a": ["b": [:]]]),
            (["a": ["b": 1]], ["a": 5]),
            (["a": 5], ["a": ["b": 1]]),
            (["a": [1, 2, 3]], ["a": [1, 2]]),
            (["a": [["x": 1]]], ["a": [["x": 2]]]),
            (["a": 1.5, "b": true], ["a": 1, "b": false, "c": "新"]),
        ]
        for (before, after) in cases {
            let patch = MergePatchDiff.diff(from: before, to: after)
            #expect(MergePatch.apply(patch, to: before) == after, "\(before) -> \(after): \(patch)")
            if before == after { #expect(patch.isEmpty) }
        }
        #expect(MergePatchDiff.diff(from: ["a": [1, 2]], to: ["a": [1, 2, 3]]) == ["a": [1, 2, 3]])
        #expect(MergePatchDiff.diff(from: ["a": ["b": 1, "c": 2]], to: ["a": ["b": 1]]) == ["a": ["c": nil]])
    }
}
