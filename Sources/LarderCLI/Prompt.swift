#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderSync

/// The prompt's lines: the prompts, when a command is whole, and how its lines join.
enum Prompt {
    /// What one entry at the prompt asks for.
    enum Entry: Equatable {
        /// A blank line or a `#` comment, or a word the prompt handled itself (`history`).
        case nothing
        /// `quit` or `exit`.
        case quit
        /// Words to run.
        case command([String])
        /// Words that do not split (an open quote); reported on stderr.
        case mistake
    }

    /// Reads an entry: blank lines and comments are nothing, `history` prints the history, `quit` and `exit` leave,
    /// the rest is split into words like a shell line.
    static func entry(_ text: String) -> Entry {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty || trimmed.hasPrefix("#") { return .nothing }
        if trimmed == "quit" || trimmed == "exit" { return .quit }
        if trimmed == "history" {
            for entry in LineEditor.entries(Session.historyPath) { Output.writeAll(1, Array((entry + "\n").utf8)) }
            return .nothing
        }
        do throws(UsageError) {
            return .command(try splitCommandLine(trimmed))
        } catch {
            Output.writeAll(2, Array("Error: \(error.message)\n".utf8))
            return .mistake
        }
    }

    static let first = "larder> "
    /// As wide as `first`, so the lines of a command line up.
    static let continuation = "   ...> "

    /// Whether these lines make a whole command: every quote closed, every JSON `{` and `[` closed (brackets inside
    /// JSON strings do not count), and no backslash at the end of the last line.
    static func isComplete(_ lines: [String]) -> Bool {
        let text = lines.joined(separator: "\n")
        var shellQuote: Character?
        var inString = false
        var depth = 0
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            index = text.index(after: index)
            switch shellQuote {
            case "'":
                // Single quotes hold JSON as it is: a backslash escapes inside a JSON string only.
                if character == "'" {
                    shellQuote = nil
                } else if inString {
                    if character == "\\" && index < text.endIndex {
                        index = text.index(after: index)
                    } else if character == "\"" {
                        inString = false
                    }
                } else {
                    count(character, &depth, &inString)
                }
            case "\"":
                // Double quotes: \" is a quote inside JSON, a lone " ends the word.
                if character == "\\" && index < text.endIndex {
                    if text[index] == "\"" { inString.toggle() }
                    index = text.index(after: index)
                } else if character == "\"" {
                    shellQuote = nil
                    inString = false
                } else if !inString {
                    count(character, &depth, &(inString))
                }
            default:
                if character == "\\" {
                    if index == text.endIndex { return false }
                    index = text.index(after: index)
                } else if character == "'" || character == "\"" {
                    shellQuote = character
                    inString = false
                } else {
                    count(character, &depth, &inString)
                }
            }
        }
        return shellQuote == nil && depth <= 0
    }

    private static func count(_ character: Character, _ depth: inout Int, _ inString: inout Bool) {
        switch character {
        case "{", "[": depth += 1
        case "}", "]": depth -= 1
        case "\"": inString = true
        default: break
        }
    }

    /// The lines of one command as one text: a backslash that ended a line is dropped, and the line break stays (a
    /// space between words; inside quotes, whitespace the JSON allows).
    static func join(_ lines: [String]) -> String {
        lines.enumerated().map { n, line in
            n < lines.count - 1 && line.hasSuffix("\\") ? String(line.dropLast()) : line
        }.joined(separator: "\n")
    }

    /// A command of several lines as one history line (↑ brings it back whole, on one line).
    static func historyEntry(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }
}
