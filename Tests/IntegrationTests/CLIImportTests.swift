import Foundation
import LarderClient
import LarderTestThreads
import Testing

/// `larder import --mode insert|upsert|skip-existing`, and the README walkthrough that relies on it being repeatable.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIImportTests {
    static let collections = ["profiles", "items", "todos", "students", "pokemon_items"]

    /// samples/ at the root of the package.
    static var samples: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("samples").path
    }

    /// `larder collections`: name to count.
    static func counts(_ port: [String]) throws -> [String: Int64] {
        var counts: [String: Int64] = [:]
        for line in try CLITests.run(["collections"] + port).json {
            counts[line["name"]?.stringValue ?? ""] = line["count"]?.intValue
        }
        return counts
    }

    /// The README's walkthrough, run twice: the second run leaves every collection as the first did.
    @Test func theReadmeWalkthroughCanBeRunTwice() throws {
        let root = URL(fileURLWithPath: Self.samples).deletingLastPathComponent()
        let readme = try String(contentsOfFile: root.appendingPathComponent("README.md").path, encoding: .utf8)
        #expect(readme.contains("do larder import $c samples/$c.json --mode upsert; done"))
        let server = try ClientTestServer()
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        var sizes: [String: Int64] = [:]
        for name in Self.collections {
            let file = URL(fileURLWithPath: "\(Self.samples)/\(name).json")
            let elements = try JSONParser.parse(try Data(contentsOf: file))
            sizes[name] = Int64(elements.arrayValue?.count ?? 0)
        }
        for run in 1...2 {
            for name in Self.collections {
                let r = try CLITests.run(["import", name, "\(Self.samples)/\(name).json", "--mode", "upsert"] + port)
                #expect(r.status == 0, "\(r.stderr)")
                let summary = try #require(try r.json.first)
                #expect(summary["created"] == .int(run == 1 ? sizes[name]! : 0), "\(name), run \(run)")
                #expect(summary["replaced"] == .int(run == 1 ? 0 : sizes[name]!), "\(name), run \(run)")
                #expect(summary["errors"] == 0)
            }
            #expect(try Self.counts(port) == sizes, "after run \(run)")
        }
        // The walkthrough's searches find what the README says.
        let r = try CLITests.run(["search", "students", "--contains", "北京", "--in", "address"] + port)
        #expect(try r.json.count >= 1)
    }

    @Test func eachModeDoesWhatItSays() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        let port = ["--port", String(server.port)]
        let kept = UUID(uuidString: "01900000-0000-7000-8000-00000000a001")!
        let other = UUID(uuidString: "01900000-0000-7000-8000-00000000a002")!
        func records(_ titles: [(UUID, String)]) -> [UInt8] {
            let lines = titles.map { #"{"id":"\#($0.0.wireString)","data":{"title":"\#($0.1)"}}"# }
            return Array(lines.joined(separator: "\n").utf8)
        }

        // insert: the default; an id that exists is an error, and nothing changes.
        var r = try CLITests.run(["import", "todos"] + port, stdin: records([(kept, "first")]))
        #expect(r.status == 0 && r.stderr.contains("created: 1, errors: 0"))
        r = try CLITests.run(["import", "todos"] + port, stdin: records([(kept, "second"), (other, "new")]))
        #expect(r.status == 1 && r.stderr.contains("created: 1, errors: 1") && r.stderr.contains("CONFLICT"))
        #expect(try await client.get("todos", id: kept).data["title"] == "first")

        // skip-existing: the new record is created, the existing one is left as it is.
        let third = UUID(uuidString: "01900000-0000-7000-8000-00000000a003")!
        r = try CLITests.run(
            ["import", "todos", "--mode", "skip-existing"] + port, stdin: records([(kept, "third"), (third, "x")]))
        #expect(r.status == 0 && r.stderr.contains("created: 1, skipped: 1, errors: 0"), "\(r.stderr)")
        #expect(try await client.get("todos", id: kept).data["title"] == "first")

        // upsert: the record with the id is replaced, under the same id.
        r = try CLITests.run(["import", "todos", "--mode", "upsert"] + port, stdin: records([(kept, "changed")]))
        #expect(r.status == 0 && r.stderr.contains("created: 0, replaced: 1, errors: 0"), "\(r.stderr)")
        let changed = try await client.get("todos", id: kept)
        #expect(changed.data["title"] == "changed" && changed.rev == 2)
        #expect(try await client.count("todos") == 3)

        // A document deleted meanwhile is created again by upsert, under its id.
        _ = try await client.delete("todos", id: other)
        r = try CLITests.run(["import", "todos", "--mode", "upsert"] + port, stdin: records([(other, "back")]))
        #expect(r.status == 0 && r.stderr.contains("created: 1, replaced: 0"), "\(r.stderr)")
        #expect(try await client.get("todos", id: other).data["title"] == "back")

        // Upsert and skip-existing need ids: data without one is an error for that line, not a duplicate.
        r = try CLITests.run(["import", "todos", "--mode", "upsert"] + port, stdin: Array(#"[{"title":"no id"}]"#.utf8))
        #expect(r.status == 1 && r.stderr.contains("line 1: --mode upsert needs the record's id"), "\(r.stderr)")
        #expect(try await client.count("todos") == 3)
    }
}
