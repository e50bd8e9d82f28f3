import Foundation
import Testing

/// The rules the test sources keep, checked on the sources: a test that hangs must fail with its name, so every suite
/// with tests carries a `.timeLimit`.
@Suite(.timeLimit(.minutes(20))) struct TestRulesTests {
    static let testsDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()

    /// Each Swift file of Tests/ with its lines.
    static func sources() throws -> [(path: String, lines: [Substring])] {
        let enumerator = FileManager.default.enumerator(atPath: testsDirectory.path)
        var files: [(String, [Substring])] = []
        while let relative = enumerator?.nextObject() as? String {
            guard relative.hasSuffix(".swift") else { continue }
            let text = try String(contentsOf: testsDirectory.appendingPathComponent(relative), encoding: .utf8)
            files.append((relative, text.split(separator: "\n", omittingEmptySubsequences: false)))
        }
        return files
    }

    /// The type a top-level declaration line opens (`struct X`, `extension X`, ...), if it opens one.
    static func declaredType(_ line: Substring) -> String? {
        guard let first = line.first, first != " " else { return nil }  // top level only
        var words = line.split(separator: " ")
        if words.first?.hasPrefix("@Suite") == true, let end = words.firstIndex(where: { $0.hasSuffix(")") }) {
            words.removeFirst(end + 1)  // a suite attribute on the same line
        }
        while let word = words.first, ["final", "public", "private", "fileprivate"].contains(word) {
            words.removeFirst()
        }
        guard words.count >= 2, ["struct", "class", "enum", "extension"].contains(words[0]) else { return nil }
        return String(words[1].prefix { $0.isLetter || $0.isNumber || $0 == "_" })
    }

    @Test func everySuiteWithTestsHasATimeLimit() throws {
        let files = try Self.sources()
        #expect(files.count > 40, "found \(files.count) test files under \(Self.testsDirectory.path)")
        // Types whose @Suite attribute (on the declaration's line or the lines just above it) sets a time limit.
        var limited: Set<String> = []
        for (_, lines) in files {
            for (n, line) in lines.enumerated() {
                guard let type = Self.declaredType(line), !line.hasPrefix("extension") else { continue }
                var attribute = line.hasPrefix("@Suite") ? String(line) : ""
                var above = n - 1
                // An attribute's lines: `@...`, and the indented lines of one spread over several.
                while above >= 0, lines[above].hasPrefix("@") || lines[above].hasPrefix(" ") {
                    attribute += lines[above]
                    above -= 1
                }
                if attribute.contains("@Suite(") && attribute.contains("timeLimit") { limited.insert(type) }
            }
        }
        var missing: [String] = []
        var tests = 0
        for (path, lines) in files {
            var type: String?
            for line in lines {
                if let declared = Self.declaredType(line) { type = declared }
                guard line.trimmingCharacters(in: .whitespaces).hasPrefix("@Test") else { continue }
                tests += 1
                if let type, limited.contains(type) { continue }
                missing.append("\(path): a test in \(type ?? "no type") has no time limit")
            }
        }
        #expect(tests > 300)
        #expect(missing.isEmpty, "\(missing.joined(separator: "\n"))")
    }
}
