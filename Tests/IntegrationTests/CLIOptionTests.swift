import Foundation
import LarderClient
import LarderTestThreads
import Testing

/// Every option of the `larder` command, run as a user types it against a real server, each checked for what it does.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIOptionTests {
    static func port(_ server: ClientTestServer) -> [String] { ["--port", String(server.port)] }

    /// Creates `count` items with prices 10, 20, ... and returns their ids in creation order.
    static func items(_ count: Int, on server: ClientTestServer) async throws -> [UUID] {
        let client = server.client()
        defer { client.close() }
        var ids: [UUID] = []
        for n in 1...count {
            let data: JSONObject = [
                "item": .string("item \(n)"), "price": .int(Int64(n * 10)), "discount": .bool(n % 2 == 0),
                "category": .string(n % 3 == 0 ? "snack" : "drink"),
            ]
            ids.append(try await client.create("items", data).id)
        }
        return ids
    }

    @Test func filterTakesAWireFormFilterAndCombinesWithWhere() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        _ = try await Self.items(6, on: server)
        let cheapOrDiscounted =
            #"{"or":[{"field":"price","op":"lt","value":25},{"field":"discount","op":"eq","value":true}]}"#
        let port = Self.port(server)
        var r = try CLITests.run(["search", "items", "--filter", cheapOrDiscounted, "--sort", "price"] + port)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try r.json.map { $0["data"]?["price"] } == [10, 20, 40, 60])
        // With --where too, both must hold.
        r = try CLITests.run(["count", "items", "--filter", cheapOrDiscounted, "--where", "price>30"] + port)
        #expect(try r.json == [["count": 2]])
        r = try CLITests.run(["search", "items", "--filter", #"{"field":"price","op":"near","value":1}"#] + port)
        #expect(r.status == 64 && r.stderr.hasPrefix("Error: --filter:"), "\(r.stderr)")
    }

    @Test func limitCursorAndAllPageThroughEverything() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let made = try await Self.items(7, on: server).map(\.wireString)
        func ids(_ run: CLITests.Run) throws -> [String] { try run.json.compactMap { $0["id"]?.stringValue } }
        /// The cursor of "N records shown, more remain: --cursor C for the next page, ..." (C quoted for the shell
        /// when it needs it).
        func cursor(_ run: CLITests.Run) -> String? {
            guard let line = run.stderr.split(separator: "\n").first(where: { $0.contains("more remain: --cursor ") }),
                let range = line.range(of: "--cursor ")
            else { return nil }
            let text = line[range.upperBound...]
            if text.hasPrefix("'") { return String(text.dropFirst().prefix { $0 != "'" }) }
            return String(text.prefix { $0 != " " })
        }
        for command in ["list", "search"] {
            let first = try CLITests.run([command, "items", "--limit", "3"] + Self.port(server))
            #expect(try ids(first) == Array(made[0..<3]), "\(command)")
            let next = try #require(cursor(first), "\(command): \(first.stderr)")
            let second = try CLITests.run([command, "items", "--limit", "3", "--cursor", next] + Self.port(server))
            #expect(try ids(second) == Array(made[3..<6]), "\(command)")
            let last = try CLITests.run(
                [command, "items", "--limit", "3", "--cursor", try #require(cursor(second))] + Self.port(server))
            #expect(try ids(last) == [made[6]] && cursor(last) == nil, "\(command)")
            let all = try CLITests.run([command, "items", "--limit", "3", "--all"] + Self.port(server))
            #expect(try ids(all) == made && cursor(all) == nil, "\(command)")
        }
        // Sorted pages go on in the sort's order.
        let byPrice = try CLITests.run(
            ["search", "items", "--sort", "price:desc", "--limit", "2", "--all"] + Self.port(server))
        #expect(try ids(byPrice) == made.reversed())
        // Blobs too.
        let client = server.client()
        defer { client.close() }
        var blobs: [String] = []
        for _ in 0..<3 { blobs.append(try await client.blobPut(Data(uniqueJPEG(commentBytes: 100))).id.wireString) }
        let firstBlobs = try CLITests.run(["blob", "list", "--limit", "2"] + Self.port(server))
        #expect(try ids(firstBlobs).count == 2)
        let restOfBlobs = try CLITests.run(
            ["blob", "list", "--limit", "2", "--cursor", try #require(cursor(firstBlobs))] + Self.port(server))
        #expect(Set(try ids(firstBlobs) + ids(restOfBlobs)) == Set(blobs))
        let allBlobs = try CLITests.run(["blob", "list", "--limit", "1", "--all"] + Self.port(server))
        #expect(Set(try ids(allBlobs)) == Set(blobs) && cursor(allBlobs) == nil)
    }

    @Test func groupPerGroupBoundsTheRecordsButNotTheCounts() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        _ = try await Self.items(7, on: server)
        var r = try CLITests.run(["group", "items", "category", "--per-group", "1"] + Self.port(server))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try r.json.map { $0["key"] } == ["drink", "snack"])
        #expect(try r.json.map { $0["count"] } == [5, 2])
        #expect(try r.json.map { $0["records"]?.arrayValue?.count } == [1, 1])
        r = try CLITests.run(["group", "items", "category", "--per-group", "0"] + Self.port(server))
        #expect(try r.json.map { $0["records"]?.arrayValue?.count } == [0, 0])
        r = try CLITests.run(
            ["group", "items", "category", "--where", "price<35", "--per-group", "5"] + Self.port(server))
        #expect(try r.json.map { $0["records"]?.arrayValue?.count } == [2, 1])
    }

    @Test func exportDataWritesTheDocumentsAlone() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        _ = try await Self.items(3, on: server)
        let r = try CLITests.run(["export", "items", "--data"] + Self.port(server))
        #expect(r.status == 0)
        let lines = try r.json
        #expect(lines.map { $0["item"] } == ["item 1", "item 2", "item 3"])
        #expect(lines.allSatisfy { $0["id"] == nil && $0["rev"] == nil && $0["data"] == nil })
        // What --data writes imports as new documents with the same data.
        let again = try CLITests.run(["import", "copy", "-"] + Self.port(server), stdin: r.stdoutBytes)
        #expect(again.status == 0 && again.stderr.contains("created: 3, errors: 0"))
    }

    /// `--window 1` sends one CREATE at a time, so the records are made (and listed) in the file's order; a wide
    /// window makes the same records.
    @Test func importWindowBoundsTheRequestsInFlight() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let lines = (0..<40).map { #"{"n":\#($0)}"# }.joined(separator: "\n")
        let input = Array(lines.utf8)
        var r = try CLITests.run(["import", "ordered", "-", "--window", "1"] + Self.port(server), stdin: input)
        #expect(r.status == 0 && r.stderr.contains("created: 40, errors: 0"), "\(r.stderr)")
        r = try CLITests.run(["export", "ordered", "--data"] + Self.port(server))
        #expect(try r.json.map { $0["n"] } == (0..<40).map { .int(Int64($0)) })
        r = try CLITests.run(["import", "wide", "-", "--window", "100"] + Self.port(server), stdin: input)
        #expect(r.status == 0 && r.stderr.contains("created: 40, errors: 0"))
        r = try CLITests.run(["import", "x", "-", "--window", "0"] + Self.port(server), stdin: input)
        #expect(r.status == 64 && r.stderr.contains("--window must be an integer from 1 to 10000"))
    }

    @Test func idsChosenByTheUser() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let id = UUID().wireString
        var r = try CLITests.run(["create", "todos", #"{"title":"Buy milk 買牛奶"}"#, "--id", id] + Self.port(server))
        #expect(try r.json.first?["id"] == .string(id))
        r = try CLITests.run(["get", "todos", id] + Self.port(server))
        #expect(try r.json.first?["data"]?["title"] == "Buy milk 買牛奶")
        r = try CLITests.run(["create", "todos", "{}", "--id", id] + Self.port(server))
        #expect(r.status == 1 && r.stderr.contains("CONFLICT"), "\(r.stderr)")
        r = try CLITests.run(["create", "todos", "{}", "--id", "not-a-uuid"] + Self.port(server))
        #expect(r.status == 64)

        let jpeg = uniqueJPEG(commentBytes: 500)
        let blobID = UUID().wireString
        r = try CLITests.run(["blob", "put", "-", "--id", blobID] + Self.port(server), stdin: jpeg)
        #expect(try r.json.first?["id"] == .string(blobID))
        r = try CLITests.run(["blob", "get", blobID] + Self.port(server))
        #expect(r.stdoutBytes == jpeg)
    }

    /// `blob put -` reads the photo from stdin: the same bytes as from the file, checked by SHA-256 on the way.
    @Test func blobPutFromStdin() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let jpeg = try ClientFixtures.bytes("rocket.jpg")
        var r = try CLITests.run(["blob", "put", "-"] + Self.port(server), stdin: jpeg)
        #expect(r.status == 0, "\(r.stderr)")
        let info = try #require(try r.json.first)
        #expect(info["sha256"] == .string(ClientFixtures.sha256(jpeg)) && info["size"] == .int(Int64(jpeg.count)))
        r = try CLITests.run(["blob", "get", try #require(info["id"]?.stringValue)] + Self.port(server))
        #expect(r.stdoutBytes == jpeg)
        r = try CLITests.run(["blob", "put", "-"] + Self.port(server), stdin: Array("not a photo".utf8))
        #expect(r.status == 1 && r.stderr.contains("UNSUPPORTED_MEDIA_TYPE"))
    }

    @Test func getWithSeveralIdsPrintsThemInOrderAndNamesTheMissing() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let ids = try await Self.items(3, on: server).map(\.wireString)
        var r = try CLITests.run(["get", "items", ids[2], ids[0], ids[1]] + Self.port(server))
        #expect(r.status == 0)
        #expect(try r.json.compactMap { $0["id"]?.stringValue } == [ids[2], ids[0], ids[1]])
        let missing = UUID().wireString
        r = try CLITests.run(["get", "items", ids[1], missing] + Self.port(server))
        #expect(r.status == 1)
        #expect(try r.json.compactMap { $0["id"]?.stringValue } == [ids[1]])
        #expect(r.stderr.contains("NOT_FOUND") && r.stderr.contains(missing), "\(r.stderr)")
    }

    /// `--interval` pauses between pings: three pings 300 ms apart take at least 600 ms (a bound a slow machine only
    /// makes easier to meet); without it they go back to back.
    @Test func pingIntervalPausesBetweenPings() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let started = Date()
        let r = try CLITests.run(["ping", "--count", "3", "--interval", "300"] + Self.port(server))
        let elapsed = Date().timeIntervalSince(started)
        #expect(r.status == 0)
        #expect(try r.json.map { $0["seq"] } == [1, 2, 3, nil] && r.json.last?["count"] == 3)
        #expect(elapsed >= 0.6, "3 pings 300 ms apart took \(elapsed) s")
        let bad = try CLITests.run(["ping", "--interval", "-1"] + Self.port(server))
        #expect(bad.status == 64)
    }

    /// `--host` and LARDER_HOST pick the address: the server listens on 127.0.0.1 only, so 127.0.0.2 (also this
    /// machine) refuses.
    @Test func hostPicksTheAddress() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        var r = try CLITests.run(["ping", "--host", "127.0.0.1"] + Self.port(server))
        #expect(r.status == 0)
        r = try CLITests.run(["ping", "--host", "127.0.0.2"] + Self.port(server))
        #expect(r.status == 2 && r.stderr.contains("127.0.0.2:\(server.port)"), "\(r.stderr)")
        r = try CLITests.run(["ping"] + Self.port(server), environment: ["LARDER_HOST": "127.0.0.2"])
        #expect(r.status == 2 && r.stderr.contains("127.0.0.2"))
        r = try CLITests.run(
            ["ping", "--host", "127.0.0.1"] + Self.port(server), environment: ["LARDER_HOST": "127.0.0.2"])
        #expect(r.status == 0)
    }

    @Test func socketConnectsOverAUnixSocket() throws {
        let path = NSTemporaryDirectory() + "larder-cli-\(UUID().uuidString.prefix(8)).sock"
        let server = try ClientTestServer { $0.socketPath = path }
        defer { server.stop() }
        var r = try CLITests.run(["create", "todos", #"{"title":"via the socket"}"#, "--socket", path])
        #expect(r.status == 0, "\(r.stderr)")
        r = try CLITests.run(["count", "todos"], environment: ["LARDER_SOCKET": path])
        #expect(try r.json == [["count": 1]])
        // Nothing listens on TCP port 1: the socket, not the port, carried the requests above.
        r = try CLITests.run(["count", "todos", "--socket", path, "--port", "1"])
        #expect(try r.json == [["count": 1]])
        r = try CLITests.run(["ping", "--socket", path + ".missing"])
        #expect(r.status == 2 && r.stderr.contains(path + ".missing"), "\(r.stderr)")
    }

    @Test func tokenIsPresentedInHello() throws {
        let server = try ClientTestServer { $0.token = "s3cret-🔑" }
        defer { server.stop() }
        var r = try CLITests.run(["collections"] + Self.port(server))
        #expect(r.status == 1 && r.stderr.contains("UNAUTHENTICATED"), "\(r.stderr)")
        r = try CLITests.run(["collections", "--token", "wrong-token"] + Self.port(server))
        #expect(r.status == 1 && r.stderr.contains("UNAUTHENTICATED") && !r.stderr.contains("wrong-token"))
        r = try CLITests.run(["create", "todos", "{}", "--token", "s3cret-🔑"] + Self.port(server))
        #expect(r.status == 0, "\(r.stderr)")
        r = try CLITests.run(["count", "todos"] + Self.port(server), environment: ["LARDER_TOKEN": "s3cret-🔑"])
        #expect(try r.json == [["count": 1]])
    }
}
