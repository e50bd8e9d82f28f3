import Foundation
import LarderTestThreads
import Testing

/// Every public declaration an app sees has a doc comment: LarderClient's, and LarderWire's, which LarderClient
/// re-exports. A declaration is documented when a `///` line sits directly above it, or above the attributes
/// (`@discardableResult`, `@inlinable`) written on the lines before it. `public extension` and `public import` lines
/// declare nothing of their own and need none; the cases of a public enum are declarations and need one each.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PublicDocumentationTests {
    static let sourcesDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources")

    /// The modules whose public declarations an app developer sees.
    static let modules = ["LarderWire", "LarderClient"]

    /// A public declaration found in a source file.
    struct Declaration: Equatable, CustomStringConvertible {
        /// `file:line`, 1-based.
        var location: String
        /// The declaration's line, trimmed.
        var text: String
        /// True when a `///` line is directly above it (or above its attributes).
        var documented: Bool

        var description: String { "\(location): \(text)" }
    }

    /// The words that may follow `public` or `open` in a declaration: its keyword, or a modifier before the keyword.
    static let declarationWords: Set<String> = [
        "func", "var", "let", "init", "init?", "init!", "struct", "enum", "class", "protocol", "typealias", "subscript",
        "case", "actor", "associatedtype", "static", "final", "convenience", "mutating", "nonmutating", "indirect",
        "override", "required", "prefix", "postfix", "infix", "nonisolated", "lazy", "dynamic", "weak", "unowned",
        "private(set)", "fileprivate(set)", "internal(set)", "package(set)",
    ]

    /// The line without the attributes that open it (`@discardableResult public func` is `public func`).
    static func droppingAttributes(_ line: Substring) -> Substring {
        var rest = line
        while rest.first == "@" {
            rest = rest.dropFirst().drop { $0.isLetter || $0.isNumber || $0 == "_" }
            if rest.first == "(" {
                var depth = 0
                rest = rest.drop {
                    if $0 == "(" { depth += 1 } else if $0 == ")" { depth -= 1 }
                    return depth > 0 || $0 == "("
                }
                rest = rest.dropFirst()  // the closing parenthesis
            }
            rest = rest.drop { $0 == " " }
        }
        return rest
    }

    /// The public declarations of one Swift source: lines that start (after their attributes) with `public` or `open`
    /// followed by a declaration, and the `case` lines of public enums.
    static func declarations(in source: String, file: String) -> [Declaration] {
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false)
        // The types the current line is inside: the indentation of each one's declaration, and whether it is a public
        // enum (whose cases are public declarations).
        var enclosing: [(indent: Int, publicEnum: Bool)] = []
        var found: [Declaration] = []
        let modifiers: Set<String> = ["public", "package", "internal", "fileprivate", "private", "final", "indirect"]
        for (n, line) in lines.enumerated() {
            let indent = line.prefix { $0 == " " }.count
            let trimmed = line.drop { $0 == " " }
            if trimmed.hasPrefix("}"), let innermost = enclosing.last, innermost.indent == indent {
                enclosing.removeLast()
            }
            let words = droppingAttributes(trimmed).split(separator: " ").map(String.init)
            guard let first = words.first else { continue }
            var isDeclaration = false
            if first == "public" || first == "open", words.count > 1 {
                // `init(`, `init?(`, `subscript(`: the keyword without what follows it; `private(set)` as it is.
                let next = words[1].hasSuffix("(set)") ? words[1] : String(words[1].prefix { !"(<:".contains($0) })
                isDeclaration = declarationWords.contains(next)
            } else if first == "case", !trimmed.hasSuffix(":"), let innermost = enclosing.last, innermost.publicEnum,
                indent == innermost.indent + 4
            {
                isDeclaration = true
            }
            let keyword = words.first { !modifiers.contains($0) }
            if let keyword, ["struct", "enum", "class", "protocol", "actor", "extension"].contains(keyword),
                !trimmed.hasSuffix("}")
            {
                enclosing.append((indent, keyword == "enum" && words.prefix { $0 != "enum" }.contains("public")))
            }
            guard isDeclaration else { continue }
            var above = n - 1
            while above >= 0, lines[above].drop(while: { $0 == " " }).hasPrefix("@") { above -= 1 }
            let documented = above >= 0 && lines[above].drop(while: { $0 == " " }).hasPrefix("///")
            found.append(Declaration(location: "\(file):\(n + 1)", text: String(trimmed), documented: documented))
        }
        return found
    }

    @Test func everyPublicDeclarationOfTheClientAndTheWireIsDocumented() throws {
        var all: [Declaration] = []
        for module in Self.modules {
            let directory = Self.sourcesDirectory.appendingPathComponent(module)
            let files = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                .filter { $0.hasSuffix(".swift") }.sorted()
            #expect(!files.isEmpty, "no Swift sources under \(directory.path)")
            for file in files {
                let source = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
                all += Self.declarations(in: source, file: "\(module)/\(file)")
            }
        }
        // The client's API is a few hundred declarations; far fewer means the scan stopped seeing them.
        #expect(all.count > 400, "found only \(all.count) public declarations")
        let undocumented = all.filter { !$0.documented }
        #expect(
            undocumented.isEmpty,
            """
            \(undocumented.count) public declarations have no `///` doc comment directly above them (or above their \
            attributes); say what each does, what it throws, and give an example where one helps:
            \(undocumented.map(\.description).joined(separator: "\n"))
            """)
    }

    @Test func theScanFindsEveryKindOfDeclarationAndOnlyThose() {
        let source = """
            import Foundation
            public import Dispatch

            /// Documented.
            public struct Documented {
                public var bare: Int
                /// Documented.
                @discardableResult
                public func withAttribute() -> Int { 1 }
                @inlinable public func attributeOnTheLine() {}
                public private(set) var readOnly = 0
                var open = false
                public static func == (lhs: Documented, rhs: Documented) -> Bool { true }
                package func shared() {}
            }

            public extension Documented {}

            /// Documented.
            public indirect enum Choice {
                /// Documented.
                case first
                case second(Int)
                public var isFirst: Bool {
                    switch self {
                    case .first: true
                    case .second: false
                    }
                }
            }

            enum Internal {
                case hidden
            }

            public typealias Alias = Int

            extension Documented {
                public init(bare: Int) { self.bare = bare }
                /// Documented.
                public subscript(key: String) -> Int { 0 }
            }
            """
        let declarations = Self.declarations(in: source, file: "Sample.swift")
        #expect(
            declarations.filter(\.documented).map(\.location) == [
                "Sample.swift:5", "Sample.swift:9", "Sample.swift:20", "Sample.swift:22", "Sample.swift:41",
            ])
        #expect(
            declarations.filter { !$0.documented }.map(\.location) == [
                "Sample.swift:6", "Sample.swift:10", "Sample.swift:11", "Sample.swift:13", "Sample.swift:23",
                "Sample.swift:24", "Sample.swift:36", "Sample.swift:39",
            ])
    }
}
