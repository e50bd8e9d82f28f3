import Foundation
import LarderBench
import LarderIO
import LarderStore
import LarderWire

// larder-bench: subcommands measure one layer each. `run` loads a server over the network (the default when the first
// argument is an option), `tcp-copy` measures the raw loopback floor, `wire` the codec in-process, `store` the store
// in-process. Exit codes: 0 success, 1 an assertion failed, 2 the run could not be made, 64 bad usage.

let topUsage = "Usage: larder-bench <run|tcp-copy|blobs|wire|store|watch|thumbnail|thumb-server|replica> [options]   "
    + "(larder-bench <command> --help; --version)"
let topHelp = """
    larder-bench: measure Larder, layer by layer

    \(topUsage)

    Commands:
      run [options]          load a Larder (or Redis) server over the network: closed or open loop, an operation mix,
                             a latency report per operation, --json, --assert (the default command: options alone
                             mean run)
      tcp-copy [options]     the raw loopback floor: an in-process sink answers each request with --size bytes, driven
                             by the same engine (compare with a blob-get run of the same size)
      blobs [options]        blob upload and download MB/s through LarderClient over one open connection (compare
                             with tcp-copy of the same --size)
      wire [SECONDS]         the codec in-process: frame encode/decode, typed and tree-free JSON, zlib levels
      store [options]        the SQLite store in-process: create, get, search, blobs
      watch [options]        change-feed fan-out: one writer, N subscribers (default 1000) of a running server
      thumbnail [FILE...]    thumbnails in-process: TurboJPEG's scaled decoding against a full-size decode
      thumb-server [options] thumbnails through a running server over TCP: cold (made and cached) and cached,
                             p50/p99 and the server's CPU per request
      replica [options]      a local replica against the plain client: first load against paging LIST, local writes
                             and the drain against CREATE, a server change to visible in an online replica

    """

let stderr = FileHandle.standardError
func printError(_ message: String) { stderr.write(Data((message + "\n").utf8)) }
func usageFailure(_ message: String, usage: String) -> Never {
    printError("Error: \(message)")
    printError(usage)
    exit(64)
}

/// A subcommand's options, or its help (exit 0) or its usage mistake (exit 64).
func parseOrExit<Options: SubcommandOptions>(_: Options.Type, _ arguments: [String]) -> Options {
    do throws(BenchUsage) {
        guard let options = try Options.parse(arguments) else {
            print(Options.help, terminator: "")
            exit(0)
        }
        return options
    } catch {
        usageFailure(error.message, usage: Options.usage)
    }
}
let log: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data((line + "\n").utf8)) }

/// Prints the results (text or JSON) and exits with the status they call for.
func finish(_ results: BenchResults, json: Bool) -> Never {
    if json {
        FileHandle.standardOutput.write(Data(results.json.bytes + [0x0A]))
    } else {
        FileHandle.standardOutput.write(Data(results.text.utf8))
    }
    for failed in results.assertions where !failed.passed {
        printError("Error: assertion failed: \(failed.assertion.expression)")
    }
    exit(results.passed ? 0 : 1)
}

var arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--version" {
    print(LarderVersion.line("larder-bench"))
    exit(0)
}
let command = arguments.first.map { $0.hasPrefix("-") && $0 != "-h" && $0 != "--help" ? "run" : $0 } ?? "help"
if command != "run" || arguments.first == "run" { arguments = Array(arguments.dropFirst()) }

