/// The arguments of a command line in swift-argument-parser's shape, one at a time: `--name value` and `--name=value`
/// alike. What a name means, how its value is checked and how a mistake is worded stay with each tool (their messages
/// are pinned by their tests); this is only the walk they share (the server, the CLI, and larder-bench's subcommands).
package struct ArgumentScanner {
    /// One argument as written, with `--name=value` split at its first `=`.
    package struct Argument {
        /// The argument as written.
        package var text: String
        /// `text` up to the `=` of a `--name=value`, else all of it.
        package var name: String
        /// What followed that `=` (nil when there was none).
        package var inline: String?
        /// Where it stands in the arguments.
        package var position: Int
    }

    package let arguments: [String]
    /// The next argument to read.
    package private(set) var index = 0

    package init(_ arguments: [String]) { self.arguments = arguments }

    /// The next argument, nil after the last.
    package mutating func next() -> Argument? {
        guard index < arguments.count else { return nil }
        let text = arguments[index]
        defer { index += 1 }
        guard text.hasPrefix("--"), let equals = text.firstIndex(of: "=") else {
            return Argument(text: text, name: text, inline: nil, position: index)
        }
        return Argument(
            text: text, name: String(text[..<equals]), inline: String(text[text.index(after: equals)...]),
            position: index)
    }

    /// The value of an option just read: what followed its `=`, else the next argument (read); nil when the line ends
    /// first.
    package mutating func value(for argument: Argument) -> String? {
        if let inline = argument.inline { return inline }
        guard index < arguments.count else { return nil }
        defer { index += 1 }
        return arguments[index]
    }
}
