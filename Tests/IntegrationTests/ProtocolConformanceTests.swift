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

/// Answers checked against Protocol.md through a real server socket: each test names the rule it holds
/// the server to, and fails on the answer the server gave before.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ProtocolConformanceTests {
    /// Section 4: PING's JSON part is empty in both directions, before HELLO and after it.
    @Test func pingAnswersAnEmptyJSONPart() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            let before = try c.call(.ping)
            #expect(before.status == .ok && before.json.isEmpty, "\(before.replyText)")
            try c.hello(compression: [])
            let after = try c.call(.ping)
            #expect(after.status == .ok && after.json.isEmpty, "\(after.replyText)")
        }
    }

    /// Sends `json` as written (so the server's tree-free readers see it as a client wrote it) and returns the answer.
    static func raw(_ c: RawClient, _ opcode: Opcode, _ json: String, binary: [UInt8] = []) throws -> Frame {
        try c.writeAll(HostileFrames.request(opcode, json, binary: binary))
        guard let frame = try c.receive() else { throw ServerTestError("closed awaiting \(opcode.name)") }
        return frame
    }

    /// The error object of an error answer.
    static func error(_ frame: Frame) -> JSONObject { frame.replyJSON.objectValue ?? [:] }

    /// Section 5.5: `field` is the request member at fault, so a stale revision names `rev` (it named `expectedRev`,
    /// which no request has) on every write that takes one, through the tree-free CREATE/REPLACE reader as well.
    @Test func aStaleRevisionNamesRev() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello(compression: [])
            let created = try c.call(.create, ["collection": "items", "data": ["n": 1]])
            let id = try Record(json: created.jsonObject()).id
            let replace = #"{"collection":"items","id":"\#(id.wireString)","data":{"n":2},"rev":7}"#
            let patch = #"{"collection":"items","id":"\#(id.wireString)","patch":{"n":2},"rev":7}"#
            let delete = #"{"collection":"items","id":"\#(id.wireString)","rev":7}"#
            // The same REPLACE with a space: the general reader (the tree-free one takes only the plain form).
            let spaced = #"{"collection": "items", "id": "\#(id.wireString)", "data": {"n": 2}, "rev": 7}"#
            for (opcode, json) in [(Opcode.replace, replace), (.replace, spaced), (.patch, patch), (.delete, delete)] {
                let answer = try Self.raw(c, opcode, json)
                #expect(answer.status == .conflict, "\(opcode.name): \(answer.replyText)")
                #expect(Self.error(answer)["field"] == "rev", "\(opcode.name): \(answer.replyText)")
                #expect(Self.error(answer)["currentRev"] == 1, "\(opcode.name): \(answer.replyText)")
            }
        }
    }

    /// Sections 5.5 and 6: PAYLOAD_TOO_LARGE carries `limit` for a document over `maxDocumentBytes` (CREATE on both
    /// readers, REPLACE, a PATCH whose result is over it) and names the member the document came from; the
    /// connection stays open. A blob over `maxBlobBytes` is refused at the header, with `limit`, and closes.
    @Test func aDocumentOverTheLimitCarriesTheLimit() throws {
        let limit = 1000
        let limits: (inout ServerConfiguration) -> Void = {
            $0.limits.maxDocumentBytes = limit
            $0.limits.maxBlobBytes = 4096
            $0.limits.maxJSONBytes = 9216  // answers carry 1 KiB of records (8 KiB kept for what wraps them)
        }
        try withServerWithoutListener(limits) { server in
            let c = try RawClient.connected(to: server)
            try c.hello(compression: [])
            let half = String(repeating: "h", count: 600)
            let first = try c.call(.create, ["collection": "items", "data": ["a": .string(half)]])
            let id = try Record(json: first.jsonObject()).id.wireString
            let big = String(repeating: "b", count: 1200)
            let cases: [(String, Opcode, String, String)] = [
                ("CREATE", .create, #"{"collection":"items","data":{"a":"\#(big)"}}"#, "data"),
                ("CREATE, general reader", .create, #"{"collection": "items", "data": {"a": "\#(big)"}}"#, "data"),
                ("REPLACE", .replace, #"{"collection":"items","id":"\#(id)","data":{"a":"\#(big)"}}"#, "data"),
                ("PATCH", .patch, #"{"collection":"items","id":"\#(id)","patch":{"b":"\#(half)"}}"#, "patch"),
            ]
            for (name, opcode, json, field) in cases {
                let answer = try Self.raw(c, opcode, json)
                #expect(answer.status == .payloadTooLarge, "\(name): \(answer.replyText)")
                #expect(Self.error(answer)["limit"] == .int(Int64(limit)), "\(name): \(answer.replyText)")
                #expect(Self.error(answer)["field"] == .string(field), "\(name): \(answer.replyText)")
            }
            #expect(try c.call(.ping).status == .ok)

            // GET_MANY of records that together pass what one answer carries: PAYLOAD_TOO_LARGE with its limit.
            var ids: [JSON] = []
            for _ in 0..<3 {
                let created = try c.call(.create, ["collection": "many", "data": ["a": .string(String(half.prefix(590)))]])
                ids.append(.string(try Record(json: created.jsonObject()).id.wireString))
            }
            let many = try c.call(.getMany, ["collection": "many", "ids": .array(ids)])
            #expect(many.status == .payloadTooLarge, "\(many.replyText)")
            #expect(Self.error(many)["field"] == "ids" && Self.error(many)["limit"]?.intValue ?? 0 > 0)

            let blob = try RawClient.connected(to: server)
            try blob.hello(compression: [])
            try blob.writeAll(HostileFrames.request(.blobPut, "{}", binary: Array(repeating: 0xFF, count: 5000)))
            let frames = try blob.framesUntilClosed()
            #expect(frames.map(\.status) == [.payloadTooLarge])
            #expect(frames.first.flatMap { Self.error($0)["limit"] } == .int(4096))
        }
    }

    /// Section 5.4: errors about `attach` name its members as `attach.…` (a bad collection named
    /// `attachTo.collection`, a missing document `attachTo`).
    @Test func blobPutErrorsNameAttach() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello(compression: [])
            let jpeg = try ServerFixtures.data("rocket.jpg")
            let badName = try c.call(.blobPut, ["attach": ["collection": "9 bad", "id": .string(UUID().wireString)]],
                binary: jpeg)
            #expect(badName.status == .invalidArgument)
            #expect(Self.error(badName)["field"] == "attach.collection", "\(badName.replyText)")
            let missing = try c.call(.blobPut, ["attach": ["collection": "items", "id": .string(UUID().wireString)]],
                binary: jpeg)
            #expect(missing.status == .notFound)
            #expect(Self.error(missing)["field"] == "attach.id", "\(missing.replyText)")
            let extra = try c.call(.blobPut, ["attach": ["collection": "items", "id": .string(UUID().wireString),
                "extra": 1]], binary: jpeg)
            #expect(Self.error(extra)["field"] == "attach.extra", "\(extra.replyText)")
        }
    }

    /// The nextCursor of a page, which must be there.
    static func cursor(_ frame: Frame) throws -> String {
        guard case .string(let cursor)? = frame.replyJSON["nextCursor"] else {
            throw ServerTestError("no nextCursor in \(frame.replyText)")
        }
        return cursor
    }

    /// Section 5.2: a cursor continues only the query that issued it. A SEARCH cursor on another collection or with
    /// another filter, text or sort, a LIST cursor given to SEARCH and the reverse, a LIST cursor of another
    /// collection, a BLOB_LIST cursor of another attachment: each is INVALID_ARGUMENT naming `cursor`, never a page
    /// of something else (a LIST cursor of another collection skipped this one's documents; a SEARCH cursor of
    /// another filter was taken). A different `limit` is the same query.
    @Test func aCursorContinuesOnlyTheQueryThatIssuedIt() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello(compression: [])
            var first: UUID?
            for collection in ["a", "b"] {
                for n in 0..<5 {
                    let data: JSONObject = ["n": .int(Int64(n))]
                    let created = try c.call(.create, ["collection": .string(collection), "data": .object(data)])
                    if first == nil { first = try Record(json: created.jsonObject()).id }
                }
            }
            let jpeg = try ServerFixtures.data("rocket.jpg")
            let attach: JSON = ["collection": "a", "id": .string(first!.wireString)]
            for _ in 0..<2 { #expect(try c.call(.blobPut, ["attach": attach], binary: jpeg).status == .ok) }
            for _ in 0..<2 { #expect(try c.call(.blobPut, [:], binary: jpeg).status == .ok) }

            let sort: JSON = [["field": "n"]]
            let filter: JSON = ["field": "n", "op": "gte", "value": 0]
            let search = try Self.cursor(
                c.call(.search, ["collection": "a", "sort": sort, "filter": filter, "limit": 2]))
            let list = try Self.cursor(c.call(.list, ["collection": "b", "limit": 2]))
            let blobs = try Self.cursor(c.call(.blobList, ["limit": 1]))
            let attached = try Self.cursor(c.call(.blobList, ["limit": 1, "attachedTo": attach]))

            let misuses: [(String, Opcode, JSONObject)] = [
                ("SEARCH cursor, other collection", .search,
                 ["collection": "b", "sort": sort, "filter": filter, "cursor": .string(search)]),
                ("SEARCH cursor, other filter", .search,
                 ["collection": "a", "sort": sort, "filter": ["field": "n", "op": "gte", "value": 1],
                  "cursor": .string(search)]),
                ("SEARCH cursor, no filter", .search, ["collection": "a", "sort": sort, "cursor": .string(search)]),
                ("SEARCH cursor, other sort", .search,
                 ["collection": "a", "sort": [["field": "n", "order": "desc"]], "filter": filter,
                  "cursor": .string(search)]),
                ("SEARCH cursor, with text", .search,
                 ["collection": "a", "sort": sort, "filter": filter, "text": ["query": "x"],
                  "cursor": .string(search)]),
                ("LIST cursor to SEARCH", .search, ["collection": "b", "cursor": .string(list)]),
                ("SEARCH cursor to LIST", .list, ["collection": "a", "cursor": .string(search)]),
                ("LIST cursor, other collection", .list, ["collection": "a", "cursor": .string(list)]),
                ("BLOB_LIST cursor to LIST", .list, ["collection": "a", "cursor": .string(blobs)]),
                ("LIST cursor to BLOB_LIST", .blobList, ["cursor": .string(list)]),
                ("BLOB_LIST cursor, other attachment", .blobList, ["cursor": .string(blobs), "attachedTo": attach]),
                ("BLOB_LIST cursor of an attachment, all blobs", .blobList, ["cursor": .string(attached)]),
                ("not a cursor", .search, ["collection": "a", "cursor": "bm90IGEgY3Vyc29y"]),
            ]
            for (name, opcode, json) in misuses {
                let answer = try c.call(opcode, json)
                #expect(answer.status == .invalidArgument, "\(name): \(answer.replyText)")
                #expect(Self.error(answer)["field"] == "cursor", "\(name): \(answer.replyText)")
            }
            let onward = try c.call(
                .search, ["collection": "a", "sort": sort, "filter": filter, "limit": 3, "cursor": .string(search)])
            #expect(onward.status == .ok, "\(onward.replyText)")
            #expect(try PageResponse(json: onward.jsonObject()).records.count == 3)
            #expect(try c.call(.list, ["collection": "b", "limit": 3, "cursor": .string(list)]).status == .ok)
            #expect(try c.call(.blobList, ["cursor": .string(blobs)]).status == .ok)
            #expect(try c.call(.blobList, ["cursor": .string(attached), "attachedTo": attach]).status == .ok)
        }
    }

    /// Section 5.2 over the wire: values sort strings, then arrays, then objects; `desc` reverses a key's
    /// whole order, so null and missing come last, while the id tie-break stays ascending; GROUP's sections come in
    /// the ascending sort order, 1 and 1.0 sharing one, `true` apart from 1.
    @Test func mixedKindsSortAndGroupAsTheSpecSays() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            try c.hello(compression: [])
            let values: [JSON?] = ["1", "[", "a", "{z", [0], [1], ["k": 1], nil, .null, nil, .null, true, 1, 1.0]
            var created: [(value: JSON?, id: UUID)] = []
            for value in values {
                let answer = try c.call(.create, ["collection": "m", "data": .object(value.map { ["v": $0] } ?? [:])])
                created.append((value, try Record(json: answer.jsonObject()).id))
            }
            func ids(_ test: (JSON?) -> Bool) -> [UUID] {
                created.filter { test($0.value) }.map(\.id).sorted { $0.wireString < $1.wireString }
            }
            let nullOrMissing = ids { $0 == nil || $0 == .null }
            let one = ids { $0 == true || $0 == 1 || $0 == 1.0 }
            let ordered: [JSON] = ["1", "[", "a", "{z", [0], [1], ["k": 1]]
            func sorted(_ order: String) throws -> [Record] {
                let answer = try c.call(.search, ["collection": "m", "sort": [["field": "v", "order": .string(order)]]])
                return try PageResponse(json: answer.jsonObject()).records
            }
            let ascending = try sorted("asc")
            #expect(ascending.prefix(4).map(\.id) == nullOrMissing, "null and missing first, ids ascending")
            #expect(ascending.dropFirst(4).prefix(3).map(\.id) == one, "true, 1 and 1.0 tie: ids ascending")
            #expect(ascending.dropFirst(7).map { $0.data["v"] } == ordered)
            let descending = try sorted("desc")
            #expect(descending.prefix(7).map { $0.data["v"] } == ordered.reversed())
            #expect(descending.dropFirst(7).prefix(3).map(\.id) == one, "ties stay ids ascending in desc")
            #expect(descending.suffix(4).map(\.id) == nullOrMissing, "null and missing last, ids ascending")

            let group = try GroupResponse(json: c.call(.group, ["collection": "m", "field": "v"]).jsonObject())
            #expect(group.groups.map(\.key) == [.null, true, 1] + ordered)
            #expect(group.groups.map(\.count) == [4, 1, 2, 1, 1, 1, 1, 1, 1, 1])
        }
    }

    /// `levels` nested objects, the outermost first: `{"a":{"a":…{}}}`.
    static func nested(_ levels: Int) -> String {
        String(repeating: #"{"a":"#, count: levels - 1) + "{}" + String(repeating: "}", count: levels - 1)
    }

    /// Section 2: a request nests at most 64 levels, the outer object being level 1 and arrays counting as objects
    /// do, so a document (level 2 of its request) has at most 63 of its own, on both CREATE readers and in a PATCH.
    /// Answers carry such a document deeper (a GROUP answer 5 levels down): the client library reads them all.
    @Test func sixtyFourLevelsCountingTheOuterObjectAndArrays() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let c = try RawClient.tcp(port: server.port)
        try c.hello(compression: [])
        let deepest = Self.nested(63)
        let arrays = #"{"a":"# + String(repeating: "[", count: 62) + String(repeating: "]", count: 62) + "}"
        let accepted = [
            #"{"collection":"deep","data":\#(deepest)}"#, #"{"collection": "deep", "data": \#(deepest)}"#,
            #"{"collection":"arrays","data":\#(arrays)}"#,
        ]
        for json in accepted {
            let answer = try Self.raw(c, .create, json)
            #expect(answer.status == .ok, "\(answer.replyText.prefix(200))")
        }
        let tooDeep = [
            #"{"collection":"deep","data":\#(Self.nested(64))}"#,
            #"{"collection": "deep", "data": \#(Self.nested(64))}"#,
            #"{"collection":"deep","data":{"a":\#(String(repeating: "[", count: 63))\#(String(repeating: "]", count: 63))}}"#,
            #"{"collection":"deep","id":"\#(UUID().wireString)","patch":\#(Self.nested(64))}"#,
        ]
        for json in tooDeep {
            let answer = try Self.raw(c, json.contains("patch") ? .patch : .create, json)
            #expect(answer.status == .invalidArgument, "\(answer.replyText)")
            #expect(answer.replyText.contains("64"), "\(answer.replyText)")
        }
        for collection in ["deep", "arrays"] {
            let group = try c.call(.group, ["collection": .string(collection), "field": "x"])
            #expect(try GroupResponse(json: group.jsonObject()).groups.first?.count == (collection == "deep" ? 2 : 1))
        }

        let client = server.client()
        defer { client.close() }
        _ = try await client.connect()
        for collection in ["deep", "arrays"] {
            let page = try await client.search(collection, SearchQuery(limit: 10))
            #expect(!page.records.isEmpty)
            #expect(try await client.get(collection, id: page.records[0].id) == page.records[0])
            #expect(try await client.group(collection, by: "x").groups.first?.records.count == page.records.count)
        }
        let typed = try await client.collection("deep", of: Deep.self).search(SearchQuery(limit: 10))
        #expect(typed.records.count == 2)
    }

    /// A model as deep as a document may be, for the typed client's reader.
    final class Deep: Codable, Sendable {
        let a: Deep?
    }

    /// Section 2: a lone surrogate escape is invalid JSON wherever it appears (both CREATE readers, a member name, a
    /// PATCH, a filter value, HELLO); an escaped pair is stored as the character's UTF-8.
    @Test func loneSurrogateEscapesAreInvalidJSON() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            let hello = try Self.raw(c, .hello, #"{"versions":[1],"client":"x\ud800"}"#)
            #expect(hello.status == .invalidArgument, "\(hello.replyText)")
            try c.hello(compression: [])
            let id = try Record(json: c.call(.create, ["collection": "s", "data": [:]]).jsonObject()).id.wireString
            let cases: [(Opcode, String)] = [
                (.create, #"{"collection":"s","data":{"t":"\ud800"}}"#),
                (.create, #"{"collection": "s", "data": {"t": "\ud800"}}"#),
                (.create, #"{"collection":"s","data":{"t":"\udc00"}}"#),
                (.create, #"{"collection":"s","data":{"t":"\ud800\u0041"}}"#),
                (.create, #"{"collection":"s","data":{"t":"\ud800x"}}"#),
                (.create, #"{"collection":"s","data":{"t":"\ude00\ud83d"}}"#),
                (.create, #"{"collection":"s","data":{"\ud800":1}}"#),
                (.patch, #"{"collection":"s","id":"\#(id)","patch":{"t":"a\udbff"}}"#),
                (.search, #"{"collection":"s","filter":{"field":"t","op":"eq","value":"\udfff"}}"#),
            ]
            for (opcode, json) in cases {
                let answer = try Self.raw(c, opcode, json)
                #expect(answer.status == .invalidArgument, "\(json): \(answer.replyText)")
                #expect(answer.replyText.contains("surrogate"), "\(json): \(answer.replyText)")
            }
            let pairs = [
                #"{"collection":"s","data":{"t":"\ud83d\ude00"}}"#,
                #"{"collection": "s", "data": {"t": "\uD83D\uDE00"}}"#,
            ]
            for json in pairs {
                let answer = try Self.raw(c, .create, json)
                #expect(answer.status == .ok)
                #expect(answer.replyText.contains(#""t":"😀""#), "\(answer.replyText)")
            }
        }
    }

    /// Section 2: integers in the signed 64-bit range are exact and stored as their digits; one outside it (the
    /// unsigned range beyond 2^63 - 1 included) is read as the nearest double and stored in that double's compact
    /// form; past the double range it is INVALID_ARGUMENT. Both CREATE readers, and filters compare exactly.
    @Test func integersBeyondSixtyFourBits() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello(compression: [])
            let members = #""max":9223372036854775807,"min":-9223372036854775808,"over":9223372036854775808,"#
                + #""u64":18446744073709551615,"under":-9223372036854775809,"big":100000000000000000000"#
            let stored = #"{"max":9223372036854775807,"min":-9223372036854775808,"over":9.223372036854776e+18,"#
                + #""u64":1.8446744073709552e+19,"under":-9.223372036854776e+18,"big":1e+20}"#
            for json in [#"{"collection":"i","data":{\#(members)}}"#, #"{"collection": "i", "data": {\#(members)}}"#] {
                let answer = try Self.raw(c, .create, json)
                #expect(answer.status == .ok, "\(answer.replyText)")
                // The Record, then the write's sequence number (section 5.1).
                #expect(answer.replyText.contains(#""data":\#(stored),"seq":"#), "\(answer.replyText)")
            }
            let huge = "1" + String(repeating: "0", count: 309)
            let refused = try Self.raw(c, .create, #"{"collection":"i","data":{"n":\#(huge)}}"#)
            #expect(refused.status == .invalidArgument, "\(refused.replyText)")
            func count(_ op: String, _ value: String) throws -> Int? {
                let json = #"{"collection":"i","filter":{"field":"max","op":"\#(op)","value":\#(value)}}"#
                return try Self.raw(c, .count, json).replyJSON["count"]?.intValue.map(Int.init)
            }
            #expect(try count("eq", "9223372036854775807") == 2)
            #expect(try count("eq", "9223372036854775806") == 0)
            #expect(try count("lt", "9223372036854775808") == 2, "2^63 as a double is above 2^63 - 1")
            for op in ["eq", "gte"] { #expect(try count(op, "9223372036854775808") == 0, "\(op)") }
        }
    }

    /// Section 5.4: every `thumbnail` size the server does not make is INVALID_ARGUMENT with the sizes it does, 0 and
    /// negative sizes as well as those above the largest it could make.
    @Test(arguments: [0, -64, 200, 5000])
    func everyRefusedThumbnailSizeNamesTheSizes(_ size: Int) throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello(compression: [])
            let photo = try c.call(.blobPut, [:], binary: RolesTests.tinyJPEG)
            let id = try #require(photo.replyJSON["id"])
            let answer = try c.call(.blobGet, ["id": id, "thumbnail": .int(Int64(size))])
            #expect(answer.status == .invalidArgument, "\(answer.replyText)")
            #expect(Self.error(answer)["field"] == "thumbnail", "\(answer.replyText)")
            #expect(Self.error(answer)["sizes"] == [64, 128, 256, 512, 1024], "\(answer.replyText)")
        }
    }

    /// Section 3: `null` for an optional request member is its absence, on every request and at every level, and on
    /// both CREATE/REPLACE readers; a client may pass a page's `nextCursor: null` back (the first page again). `null`
    /// for a required member is that member missing; where null is a value (a filter's `value`) it stays one.
    @Test func nullForAnOptionalMemberIsItsAbsence() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            let hello = try Self.raw(c, .hello, #"{"versions":[1],"compression":null,"client":null,"token":null}"#)
            #expect(hello.status == .ok, "\(hello.replyText)")
            func ok(_ opcode: Opcode, _ json: String) throws -> Frame {
                let answer = try Self.raw(c, opcode, json)
                #expect(answer.status == .ok, "\(opcode.name) \(json): \(answer.replyText)")
                return answer
            }
            var ids: [String] = []
            for (n, json) in [
                #"{"collection":"n","id":null,"data":{"n":0}}"#, #"{"collection": "n", "id": null, "data": {"n": 1}}"#,
                #"{"collection":"n","data":{"n":2,"x":null}}"#,
            ].enumerated() {
                let record = try Record(json: ok(.create, json).jsonObject())
                #expect(record.data["n"] == .int(Int64(n)))
                ids.append(record.id.wireString)
            }
            _ = try ok(.replace, #"{"collection":"n","id":"\#(ids[0])","data":{"n":0},"rev":null}"#)
            _ = try ok(.replace, #"{"collection": "n", "id": "\#(ids[0])", "data": {"n": 0}, "rev": null}"#)
            _ = try ok(.patch, #"{"collection":"n","id":"\#(ids[0])","patch":{"p":1},"rev":null}"#)

            let plainList = try c.call(.list, ["collection": "n", "limit": 2])
            #expect(try ok(.list, #"{"collection":"n","limit":2,"cursor":null}"#).json == plainList.json)
            let second = try ok(.list, #"{"collection":"n","limit":2,"cursor":"\#(try Self.cursor(plainList))"}"#)
            #expect(second.replyJSON["nextCursor"] == .null)
            // The last page's nextCursor passed back unchanged: the first page again.
            #expect(try ok(.list, #"{"collection":"n","limit":2,"cursor":null}"#).json == plainList.json)
            #expect(try ok(.list, #"{"collection":"n","limit":null}"#).replyJSON["records"]?.arrayValue?.count == 3)

            let all = try c.call(.search, ["collection": "n"])
            let nulls = #"{"collection":"n","filter":null,"text":null,"sort":null,"limit":null,"cursor":null}"#
            #expect(try ok(.search, nulls).json == all.json)
            let ascending = try c.call(.search, ["collection": "n", "sort": [["field": "n"]]])
            #expect(try ok(.search, #"{"collection":"n","sort":[{"field":"n","order":null}]}"#).json == ascending.json)
            let clause = #"{"field":"x","op":"eq","value":null,"and":null,"not":null}"#
            let withNulls = try ok(.search, #"{"collection":"n","filter":\#(clause)}"#)
            #expect(try PageResponse(json: withNulls.jsonObject()).records.count == 3, "value null stays a value")
            _ = try ok(.search, #"{"collection":"n","text":{"query":"x","fields":null}}"#)
            #expect(try ok(.count, #"{"collection":"n","filter":null,"text":null}"#).replyJSON["count"] == 3)
            let group = try ok(.group, #"{"collection":"n","field":"n","filter":null,"text":null,"perGroup":null}"#)
            #expect(try GroupResponse(json: group.jsonObject()).groups.count == 3)

            let jpeg = try ServerFixtures.data("rocket.jpg")
            let put = try Self.raw(c, .blobPut, #"{"id":null,"sha256":null,"attach":null}"#, binary: jpeg)
            #expect(put.status == .ok, "\(put.replyText)")
            #expect(try BlobInfo(json: put.jsonObject()).attachedTo == nil)
            let blobs = try ok(.blobList, #"{"limit":null,"cursor":null,"attachedTo":null}"#)
            #expect(blobs.replyJSON["blobs"]?.arrayValue?.count == 1)
            _ = try ok(.delete, #"{"collection":"n","id":"\#(ids[2])","rev":null}"#)

            for (opcode, json, field) in [
                (Opcode.get, #"{"collection":"n","id":null}"#, "id"),
                (.create, #"{"collection":null,"data":{}}"#, "collection"),
                (.replace, #"{"collection":"n","id":"\#(ids[0])","data":null}"#, "data"),
                (.search, #"{"collection":"n","filter":{"field":null,"op":"eq","value":1}}"#, "filter.field"),
            ] {
                let answer = try Self.raw(c, opcode, json)
                #expect(answer.status == .invalidArgument, "\(json): \(answer.replyText)")
                #expect(Self.error(answer)["field"] == .string(field), "\(json): \(answer.replyText)")
            }

            let watch = try ok(.watch, #"{"collection":null,"filter":null,"since":null,"idsOnly":null}"#)
            let subscription = try #require(watch.replyJSON["subscription"])
            #expect(try c.call(.unwatch, ["subscription": subscription]).status == .ok)
        }
    }

    /// Section 4: `maxHandshakeFrameBytes` is compared with `length`, as `maxFrameBytes` is: a HELLO whose `length` is
    /// the cap is answered, one byte more is PAYLOAD_TOO_LARGE (details `limit`) and the connection ends.
    @Test func theHandshakeCapIsComparedWithLength() throws {
        try withServerWithoutListener { server in
            let cap = Limits.default.maxHandshakeFrameBytes
            func hello(length: Int) -> [UInt8] {
                let json = #"{"versions":[1]}"#
                return HostileFrames.request(.hello, json + String(repeating: " ", count: length - 24 - json.utf8.count))
            }
            let atCap = try RawClient.connected(to: server)
            let frame = hello(length: cap)
            #expect(frame.count == 4 + cap)
            try atCap.writeAll(frame)
            let answer = try #require(try atCap.receive())
            #expect(answer.status == .ok, "\(answer.replyText)")
            #expect(try atCap.call(.ping).status == .ok)

            let over = try RawClient.connected(to: server)
            try over.writeAll(hello(length: cap + 1))
            let frames = try over.framesUntilClosed()
            #expect(frames.map(\.status) == [.payloadTooLarge])
            #expect(frames.first.flatMap { Self.error($0)["limit"] } == .int(Int64(cap)))
        }
    }

    /// Section 4: compression names are case-sensitive and the server ignores those it does not know, choosing
    /// `zlib` when it is among them and `none` otherwise.
    @Test func unknownCompressionNamesAreIgnored() throws {
        try withServerWithoutListener { server in
            let offers: [([String], String)] = [
                (["gzip"], "none"), (["zstd", "zlib"], "zlib"), (["ZLIB"], "none"), ([], "none"),
                (["zlib", "zlib"], "zlib"),
            ]
            for (offer, chosen) in offers {
                let c = try RawClient.connected(to: server)
                #expect(try c.hello(compression: offer).compression == chosen, "\(offer)")
                #expect(try c.call(.ping).status == .ok)
            }
        }
    }

    /// Section 4: a token sent to a server that requires none is ignored (so clients can be given one before the
    /// server starts to require it); a server that requires one still refuses a wrong one.
    @Test func aTokenIsIgnoredWhereNoneIsRequired() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            let hello = try c.hello(token: "secret-the-server-does-not-ask-for")
            #expect(hello.authRequired == false)
            #expect(try c.call(.create, ["collection": "t", "data": [:]]).status == .ok)
        }
        try withServerWithoutListener({ $0.token = "right" }) { server in
            let c = try RawClient.connected(to: server)
            try c.writeAll(c.encode(.hello, HelloRequest(client: "t", token: "wrong").json, id: 1))
            let frames = try c.framesUntilClosed()
            #expect(frames.map(\.status) == [.unauthenticated])
        }
    }

    /// Section 2.1: the first 6 bytes are judged together, the magic first: a bad length with a bad magic gets the
    /// magic's PROTOCOL_ERROR however the bytes arrive (the length's 4 bytes first, alone, too), and a bad length
    /// behind a good magic gets PAYLOAD_TOO_LARGE.
    @Test func aBadMagicWinsOverABadLength() throws {
        try withServerWithoutListener { server in
            let halves = try RawClient.connected(to: server)
            try halves.writeAll([0xFF, 0xFF, 0xFF, 0xFF])
            try halves.writeAll([0x48, 0x54])
            let answer = try halves.framesUntilClosed()
            #expect(answer.map(\.status) == [.protocolError], "\(answer.map(\.replyText))")
            #expect(answer.first.map { $0.replyText.contains("bad magic") } == true)

            let http = try RawClient.connected(to: server)
            try http.writeAll(Array("GET / HTTP/1.1\r\nHost: larder\r\n\r\n".utf8))
            let frames = try http.framesUntilClosed()
            #expect(frames.map(\.status) == [.protocolError])
            #expect(frames.first.map { $0.requestID == 0 && $0.opcode.rawValue == 0 } == true)

            let length = try RawClient.connected(to: server)
            try length.writeAll([0xFF, 0xFF, 0xFF, 0xFF])
            try length.writeAll([0x4C, 0x52])
            #expect(try length.framesUntilClosed().map(\.status) == [.payloadTooLarge])
        }
    }
}
