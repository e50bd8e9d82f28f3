#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderSync

/// The `larder` command line: parses arguments, runs one command or the interactive prompt, returns the exit status.
///
/// Exit statuses: 0 success, 1 the server answered an error (its status name on stderr) or a local failure,
/// 2 cannot connect, 64 usage error, 130 a command cancelled with Ctrl-C.
public enum CLI {
    /// Exit status for usage errors (`EX_USAGE`).
    public static let usageStatus: Int32 = 64
    /// Exit status when the server cannot be reached.
    public static let connectStatus: Int32 = 2
    /// Exit status of a command cancelled with Ctrl-C (128 + SIGINT, as a shell reports it).
    public static let cancelledStatus: Int32 = 130

    /// Ends the process with `status`.
    public static func exit(_ status: Int32) -> Never {
        Foundation.exit(status)
    }

    /// Runs the command line and returns the exit status.
    public static func main(arguments: [String]) async -> Int32 {
        let session = Session()
        defer { session.close() }
        return await session.run(arguments, interactiveAllowed: true)
    }

    /// The tool's help: usage, commands and global options.
    public static var help: String {
        var lines = [
            "larder: the command-line client of a Larder server", "", CommandSpec.toolUsage, "",
            "Commands:",
        ]
        lines += commandLines(Commands.all)
        lines += ["", "Global options (before or after the command):"]
        lines += optionLines(CommandSpec.globalOptions)
        lines += [
            "", "With no command on a terminal, larder starts a prompt: line editing, ↑/↓ history (kept in",
            "~/.larder_history), Tab completion of commands, options and collections, commands over several lines",
            "until their quotes and JSON close; Ctrl-C cancels the line or the running command, Ctrl-D leaves.",
            "With no command and piped stdin, it runs one command per line.",
            "Output: tables that fit the terminal (a record too wide is shown vertically), JSON lines when stdout is",
            "not a terminal or with --json; NO_COLOR disables colour.",
            "Exit status: 0 ok, 1 the server answered an error, 2 cannot connect, 64 usage error, 130 cancelled.",
        ]
        return lines.joined(separator: "\n")
    }

    /// `  name ARGUMENTS   summary` for each command, the summaries in one column.
    static func commandLines(_ commands: [CommandSpec]) -> [String] {
        let heads = commands.map { $0.name + ($0.arguments.isEmpty ? "" : " " + $0.arguments) }
        let width = heads.map(\.count).max() ?? 0
        return zip(heads, commands).map {
            "  " + $0.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $1.summary
        }
    }

    static func optionLines(_ options: [OptionSpec]) -> [String] {
        let heads = options.map { option in
            (option.short.map { "-\($0), " } ?? "") + "--\(option.name)" + (option.value.map { " \($0)" } ?? "")
        }
        let width = heads.map(\.count).max() ?? 0
        return zip(heads, options).map { "  " + $0.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $1.help }
    }

    /// Help for one command.
    public static func help(for command: CommandSpec) -> String {
        var lines = [command.usage, "", command.summary]
        if !command.options.isEmpty { lines += ["", "Options:"] + optionLines(command.options) }
        if !command.details.isEmpty { lines += ["", command.details] }
        lines += ["", "Global options: --host, --port, --socket, --token, --timeout, --json (see larder --help)"]
        return lines.joined(separator: "\n")
    }

    /// Help for a group of subcommands (`larder help blob`).
    static func help(group: String) -> String {
        let members = Commands.all.filter { $0.words[0] == group }
        return (["Usage: larder \(group) SUBCOMMAND ...", "", "Subcommands:"] + commandLines(members)
            + ["", "larder help \(group) SUBCOMMAND explains one."]).joined(separator: "\n")
    }
}

/// One run of the tool: keeps the client between prompt lines.
final class Session: @unchecked Sendable {
    private let lock = Lock()
    private var client: LarderClient?
    private var clientKey: String?

    func close() { lock.withLock { client?.close() } }

