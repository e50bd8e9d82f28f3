import Foundation
import LarderTestThreads
import Testing

/// Every promise of Protocol.md and of OPERATING.md's "Scaling out" and "Operating Larder" sections has a test that
/// names it: `Tests/Promises.md` maps each one to the tests that exercise it, and this suite fails when a promise has
/// no row (a new or reworded sentence), a row has no promise (one removed), or a row names a test that does not exist.
///
/// A promise is a sentence (or a table row) of Protocol.md that names a status (`INVALID_ARGUMENT`), a limit
/// (`maxFrameBytes`) or says MUST; in the two OPERATING.md sections, one that names a server option (`--max-in-flight`).
/// Each is keyed by its section and a hash of its words, so rewording a promise asks for its tests to be named again.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PromiseTableTests {
    static let repository = TestRulesTests.testsDirectory.deletingLastPathComponent()
    static let tablePath = TestRulesTests.testsDirectory.appendingPathComponent("Promises.md").path

    struct Promise: Hashable {
        var key: String
        var text: String
        /// The first words, as the table shows them.
        var excerpt: String {
            let flat = text.replacingOccurrences(of: "|", with: "/")
            return flat.count <= 100 ? flat : String(flat.prefix(97)) + "..."
        }
    }

    /// FNV-1a, 32 bits, of the sentence's bytes: stable across runs and platforms.
    static func hash(_ text: String) -> String {
        var value: UInt32 = 0x811C_9DC5
        for byte in text.utf8 {
            value ^= UInt32(byte)
            value = value &* 0x0100_0193
        }
        return String(format: "%08x", value)
    }

    /// The text's units: paragraphs (blank-line separated), each list item and each table row on its own, code blocks
    /// left out; each with the section heading number in force (`5.4`), or the heading's title where it has none.
    static func units(_ markdown: String) -> [(section: String, text: String)] {
        var units: [(String, String)] = []
        var section = ""
        var current: [Substring] = []
        var inCode = false
        func flush() {
            let text = current.map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
            if !text.isEmpty { units.append((section, text)) }
            current = []
        }
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                flush()
                inCode.toggle()
                continue
            }
            if inCode { continue }
            if line.hasPrefix("#") {
                flush()
                let title = line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces)
                let number = title.prefix { $0.isNumber || $0 == "." }
                section = number.isEmpty ? title : String(number.hasSuffix(".") ? number.dropLast() : number)
                continue
            }
            if line.trimmingCharacters(in: .whitespaces).isEmpty {
                flush()
                continue
            }
            if line.hasPrefix("- ") || line.hasPrefix("|") { flush() }
            if line.hasPrefix("|--") || line.hasPrefix("| --") { continue }
            current.append(line)
            if line.hasPrefix("|") { flush() }
        }
        flush()
        return units
    }

    /// A unit's sentences: split after `.` or `;` followed by a space and a capital, a backtick or a parenthesis.
    /// Table rows are one sentence each.
    static func sentences(_ text: String) -> [String] {
        if text.hasPrefix("|") { return [text] }
        var sentences: [String] = []
        var current = ""
        let characters = Array(text)
        var i = 0
        while i < characters.count {
            current.append(characters[i])
            if characters[i] == "." || characters[i] == ";", i + 2 < characters.count, characters[i + 1] == " ",
                characters[i + 2].isUppercase || characters[i + 2] == "`" || characters[i + 2] == "("
            {
                sentences.append(current)
                current = ""
                i += 2
                continue
            }
            i += 1
        }
        if !current.isEmpty { sentences.append(current) }
        return sentences
    }

    /// Names in backticks in the first column after a number in Protocol.md's status table, and in the first column
    /// of its limits table.
    static func vocabulary(_ protocolText: String) -> (statuses: Set<String>, limits: Set<String>) {
        var statuses: Set<String> = []
        var limits: Set<String> = []
        for (section, text) in units(protocolText) where text.hasPrefix("|") {
            let cells = text.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            if section == "6", cells.count >= 2, Int(cells[0]) != nil, cells[1].hasPrefix("`") {
                statuses.insert(cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`")))
            }
            if section == "8", let first = cells.first, first.hasPrefix("`") {
                limits.insert(first.trimmingCharacters(in: CharacterSet(charactersIn: "`")))
            }
        }
        statuses.remove("OK")
        return (statuses, limits)
    }

    static func promises() throws -> [Promise] {
        let protocolText = try String(
            contentsOf: repository.appendingPathComponent("Protocol.md"), encoding: .utf8)
        let (statuses, limits) = vocabulary(protocolText)
        var found: [Promise] = []
        func add(_ document: String, _ section: String, _ sentence: String) {
            let key = "\(document) \(section) \(hash(sentence))"
            found.append(Promise(key: key, text: sentence))
        }
        for (section, text) in units(protocolText) {
            for sentence in sentences(text) {
                let names = statuses.union(limits)
                // The sentence that defines the key words is not itself a promise.
                guard !sentence.contains("RFC 2119") else { continue }
                if sentence.contains("MUST") || names.contains(where: { sentence.contains("`\($0)`") }) {
                    add("Protocol", section, sentence)
                }
            }
        }
        let operating = try String(contentsOf: repository.appendingPathComponent("OPERATING.md"), encoding: .utf8)
        for (section, text) in units(operating) where ["Scaling out", "Operating Larder"].contains(section) {
            for sentence in sentences(text) where sentence.contains("`--") {
                add("OPERATING", section.replacingOccurrences(of: " ", with: "-"), sentence)
            }
        }
        return found
    }

    /// The table's rows: key, the tests named, the excerpt.
    static func table() throws -> [(key: String, tests: [String], excerpt: String)] {
        let text = try String(contentsOfFile: tablePath, encoding: .utf8)
        return text.split(separator: "\n").compactMap { line in
            guard line.hasPrefix("| ") else { return nil }
            let cells = line.dropFirst(2).components(separatedBy: " | ")
            guard cells.count >= 3, cells[0] != "promise", !cells[0].hasPrefix("-") else { return nil }
            let tests = cells[1].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.isEmpty }
            var excerpt = cells[2...].joined(separator: " | ")
            if excerpt.hasSuffix(" |") { excerpt.removeLast(2) }
            return (cells[0], tests, excerpt)
        }
    }

    /// Every function declared in Tests/.
    static func testFunctions() throws -> Set<String> {
        var names: Set<String> = []
        for (_, lines) in try TestRulesTests.sources() {
            for line in lines {
                guard let range = line.range(of: "func ") else { continue }
                let name = line[range.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                if !name.isEmpty { names.insert(String(name)) }
            }
        }
        return names
    }

    @Test func everyPromiseHasATestThatNamesIt() throws {
        let promises = try Self.promises()
        #expect(promises.count > 100, "found only \(promises.count) promises")
        let rows = try Self.table()
        let byKey = Dictionary(rows.map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
        let functions = try Self.testFunctions()
        var unmapped: [String] = []
        for promise in promises {
            guard let row = byKey[promise.key] else {
                unmapped.append("| \(promise.key) |  | \(promise.excerpt) |")
                continue
            }
            #expect(!row.tests.isEmpty, "no test named for \(promise.key): \(promise.excerpt)")
            for test in row.tests where !functions.contains(test) {
                Issue.record(Comment(rawValue: "\(promise.key) names \(test), which no file in Tests/ declares"))
            }
            #expect(row.excerpt == promise.excerpt, "\(promise.key)'s excerpt is not the promise's words")
        }
        let unmappedList = unmapped.joined(separator: "\n")
        #expect(
            unmapped.isEmpty,
            "promises with no row in Tests/Promises.md (add each with the tests that exercise it):\n\(unmappedList)")
        let keys = Set(promises.map(\.key))
        let stale = rows.filter { !keys.contains($0.key) }.map(\.key)
        #expect(stale.isEmpty, "rows of Tests/Promises.md for promises no longer in the documents: \(stale)")
    }
}
