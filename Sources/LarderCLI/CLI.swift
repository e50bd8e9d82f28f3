#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderClient

/// The `larder` command line: parses arguments, runs one command or the interactive prompt, returns the exit status.
///
/// Exit statuses: 0 success, 1 the server answered an error (its status name on stderr) or a local failure,
/// 2 cannot connect, 64 usage error.
public enum CLI {
    /// Exit status for usage errors (`EX_USAGE`).
    public static let usageStatus: Int32 = 64
    /// Exit status when the server cannot be reached.
    public static let connectStatus: Int32 = 2

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
        let width = Commands.all.map { ($0.name + " " + $0.arguments).count }.max() ?? 0
        for command in Commands.all {
            let head = command.name + (command.arguments.isEmpty ? "" : " " + command.arguments)
            lines.append("  " + head.padding(toLength: width + 2, withPad: " ", startingAt: 0) + command.summary)
        }
        lines += ["", "Global options (before or after the command):"]
        lines += optionLines(CommandSpec.globalOptions)
        lines += [
            "", "With no command on a terminal, larder starts a prompt (history in ~/.larder_history); with no",
            "command and piped stdin, it runs one command per line.",
            "Output: tables on a terminal, JSON lines otherwise or with --json; NO_COLOR disables colour.",
            "Exit status: 0 ok, 1 the server answered an error, 2 cannot connect, 64 usage error.",
        ]
        return lines.joined(separator: "\n")
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
}

/// One run of the tool: keeps the client between prompt lines.
final class Session: @unchecked Sendable {
    private var client: LarderClient?
    private var clientKey: String?

    func close() { client?.close() }

    private func client(for invocation: Invocation) throws(UsageError) -> LarderClient {
        let environment = ProcessInfo.processInfo.environment
        let host = invocation.value("host") ?? environment["LARDER_HOST"] ?? "127.0.0.1"
        let portText = invocation.value("port") ?? environment["LARDER_PORT"] ?? "7411"
        guard let port = Int(portText), (1...65535).contains(port) else {
            throw UsageError("--port must be an integer from 1 to 65535, not '\(portText)'")
        }
        let socket = invocation.value("socket") ?? environment["LARDER_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        let token = invocation.value("token") ?? environment["LARDER_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        var timeout: Duration = .seconds(30)
        if let text = invocation.value("timeout") {
            guard let seconds = Double(text), seconds > 0 else {
                throw UsageError("--timeout must be a positive number of seconds, not '\(text)'")
            }
            timeout = .milliseconds(Int64(seconds * 1000))
        }
        // A --port on the command line beats LARDER_SOCKET from the environment.
        let useSocket = invocation.value("socket") != nil || (socket != nil && invocation.value("port") == nil
            && invocation.value("host") == nil)
        let endpoint: LarderClient.Endpoint = useSocket && socket != nil
            ? .unix(path: socket!) : .tcp(host: host, port: port)
        let key = "\(endpoint)|\(token ?? "")|\(timeout)"
        if let client, clientKey == key { return client }
        client?.close()
        let made = LarderClient(
            configuration: LarderClient.Configuration(
                endpoint: endpoint, token: token, clientName: "larder-cli", requestTimeout: timeout))
        client = made
        clientKey = key
        return made
    }

    /// Runs one command line; with no command, the prompt (when `interactiveAllowed`).
    func run(_ arguments: [String], interactiveAllowed: Bool) async -> Int32 {
        let invocation: Invocation
        let command: CommandSpec?
        do throws(UsageError) {
            (invocation, command) = try Invocation.parse(arguments, commands: Commands.all)
        } catch {
            Output.writeAll(2, Array("Error: \(error.message)\n\(error.usage)\n".utf8))
            return CLI.usageStatus
        }
        let output = Output(forceJSON: invocation.flag("json"))
        defer { output.flush() }
        if invocation.flag("help") || command?.name == "help" {
            var words = invocation.words
            if command?.name == "help" { words = invocation.arguments }
            if let spec = Commands.all.first(where: { $0.words == words }) {
                output.line(CLI.help(for: spec))
            } else if let first = words.first, Commands.all.contains(where: { $0.words[0] == first }) {
                let group = Commands.all.filter { $0.words[0] == first }
                output.line("Usage: larder \(first) SUBCOMMAND ...\n\nSubcommands:")
                for spec in group { output.line("  \(spec.name) \(spec.arguments)  \(spec.summary)") }
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
            output.error("Error: \(error.message)\n\(error.usage == CommandSpec.toolUsage ? command.usage : error.usage)")
            return CLI.usageStatus
        } catch let error as LarderError {
            output.error("Error: \(error.isConnectFailure ? error.message : error.description)")
            return error.isConnectFailure ? CLI.connectStatus : 1
        } catch let error as CommandFailure {
            output.error("Error: \(error.message)")
            return 1
        } catch {
            output.error("Error: \(error)")
            return 1
        }
    }

    /// The prompt: on a terminal with `larder> ` and a history file; otherwise one command per stdin line.
    /// Global options given on the command line apply to every line.
    func prompt(_ globals: [String]) async -> Int32 {
        let interactive = isatty(0) == 1
        let historyPath = (ProcessInfo.processInfo.environment["HOME"] ?? NSTemporaryDirectory()) + "/.larder_history"
        if interactive {
            Output.writeAll(2, Array("larder \(LarderClientVersion.string): type help for commands, quit to leave\n".utf8))
        }
        var status: Int32 = 0
        while true {
            if interactive { Output.writeAll(1, Array("larder> ".utf8)) }
            guard let line = readLine(strippingNewline: true) else { break }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            if interactive { Session.appendHistory(trimmed, to: historyPath) }
            if trimmed == "quit" || trimmed == "exit" { break }
            if trimmed == "history" {
                let text = (try? String(contentsOfFile: historyPath, encoding: .utf8)) ?? ""
                Output.writeAll(1, Array(text.utf8))
                continue
            }
            let words: [String]
            do throws(UsageError) {
                words = try splitCommandLine(trimmed)
            } catch {
                Output.writeAll(2, Array("Error: \(error.message)\n".utf8))
                status = status == 0 ? CLI.usageStatus : status
                continue
            }
            let result = await run(words + globals, interactiveAllowed: false)
            if result != 0 && status == 0 { status = result }
        }
        if interactive { Output.writeAll(1, Array("\n".utf8)) }
        // On a terminal a failed line was already reported; only piped runs report failure by status.
        return interactive ? 0 : status
    }

    static func appendHistory(_ line: String, to path: String) {
        guard let handle = FileHandle(forWritingAtPath: path) ?? {
            _ = FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600])
            return FileHandle(forWritingAtPath: path)
        }() else { return }
        handle.seekToEndOfFile()
        handle.write(Data((line + "\n").utf8))
        handle.closeFile()
    }
}

/// The version the CLI reports.
public enum LarderClientVersion {
    /// `0.1.0`.
    public static let string = "0.1.0"
}
