import Foundation
import LarderBench
import LarderClient
import LarderTestThreads
import Testing

/// The smaller things a new user tripped on: help columns, grammar, the token hint, progress to 100%, sizes in units.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLISmallFixesTests {
    @Test func groupHelpIsAligned() throws {
        for arguments in [["help", "blob"], ["blob", "--help"]] {
            let r = try CLITests.run(arguments)
            #expect(r.status == 0)
            let lines = r.stdout.split(separator: "\n").filter { $0.hasPrefix("  blob ") }
            #expect(lines.count == 5, "\(r.stdout)")
            // Each summary starts in the same column: after the longest "blob NAME ARGS" and two spaces.
            let columns = Set(lines.map { line in
                let characters = Array(line)
                var column = 2
                while column + 1 < characters.count && !(characters[column] == " " && characters[column + 1] == " ") {
                    column += 1
                }
                while characters[column] == " " { column += 1 }
                return column
            })
            #expect(columns.count == 1, "\(r.stdout)")
            #expect(r.stdout.contains("  blob delete ID  delete a blob"), "\(r.stdout)")
        }
    }

    @Test func typeNamesTakeTheirArticle() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let port = ["--port", String(server.port)]
        var r = try CLITests.run(["create", "items", "[1, 2]"] + port)
        #expect(r.status == 64 && r.stderr.contains("must be a JSON object such as"), "\(r.stderr)")
        #expect(r.stderr.contains(", not an array"), "\(r.stderr)")
        r = try CLITests.run(["search", "items", "--filter", "[]"] + port)
        #expect(r.status == 64 && r.stderr.contains("a filter must be an object, not an array"), "\(r.stderr)")
        // The server's own words, through a raw request the client does not check.
        let client = server.client()
        defer { client.close() }
        await #expect {
            let filter: JSON = ["field": "a", "op": "lt", "value": [1]]
            _ = try await client.request(.search, json: ["collection": "items", "filter": filter])
        } throws: { ($0 as? LarderError)?.message.contains("not an array") == true }
        await #expect {
            _ = try await client.request(.get, json: ["collection": 5, "id": "x"])
        } throws: { ($0 as? LarderError)?.message.contains("must be a string, not a number") == true }
    }

    @Test func unauthenticatedSaysWhereTheTokenGoes() throws {
        let server = try ClientTestServer { $0.token = "s3cret-token" }
        defer { server.stop() }
        var r = try CLITests.run(["ping", "--port", String(server.port)])
        #expect(r.status == 1 && r.stderr.contains("UNAUTHENTICATED"), "\(r.stderr)")
        #expect(r.stderr.contains("--token") && r.stderr.contains("LARDER_TOKEN"), "\(r.stderr)")
        r = try CLITests.run(["ping", "--port", String(server.port)], environment: ["LARDER_TOKEN": "wrong-one"])
        #expect(r.status == 1 && r.stderr.contains("--token or LARDER_TOKEN") && !r.stderr.contains("wrong-one"))
        r = try CLITests.run(["ping", "--port", String(server.port), "--token", "s3cret-token"])
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// A blob of 2 MiB both ways with stderr on a terminal: the bar ends at 100%, the sizes in MiB.
    @Test func blobProgressReachesOneHundredPercent() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let directory = NSTemporaryDirectory() + "larder-progress-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let jpeg = Payloads.syntheticJPEG(size: 2 << 20)
        _ = FileManager.default.createFile(atPath: directory + "/big.jpg", contents: Data(jpeg))
        let port = ["--port", String(server.port)]

        let put = try CLIOutputTests.onTerminal(["blob", "put", directory + "/big.jpg"] + port, columns: 120)
        #expect(put.contains("put [##############################] 100% 2 MiB of 2 MiB"), "\(put)")
        #expect(put.contains("size         2 MiB (2097152 bytes)"), "\(put)")
        let id = try #require(put.split(separator: "\n").first { $0.hasPrefix("id ") }?.split(separator: " ").last)

        let get = try CLIOutputTests.onTerminal(
            ["blob", "get", String(id), "-o", directory + "/copy.jpg"] + port, columns: 120)
        #expect(get.contains("get [##############################] 100% 2 MiB of 2 MiB"), "\(get)")
        #expect(!get.contains("99%\n"), "\(get)")
        #expect(Array(FileManager.default.contents(atPath: directory + "/copy.jpg") ?? Data()) == jpeg)

        let list = try CLIOutputTests.onTerminal(["blob", "list"] + port, columns: 120)
        #expect(list.contains("2 MiB") && list.contains(String(id)), "\(list)")
    }
}
