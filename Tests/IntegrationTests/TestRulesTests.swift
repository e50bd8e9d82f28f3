import Foundation
import LarderTestProcess
import LarderTestThreads
import Testing

/// The rules the test sources keep, checked on the sources: a test that hangs must fail with its name, so every suite
/// with tests carries a `.timeLimit`; every suite runs its tests on threads of their own (`.ownThreads`), so no test
/// holds the threads the others' async steps need; a wait's result is checked; the integration tests' deadlines are
/// 120 s or more.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TestRulesTests {
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
        if words.first == "@Suite" {
            words.removeFirst()  // a bare suite attribute on the same line
        } else if words.first?.hasPrefix("@Suite") == true, let end = words.firstIndex(where: { $0.hasSuffix(")") }) {
            words.removeFirst(end + 1)  // a suite attribute on the same line
        }
        while let word = words.first, ["final", "public", "private", "fileprivate"].contains(word) {
            words.removeFirst()
        }
        guard words.count >= 2, ["struct", "class", "enum", "extension"].contains(words[0]) else { return nil }
        return String(words[1].prefix { $0.isLetter || $0.isNumber || $0 == "_" })
    }

    @Test func everySuiteWithTestsHasATimeLimitAndThreadsOfItsOwn() throws {
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
                if attribute.contains("@Suite("), attribute.contains("timeLimit"), attribute.contains(".ownThreads") {
                    limited.insert(type)
                }
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
                missing.append("\(path): a test in \(type ?? "no type") lacks a time limit or .ownThreads")
            }
        }
        #expect(tests > 300)
        #expect(missing.isEmpty, "\(missing.joined(separator: "\n"))")
    }

    /// A test of a suite with `.ownThreads` runs on the threads made for it, not on the ones every task shares, and
    /// so does an async test after a wait that another thread ends (as a socket's or a child process's answer does).
    /// Under ThreadSanitizer the runtime resumes a task on the shared threads after any wait, whatever executor it
    /// prefers: there only the start is checked.
    @Test func aTestRunsOnThreadsOfItsOwn() async throws {
        let before = TestRulesTests.threadName()
        await withCheckedContinuation { (answered: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread { answered.resume() }
        }
        let after = TestRulesTests.threadName()
        #expect(before.hasPrefix("test-"), "started on \(before)")
        if SanitizerBuild.current != .thread {
            #expect(after.hasPrefix("test-"), "ran on \(before), then \(after)")
        }
    }

    static func threadName() -> String { Thread.current.name ?? "an unnamed thread" }

    /// Children are started with `ChildProcess` (LarderTestSupport), never Foundation's `Process`, whose `run()` on
    /// Linux now and then reads past a buffer into an unmapped page and takes the whole test process down.
    @Test func childrenAreStartedWithoutFoundationsProcess() throws {
        var found: [String] = []
        // Built from pieces, so this file does not match itself.
        let needles = [" " + "Process()", "(" + "Process()", ": " + "Process\n", ": " + "Process,", ": " + "Process)"]
        for (path, lines) in try Self.sources() {
            for (n, line) in lines.enumerated() where needles.contains(where: { (line + "\n").contains($0) }) {
                found.append("\(path):\(n + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        #expect(found.isEmpty, "Foundation's Process in the tests:\n\(found.joined(separator: "\n"))")
    }

    /// `waitUntil` answers whether its condition came true: a result thrown away makes the wait a pause that passes
    /// whatever happened.
    @Test func noWaitResultIsDiscarded() throws {
        var found: [String] = []
        for (path, lines) in try Self.sources() {
            for (n, line) in lines.enumerated() {
                let code = line.replacingOccurrences(of: " ", with: "")
                // The needles are built from pieces, so this file does not match itself.
                let wait = "await" + "waitUntil"
                if code.contains("_=try" + wait) || code.contains("_=" + wait) || code.contains("_=try?" + wait) {
                    found.append("\(path):\(n + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(found.isEmpty, "waits whose result is discarded:\n\(found.joined(separator: "\n"))")
    }

    /// The calls whose first number literal after the prefix is a deadline in seconds.
    static let deadlineCalls = [
        "waitUntil(", "receive(timeout: ", "framesUntilClosed(timeout: ", "Date().addingTimeInterval(",
        "monotonicSeconds() + ", "nextEvents(",
    ]

    /// The deadline in seconds a line passes right after `prefix` as a number literal, if it does. `nextEvents`
    /// takes its deadline as `timeout:`. A literal that is only part of a sum is not a deadline by itself.
    static func literalDeadline(_ line: Substring, after prefix: String) -> Double? {
        guard let found = line.range(of: prefix) else { return nil }
        var rest = line[found.upperBound...]
        if prefix == "nextEvents(" {
            guard let timeout = rest.range(of: "timeout: ") else { return nil }
            rest = rest[timeout.upperBound...]
        }
        let literal = rest.prefix { $0.isNumber || $0 == "_" || $0 == "." }
        guard !literal.isEmpty, let value = Double(literal.replacingOccurrences(of: "_", with: "")) else { return nil }
        let after = rest.dropFirst(literal.count).first
        guard after == nil || after == ")" || after == "," else { return nil }
        return value
    }

    /// The integration tests wait for conditions with deadlines of 120 s or more: a deadline runs out only when what
    /// it waits for never comes, never because the shared machine was busy.
    @Test func integrationDeadlinesAreAtLeast120Seconds() throws {
        var short: [String] = []
        var seen = 0
        for (path, lines) in try Self.sources() where path.hasPrefix("IntegrationTests/") {
            for (n, line) in lines.enumerated() {
                for prefix in Self.deadlineCalls {
                    guard let seconds = Self.literalDeadline(line, after: prefix) else { continue }
                    seen += 1
                    if seconds < 120 { short.append("\(path):\(n + 1): \(line.trimmingCharacters(in: .whitespaces))") }
                }
            }
        }
        #expect(seen > 50, "found \(seen) deadlines")
        #expect(short.isEmpty, "deadlines under 120 s:\n\(short.joined(separator: "\n"))")
    }
}
