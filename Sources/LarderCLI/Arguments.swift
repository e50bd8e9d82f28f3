import LarderIO

/// A command-line mistake: printed as `Error: <message>`, the offending text with a caret under the mistake, and the
/// command's usage line; exit 64. A mistake in the command line shows the word at fault only, never the rest of the
/// line, which may carry a token.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    /// What was wrong.
    public var message: String
    /// The usage line of the command concerned (or the tool's).
    public var usage: String
    /// The text the mistake is in, and where in it, for the caret.
    public var excerpt: Excerpt?

    /// A span of a piece of user input: `offset` and `length` count characters.
    public struct Excerpt: Equatable, Sendable {
        public var text: String
        public var offset: Int
        public var length: Int

        /// The span `offset..<offset+length` of `text` (a length of 0 points just after the text, at what is missing).
        public init(_ text: String, offset: Int, length: Int = 1) {
            self.text = text
            self.offset = max(0, min(offset, text.count))
            self.length = max(1, length)
        }

        /// `--name VALUE` with the whole value underlined: how a bad option value is shown.
        public static func option(_ name: String, _ value: String) -> Excerpt {
            Excerpt("--\(name) \(value)", offset: name.count + 3, length: value.count)
        }

        /// The two lines a compiler would print: the text, and a caret (with tildes) under the span. Columns are
        /// counted as the terminal shows them, so wide characters before the mistake do not shift the caret.
        public var lines: [String] {
            let flat = text.map { $0 == "\n" || $0 == "\t" ? " " : $0 }
            let before = String(flat.prefix(offset))
            let span = String(flat.dropFirst(offset).prefix(length))
            let marker = "^" + String(repeating: "~", count: max(0, Output.width(span) - 1))
            return ["  " + String(flat), "  " + String(repeating: " ", count: Output.width(before)) + marker]
        }
    }

    /// A usage error with its usage line.
    public init(_ message: String, usage: String = CommandSpec.toolUsage, excerpt: Excerpt? = nil) {
        self.message = message
        self.usage = usage
        self.excerpt = excerpt
    }

    /// The message.
    public var description: String { message }

    /// What is printed on stderr: `Error: ...`, the excerpt with its caret, then `usage`.
    public func report(usage: String) -> String {
        (["Error: \(message)"] + (excerpt?.lines ?? []) + [usage]).joined(separator: "\n")
    }

    /// The same mistake with every occurrence of `secrets` in its message and excerpt replaced by `***`: the last
    /// guard that a token typed where a word was expected is not printed back.
    public func redacting(_ secrets: [String]) -> UsageError {
        var copy = self
        for secret in secrets where !secret.isEmpty {
            copy.message = copy.message.replacingOccurrences(of: secret, with: "***")
            if let excerpt = copy.excerpt, excerpt.text.contains(secret) {
                let text = excerpt.text.replacingOccurrences(of: secret, with: "***")
                copy.excerpt = Excerpt(text, offset: 0, length: text.count)
            }
        }
        return copy
    }

    /// The values of `--token` in `arguments` (both spellings) and of `LARDER_TOKEN` in `environment`: what a
    /// report must never show.
    public static func secrets(in arguments: [String], environment: [String: String]) -> [String] {
        var found: [String] = []
        for (n, word) in arguments.enumerated() {
            if word == "--token", n + 1 < arguments.count {
                found.append(arguments[n + 1])
            } else if word.hasPrefix("--token=") {
                found.append(String(word.dropFirst("--token=".count)))
            }
        }
        if let token = environment["LARDER_TOKEN"] { found.append(token) }
        // Longest first, so that a token containing another is replaced whole.
        return found.filter { !$0.isEmpty }.sorted { $0.count > $1.count }
    }
}

