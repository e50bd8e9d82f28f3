import Foundation
import LarderClient
import LarderTestProcess
import LarderTestThreads
import Testing

/// The `larder` binary run as a user would, against an in-process server on port 0.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLITests {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
        var stdoutBytes: [UInt8]

        /// Stdout's lines parsed as JSON.
        var json: [JSON] {
            get throws {
                try stdout.split(separator: "\n").map { try JSONParser.parse(Array($0.utf8)) }
            }
        }
    }

    /// The built `larder` next to this test bundle's resources.
    static var binary: URL {
        Bundle.module.bundleURL.deletingLastPathComponent().appendingPathComponent("larder")
    }

    static func run(_ arguments: [String], stdin: [UInt8]? = nil, environment: [String: String] = [:]) throws -> Run {
        let directory = NSTemporaryDirectory() + "larder-cli-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let process = ChildProcess()
        process.executableURL = binary
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for key in ["LARDER_HOST", "LARDER_PORT", "LARDER_SOCKET", "LARDER_TOKEN"] { env[key] = nil }
        env["HOME"] = directory
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let out = directory + "/out", err = directory + "/err", input = directory + "/in"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        _ = FileManager.default.createFile(atPath: input, contents: Data(stdin ?? []))
        process.standardOutput = FileHandle(forWritingAtPath: out)
        process.standardError = FileHandle(forWritingAtPath: err)
        process.standardInput = FileHandle(forReadingAtPath: input)
        try process.run()
        process.waitUntilExit()
        return Run(
            status: process.terminationStatus,
            stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? "",
            stdoutBytes: Array(FileManager.default.contents(atPath: out) ?? Data()))
    }

    @Test(arguments: ServerStore.allCases) func documentCommandsWithJSONOutput(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        var r = try Self.run(["create", "items", #"{"item":"茶葉蛋","price":13,"discount":false}"#] + port)
        #expect(r.status == 0)
        let record = try #require(try r.json.first?.objectValue)
        let id = try #require(record["id"]?.stringValue)
        #expect(record["data"]?["item"] == "茶葉蛋")
        r = try Self.run(port + ["--json", "get", "items", id])
        #expect(try r.json == [.object(record)])
        r = try Self.run(["replace", "items", id, #"{"item":"茶葉蛋","price":15,"discount":true}"#, "--rev", "1"] + port)
        #expect(try r.json.first?["rev"] == 2)
        r = try Self.run(["patch", "items", id, #"{"comment":"classic"}"#, "--rev=2"] + port)
        #expect(try r.json.first?["data"]?["comment"] == "classic")
        r = try Self.run(["patch", "items", id, "{}", "--rev", "1"] + port)
        #expect(r.status == 1)
        #expect(r.stderr.contains("CONFLICT"))
        _ = try Self.run(["create", "items", #"{"item":"泡麵","price":42,"discount":true}"#] + port)
        _ = try Self.run(["create", "items", #"{"item":"Bento 便當","price":89,"discount":false}"#] + port)
        r = try Self.run(["search", "items", "--where", "price<50", "--where", "discount=true"] + port)
        #expect(try r.json.compactMap { $0["data"]?["item"]?.stringValue }.sorted() == ["泡麵", "茶葉蛋"])
        r = try Self.run(["search", "items", "--contains", "便當", "--in", "item", "--sort", "price:desc"] + port)
        #expect(try r.json.count == 1)
        r = try Self.run(["list", "items", "--limit", "2"] + port)
        #expect(try r.json.count == 2)
        #expect(r.stderr.contains("--cursor"))
        r = try Self.run(["count", "items", "--where", "price>=40"] + port)
        #expect(try r.json == [["count": 2]])
        r = try Self.run(["group", "items", "discount"] + port)
        #expect(try r.json.map { $0["count"] } == [1, 2])
        r = try Self.run(["index", "items", "price"] + port)
        #expect(r.status == 0)
        r = try Self.run(["collections"] + port)
        #expect(try r.json == [["name": "items", "count": 3]])
        r = try Self.run(["stats"] + port)
        #expect(try r.json.first?["connections"] != nil)
        r = try Self.run(["ping", "--count", "5"] + port)
        #expect(try r.json.count == 6)
        #expect(try r.json.last?["count"] == 5)
        r = try Self.run(["delete", "items", id] + port)
        #expect(try r.json.first?["id"] == .string(id))
        r = try Self.run(["get", "items", id] + port)
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("Error: NOT_FOUND"))
        // `larder watch` runs until Ctrl-C: WatchClientTests runs it in the background.
        r = try Self.run(["drop", "items"] + port)
        #expect(try r.json.first?["documents"] == 2)
        // The environment names the server too.
        r = try Self.run(["ping"], environment: ["LARDER_PORT": String(server.port)])
        #expect(r.status == 0)
    }

    @Test(arguments: ServerStore.allCases) func rulesSetThenGetGivesTheSameRules(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        var r = try Self.run(port + ["rules", "get", "todos"])
        #expect(r.status == 0)
        #expect(try r.json == [["collection": "todos", "rules": nil]])
        r = try Self.run(
            port + ["rules", "set", "todos", "--read", "owner", "--create", "signedIn", "--update", "owner", "--delete",
                "admin"])
        #expect(r.status == 0, "\(r.stderr)")
        r = try Self.run(port + ["--json", "rules", "get", "todos"])
        let rules = try #require(try r.json.first?["rules"])
        #expect(rules["read"] == "owner")
        #expect(rules["create"] == "signedIn")
        #expect(rules["update"] == "owner")
        #expect(rules["delete"] == "admin")
        r = try Self.run(port + ["rules", "set", "todos", "--read", "everyone", "--create", "owner", "--update", "owner",
            "--delete", "owner"])
        #expect(r.status == 64)
        #expect(r.stderr.contains("--read must be owner, signedIn, public or admin"))
    }

    @Test func exitStatuses() throws {
        var r = try Self.run(["--help"])
        #expect(r.status == 0 && r.stdout.contains("blob put"))
        r = try Self.run(["search", "--help"])
        #expect(r.status == 0 && r.stdout.contains("price<50") && r.stdout.contains("北京"))
        r = try Self.run(["blob", "--help"])
        #expect(r.status == 0 && r.stdout.contains("blob get"))
        r = try Self.run(["frobnicate"])
        #expect(r.status == 64)
        #expect(r.stderr.hasPrefix("Error: ") && r.stderr.contains("Usage: larder"))
        r = try Self.run(["get", "items"])
        #expect(r.status == 64)
        r = try Self.run(["get", "items", "not-a-uuid", "--port", "1"])
        #expect(r.status == 64)
        r = try Self.run(["ping", "--port", "1"])
        #expect(r.status == 2)
        #expect(r.stderr.contains("cannot connect"))
    }

    @Test(arguments: ServerStore.allCases) func importThenExportGivesTheSameRecords(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        let seed = try JSONParser.parse(try ClientFixtures.bytes("seed-records.json"))
        let students = try #require(seed["students"]?.arrayValue)
        // NDJSON on stdin.
        let ndjson = students.map { String(decoding: $0.bytes, as: UTF8.self) }.joined(separator: "\n") + "\n"
        var r = try Self.run(["import", "students", "-"] + port, stdin: Array(ndjson.utf8))
        #expect(r.status == 0)
        #expect(r.stderr.contains("created: 4, errors: 0"))
        r = try Self.run(["export", "students"] + port)
        let exported = try r.json
        #expect(Set(exported.compactMap { $0["data"] }) == Set(students))
        // The export imports elsewhere with its ids, and exports the same again.
        let file = NSTemporaryDirectory() + "larder-export-\(UUID().uuidString).ndjson"
        _ = FileManager.default.createFile(atPath: file, contents: Data(r.stdout.utf8))
        defer { try? FileManager.default.removeItem(atPath: file) }
        r = try Self.run(["import", "copy", file] + port)
        #expect(r.status == 0)
        r = try Self.run(["export", "copy"] + port)
        func idsAndData(_ lines: [JSON]) -> Set<JSON> { Set(lines.map { ["id": $0["id"] ?? nil, "data": $0["data"] ?? nil] }) }
        #expect(idsAndData(try r.json) == idsAndData(exported))
        // A JSON array file with one bad element: errors counted, non-zero exit.
        let array = "[{\"title\":\"ok\"}, 5, {\"title\":\"also ok\"}]"
        r = try Self.run(["import", "todos"] + port, stdin: Array(array.utf8))
        #expect(r.status == 1)
        #expect(r.stderr.contains("created: 2, errors: 1"))
    }

    @Test(arguments: ServerStore.allCases) func blobPutThenGetGivesTheSameBytes(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        let fixture = Bundle.module.url(forResource: "Fixtures/rocket.jpg", withExtension: nil)!.path
        let jpeg = try ClientFixtures.bytes("rocket.jpg")
        var r = try Self.run(["create", "items", #"{"item":"rocket"}"#] + port)
        let id = try #require(try r.json.first?["id"]?.stringValue)
        r = try Self.run(["blob", "put", fixture, "--attach", "items/\(id)"] + port)
        #expect(r.status == 0)
        let info = try #require(try r.json.first)
        let blobID = try #require(info["id"]?.stringValue)
        #expect(info["sha256"] == .string(ClientFixtures.sha256(jpeg)))
        let out = NSTemporaryDirectory() + "larder-blob-\(UUID().uuidString).jpg"
        defer { try? FileManager.default.removeItem(atPath: out) }
        r = try Self.run(["blob", "get", blobID, "-o", out] + port)
        #expect(r.status == 0)
        let copy = Array(try #require(FileManager.default.contents(atPath: out)))
        #expect(copy == jpeg)
        #expect(ClientFixtures.sha256(copy) == ClientFixtures.sha256(jpeg))
        r = try Self.run(["blob", "get", blobID] + port)
        #expect(r.stdoutBytes == jpeg)
        r = try Self.run(["blob", "info", blobID] + port)
        #expect(try r.json.first?["attachedTo"]?["id"] == .string(id))
        r = try Self.run(["blob", "list", "--attached-to", "items/\(id)"] + port)
        #expect(try r.json.count == 1)
        r = try Self.run(["blob", "put", #filePath] + port)
        #expect(r.status == 1 && r.stderr.contains("UNSUPPORTED_MEDIA_TYPE"))
        r = try Self.run(["blob", "delete", blobID] + port)
        #expect(r.status == 0)
        r = try Self.run(["blob", "info", blobID] + port)
        #expect(r.status == 1 && r.stderr.contains("NOT_FOUND"))
    }

    @Test(arguments: ServerStore.allCases) func promptDrivenThroughPipedStdin(_ store: ServerStore) throws {
        let server = try ClientTestServer(store)
        defer { server.stop() }
        let script = """
            create todos '{"title": "Buy milk 買牛奶", "isFinish": false}'
            # a comment
            count todos
            search todos --contains 牛奶
            get todos 00000000-0000-0000-0000-000000000000
            help
            """
        let r = try Self.run(["--port", String(server.port)], stdin: Array(script.utf8))
        #expect(r.status == 1)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        let first = try JSONParser.parse(Array(lines[0].utf8))
        #expect(first["data"]?["title"] == "Buy milk 買牛奶")
        #expect(lines[1] == #"{"count":1}"#)
        #expect(try JSONParser.parse(Array(lines[2].utf8))["id"] == first["id"])
        #expect(r.stderr.contains("NOT_FOUND"))
        #expect(r.stdout.contains("Commands:"))
    }
}