    private func client(for invocation: Invocation) throws(UsageError) -> LarderClient {
        let environment = ProcessInfo.processInfo.environment
        let host = invocation.value("host") ?? environment["LARDER_HOST"] ?? "127.0.0.1"
        let portText = invocation.value("port") ?? environment["LARDER_PORT"] ?? "7411"
        guard let port = Int(portText), (1...65535).contains(port) else {
            throw UsageError("--port must be an integer from 1 to 65535", excerpt: .option("port", portText))
        }
        let socket = invocation.value("socket") ?? environment["LARDER_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        let token = invocation.value("token") ?? environment["LARDER_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        var timeout: Duration = .seconds(30)
        if let text = invocation.value("timeout") {
            guard let seconds = Double(text), seconds > 0, seconds.isFinite else {
                throw UsageError("--timeout must be a positive number of seconds", excerpt: .option("timeout", text))
            }
            timeout = .milliseconds(Int64(seconds * 1000))
        }
        // A --port on the command line beats LARDER_SOCKET from the environment.
        let useSocket = invocation.value("socket") != nil || (socket != nil && invocation.value("port") == nil
            && invocation.value("host") == nil)
        var endpoints: [LarderClient.Endpoint]
        if useSocket, let socket {
            endpoints = [.unix(path: socket)]
        } else {
            // Several servers sharing one PostgreSQL: a connection goes to the next when one refuses or drops.
            do throws(LarderError) {
                endpoints = try HostList.parse(host, defaultPort: port).map { .tcp(host: $0.host, port: $0.port) }
            } catch {
                throw UsageError("--host: \(error.message)", excerpt: .option("host", host))
            }
        }
        let tls = try CLI.tlsSettings(invocation, environment: environment, unixSocket: useSocket && socket != nil)
        let key = "\(endpoints)|\(token ?? "")|\(timeout)|\(String(describing: tls))"
        return lock.withLock {
            if let client, clientKey == key { return client }
            client?.close()
            var configuration = LarderClient.Configuration(
                token: token, clientName: "larder-cli \(LarderVersion.string)", requestTimeout: timeout, tls: tls)
            configuration.endpoints = endpoints
            let made = LarderClient(configuration: configuration)
            client = made
            clientKey = key
            return made
        }
    }

    /// Runs one command line; with no command, the prompt (when `interactiveAllowed`).
    func run(_ arguments: [String], interactiveAllowed: Bool) async -> Int32 {
        if arguments.first == "__complete" { return await completeForShell(Array(arguments.dropFirst())) }
        let invocation: Invocation
        let command: CommandSpec?
        do throws(UsageError) {
            (invocation, command) = try Invocation.parse(arguments, commands: Commands.all)
        } catch {
            Output.writeAll(2, Array((error.report(usage: error.usage) + "\n").utf8))
            return CLI.usageStatus
        }
        let output = Output(forceJSON: invocation.flag("json"))
        defer { output.flush() }
        if invocation.flag("version") {
            output.line(LarderVersion.line("larder"))
            return 0
        }
        if invocation.flag("help") || command?.name == "help" {
            var words = invocation.words
            if command?.name == "help" { words = invocation.arguments }
            if let spec = Commands.all.first(where: { $0.words == words }) {
                output.line(CLI.help(for: spec))
            } else if let first = words.first, Commands.all.contains(where: { $0.words[0] == first }) {
                output.line(CLI.help(group: first))
            } else if !words.isEmpty {
                output.error("Error: unknown command '\(words.joined(separator: " "))'\n\(CommandSpec.toolUsage)")
                return CLI.usageStatus
            } else {
                output.line(CLI.help)
            }
            return 0
        }
        guard let command else {
            if interactiveAllowed { return await prompt(arguments) }
            output.error("Error: no command given\n\(CommandSpec.toolUsage)")
            return CLI.usageStatus
        }
        do {
            let context = Context(invocation: invocation, client: try client(for: invocation), output: output)
            return try await Commands.run(command, context)
        } catch let error as UsageError {
            output.error(error.report(usage: error.usage == CommandSpec.toolUsage ? command.usage : error.usage))
            return CLI.usageStatus
        } catch where Task.isCancelled {
            output.error("cancelled")
            return CLI.cancelledStatus
        } catch let error as LarderError {
            if error.isConnectFailure {
                output.error("Error: \(error.message)")
                return CLI.connectStatus
            }
            var text = "Error: \(error.description)"
            if error.status == .unauthenticated {
                text += invocation.value("token") != nil || ProcessInfo.processInfo.environment["LARDER_TOKEN"] != nil
                    ? "\nCheck the token given with --token or LARDER_TOKEN: the server refused it."
                    : "\nThe server requires a token: give it with --token T or the LARDER_TOKEN environment variable."
            }
            output.error(text)
            return 1
        } catch let error as CommandFailure {
            output.error("Error: \(error.message)")
            return 1
        } catch {
            output.error("Error: \(error)")
            return 1
        }
    }

    // MARK: - The prompt

    /// The prompt: on a terminal, the line editor; otherwise one command per stdin line. Global options given on the
    /// command line apply to every line.
    func prompt(_ globals: [String]) async -> Int32 {
        if isatty(0) == 1 && isatty(1) == 1 { return await editedPrompt(globals) }
        var status: Int32 = 0
        reading: while let line = readLine(strippingNewline: true) {
            let words: [String]
            switch Prompt.entry(line) {
            case .nothing: continue
            case .quit: break reading
            case .mistake:
                status = status == 0 ? CLI.usageStatus : status
                continue
            case .command(let command): words = command
            }
            let result = await run(words + globals, interactiveAllowed: false)
            if result != 0 && status == 0 { status = result }
        }
        return status
    }

    /// `~/.larder_history`.
    static var historyPath: String {
        (ProcessInfo.processInfo.environment["HOME"] ?? NSTemporaryDirectory()) + "/.larder_history"
    }

    /// The prompt on a terminal: libedit, a command over as many lines as its quotes and JSON need, Ctrl-C cancels
    /// the line being typed or the command running, Ctrl-D (or quit) leaves. Failed commands were reported, so the
    /// exit status is 0.
    private func editedPrompt(_ globals: [String]) async -> Int32 {
        Interrupt.promptOpened()
        let editor = LineEditor(historyPath: Session.historyPath) { [self] before in
            let words = Completion.words(before)
            let candidates = waitFor(seconds: 5) {
                await Completion.candidates(words, prompt: true) { await self.collectionNames(globals) }
            }
            return LineEditor.Offer(word: words.last ?? "", candidates: candidates ?? [])
        }
        let banner = "larder \(LarderVersion.string): help for commands, Tab completes, Ctrl-D or quit to leave\n"
        Output.writeAll(2, Array(banner.utf8))
        var pending: [String] = []
        while true {
            let prompt = pending.isEmpty ? Prompt.first : Prompt.continuation
            Interrupt.forgetPending()
            let input = await Thread.run { editor.read(prompt: prompt) }
            guard case .line(let line) = input else {
                if input == .interrupted {
                    pending = []
                    continue
                }
                break
            }
            pending.append(line)
            guard Prompt.isComplete(pending) else { continue }
            let text = Prompt.join(pending)
            pending = []
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if !trimmed.isEmpty && !trimmed.hasPrefix("#") { editor.remember(Prompt.historyEntry(trimmed)) }
            let words: [String]
            switch Prompt.entry(trimmed) {
            case .nothing, .mistake: continue
            case .quit: return 0
            case .command(let command): words = command
            }
            let (_, interrupted) = await Interrupt.cancellable {
                await self.run(words + globals, interactiveAllowed: false)
            }
            // The terminal echoed ^C where the output stopped: the prompt starts on a line of its own.
            if interrupted { Output.writeAll(1, Array("\n".utf8)) }
        }
        Output.writeAll(1, Array("\n".utf8))
        return 0
    }

    /// The collections of the server the global options name, for completion; none when it does not answer.
    func collectionNames(_ globals: [String]) async -> [String] {
        guard let (invocation, _) = try? Invocation.parse(globals, commands: Commands.all),
            let client = try? client(for: invocation),
            let entries = try? await client.collections()
        else { return [] }
        return entries.map(\.name)
    }

    /// `larder __complete WORDS...`, which the bash and zsh scripts call: the candidates for the last word, one a line.
    private func completeForShell(_ words: [String]) async -> Int32 {
        // Only the options that name the server matter here; the rest of the line may be half typed.
        var globals: [String] = []
        for (n, word) in words.enumerated() {
            for name in ["host", "port", "socket", "token"] {
                if word == "--\(name)", n + 1 < words.count - 1 {
                    globals += [word, words[n + 1]]
                } else if word.hasPrefix("--\(name)=") {
                    globals.append(word)
                }
            }
        }
        globals += ["--timeout", "3"]
        let candidates = await Completion.candidates(words, prompt: false) { await self.collectionNames(globals) }
        Output.writeAll(1, Array(candidates.map { $0 + "\n" }.joined().utf8))
        return 0
    }
}

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

extension Thread {
    /// Runs blocking `work` on a thread of its own and returns its result, leaving the cooperative pool free.
    static func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: work()) }
        }
    }
}

/// Waits (blocking this thread, which must not be one of the cooperative pool's) for `work` to finish, at most
/// `seconds`; nil when it did not.
func waitFor<T: Sendable>(seconds: Double, _ work: @escaping @Sendable () async -> T) -> T? {
    let result = Locked<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        let value = await work()
        result.set(value)
        done.signal()
    }
    guard done.wait(timeout: .now() + seconds) == .success else { return nil }
    return result.value
}

/// A value shared between threads.
final class Locked<Value>: @unchecked Sendable {
    private let lock = Lock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func set(_ value: Value) { lock.withLock { stored = value } }
}

/// The version the CLI reports.
public enum LarderClientVersion {
    /// The version of every Larder executable (`LarderVersion`).
    public static let string = LarderVersion.string
}