/// One option of a command: `--name VALUE` / `--name=VALUE`, or a flag `--name`.
public struct OptionSpec: Sendable, Equatable {
    /// The long name, without dashes.
    public var name: String
    /// A one-letter alias (`-o`), if any.
    public var short: Character?
    /// The value's placeholder (`N`, `FILE`); nil for a flag.
    public var value: String?
    /// One line of help.
    public var help: String

    /// An option or flag.
    public init(_ name: String, short: Character? = nil, value: String? = nil, help: String) {
        self.name = name
        self.short = short
        self.value = value
        self.help = help
    }
}

/// A command's shape: its words, positional arguments, options and help text.
public struct CommandSpec: Sendable {
    /// The command words, e.g. `["blob", "put"]`.
    public var words: [String]
    /// The positional arguments as shown in usage, e.g. `COLLECTION ID JSON`.
    public var arguments: String
    /// The fewest and most positional arguments (`Int.max` for any number).
    public var arity: ClosedRange<Int>
    /// One line for the command list.
    public var summary: String
    /// Longer help shown by `--help`, examples included.
    public var details: String
    /// The command's own options.
    public var options: [OptionSpec]

    /// A command description.
    public init(
        _ words: [String], arguments: String = "", arity: ClosedRange<Int> = 0...0, summary: String,
        details: String = "", options: [OptionSpec] = []
    ) {
        self.words = words
        self.arguments = arguments
        self.arity = arity
        self.summary = summary
        self.details = details
        self.options = options
    }

    /// The command's name, e.g. `blob put`.
    public var name: String { words.joined(separator: " ") }

    /// The usage line, e.g. `Usage: larder get COLLECTION ID [global options]`.
    public var usage: String {
        var line = "Usage: larder \(name)"
        if !arguments.isEmpty { line += " \(arguments)" }
        for option in options {
            line += option.value.map { " [--\(option.name) \($0)]" } ?? " [--\(option.name)]"
        }
        return line
    }

    /// The tool's usage line.
    public static let toolUsage =
        "Usage: larder [--host H] [--port N | --socket PATH] [--token T] [--tls [--ca FILE]] [--timeout S] [--json] "
        + "COMMAND ..."
        + " (larder --help lists the commands)"

    /// Options every command accepts, before or after the command.
    public static let globalOptions: [OptionSpec] = [
        OptionSpec(
            "host", value: "HOST",
            help: "server host, or several as a:7411,b:7412 (env LARDER_HOST, default 127.0.0.1)"),
        OptionSpec("port", value: "N", help: "server TCP port (env LARDER_PORT, default 7411)"),
        OptionSpec("socket", value: "PATH", help: "connect to a Unix socket instead (env LARDER_SOCKET)"),
        OptionSpec("token", value: "T", help: "auth token (env LARDER_TOKEN)"),
        OptionSpec("tls", help: "connect with TLS, verifying the server's certificate (env LARDER_TLS=1)"),
        OptionSpec("ca", value: "FILE", help: "trust the CAs of FILE (PEM) instead of the system's (env LARDER_CA)"),
        OptionSpec(
            "tls-server-name", value: "NAME",
            help: "the name the server's certificate must carry, if not the host (env LARDER_TLS_SERVER_NAME)"),
        OptionSpec("tls-cert", value: "FILE", help: "client certificate (PEM) for TLS (env LARDER_TLS_CERT)"),
        OptionSpec("tls-key", value: "FILE", help: "the client certificate's key (PEM) (env LARDER_TLS_KEY)"),
        OptionSpec(
            "tls-insecure-skip-verify",
            help: "TLS without checking the server's certificate: for tests only (env LARDER_TLS_INSECURE_SKIP_VERIFY=1)"),
        OptionSpec("timeout", value: "SECONDS", help: "per-request deadline (default 30)"),
        OptionSpec("json", help: "JSON output (the default when stdout is not a terminal)"),
        OptionSpec("help", short: "h", help: "show help"),
        OptionSpec("version", help: "print the version and exit"),
    ]
}

