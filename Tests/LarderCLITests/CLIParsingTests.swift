import LarderClient
import LarderTestThreads
import Testing

@testable import LarderCLI

/// The `larder` argument parser, filter syntax and prompt line splitting.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIParsingTests {
    func parse(_ line: String) throws -> (Invocation, CommandSpec?) {
        try Invocation.parse(try splitCommandLine(line), commands: Commands.all)
    }

    @Test func globalOptionsGoBeforeOrAfterTheCommand() throws {
        let (a, ca) = try parse("--port 7500 --json get items 3f2504e0-4f89-11d3-9a0c-0305e82c3301")
        let (b, cb) = try parse("get items 3f2504e0-4f89-11d3-9a0c-0305e82c3301 --port=7500 --json")
        #expect(ca?.name == "get" && cb?.name == "get")
        #expect(a == b)
        #expect(a.value("port") == "7500")
        #expect(a.flag("json"))
        #expect(a.arguments == ["items", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"])
    }

    @Test func repeatedOptionsAndSubcommands() throws {
        let (s, _) = try parse("search items --where 'price<50' --where discount=true --sort price:desc --limit=3")
        #expect(s.values["where"] == ["price<50", "discount=true"])
        #expect(s.value("limit") == "3")
        let (g, command) = try parse("blob get 3f2504e0-4f89-11d3-9a0c-0305e82c3301 -o out.jpg")
        #expect(command?.name == "blob get")
        #expect(g.value("output") == "out.jpg")
        let (i, _) = try parse("import todos -")
        #expect(i.arguments == ["todos", "-"])
    }

    @Test func usageErrors() throws {
        #expect(throws: UsageError.self) { try parse("frobnicate") }
        #expect(throws: UsageError.self) { try parse("get items") }
        #expect(throws: UsageError.self) { try parse("get items --bogus 1 x") }
        #expect(throws: UsageError.self) { try parse("search items --limit") }
        #expect(throws: UsageError.self) { try parse("ping --json=yes") }
        #expect(throws: UsageError.self) { try parse("blob") }
        #expect(throws: UsageError.self) { try parse("blob eat x") }
        #expect(throws: UsageError.self) { try parse("--where a=1 search items") }
        #expect(throws: UsageError.self) { try parse("create items {} extra") }
    }

    @Test func helpIsAcceptedAtEveryLevel() throws {
        #expect(try parse("--help").0.flag("help"))
        #expect(try parse("blob --help").0.words == ["blob"])
        let (h, command) = try parse("blob put --help")
        #expect(h.flag("help") && command?.name == "blob put")
        #expect(try parse("get -h").0.flag("help"))
    }

    @Test func filterExpressions() throws {
        #expect(try FilterSyntax.parse("price<50") == .compare(try FieldPath("price"), .lt, 50))
        #expect(try FilterSyntax.parse("price >= 12.5") == .compare(try FieldPath("price"), .gte, 12.5))
        #expect(try FilterSyntax.parse("discount=true") == .compare(try FieldPath("discount"), .eq, true))
        #expect(try FilterSyntax.parse("score=\"92\"") == .compare(try FieldPath("score"), .eq, "92"))
        #expect(try FilterSyntax.parse("store!=7-Eleven") == .compare(try FieldPath("store"), .ne, "7-Eleven"))
        #expect(try FilterSyntax.parse("address~北京") == .contains(try FieldPath("address"), "北京"))
        #expect(try FilterSyntax.parse("name^=poke") == .prefix(try FieldPath("name"), "poke"))
        #expect(
            try FilterSyntax.parse("category=[\"Ball\",\"Medicine\"]")
                == .isIn(try FieldPath("category"), ["Ball", "Medicine"]))
        #expect(try FilterSyntax.parse("photoName?") == .exists(try FieldPath("photoName"), true))
        #expect(try FilterSyntax.parse("!photoName?") == .exists(try FieldPath("photoName"), false))
        #expect(try FilterSyntax.parse("address.city=Taipei") == .compare(try FieldPath("address.city"), .eq, "Taipei"))
        #expect(try FilterSyntax.parse("$rev>1") == .compare(try FieldPath("$rev"), .gt, 1))
        #expect(throws: UsageError.self) { try FilterSyntax.parse("price") }
        #expect(throws: UsageError.self) { try FilterSyntax.parse("=5") }
        #expect(throws: UsageError.self) { try FilterSyntax.parse("price<true") }
        #expect(throws: UsageError.self) { try FilterSyntax.parse("$bogus=1") }
        let both = try FilterSyntax.filter(wheres: ["price<50", "discount=true"], json: nil)
        #expect(both == .and([.compare(try FieldPath("price"), .lt, 50), .compare(try FieldPath("discount"), .eq, true)]))
    }

    @Test func promptLinesSplitLikeAShell() throws {
        #expect(try splitCommandLine("create todos '{\"title\": \"買 牛奶\"}'") == ["create", "todos", "{\"title\": \"買 牛奶\"}"])
        #expect(try splitCommandLine("search  items --where \"price < 50\"") == ["search", "items", "--where", "price < 50"])
        #expect(try splitCommandLine("a\\ b ''") == ["a b", ""])
        #expect(throws: UsageError.self) { try splitCommandLine("get 'unterminated") }
    }

    @Test func tableWidthsCountWideCharactersTwice() {
        #expect(Output.width("abc") == 3)
        #expect(Output.width("北京") == 4)
        #expect(Output.pad("北京", 6) == "北京  ")
        #expect(Output.cell("鮪魚飯糰鮪魚飯糰", limit: 7) == "鮪魚飯…")
    }
}
