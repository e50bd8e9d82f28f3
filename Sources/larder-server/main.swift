import Foundation
import LarderServer
import LarderWire

// A thin entry point: parse, start, print one line, run until SIGTERM/SIGINT, exit 0.
// Exit codes: 0 after a clean shutdown, 64 for bad options, 1 when the server cannot start.

func fail(_ message: String, code: Int32) -> Never {
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    if code == 64 { FileHandle.standardError.write(Data("\(ServerOptions.usageLine)\n".utf8)) }
    exit(code)
}

// Before any thread exists, so that SIGTERM and SIGINT wait for `runUntilSignalled` whenever they come.
LarderServer.holdTerminationSignals()
LarderServer.returnLargeAllocationsToTheSystem()

let command: ServerOptions.Command
var configuration: ServerConfiguration
do {
    (command, configuration) = try ServerOptions.parse(
        Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
} catch {
    fail(error.message, code: 64)
}
configuration.applyTestGates(environment: ProcessInfo.processInfo.environment)

if command == .help {
    print(ServerOptions.helpText, terminator: "")
    exit(0)
}
if command == .version {
    print(LarderVersion.line("larder-server"))
    exit(0)
}

configuration.startGate?.pass()

let server: LarderServer
do {
    server = try LarderServer(configuration: configuration)
} catch {
    fail(error.message, code: 1)
}
let port: Int
do {
    port = try server.start()
} catch {
    fail("cannot listen: \(error)", code: 1)
}
server.runUntilSignalled {
    // Written unbuffered so a supervisor (or a test) reading the pipe sees the line at once; a SIGTERM sent on reading
    // it is held until `runUntilSignalled` takes it.
    FileHandle.standardOutput.write(
        Data(
            ("\(LarderServer.serverName) listening on \(server.addresses(port: port).joined(separator: ", ")) "
                + (server.metricsPort.map { "metrics http://\(configuration.host):\($0)/metrics " } ?? "")
                + "\(server.storeDescription)\n").utf8))
}
exit(0)
