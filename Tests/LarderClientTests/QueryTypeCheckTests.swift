import Foundation
import LarderTestProcess
import LarderTestThreads
import Testing

/// The Swift query API is type-checked: code an app writes against the built LarderClient module compiles where the
/// wire form allows the comparison and is refused by the compiler where it does not (`Field("x") < [1, 2]`).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct QueryTypeCheckTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Lines that must compile, each inside a function of its own.
    static let compiles = [
        #"_ = Field("price") < 50 && Field("category") == "Ball" || !Field("address.zip").exists"#,
        #"_ = Field("nickname") == nil"#,
        #"_ = Field("nickname") != nil"#,
        #"_ = Field("category").in(["Ball", "Medicine", nil])"#,
        #"_ = Field("due") >= Date() && Field("owner") == UUID() && Field("ratio") > Float(0.5)"#,
        #"_ = Field("discount") == true"#,
        #"let names: [String] = []; _ = Field("name").in(names)"#,
        #"let maybe: Int? = nil; _ = Field("n") == maybe"#,
        #"_ = [Field("price").descending, Field("name").ascending]"#,
        #"let items = LarderClient().collection("items", of: Item.self); _ = items.search(Field("n") > 1, limit: 5)"#,
        #"""
        let items = LarderClient().collection("items", of: Item.self)
        Task {
            for try await item in items.search(containing: "张", sortedBy: [Field("n").descending]) {
                print(item.value.n)
            }
        }
        """#,
    ]

    /// Lines the compiler must refuse: comparisons the JSON form does not have.
    static let refused = [
        #"_ = Field("x") < [1, 2]"#,
        #"_ = Field("x") < true"#,
        #"_ = Field("x") > nil"#,
        #"_ = Field("x") == [1]"#,
        #"_ = Field("x") == ["a": 1]"#,
        #"_ = Field("x").in([[1]])"#,
        #"_ = Field("x") == Item(n: 1)"#,
        #"_ = Field("x") < 1 && true"#,
    ]

    @Test func comparisonsTheWireFormLacksDoNotCompile() throws {
        let modules = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("Modules")
        try #require(
            FileManager.default.fileExists(atPath: modules.appendingPathComponent("LarderClient.swiftmodule").path),
            "no LarderClient.swiftmodule in \(modules.path)")
        var source = "import Foundation\nimport LarderClient\n\nstruct Item: Codable, Sendable { var n: Int }\n"
        var refusedLines: [Int: String] = [:]
        var compilingLines: [ClosedRange<Int>] = []
        for (n, line) in Self.compiles.enumerated() {
            let first = source.split(separator: "\n", omittingEmptySubsequences: false).count
            source += "func compiles\(n)() {\n    \(line)\n}\n"
            let last = source.split(separator: "\n", omittingEmptySubsequences: false).count - 1
            compilingLines.append(first...last)
        }
        for (n, line) in Self.refused.enumerated() {
            source += "func refused\(n)() {\n"
            refusedLines[source.split(separator: "\n", omittingEmptySubsequences: false).count] = line
            source += "    \(line)\n}\n"
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-typecheck-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("App.swift")
        try source.write(to: file, atomically: true, encoding: .utf8)

        // The C modules the library's modules import are found by their module maps, as the package build finds them.
        let sources = Self.packageRoot.appendingPathComponent("Sources")
        let cModules = try FileManager.default.contentsOfDirectory(atPath: sources.path).filter { $0.hasPrefix("C") }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            ["swiftc", "-typecheck", "-parse-as-library", "-swift-version", "6", "-I", modules.path]
            + cModules.flatMap { ["-I", sources.appendingPathComponent($0).path] } + [file.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()

        // `App.swift:LINE:COLUMN: error: ...`, for each error.
        var errorLines: Set<Int> = []
        for line in text.split(separator: "\n") where line.hasPrefix(file.path + ":") && line.contains(": error: ") {
            let rest = line.dropFirst(file.path.count + 1)
            if let number = Int(rest.prefix { $0.isNumber }) { errorLines.insert(number) }
        }
        #expect(process.terminationStatus != 0)
        for (line, code) in refusedLines.sorted(by: { $0.key < $1.key }) {
            #expect(errorLines.contains(line), "compiles but must not: \(code)\n\(text)")
        }
        for (n, lines) in compilingLines.enumerated() {
            #expect(errorLines.allSatisfy { !lines.contains($0) }, "does not compile: \(Self.compiles[n])\n\(text)")
        }
        #expect(errorLines.isSubset(of: Set(refusedLines.keys)), "\(text)")
    }
}
