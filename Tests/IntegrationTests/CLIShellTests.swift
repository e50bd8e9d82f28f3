import Foundation
import LarderClient
import LarderTestProcess
import LarderTestThreads
import Testing

/// `--version` on every executable, and `larder completion bash|zsh` loaded into a shell.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLIShellTests {
    /// Runs a built executable (or any program) with `arguments`; its status and stdout.
    static func run(_ executable: URL, _ arguments: [String], environment: [String: String] = [:]) throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        let process = ChildProcess()
        process.executableURL = executable
        process.arguments = arguments
        var variables = CLIPromptTests.environment()
        for (key, value) in environment { variables[key] = value }
        process.environment = variables
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (
            process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self)
        )
    }

    static func product(_ name: String) -> URL {
        CLITests.binary.deletingLastPathComponent().appendingPathComponent(name)
    }

    @Test func everyExecutableTellsItsVersion() throws {
        for name in ["larder", "larder-server", "larder-bench"] {
            let r = try Self.run(Self.product(name), ["--version"])
            #expect(r.status == 0 && r.stdout == "\(name) \(LarderVersion.string) (protocol 1)\n", "\(name): \(r)")
        }
        // As a global option, anywhere on larder's line.
        let r = try Self.run(Self.product("larder"), ["ping", "--version", "--port", "1"])
        #expect(r.status == 0 && r.stdout.hasPrefix("larder \(LarderVersion.string)"))
        #expect(try Self.run(Self.product("larder"), ["--help"]).stdout.contains("--version"))
        #expect(try Self.run(Self.product("larder-server"), ["--help"]).stdout.contains("--version"))
    }

    /// The bash script, loaded into bash, completes commands, options, option values and the server's collections.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/bin/bash")))
    func bashCompletionCompletes() async throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let client = server.client()
        defer { client.close() }
        for name in ["profiles", "pokemon_items", "items"] { _ = try await client.create(name, ["x": 1]) }
        let script = try Self.run(Self.product("larder"), ["completion", "bash"])
        #expect(script.status == 0 && script.stdout.contains("complete -o default -F _larder larder"))

        /// What Tab offers after `line` (the last word is the one being completed), asked as bash's completion does.
        func complete(_ words: [String]) throws -> [String] {
            let quoted = words.map { "'" + $0 + "'" }.joined(separator: " ")
            let program = """
                eval "$(larder completion bash)"
                complete -p larder >/dev/null || exit 3
                COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1)
                COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
                _larder
                printf '%s\\n' "${COMPREPLY[@]}"
                """
            let r = try Self.run(
                URL(fileURLWithPath: "/bin/bash"), ["--norc", "--noprofile", "-c", program],
                environment: [
                    "PATH": CLITests.binary.deletingLastPathComponent().path + ":/usr/bin:/bin",
                    "LARDER_PORT": String(server.port),
                ])
            #expect(r.status == 0, "\(r.stderr)")
            return r.stdout.split(separator: "\n").map(String.init)
        }
        #expect(try complete(["larder", "bl"]) == ["blob"])
        #expect(try complete(["larder", "blob", "g"]) == ["get"])
        #expect(try complete(["larder", "search", "p"]) == ["pokemon_items", "profiles"])
        #expect(try complete(["larder", "count", "it"]) == ["items"])
        #expect(try complete(["larder", "search", "items", "--so"]) == ["--sort", "--socket"].sorted())
        #expect(try complete(["larder", "import", "items", "f.json", "--mode", "u"]) == ["upsert"])
        #expect(try complete(["larder", "completion", ""]) == ["bash", "zsh"])
        // --port on the line names the server asked: here nothing listens, so no collections.
        #expect(try complete(["larder", "--port", "1", "list", "p"]) == [])
    }

    @Test func theZshScriptRegistersItself() throws {
        let r = try Self.run(Self.product("larder"), ["completion", "zsh"])
        #expect(r.status == 0 && r.stdout.hasPrefix("#compdef larder\n") && r.stdout.contains("compdef _larder larder"))
        let fish = try Self.run(Self.product("larder"), ["completion", "fish"])
        #expect(fish.status == 64 && fish.stderr.contains("bash and zsh"))
    }
}
