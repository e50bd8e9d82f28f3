import Foundation
import LarderClient
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// The web console in Chromium (Tests/console/browser_test.py, Playwright for Python, both installed by
/// scripts/bootstrap --test) against a real server seeded with the sample apps' records and 10,000 more: what the page
/// shows is checked here against the same queries sent over TCP. Screenshots go to .build/console-screenshots.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ConsoleBrowserTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test func theConsoleWorksInChromium() async throws {
        let directory = temporaryTestDirectory("larder-console-browser")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let tokens = directory.appendingPathComponent("tokens").path
        _ = FileManager.default.createFile(
            atPath: tokens, contents: Data("admin console-admin\nread console-reader\n".utf8))
        var configuration = ServerConfiguration.forTests(in: directory.appendingPathComponent("data"))
        configuration.ioQueues = 2
        configuration.consolePort = 0
        configuration.consoleDirectory = ConsoleTests.consoleDirectory
        configuration.tokenFile = tokens
        var accounts = PasswordAccountSettings()
        accounts.hashParameters = .init(iterations: 1, memoryKiB: 64, parallelism: 1)
        configuration.passwordAccounts = accounts
        // Chunks of 16 KiB: the photo uploads in several, so that its progress shows and it can resume between them.
        configuration.limits.blobChunkBytes = 16 << 10
        let server = try LarderServer(configuration: configuration)
        let port = try server.start()
        defer { server.shutdown() }
        let consolePort = try #require(server.consolePort)
        let c = try RawClient.tcp(port: port)
        _ = try c.hello(token: "console-admin", compression: [])
        let samples = ["profiles", "items", "todos", "students", "pokemon_items"]
        let cli = try ServerProcessTests.binary("larder")
        for name in samples {
            let run = try CLIShellTests.run(
                cli, ["--port", "\(port)", "--token", "console-admin", "import", name,
                    Self.root.appendingPathComponent("samples/\(name).json").path, "--mode", "upsert"])
            #expect(run.status == 0, "import \(name): \(run.stderr)")
        }
        // In batches below maxInFlight (128), so that none is refused.
        for start in stride(from: 0, to: 10_000, by: 100) {
            let ids = try c.sendTogether(
                (start..<(start + 100)).map {
                    (.create, ["collection": "bulk", "data": ["n": .int(Int64($0)), "even": .bool($0 % 2 == 0)]])
                })
            for _ in ids { #expect(try c.receive()?.status == .ok) }
        }

        // What the page must list when it opens, before it writes anything.
        let counts = try c.call(.collections).replyJSON["collections"]?.arrayValue ?? []
        let screenshots = Self.root.appendingPathComponent(".build/console-screenshots").path
        let out = directory.appendingPathComponent("out.json").path
        var environment = ProcessInfo.processInfo.environment
        environment["CONSOLE_URL"] = "http://127.0.0.1:\(consolePort)"
        environment["LARDER_PORT"] = "\(port)"
        environment["LARDER_CLI"] = cli.path
        environment["ADMIN_TOKEN"] = "console-admin"
        environment["READ_TOKEN"] = "console-reader"
        environment["SCREENSHOTS"] = screenshots
        environment["OUT"] = out
        environment["PROTOCOL_MD"] = Self.root.appendingPathComponent("Protocol.md").path
        environment["PHOTO"] = Self.root.appendingPathComponent("Tests/IntegrationTests/Fixtures/rocket.jpg").path
        let run = try CLIShellTests.run(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["python3", Self.root.appendingPathComponent("Tests/console/browser_test.py").path],
            environment: environment)
        #expect(run.status == 0, "browser_test.py: \(run.stderr.suffix(4000))")
        let data = try #require(FileManager.default.contents(atPath: out), "browser_test.py wrote no results")
        let results = try JSONParser.parse(Array(data))

        // larder.js decodes and re-encodes every vector of Protocol.md to the same bytes.
        let vectors = results["vectors"]?.arrayValue ?? []
        #expect(vectors.count >= 20, "vectors run in the browser: \(vectors.count)")
        for vector in vectors {
            #expect(vector["same"] == .bool(true), "vector \(vector["name"]?.stringValue ?? "?") re-encodes")
        }
        #expect(results["wrongToken"]?.stringValue?.contains("UNAUTHENTICATED") == true)
        // Every sample collection is listed with its count and browsed.
        let listed = Dictionary(
            uniqueKeysWithValues: (results["collections"]?.arrayValue ?? []).compactMap { row -> (String, Int)? in
                guard let cells = row.arrayValue, cells.count == 2, let name = cells[0].stringValue,
                    let count = cells[1].intValue
                else { return nil }
                return (name, Int(count))
            })
        for entry in counts {
            let name = entry["name"]?.stringValue ?? ""
            #expect(listed[name] == entry["count"]?.intValue.map(Int.init), "the count of \(name)")
            if name != "bulk" {
                #expect(
                    results["browsed"]?[name]?.intValue.map(Int.init)
                        == min(50, Int(entry["count"]?.intValue ?? 0)), "the table of \(name)")
            }
        }
        #expect(samples.allSatisfy { listed[$0] != nil }, "every sample collection is listed: \(listed)")
        // The filtered, sorted pages are those of the same query through LarderClient.
        let client = LarderClient(port: port, token: "console-admin")
        var query = try SearchQuery(json: [
            "limit": 50, "sort": [["field": "n", "order": "desc"]],
            "filter": [
                "and": [["field": "n", "op": "lt", "value": 5000], ["field": "even", "op": "eq", "value": true]]
            ],
        ])
        for (index, shown) in (results["bulkPages"]?.arrayValue ?? []).enumerated() {
            let page = try await client.search("bulk", query)
            let expected = page.records.map(\.id.wireString)
            #expect(shown.arrayValue?.compactMap(\.stringValue) == expected, "page \(index + 1)")
            query.cursor = page.nextCursor
        }
        client.close()
        #expect(results["bulkPages"]?.arrayValue?.count == 3)
        #expect(
            results["bulkWindowTop"] == .array([.bool(true), .bool(true), .bool(true)]),
            "the 1280 px window screenshot shows the header, the filter and the column headers")
        #expect(results["liveRow"]?.stringValue != nil, "the CLI's record appeared without a reload")
        #expect(results["conflictTheirs"]?["by"]?.stringValue == "another client")
        #expect(results["afterReload"]?["by"]?.stringValue == "another client")
        #expect(results["afterOverwrite"]?["by"]?.stringValue == "the console, overwriting")
        #expect(results["createdInPage"]?["made"]?.stringValue == "in the console")
        let deleted = try #require(results["deletedInPage"]?.stringValue)
        #expect(try c.call(.get, ["collection": "bulk", "id": .string(deleted)]).status == .notFound)
        #expect(results["photoSame"] == .bool(true), "the stored photo equals the file")
        // The upload's connection was cut after its first chunk: it went on on a new one from the server's offset,
        // with no chunk sent twice, and its progress was shown on the way.
        let chunks = (results["uploadChunks"]?.arrayValue ?? []).map { $0.arrayValue?.compactMap(\.intValue) ?? [] }
        let photoBytes = try ServerFixtures.data("rocket.jpg").count
        #expect(chunks.first == [0, 0], "chunks sent: \(chunks)")
        #expect(chunks.dropFirst().first == [1, 16 << 10], "resumed from the server's offset: \(chunks)")
        #expect(chunks.count == (photoBytes + (16 << 10) - 1) / (16 << 10), "each chunk sent once: \(chunks)")
        #expect(chunks.dropFirst().allSatisfy { $0.first == 1 }, "the rest on the new connection: \(chunks)")
        let seen = (results["uploadSeen"]?.arrayValue ?? []).compactMap(\.stringValue)
        #expect(seen.contains { $0.hasSuffix("%") && !$0.hasSuffix(" 100%") }, "progress shown: \(seen)")
        #expect(seen.contains("photo.jpg: connection lost, resuming"), "\(seen)")
        #expect(seen.last == "photo.jpg: uploaded", "\(seen)")
        let fullSize = results["fullSize"]?.arrayValue ?? []
        #expect(fullSize.first?.intValue.map { $0 > 256 } == true, "the full-size photo, not a thumbnail: \(fullSize)")
        #expect(fullSize.last == .bool(true), "the full-size view replaces the gallery")
        #expect(results["downloadSame"] == .bool(true), "the download is the uploaded file")
        // Choosing columns, copying an id, the live switch and a changed row, on a table of their own.
        let unticked = results["columnUnticked"]
        let headers = Set(unticked?["headers"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        #expect(headers == ["id", "rev", "name", "size"], "an unticked column leaves the table")
        #expect(unticked?["cells"]?.intValue == 0 && unticked?["sizeCells"]?.intValue == 1)
        #expect(results["copied"]?["clipboard"] == results["copied"]?["id"], "the copy button copies the full id")
        #expect(results["paused"]?["shownWhilePaused"]?.intValue == 0, "a paused table lets events go by")
        #expect(results["paused"]?["shownAfterResuming"] == .bool(true), "resuming reloads the table")
        #expect(results["changedRow"]?.stringValue == "3", "the changed row is redrawn")
        // The keyboard: sign-in, a record's link, the drop zone.
        #expect(results["tabToToken"] == .bool(true))
        #expect(results["tabToRecord"] == .bool(true))
        #expect(results["keyboardRecord"]?.stringValue?.count == 36, "a record opened with Enter")
        #expect(results["tabToDrop"] == .array([.bool(true), .bool(true)]))
        #expect(results["dropKeys"] == .array([.bool(true), .bool(true)]), "Enter and Space open the picker")
        #expect(results["readControls"]?.intValue == 0, "a read token sees no edit controls")
        #expect(results["readForged"]?.stringValue == "PERMISSION_DENIED")
        #expect(results["foreignOrigin"]?.stringValue == "refused")
        // Users see only their own todos (the samples' have no owner), and no Stats page.
        #expect(results["userWrongPassword"]?.stringValue?.contains("UNAUTHENTICATED") == true)
        #expect(results["userSessionAfterSignOut"]?.stringValue == "UNAUTHENTICATED", "Sign out left the session in force")
        let ann = results["users"]?["ann@example.com"]
        let bob = results["users"]?["bob@example.com"]
        #expect(ann?["role"]?.stringValue?.hasPrefix("user: larder|") == true)
        #expect(ann?["statsShown"] == .bool(false))
        #expect(ann?["before"]?.arrayValue?.isEmpty == true && bob?["before"]?.arrayValue?.isEmpty == true)
        let annsTodo = try #require(ann?["after"]?.arrayValue?.first?.stringValue)
        #expect(ann?["after"]?.arrayValue?.count == 1 && bob?["after"]?.arrayValue?.isEmpty == true)
        let stored = try c.call(.get, ["collection": "todos", "id": .string(annsTodo)]).replyJSON
        #expect(stored["data"]?["title"] == "ann's todo")
        #expect(stored["data"]?["$owner"]?.stringValue == ann?["role"]?.stringValue.map { String($0.dropFirst(6)) })
        #expect(results["consoleErrors"]?.arrayValue?.isEmpty == true, "console errors: \(run.stderr.suffix(2000))")
    }
}
