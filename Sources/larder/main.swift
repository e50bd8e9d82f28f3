import Foundation
import LarderCLI

// The `larder` command: everything lives in LarderCLI so that it can be unit-tested.
exit(await CLI.main(arguments: Array(CommandLine.arguments.dropFirst())))
