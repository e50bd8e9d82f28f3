import LarderIO
import LarderTestThreads
import Testing

/// The one walk over a command line that the server, the CLI and larder-bench's commands share.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ArgumentScannerTests {
    @Test func bothSpellingsOfAValueAndFlagsAndPositionals() {
        var scanner = ArgumentScanner(["--port", "7411", "--host=::1", "--json", "get", "--a=b=c", "-x", "--empty="])
        var seen: [String] = []
        while let argument = scanner.next() {
            switch argument.name {
            case "--port", "--host", "--a", "--empty":
                seen.append("\(argument.name) \(scanner.value(for: argument) ?? "<none>")")
            default:
                seen.append("\(argument.text)@\(argument.position)\(argument.inline == nil ? "" : "!")")
            }
        }
        #expect(seen == ["--port 7411", "--host ::1", "--json@3", "get@4", "--a b=c", "-x@6", "--empty "])
    }

    @Test func aValueMissingAtTheEndIsNil() {
        var scanner = ArgumentScanner(["--port"])
        let argument = scanner.next()!
        #expect(scanner.value(for: argument) == nil)
        #expect(scanner.next() == nil)
    }
}
