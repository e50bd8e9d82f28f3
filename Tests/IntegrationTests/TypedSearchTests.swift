import Foundation
import LarderClient
import LarderIO
import LarderSync
import LarderTestSupport
import LarderTestThreads
import Testing

/// A `larder-server` child on SQLite or on a PostgreSQL schema of its own, with a `RecordingProxy` in front: `client`
/// goes through the proxy, which notes what it sends; `direct` talks to the server itself.
final class ProxiedServer: Sendable {
    let directory: String
    let schema: TestSchema?
    let child: ServerChild
    let proxy: RecordingProxy
    /// A client straight to the server, not through the proxy.
    let direct: LarderClient
    /// A client through the proxy, which notes what it sends.
    let client: LarderClient

    init(_ store: ServerStore) throws {
        directory = NSTemporaryDirectory() + "larder-typed-\(UUID().uuidString)"
        schema = store == .postgres ? try TestPostgres.newSchema() : nil
        child = try ServerChild(dataDirectory: directory, arguments: schema.map { ["--postgres", $0.url] } ?? [])
        proxy = try RecordingProxy(upstream: child.port)
        direct = LarderClient(port: child.port, requestTimeout: .seconds(300))
        client = proxy.client()
    }

    func stop() {
        client.close()
        direct.close()
        proxy.stop()
        _ = child.stop()
        schema?.drop()
        try? FileManager.default.removeItem(atPath: directory)
        try? FileManager.default.removeItem(atPath: child.logPath)
    }
}

