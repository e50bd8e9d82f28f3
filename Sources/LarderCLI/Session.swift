#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient
import LarderSync

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
        let secrets = UsageError.secrets(in: arguments, environment: ProcessInfo.processInfo.environment)
        let invocation: Invocation
        let command: CommandSpec?
        do throws(UsageError) {
            (invocation, command) = try Invocation.parse(arguments, commands: Commands.all)
        } catch {
            let shown = error.redacting(secrets)
            Output.writeAll(2, Array((shown.report(usage: shown.usage) + "\n").utf8))
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
                let error = UsageError("unknown command '\(words.joined(separator: " "))'").redacting(secrets)
                output.error("Error: \(error.message)\n\(CommandSpec.toolUsage)")
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
            let shown = error.redacting(secrets)
            output.error(shown.report(usage: shown.usage == CommandSpec.toolUsage ? command.usage : shown.usage))
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
            // A schema's refusal: each violation on a line of its own.
            for violation in error.violations { text += "\n  \(violation)" }
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