/// A parsed command line: the command, its positional arguments and option values, and the global options.
public struct Invocation: Equatable, Sendable {
    /// The command words found (empty: none was given).
    public var words: [String] = []
    /// Positional arguments after the command words.
    public var arguments: [String] = []
    /// Option values by long name, in order (a repeated option has several).
    public var values: [String: [String]] = [:]
    /// Flags given, by long name.
    public var flags: Set<String> = []

    /// An empty invocation.
    public init() {}

    /// The last value of option `name`.
    public func value(_ name: String) -> String? { values[name]?.last }

    /// Whether flag `name` was given.
    public func flag(_ name: String) -> Bool { flags.contains(name) }

    /// Parses `arguments` against the command table: global options anywhere, `--opt v` and `--opt=v`, `--` ends
    /// options, `-` is a positional (stdin). A mistake comes with the word at fault alone and a caret under it.
    public static func parse(_ arguments: [String], commands: [CommandSpec]) throws(UsageError) -> (Invocation, CommandSpec?) {
        var invocation = Invocation()
        var command: CommandSpec?
        /// Positional words and where they are in `arguments`.
        var positionals: [(word: String, at: Int)] = []
        var scanner = ArgumentScanner(arguments)
        var optionsEnded = false

        func usage() -> String { command?.usage ?? CommandSpec.toolUsage }
        func at(_ position: Int) -> UsageError.Excerpt { commandLineExcerpt(arguments, at: position) }
        /// An option at fault: its name only, so that a value after `=` is not shown.
        func option(_ name: String) -> UsageError.Excerpt { UsageError.Excerpt(name, offset: 0, length: name.count) }
        /// What is missing after `word`: the caret just after it.
        func after(_ word: String) -> UsageError.Excerpt { UsageError.Excerpt(word + " ", offset: word.count + 1) }

        /// Settles the command from the positionals seen so far, once they name one.
        func resolve() throws(UsageError) {
            guard command == nil, let first = positionals.first else { return }
            let candidates = commands.filter { $0.words[0] == first.word }
            guard !candidates.isEmpty else {
                throw UsageError(
                    "unknown command '\(first.word)'; run larder --help for the list", excerpt: at(first.at))
            }
            if let single = candidates.first(where: { $0.words.count == 1 }) {
                command = single
                positionals.removeFirst()
                return
            }
            guard positionals.count >= 2 else { return }
            guard let match = candidates.first(where: { $0.words[1] == positionals[1].word }) else {
                let names = candidates.map { $0.words[1] }.joined(separator: ", ")
                throw UsageError(
                    "unknown command '\(first.word) \(positionals[1].word)'; use one of: \(names)",
                    excerpt: at(positionals[1].at))
            }
            command = match
            positionals.removeFirst(2)
        }

        while let argument = scanner.next() {
            let token = argument.text
            let position = argument.position
            if optionsEnded || token == "-" || !token.hasPrefix("-") || token.count == 1 {
                positionals.append((token, position))
                try resolve()
                continue
            }
            if token == "--" {
                optionsEnded = true
                continue
            }
            var name: String
            var inline = argument.inline
            if token.hasPrefix("--") {
                name = String(argument.name.dropFirst(2))
            } else {
                // A short option: -o FILE, -oFILE, -h.
                let letter = token[token.index(after: token.startIndex)]
                let known = (CommandSpec.globalOptions + (command?.options ?? [])).first { $0.short == letter }
                guard let known else {
                    let short = String(token.prefix(2))
                    throw UsageError("unknown option \(short)", usage: usage(), excerpt: option(short))
                }
                name = known.name
                if token.count > 2 { inline = String(token.dropFirst(2)) }
            }
            let spec = CommandSpec.globalOptions.first { $0.name == name }
                ?? command?.options.first { $0.name == name }
            guard let spec else {
                if command == nil, commands.contains(where: { $0.options.contains { $0.name == name } }) {
                    throw UsageError(
                        "--\(name) goes after the command it belongs to", usage: usage(), excerpt: option("--\(name)"))
                }
                throw UsageError("unknown option --\(name)", usage: usage(), excerpt: option("--\(name)"))
            }
            if let placeholder = spec.value {
                guard let value = inline ?? scanner.value(for: argument) else {
                    throw UsageError(
                        "--\(name) needs a value (\(placeholder))", usage: usage(), excerpt: after("--\(name)"))
                }
                invocation.values[name, default: []].append(value)
            } else {
                guard inline == nil else {
                    throw UsageError("--\(name) takes no value", usage: usage(), excerpt: option("--\(name)"))
                }
                invocation.flags.insert(name)
            }
        }
        if command == nil, let first = positionals.first {
            if invocation.flags.contains("help") {
                // `larder blob --help`: help for the group.
                invocation.words = [first.word]
                return (invocation, nil)
            }
            let names = commands.filter { $0.words[0] == first.word }.map { $0.name }.joined(separator: ", ")
            throw UsageError("'\(first.word)' needs a subcommand: \(names)", excerpt: after(shellQuoted(first.word)))
        }
        invocation.words = command?.words ?? []
        invocation.arguments = positionals.map(\.word)
        if let command, !invocation.flags.contains("help"), !command.arity.contains(positionals.count) {
            if positionals.count < command.arity.lowerBound {
                let missing = command.arguments.split(separator: " ")
                    .filter { !$0.hasPrefix("[") }.dropFirst(positionals.count).first.map(String.init) ?? "argument"
                throw UsageError("missing \(missing)", usage: command.usage)
            }
            let extra = positionals[command.arity.upperBound]
            throw UsageError("unexpected argument '\(extra.word)'", usage: command.usage, excerpt: at(extra.at))
        }
        return (invocation, command)
    }
}

