import Foundation

// larder-bench: subcommands measure one layer each. `wire` is the codec in-process.
let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "wire":
    let seconds = arguments.dropFirst().first.flatMap(Double.init) ?? 2
    WireBench.run(seconds: seconds)
default:
    FileHandle.standardError.write(Data("usage: larder-bench wire [SECONDS]\n".utf8))
    exit(64)
}
