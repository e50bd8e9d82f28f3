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

/// The version the CLI reports.
public enum LarderClientVersion {
    /// The version of every Larder executable (`LarderVersion`).
    public static let string = LarderVersion.string
}
