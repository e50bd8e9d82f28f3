import LarderCLI

// The `larder` command: everything lives in LarderCLI so that it can be unit-tested.
// Ctrl-C is held from the first line, before any thread exists; the command runs on the cooperative pool while the
// main thread takes Ctrl-C (`Interrupt`), and the process ends with the command's exit status.
Interrupt.hold()
Task.detached { CLI.exit(await CLI.main(arguments: Array(CommandLine.arguments.dropFirst()))) }
Interrupt.serve()
