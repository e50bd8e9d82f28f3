import Foundation
import LarderClient
import LarderTestThreads
import Testing

@testable import LarderCLI

/// The pieces of the `larder` CLI for people that need no server: carets, table fitting, wrapping, when a prompt
/// entry is whole, completion, the history file and the stats summary.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIFormattingTests {
    @Test func aCaretPointsAtTheMistakeCountingWideCharactersTwice() throws {
        let error = #expect(throws: UsageError.self) { try FilterSyntax.parse("地址~~北京") }
        #expect(error?.excerpt?.lines == ["  地址~~北京", "       ^"])
        #expect(UsageError.Excerpt("abc", offset: 3, length: 0).lines == ["  abc", "     ^"])
        #expect(UsageError.Excerpt.option("limit", "10x").lines == ["  --limit 10x", "          ^~~"])
        let report = UsageError("bad", usage: "Usage: x", excerpt: .option("n", "y")).report(usage: "Usage: x")
        #expect(report == "Error: bad\n  --n y\n      ^\nUsage: x")
    }

    @Test func filtersAndSortKeysAreStrict() throws {
        let mistakes = [("price<<50", 6), ("price<=>5", 7), ("price=", 6), ("=5", 0), ("price^5", 6), ("tags=[1,", 8)]
        for (text, offset) in mistakes {
            let error = #expect(throws: UsageError.self, "\(text)") { try FilterSyntax.parse(text) }
            #expect(error?.excerpt?.offset == offset, "\(text): \(error?.message ?? "")")
        }
        #expect(throws: UsageError.self) { try FilterSyntax.parse("price<[1]") }
        #expect(throws: UsageError.self) { try FilterSyntax.parse(#"a={"b":1}"#) }
        #expect(try FilterSyntax.parse(#"name="<b>""#) == .compare(try FieldPath("name"), .eq, "<b>"))
        #expect(try FilterSyntax.parse(" price < 50 ") == .compare(try FieldPath("price"), .lt, 50))
        #expect(try FilterSyntax.parse("date<2024-05-01") == .compare(try FieldPath("date"), .lt, "2024-05-01"))
        #expect(try FilterSyntax.sortKey("price:desc") == SortKey(field: try FieldPath("price"), descending: true))
        #expect(try FilterSyntax.sortKey("price:asc") == SortKey(field: try FieldPath("price"), descending: false))
        #expect(try FilterSyntax.sortKey("a:b:desc") == SortKey(field: try FieldPath("a:b"), descending: true))
        let error = #expect(throws: UsageError.self) { try FilterSyntax.sortKey("nope:up") }
        #expect(error?.excerpt?.lines == ["  nope:up", "       ^~"])
        // A collation after '@', with a strength after '/'.
        #expect(try FilterSyntax.sortKey("title@en") == SortKey(field: try FieldPath("title"), collation: "en"))
        #expect(
            try FilterSyntax.sortKey("name:desc@de/1")
                == SortKey(field: try FieldPath("name"), descending: true, collation: "de", strength: 1))
        #expect(try FilterSyntax.sortKey("t@zh-u-co-pinyin").collation == "zh-u-co-pinyin")
        for bad in ["title@", "title@en/9", "title@e n", "$id@en"] {
            #expect(throws: UsageError.self, "\(bad)") { try FilterSyntax.sortKey(bad) }
        }
    }

    @Test func tablesNarrowTheirWidestColumnsFirstOrGiveUp() {
        // Fits as it is.
        #expect(TableLayout.fit(natural: [36, 10, 5], minimum: [36, 10, 5], width: 80) == [36, 10, 5])
        // Too wide: the widest column is cut down to the water level first; the id keeps its width.
        #expect(TableLayout.fit(natural: [36, 60, 8], minimum: [36, 10, 8], width: 80) == [36, 32, 8])
        #expect(TableLayout.fit(natural: [36, 30, 30], minimum: [36, 10, 10], width: 80) == [36, 20, 20])
        // What the level leaves over goes left first.
        #expect(TableLayout.fit(natural: [36, 30, 30], minimum: [36, 10, 10], width: 81) == [36, 21, 20])
        // Even the minimums do not fit: nil, and the rows go vertical.
        #expect(TableLayout.fit(natural: [36, 20, 20, 20, 20], minimum: [36, 10, 10, 10, 10], width: 80) == nil)
        #expect(TableLayout.render(["a", "北京市海淀區", "x"], [3, 7, 1]) == "a    北京市…  x")
    }

    @Test func longValuesWrapAtSpacesToTheWidth() {
        #expect(Output.wrap("one two three four", width: 9, maxLines: 5) == ["one two", "three", "four"])
        #expect(Output.wrap("abcdefghij", width: 4, maxLines: 5) == ["abcd", "efgh", "ij"])
        #expect(Output.wrap("abcdefghij", width: 4, maxLines: 2) == ["abcd", "efg…"])
        #expect(Output.wrap("北京市海淀區", width: 5, maxLines: 5) == ["北京", "市海", "淀區"])
        #expect(Output.truncate("北京市海淀區", 7) == "北京市…")
    }

    @Test func aPromptEntryIsWholeWhenItsQuotesAndJSONClose() throws {
        #expect(Prompt.isComplete(["count items"]))
        #expect(!Prompt.isComplete([#"create todos '{"title":"#]))
        #expect(!Prompt.isComplete([#"create todos '{"title":"#, #""x", "tags": ["a","#]))
        #expect(Prompt.isComplete([#"create todos '{"title":"#, #""x", "tags": ["a","#, #""b"]}'"#]))
        // Brackets inside JSON strings do not count; a quote inside single quotes closes them.
        #expect(Prompt.isComplete([#"create t '{"a":"{[ not json"}'"#]))
        #expect(!Prompt.isComplete([#"create t '{"a":"it's"}'"#]))
        #expect(Prompt.isComplete([#"create t "{\"a\":\"{\"}""#]))
        #expect(!Prompt.isComplete([#"create t "{\"a\":"#]))
        #expect(!Prompt.isComplete(["search items \\"]))
        #expect(Prompt.isComplete(["search items \\", "--limit 3"]))
        #expect(Prompt.join(["search items \\", "--limit 3"]) == "search items \n--limit 3")
        let joined = Prompt.join(["search items \\", "--limit 3"])
        #expect(try splitCommandLine(joined) == ["search", "items", "--limit", "3"])
        #expect(Prompt.historyEntry("create t '{\n  \"a\": 1\n}'") == #"create t '{ "a": 1 }'"#)
    }

    @Test func completionOffersCommandsOptionsValuesAndCollections() async {
        let names = ["items", "pokemon_items", "profiles"]
        func offered(_ line: String, prompt: Bool = true) async -> [String] {
            await Completion.candidates(Completion.words(line), prompt: prompt) { names }
        }
        let first = await offered("")
        #expect(first.contains("search") && first.contains("quit"))
        #expect(!(await offered("", prompt: false)).contains("quit"))
        #expect(await offered("se") == ["search"])
        #expect(await offered("blob ") == ["delete", "get", "info", "list", "put"])
        #expect(await offered("search p") == ["pokemon_items", "profiles"])
        #expect(await offered("search items --l") == ["--limit"])
        #expect(await offered("search items --limit 5 --s") == ["--socket", "--sort"])
        #expect(await offered("--port 7500 count i") == ["items"])
        #expect(await offered("import items f.json --mode ") == ["insert", "skip-existing", "upsert"])
        #expect(await offered("get items ") == [], "the id is not a collection")
        #expect(await offered("help bl") == ["blob"])
        #expect(await offered("help blob p") == ["put"])
        #expect(await offered("create 'pro") == ["profiles"])
        #expect(LineEditor.commonPrefix(["profiles", "pokemon_items"]) == "p")
    }

    @Test func historyEntriesOfSeveralLinesSurviveTheFile() throws {
        let path = NSTemporaryDirectory() + "larder-history-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        LineEditor.append("count items", to: path)
        LineEditor.append("create t '{\n\"a\": \"back\\\\slash\"}'", to: path)
        #expect(LineEditor.loadHistory(path) == ["count items", "create t '{\n\"a\": \"back\\\\slash\"}'"])
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        for n in 0..<(2 * LineEditor.historyLimit) { LineEditor.append("ping \(n)", to: path) }
        let kept = LineEditor.loadHistory(path)
        #expect(kept.count <= 2 * LineEditor.historyLimit && kept.last == "ping \(2 * LineEditor.historyLimit - 1)")
    }

    /// A STATS answer from a newer server, with members and sections this client does not know, gives the same
    /// summary as one without them: they are ignored, never an error.
    @Test func statsSummaryIgnoresMembersItDoesNotKnow() {
        let known: JSONObject = [
            "server": "larder-server 0.1.0", "uptimeMs": 1000,
            "connections": ["open": 1, "total": 2, "refused": 0],
            "requests": ["total": 10, "errors": 0, "byOpcode": ["GET": ["count": 10, "errors": 0]]],
        ]
        let newer: JSONObject = [
            "server": "larder-server 0.1.0", "uptimeMs": 1000, "quantumFlux": ["level": 11],
            "connections": ["open": 1, "total": 2, "refused": 0, "teleported": 3],
            "requests": ["total": 10, "errors": 0, "byOpcode": ["GET": ["count": 10, "errors": 0, "warp": true]]],
        ]
        let rows = StatsSummary.rows(newer, rate: nil)
        #expect(rows.map(\.0) == StatsSummary.rows(known, rate: nil).map(\.0))
        #expect(rows.map(\.1) == StatsSummary.rows(known, rate: nil).map(\.1))
        #expect(!rows.contains { $0.0.contains("quantum") || $0.1.contains("teleported") })
    }

    @Test func statsSummaryRows() {
        let stats: JSONObject = [
            "server": "larder-server 0.1.0", "uptimeMs": 3_723_000,
            "connections": ["open": 3, "total": 1200, "refused": 0],
            "requests": [
                "total": 12345, "errors": 5,
                "byOpcode": [
                    "GET": ["count": 10000, "errors": 0, "latencyMicros": ["p50": 45, "p99": 1200]],
                    "CREATE": ["count": 2345, "errors": 5, "latencyMicros": ["p50": 1700, "p99": 2_500_000]],
                ],
            ],
            "readCache": ["hits": 900, "misses": 100],
            "watch": ["subscriptions": 2, "events": 1234, "gaps": 0],
            "store": [
                "documents": 1000, "blobs": 3, "databaseBytes": 13_107_200, "changes": 1003, "lastChangeSeq": 1003,
            ],
        ]
        let rows = StatsSummary.rows(stats, rate: (250, "1 s"))
        #expect(rows.first?.1 == "larder-server 0.1.0, up 1h 02m 03s")
        #expect(rows.contains { $0 == ("connections", "3 open, 1,200 since start, 0 refused") })
        #expect(rows.contains { $0.0 == "requests" && $0.1.hasPrefix("250.0/s over the last 1 s, 12,345 since start") })
        #expect(rows.contains { $0 == ("store", "1,000 documents, 3 blobs, 12.5 MiB on disk") })
        #expect(rows.contains { $0 == ("read cache", "90.0% of 1,000 GETs answered from memory") })
        #expect(StatsSummary.operations(stats) == [
            ["GET", "10,000", "0", "45 µs", "1.2 ms"], ["CREATE", "2,345", "5", "1.7 ms", "2.5 s"],
        ])
    }
}
