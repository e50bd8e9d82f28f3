import Foundation
import LarderServer
import LarderWire

/// What `larder-server` does, with the hooks of the build that runs it (none in the shipped one): parse, start, print
/// one line, run until SIGTERM/SIGINT, exit 0.
/// Exit codes: 0 after a clean shutdown, 64 for bad options, 1 when the server cannot start.
enum ServerCommand {
    /// Runs the server that this process's command line and environment describe, with `hooks`, and exits.
    static func run(hooks: ServerHooks) -> Never {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let environment = ProcessInfo.processInfo.environment
        // With `--log-format json` every line the server prints, this one's too, is a JSON object.
        let logFormat = LogLine.requestedFormat(arguments, environment: environment)

        // Before any thread exists, so that SIGTERM and SIGINT wait for `runUntilSignalled` whenever they come.
        LarderServer.holdTerminationSignals()
        LarderServer.returnLargeAllocationsToTheSystem()

        let command: ServerOptions.Command
        let configuration: ServerConfiguration
        do {
            (command, configuration) = try ServerOptions.parse(arguments, environment: environment)
        } catch {
            fail(error.message, code: 64, format: logFormat)
        }

        if command == .help {
            print(ServerOptions.helpText, terminator: "")
            exit(0)
        }
        if command == .version {
            print(LarderVersion.line("larder-server"))
            exit(0)
        }

        let server: LarderServer
        do {
            server = try LarderServer(configuration: configuration, hooks: hooks)
        } catch {
            fail(error.message, code: 1, format: logFormat)
        }
        let port: Int
        do {
            port = try server.start()
        } catch {
            fail("cannot listen: \(error)", code: 1, format: logFormat)
        }
        server.runUntilSignalled {
            // Written unbuffered so a supervisor (or a test) reading the pipe sees the line at once; a SIGTERM sent on
            // reading it is held until `runUntilSignalled` takes it.
            let addresses = server.addresses(port: port)
            let metrics = server.metricsPort.map { "http://\(configuration.host):\($0)/metrics" }
            let scheme = configuration.tlsCertificate == nil ? "http" : "https"
            let console = server.consolePort.map { "\(scheme)://\(configuration.host):\($0)/" }
            let text = "\(LarderServer.serverName) listening on \(addresses.joined(separator: ", ")) "
                + (metrics.map { "metrics \($0) " } ?? "") + (console.map { "console \($0) " } ?? "")
                + server.storeDescription
            switch configuration.logFormat {
            case .text:
                FileHandle.standardOutput.write(Data((text + "\n").utf8))
            case .json:
                var fields: [(String, JSON)] = [
                    ("version", .string(LarderServer.version)), ("listen", .array(addresses.map { .string($0) })),
                ]
                if let metrics { fields.append(("metrics", .string(metrics))) }
                if let console { fields.append(("console", .string(console))) }
                fields.append(("store", .string(server.storeDescription)))
                FileHandle.standardOutput.write(Data(LogLine.format(.json, level: .info, text, fields: fields).utf8))
            }
        }
        exit(0)
    }

    /// Prints `message` as an error in `format` (with the usage line for a usage error) and exits with `code`.
    static func fail(_ message: String, code: Int32, format: LogFormat) -> Never {
        switch format {
        case .text:
            FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
            if code == 64 { FileHandle.standardError.write(Data("\(ServerOptions.usageLine)\n".utf8)) }
        case .json:
            let usage: [(String, JSON)] = code == 64 ? [("usage", .string(ServerOptions.usageLine))] : []
            let line = LogLine.format(.json, level: .error, message, fields: [("exitStatus", .int(Int64(code)))] + usage)
            FileHandle.standardError.write(Data(line.utf8))
        }
        exit(code)
    }
}
