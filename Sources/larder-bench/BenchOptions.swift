import LarderIO

/// A mistake on a subcommand's command line (`blobs`, `watch`, `thumb-server`): printed as `Error: message` with the usage
/// line, exit 64.
struct BenchUsage: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// A subcommand's options: parsed from its arguments (nil when help was asked for), with its usage line and help.
protocol SubcommandOptions {
    /// The usage line, printed after a usage error.
    static var usage: String { get }
    /// The `--help` text.
    static var help: String { get }
    /// The defaults.
    init()
    /// Takes `argument` if it is one of the subcommand's own options, reading its value from `scanner`; false when it
    /// is none of them.
    mutating func take(
        _ argument: ArgumentScanner.Argument, from scanner: inout ArgumentScanner
    ) throws(BenchUsage) -> Bool
}

extension SubcommandOptions {
    /// The options of `arguments` over the defaults; nil when help was asked for.
    static func parse(_ arguments: [String]) throws(BenchUsage) -> Self? {
        var options = Self()
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            if argument.name == "-h" || argument.name == "--help" { return nil }
            guard try options.take(argument, from: &scanner) else {
                throw BenchUsage("unexpected argument '\(argument.text)'")
            }
        }
        return options
    }
}

// The option readers those subcommands share, each naming the option in its error.
extension ArgumentScanner {
    /// The value of the option just read; a usage error when the line ends first.
    mutating func string(_ argument: Argument) throws(BenchUsage) -> String {
        guard let value = value(for: argument) else { throw BenchUsage("\(argument.name) needs a value") }
        return value
    }

    /// The option's value as an integer of at least `min`.
    mutating func int(_ argument: Argument, min: Int = 1) throws(BenchUsage) -> Int {
        let text = try string(argument)
        guard let n = Int(text), n >= min else {
            throw BenchUsage("\(argument.name) needs an integer of at least \(min)")
        }
        return n
    }

    /// A flag, which takes no value (`--json=1` is a mistake, not a yes).
    func flag(_ argument: Argument) throws(BenchUsage) {
        if argument.inline != nil { throw BenchUsage("\(argument.name) takes no value") }
    }
}