/// The word `arguments[position]` alone, underlined (past the end: an empty excerpt). The rest of the command line is
/// left out: it may hold a token. A word that a shell would split or expand is shown quoted, so it can be copied back.
func commandLineExcerpt(_ arguments: [String], at position: Int) -> UsageError.Excerpt {
    guard position < arguments.count else { return UsageError.Excerpt("", offset: 0) }
    let word = shellQuoted(arguments[position])
    return UsageError.Excerpt(word, offset: 0, length: word.count)
}

/// `word` as a shell reads it back: bare when safe, else in single quotes.
func shellQuoted(_ word: String) -> String {
    let plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./=:,@%+".unicodeScalars
    let safe = !word.isEmpty && word.unicodeScalars.allSatisfy { !$0.isASCII || plain.contains($0) }
    return safe ? word : "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
}

/// Splits a prompt line into words like a shell: whitespace separates, quotes group, backslash escapes.
public func splitCommandLine(_ line: String) throws(UsageError) -> [String] {
    let scan = scanWords(line)
    if scan.quote != nil { throw UsageError("unterminated quote in: \(line)") }
    return scan.words + (scan.last.map { [$0] } ?? [])
}

/// The words of a line as a shell splits them: the whole words, the word still being typed when the line does not end
/// in whitespace (nil when it does), and the quote left open, if one is.
func scanWords(_ line: String) -> (words: [String], last: String?, quote: Character?) {
    var words: [String] = []
    var current = ""
    var inWord = false
    var quote: Character?
    var escaped = false
    for character in line {
        if escaped {
            current.append(character)
            escaped = false
            continue
        }
        if let open = quote {
            if character == open {
                quote = nil
            } else if character == "\\" && open == "\"" {
                escaped = true
            } else {
                current.append(character)
            }
            continue
        }
        switch character {
        case "\\":
            escaped = true
            inWord = true
        case "'", "\"":
            quote = character
            inWord = true
        case " ", "\t", "\n", "\r":
            if inWord { words.append(current) }
            current = ""
            inWord = false
        default:
            current.append(character)
            inWord = true
        }
    }
    return (words, inWord ? current : nil, quote)
}