/// Every operator of the Swift query API sent to a real server, on both stores: the request on the wire is exactly
/// the JSON form of Protocol.md §5.2, and the records answered are those the JSON form, sent by hand, answers.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TypedQueryOperatorTests {
    struct Shop: Codable, Sendable, Equatable {
        struct Address: Codable, Sendable, Equatable {
            var zip: String?
            var city: String?
        }
        var name: String
        var category: String
        var price: Double
        var discount: Bool
        var nickname: String?
        var address: Address?
        var bought: Date
        var owner: UUID
        var note: String?
    }

    static let owners = [
        "3F2504E0-4F89-41D3-9A0C-0305E82C3301", "6BA7B810-9DAD-11D1-80B4-00C04FD430C8",
        "0E3B9A8C-2F4D-4E61-9C3A-7D8E9F0A1B2C",
    ]

    /// Six records as the CLI would write them (a null and a missing field, nested objects, Chinese text), with dates
    /// and UUIDs in the form a model's encoder stores.
    static let documents: [String] = [
        document(1, #""name":"鮪魚飯糰","category":"Food","price":35,"discount":true,"nickname":null"#, #"{"zip":"100"}"#),
        document(2, #""name":"poke-ball 精靈球","category":"Ball","price":20,"discount":false"#, #"{"city":"北京市海淀区"}"#),
        document(
            3, #""name":"great-ball","category":"Ball","price":60,"discount":true,"nickname":"great""#,
            #"{"zip":null}"#),
        document(4, #""name":"张三的藥水","category":"Medicine","price":49.5,"discount":false,"nickname":"张""#, nil),
        document(
            5, #""name":"antidote","category":"Medicine","price":50,"discount":true,"nickname":"anti""#,
            #"{"zip":"200","city":"上海"}"#),
        document(
            6, #""name":"Master Ball","category":"Ball","price":5000,"discount":false,"nickname":null"#,
            #"{"city":"北京"}"#, note: "張 not 张"),
    ]

    /// Document `n` (1 to 6): `members`, an `address` (unless nil), bought on the n-th of May 2024, by one of three
    /// owners in turn.
    static func document(_ n: Int, _ members: String, _ address: String?, note: String? = nil) -> String {
        var text = "{" + members
        if let address { text += #","address":\#(address)"# }
        text += #","bought":"2024-05-0\#(n)T08:00:00.000Z","owner":"\#(owners[ownerOf[n - 1]])""#
        if let note { text += #","note":"\#(note)""# }
        return text + "}"
    }

    /// Which of `owners` each document names.
    static let ownerOf = [0, 1, 0, 2, 1, 2]

    /// One query: the sequence an app writes, the first SEARCH it must send (compact JSON, members in order), and
    /// the record numbers (indexes into `documents`) expected, in order.
    struct Case {
        var name: String
        var sequence: RecordSequence<Shop>
        var request: String
        var expected: [Int]
    }

    static func leaf(_ field: String, _ op: String, _ value: String) -> String {
        #"{"field":"\#(field)","op":"\#(op)","value":\#(value)}"#
    }

    static func cases(_ shops: LarderCollection<Shop>, ids: [UUID], createdAt: [Int64]) -> [Case] {
        func filter(_ name: String, _ expression: FilterExpression, _ json: String, _ expected: [Int]) -> Case {
            Case(
                name: name, sequence: shops.search(expression),
                request: #"{"collection":"shops","filter":\#(json),"limit":100}"#, expected: expected)
        }
        let fourth = Date(timeIntervalSince1970: Double(createdAt[3]) / 1000)
        // Records created in the same millisecond as the fourth match too.
        let sinceFourth = createdAt.indices.filter { createdAt[$0] >= createdAt[3] }
        let may4 = Date(timeIntervalSince1970: 1_714_780_800)  // 2024-05-04T00:00:00Z
        return [
            filter("<", Field("price") < 50, leaf("price", "lt", "50"), [0, 1, 3]),
            filter("<=", Field("price") <= 50, leaf("price", "lte", "50"), [0, 1, 3, 4]),
            filter(">", Field("price") > 50, leaf("price", "gt", "50"), [2, 5]),
            filter(">= a double", Field("price") >= 49.5, leaf("price", "gte", "49.5"), [2, 3, 4, 5]),
            filter("== string", Field("category") == "Ball", leaf("category", "eq", #""Ball""#), [1, 2, 5]),
            filter("!= string", Field("category") != "Ball", leaf("category", "ne", #""Ball""#), [0, 3, 4]),
            filter("== bool", Field("discount") == true, leaf("discount", "eq", "true"), [0, 2, 4]),
            filter("== nil", Field("nickname") == nil, leaf("nickname", "eq", "null"), [0, 1, 5]),
            filter("!= nil", Field("nickname") != nil, leaf("nickname", "ne", "null"), [2, 3, 4]),
            filter("exists", Field("address.zip").exists, leaf("address.zip", "exists", "true"), [0, 2, 4]),
            filter("isMissing", Field("address.zip").isMissing, leaf("address.zip", "exists", "false"), [1, 3, 5]),
            filter(
                "!exists", !Field("address.zip").exists, #"{"not":\#(leaf("address.zip", "exists", "true"))}"#,
                [1, 3, 5]),
            filter(
                "in", Field("category").in(["Food", "Medicine"]), leaf("category", "in", #"["Food","Medicine"]"#),
                [0, 3, 4]),
            filter(
                "in with nil", Field("nickname").in(["great", nil]), leaf("nickname", "in", #"["great",null]"#),
                [0, 1, 2, 5]),
            filter("contains", Field("name").contains("张"), leaf("name", "contains", #""张""#), [3]),
            filter(
                "contains nested", Field("address.city").contains("北京"), leaf("address.city", "contains", #""北京""#),
                [1, 5]),
            filter("hasPrefix", Field("name").hasPrefix("poke"), leaf("name", "prefix", #""poke""#), [1]),
            filter(
                "&&", Field("price") < 50 && Field("discount") == true,
                #"{"and":[\#(leaf("price", "lt", "50")),\#(leaf("discount", "eq", "true"))]}"#, [0]),
            filter(
                "||", Field("category") == "Food" || Field("price") > 1000,
                #"{"or":[\#(leaf("category", "eq", #""Food""#)),\#(leaf("price", "gt", "1000"))]}"#, [0, 5]),
            filter(
                "!", !(Field("category") == "Ball"), #"{"not":\#(leaf("category", "eq", #""Ball""#))}"#, [0, 3, 4]),
            filter(
                "nested",
                (Field("category") == "Ball" || Field("category") == "Medicine") && !(Field("discount") == true)
                    && Field("price") < 100,
                #"{"and":[{"or":[\#(leaf("category", "eq", #""Ball""#)),\#(leaf("category", "eq", #""Medicine""#))]},"#
                    + #"{"not":\#(leaf("discount", "eq", "true"))},\#(leaf("price", "lt", "100"))]}"#, [1, 3]),
            filter("Date", Field("bought") >= may4, leaf("bought", "gte", #""2024-05-04T00:00:00.000Z""#), [3, 4, 5]),
            filter(
                "UUID", Field("owner") == UUID(uuidString: owners[0])!, leaf("owner", "eq", #""\#(owners[0])""#),
                [0, 2]),
            filter("$id", Field("$id") == ids[3], leaf("$id", "eq", #""\#(ids[3].uuidString)""#), [3]),
            filter("$rev", Field("$rev") > 1, leaf("$rev", "gt", "1"), [4]),
            filter(
                "$createdAt", Field("$createdAt") >= fourth, leaf("$createdAt", "gte", "\(createdAt[3])"), sinceFourth),
            Case(
                name: "containing, whole record", sequence: shops.search(containing: "张"),
                request: #"{"collection":"shops","text":{"query":"张"},"limit":100}"#, expected: [3, 5]),
            Case(
                name: "containing in fields", sequence: shops.search(containing: "北京", in: [Field("address")]),
                request: #"{"collection":"shops","text":{"query":"北京","fields":["address"]},"limit":100}"#,
                expected: [1, 5]),
            Case(
                name: "descending",
                sequence: shops.search(Field("discount") == false, sortedBy: [Field("price").descending]),
                request: #"{"collection":"shops","filter":\#(leaf("discount", "eq", "false")),"#
                    + #""sort":[{"field":"price","order":"desc"}],"limit":100}"#, expected: [5, 3, 1]),
            Case(
                name: "two keys and a limit",
                sequence: shops.search(sortedBy: [Field("category").ascending, Field("price").descending], limit: 4),
                request: #"{"collection":"shops","sort":[{"field":"category","order":"asc"},"#
                    + #"{"field":"price","order":"desc"}],"limit":4}"#, expected: [5, 2, 1, 0]),
            Case(
                name: "ascending in pages of 2",
                sequence: shops.search(Field("price") > 0, sortedBy: [Field("name").ascending], pageSize: 2),
                request: #"{"collection":"shops","filter":\#(leaf("price", "gt", "0")),"#
                    + #""sort":[{"field":"name","order":"asc"}],"limit":2}"#, expected: [5, 4, 2, 1, 3, 0]),
        ]
    }

    @Test(arguments: ServerStore.allCases) func everyOperatorSendsItsJSONFormAndAnswersWhatThatAnswers(
        _ store: ServerStore
    ) async throws {
        let server = try ProxiedServer(store)
        defer { server.stop() }
        let (direct, client) = (server.direct, server.client)
        var ids: [UUID] = []
        var createdAt: [Int64] = []
        for document in Self.documents {
            let record = try await direct.create("shops", try JSONParser.parseObject(Array(document.utf8)))
            ids.append(record.id)
            createdAt.append(record.createdAtMs)
        }
        _ = try await direct.patch("shops", id: ids[4], patch: ["note": "patched"])
        let shops = client.collection("shops", of: Shop.self)

        for test in Self.cases(shops, ids: ids, createdAt: createdAt) {
            server.proxy.clear()
            let typed = try await test.sequence.collect()
            let sent = server.proxy.sent(.search)
            try #require(!sent.isEmpty, "\(test.name): no SEARCH went out")
            #expect(String(decoding: JSON.object(sent[0]).bytes, as: UTF8.self) == test.request, "\(test.name)")
            // Later pages send the same query with the previous page's cursor.
            for (n, request) in sent.enumerated().dropFirst() {
                var same = request
                #expect(same["cursor"]?.stringValue != nil, "\(test.name): page \(n + 1) has no cursor")
                same["cursor"] = nil
                #expect(same == sent[0], "\(test.name): page \(n + 1) asks another query")
            }
            // The JSON form, sent by hand for the same records at once.
            var raw = try JSONParser.parseObject(Array(test.request.utf8))
            if raw["limit"] != 4 { raw["limit"] = 1000 }
            let answer = try PageResponse(json: try await direct.request(.search, json: raw).json)
            #expect(typed.map(\.id) == answer.records.map(\.id), "\(test.name)")
            #expect(typed.map(\.id) == test.expected.map { ids[$0] }, "\(test.name)")
            #expect(typed.map(\.value.name) == test.expected.map { Self.name(Self.documents[$0]) }, "\(test.name)")
        }
    }

    static func name(_ document: String) -> String {
        (try? JSONParser.parseObject(Array(document.utf8)))?["name"]?.stringValue ?? "?"
    }

    @Test func anInvalidFieldIsThrownByTheSearchAndNothingIsSent() async throws {
        let server = try ProxiedServer(.sqlite)
        defer { server.stop() }
        let client = server.client
        _ = try await client.ping()
        let shops = client.collection("shops", of: Shop.self)
        for sequence in [
            shops.search(Field("") == 1), shops.search(Field("price") < 50 && Field("a..b").exists),
            shops.search(sortedBy: [Field("$nope").descending]), shops.search(containing: "x", in: [Field(".x")]),
        ] {
            let error = await #expect(throws: LarderError.self) { _ = try await sequence.collect() }
            #expect(error?.status == .invalidArgument, "\(String(describing: error))")
            #expect(error?.message.contains("Field(") == true, "\(String(describing: error))")
        }
        #expect(server.proxy.sent(.search).isEmpty)
    }
}

/// Typed results as `AsyncSequence`s on both stores: every page followed across writes, cancellation, records that
/// do not decode, and cursors given back.
@Suite(.ownThreads, .timeLimit(.minutes(30))) struct TypedPagingTests {
    struct Numbered: Codable, Sendable {
        var n: Int
        var price: Int
    }

    /// Creates `count` records `{n, price}` with prices that tie often (n % 97), 250 requests in flight at a time.
    static func create(_ count: Int, from start: Int = 0, in collection: String, _ client: LarderClient) async throws
        -> [UUID]
    {
        var ids: [UUID] = []
        var next = start
        while next < start + count {
            let chunk = next..<min(start + count, next + 250)
            ids += try await withThrowingTaskGroup(of: (Int, UUID).self) { group in
                for n in chunk {
                    group.addTask {
                        (n, try await client.create(collection, ["n": .int(Int64(n)), "price": .int(Int64(n % 97))]).id)
                    }
                }
                var made: [(Int, UUID)] = []
                for try await pair in group { made.append(pair) }
                return made.sorted { $0.0 < $1.0 }.map(\.1)
            }
            next = chunk.upperBound
        }
        return ids
    }

    @Test(arguments: ServerStore.allCases) func everyPageIsFollowedAcrossInsertsAndDeletesWithoutSkipsOrRepeats(
        _ store: ServerStore
    ) async throws {
        let server = try ProxiedServer(store)
        defer { server.stop() }
        let (direct, client) = (server.direct, server.client)
        let items = client.collection("items", of: Numbered.self)
        var present = Set(try await Self.create(2500, in: "items", direct))
        var rng = SplitMix64(seed: store == .sqlite ? 31 : 32)
        var nextN = 10_000

        let passes: [(String, Int, RecordSequence<Numbered>)] = [
            (
                "price descending", 100,
                items.search(Field("n") >= 0, sortedBy: [Field("price").descending], pageSize: 100)
            ),
            ("id order", 100, items.search(pageSize: 100)),
            (
                "price ascending, n descending", 150,
                items.search(sortedBy: [Field("price").ascending, Field("n").descending], pageSize: 150)
            ),
        ]
        for (name, pageSize, sequence) in passes {
            server.proxy.clear()
            var seen: [UUID] = []
            var seenSet: Set<UUID> = []
            var deletedUnseen: Set<UUID> = []
            var deleted: Set<UUID> = []
            var inserted: Set<UUID> = []
            let atStart = present
            for try await record in sequence {
                seen.append(record.id)
                seenSet.insert(record.id)
                // The last record of a page: the next is requested when the loop asks for another. Meanwhile
                // delete three records not seen yet and two seen, and insert five with prices on both sides of the
                // position reached.
                guard seen.count % pageSize == 0 else { continue }
                let unseen = atStart.subtracting(seenSet).subtracting(deleted)
                for id in unseen.shuffled(using: &rng).prefix(3) {
                    try await direct.delete("items", id: id)
                    deleted.insert(id)
                    deletedUnseen.insert(id)
                }
                for id in seenSet.subtracting(deleted).shuffled(using: &rng).prefix(2) {
                    try await direct.delete("items", id: id)
                    deleted.insert(id)
                }
                for _ in 0..<5 {
                    let price = Int(rng.below(97))
                    let id = try await direct.create("items", ["n": .int(Int64(nextN)), "price": .int(Int64(price))]).id
                    nextN += 1
                    inserted.insert(id)
                }
            }
            #expect(seen.count == seenSet.count, "\(name): \(seen.count - seenSet.count) records came twice")
            let throughout = atStart.subtracting(deleted)
            let missed = throughout.subtracting(seenSet)
            #expect(missed.isEmpty, "\(name): \(missed.count) records there throughout were skipped")
            #expect(seenSet.isDisjoint(with: deletedUnseen), "\(name): a record deleted before its page came")
            #expect(seenSet.isSubset(of: atStart.union(inserted)), "\(name): a record that never existed came")
            #expect(throughout.count > 2000)
            // The records came from many pages, each after the first continuing from a cursor.
            let searches = server.proxy.sent(.search)
            #expect(searches.count >= throughout.count / 150, "\(name): \(searches.count) pages")
            #expect(searches.first?["cursor"] == nil)
            #expect(searches.dropFirst().allSatisfy { $0["cursor"]?.stringValue != nil }, "\(name)")
            present = atStart.union(inserted).subtracting(deleted)
        }
        // The whole collection, in creation order, with `all()`.
        let all = try await items.all()
        #expect(Set(all.map(\.id)) == present)
        #expect(all.count == present.count)
    }

    /// Runs a loop over `sequence` in a task that cancels itself after taking `cancelAfter` records; answers how
    /// many it took and what the loop threw.
    static func takeThenCancel(_ sequence: RecordSequence<Numbered>, cancelAfter: Int) async -> (Int, LarderError?) {
        await Task { () -> (Int, LarderError?) in
            var taken = 0
            do throws(LarderError) {
                for try await _ in sequence {
                    taken += 1
                    if taken == cancelAfter { withUnsafeCurrentTask { $0?.cancel() } }
                }
                return (taken, nil)
            } catch {
                return (taken, error)
            }
        }.value
    }

    /// SEARCH requests the server has answered so far (STATS is exact for answered requests).
    static func searchesAnswered(_ client: LarderClient) async throws -> Int64 {
        let stats = try await client.stats()
        return stats["requests"]?.objectValue?["byOpcode"]?.objectValue?["SEARCH"]?.objectValue?["count"]?.intValue
            ?? 0
    }

    @Test(arguments: ServerStore.allCases) func aCancelledTaskRequestsNoFurtherPage(_ store: ServerStore) async throws {
        let server = try ProxiedServer(store)
        defer { server.stop() }
        let (direct, client) = (server.direct, server.client)
        _ = try await Self.create(500, in: "items", direct)
        let items = client.collection("items", of: Numbered.self)
        let sequence = items.search(Field("n") >= 0, pageSize: 100)
        var answered = try await Self.searchesAnswered(direct)

        for cancelAfter in [200, 150, 1] {
            server.proxy.clear()
            let (taken, error) = await Self.takeThenCancel(sequence, cancelAfter: cancelAfter)
            #expect(taken == cancelAfter)
            #expect(error?.status == .deadlineExceeded, "\(String(describing: error))")
            #expect(error?.message.contains("cancelled") == true, "\(String(describing: error))")
            // A PING on the same connection: once it is answered, every request sent before it was seen.
            _ = try await client.ping()
            let pages = (cancelAfter + 99) / 100
            #expect(server.proxy.sent(.search).count == pages, "cancelled after \(cancelAfter)")
            let now = try await Self.searchesAnswered(direct)
            #expect(now - answered == Int64(pages), "cancelled after \(cancelAfter)")
            answered = now
        }

        // Not cancelled, the same loop reads every page.
        server.proxy.clear()
        let (taken, error) = await Self.takeThenCancel(sequence, cancelAfter: 0)
        #expect(taken == 500 && error == nil)
        #expect(server.proxy.sent(.search).count >= 5)
        // A loop that breaks early requests no more pages either.
        server.proxy.clear()
        for try await record in sequence where record.value.n >= 0 { break }
        _ = try await client.ping()
        #expect(server.proxy.sent(.search).count == 1)
    }

    struct Todo: Codable, Sendable, Equatable {
        var title: String
        var isFinish: Bool
    }

    @Test(arguments: ServerStore.allCases) func aRecordThatDoesNotDecodeIsReportedAndTheOthersStillCome(
        _ store: ServerStore
    ) async throws {
        let server = try ProxiedServer(store)
        defer { server.stop() }
        let (direct, client) = (server.direct, server.client)
        // As the CLI (or an older app) writes them: a title that is a number, and a record without a title.
        var ids: [UUID] = []
        for data: JSONObject in [
            ["title": "Buy milk", "isFinish": false], ["title": "買牛奶", "isFinish": true],
            ["title": 42, "isFinish": false], ["title": "Call mum", "isFinish": false], ["isFinish": true],
            ["title": "Water plants", "isFinish": true],
        ] {
            ids.append(try await direct.create("todos", data).id)
        }
        let good = [ids[0], ids[1], ids[3], ids[5]]
        let bad = [ids[2], ids[4]]
        let todos = client.collection("todos", of: Todo.self)

        func check(_ undecodable: [UndecodableRecord], _ context: String) {
            #expect(undecodable.map(\.id) == bad, "\(context)")
            #expect(undecodable.allSatisfy { $0.error.status == .decodingFailed }, "\(context)")
            #expect(undecodable.map(\.error.field) == ["title", "title"], "\(context)")
            #expect(undecodable.first?.record.data["title"] == 42, "\(context)")
            #expect(undecodable.allSatisfy { $0.description.contains($0.id.wireString) }, "\(context)")
        }

        let listed = try await todos.list(limit: 10)
        #expect(listed.records.map(\.id) == good)
        #expect(listed.values.map(\.title) == ["Buy milk", "買牛奶", "Call mum", "Water plants"])
        check(listed.undecodable, "list")

        let searched = try await todos.search(filter: .compare(try FieldPath("$rev"), .eq, 1))
        #expect(searched.records.map(\.id) == good)
        check(searched.undecodable, "search")

        // As a sequence, in pages of 2 (an undecodable record at either end of a page).
        let reported = Locked<[UndecodableRecord]>([])
        let records = try await todos.search(Field("$rev") == 1, pageSize: 2)
            .onUndecodable { failure in reported.withLock { $0.append(failure) } }
            .collect()
        #expect(records.map(\.id) == good)
        check(reported.withLock { $0 }, "onUndecodable")

        var pageFailures: [UndecodableRecord] = []
        var pageRecords: [UUID] = []
        for try await page in todos.search(pageSize: 2).pages {
            pageRecords += page.records.map(\.id)
            pageFailures += page.undecodable
        }
        #expect(pageRecords == good)
        check(pageFailures, "pages")

        let all = Locked<[UndecodableRecord]>([])
        #expect(try await todos.all { failure in all.withLock { $0.append(failure) } }.map(\.id) == good)
        check(all.withLock { $0 }, "all")
    }

    @Test(arguments: ServerStore.allCases) func aTypedSearchContinuesFromACursor(_ store: ServerStore) async throws {
        let server = try ProxiedServer(store)
        defer { server.stop() }
        let (direct, client) = (server.direct, server.client)
        _ = try await Self.create(30, in: "items", direct)
        let items = client.collection("items", of: Numbered.self)
        let everything = try await items.search(Field("n") < 25, sortedBy: [Field("price").descending]).collect()
        #expect(everything.count == 25)

        // The page-returning search takes the cursor of its previous page.
        let filter = Filter.compare(try FieldPath("n"), .lt, 25)
        let sort = [SortKey(field: try FieldPath("price"), descending: true)]
        let first = try await items.search(filter: filter, sort: sort, limit: 10)
        let second = try await items.search(filter: filter, sort: sort, limit: 10, cursor: first.nextCursor)
        #expect((first.records + second.records).map(\.id) == everything.prefix(20).map(\.id))

        // So does the sequence, and its `page()` gives one page.
        let query = items.search(Field("n") < 25, sortedBy: [Field("price").descending], pageSize: 10)
        let page = try await query.page()
        #expect(page.records.map(\.id) == first.records.map(\.id))
        let rest = try await items.search(
            Field("n") < 25, sortedBy: [Field("price").descending], pageSize: 7, cursor: page.nextCursor
        ).collect()
        #expect(rest.map(\.id) == everything.dropFirst(10).map(\.id))
        // A cursor of another query is refused, not answered with a page of something else.
        let other = await #expect(throws: LarderError.self) {
            _ = try await items.search(Field("n") < 24, cursor: page.nextCursor).collect()
        }
        #expect(other?.status == .invalidArgument && other?.field == "cursor", "\(String(describing: other))")
    }
}
