import Foundation
import LarderServer
import LarderTestProcess

// `larder-server` built for the tests of a server process: the same command (ServerCommand.swift and
// ServerOptions.swift are the shipped server's own files), with test hooks read from the environment the test starts
// it with. A test of a server process cannot reach its hooks the way an in-process test does; the shipped server
// reads no such variable. Each names a Unix socket path only: a gate whose socket nobody listens on is passed at once.
let environment = ProcessInfo.processInfo.environment
/// The gate at the path `variable` names, if it names one.
func gate(_ variable: String) -> TestGate? {
    guard let path = environment[variable], !path.isEmpty else { return nil }
    return TestGate(path: path)
}
ServerCommand.run(
    hooks: ServerHooks(
        search: gate(TestGateVariable.search), start: gate(TestGateVariable.start),
        follower: gate(TestGateVariable.follower)))