switch command {
case "run":
    let parsed: BenchCommand
    do {
        parsed = try BenchArguments.parse(arguments)
    } catch {
        usageFailure(error.message, usage: BenchArguments.usageLine)
    }
    guard case .run(let options) = parsed else {
        print(BenchArguments.helpText, terminator: "")
        exit(0)
    }
    do {
        let results = try runBenchmark(options, log: log)
        if let path = options.hdrOut { try HdrLog.write(results, to: path) }
        finish(results, json: options.json)
    } catch {
        printError("Error: \(error.message)")
        exit(2)
    }

case "tcp-copy":
    let copy: TCPCopyOptions
    do {
        guard let parsed = try TCPCopyOptions.parse(arguments) else {
            print(TCPCopyOptions.helpText, terminator: "")
            exit(0)
        }
        copy = parsed
    } catch {
        usageFailure(error.message, usage: TCPCopyOptions.usageLine)
    }
    do {
        finish(try runTCPCopy(copy, log: log), json: copy.json)
    } catch {
        printError("Error: \(error.message)")
        exit(2)
    }

case "blobs":
    let blobOptions = parseOrExit(BlobBench.Options.self, arguments)
    do {
        try BlobBench.run(blobOptions)
    } catch {
        printError("Error: \(error)")
        exit(2)
    }

case "wire":
    if arguments.first == "--help" || arguments.first == "-h" {
        print("Usage: larder-bench wire [SECONDS]\n\nCodec throughput in-process: frame encode/decode, typed decoding and encoding and the server's\nCREATE reading, with and without a JSON tree, zlib levels.")
        exit(0)
    }
    guard arguments.count <= 1, let seconds = arguments.first.map(Double.init) ?? 2, seconds > 0 else {
        usageFailure("wire takes one optional number of seconds per case", usage: "Usage: larder-bench wire [SECONDS]")
    }
    WireBench.run(seconds: seconds)

case "store":
    let storeUsage = "Usage: larder-bench store [--dir DIR] [--documents N] [--quick]"
    var directory: String?
    var documents: Int?
    var quick = false
    var scanner = ArgumentScanner(arguments)
    while let argument = scanner.next() {
        switch argument.name {
        case "-h", "--help":
            print("""
                larder-bench store: the store in-process (no network)

                \(storeUsage)

                Creates a fresh store under DIR (default: the temporary directory) and measures create and get by id,
                search with and without indexes over N documents (default 100000), and 1 MiB blob put and get.
                --quick runs each measurement with a hundredth of its operations (and 1000 documents unless
                --documents says otherwise): a check that it runs, not figures to compare.
                """)
            exit(0)
        case "--dir":
            guard let value = scanner.value(for: argument) else { usageFailure("--dir needs a value", usage: storeUsage) }
            directory = value
        case "--documents":
            guard let value = scanner.value(for: argument), let n = Int(value), n >= 1000 else {
                usageFailure("--documents must be a whole number of at least 1000", usage: storeUsage)
            }
            documents = n
        case "--quick" where argument.inline == nil:
            quick = true
        default:
            usageFailure("unexpected argument '\(argument.text)'", usage: storeUsage)
        }
    }
    do {
        try runStoreBenchmark(directory: directory, documents: documents ?? (quick ? 1_000 : 100_000), quick: quick)
    } catch {
        printError("Error: \(error)")
        exit(2)
    }

case "watch":
    let watchOptions = parseOrExit(WatchBench.Options.self, arguments)
    do {
        try WatchBench.run(watchOptions)
    } catch {
        printError("Error: \(error)")
        exit(2)
    }

case "replica":
    let replicaOptions = parseOrExit(ReplicaBench.Options.self, arguments)
    do {
        try ReplicaBench.run(replicaOptions)
    } catch {
        printError("Error: \(error)")
        exit(2)
    }

case "thumbnail":
    do {
        try ThumbnailBench.run(arguments)
    } catch {
        printError("Error: \(error)")
        exit(2)
    }

case "thumb-server":
    let thumbOptions = parseOrExit(ThumbnailServerBench.Options.self, arguments)
    do {
        try ThumbnailServerBench.run(thumbOptions)
    } catch {
        printError("Error: \(error.message)")
        exit(2)
    }

case "help", "-h", "--help":
    print(topHelp, terminator: "")

default:
    usageFailure("unknown command '\(command)'", usage: topUsage)
}
