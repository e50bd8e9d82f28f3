import Foundation
import LarderTestThreads
import Testing

/// A usage error names the argument at fault and nothing else of the command line: the token, given with `--token T`,
/// `--token=T` or `LARDER_TOKEN`, is printed on neither stdout nor stderr.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct CLITokenSecrecyTests {
    static let secret = "s3cr3t-Token-4f9a2c"

    /// The three ways of giving the token: as arguments put before the command, and as environment.
    static let spellings: [(arguments: [String], environment: [String: String])] = [
        (["--token", secret], [:]),
        (["--token=\(secret)"], [:]),
        ([], ["LARDER_TOKEN": secret]),
    ]

    /// Usage mistakes and the word each error must name.
    static let mistakes: [(arguments: [String], named: String)] = [
        (["--bogus", "ping"], "--bogus"),
        (["frobnicate"], "frobnicate"),
        (["ping", "extra"], "extra"),
        (["ping", "--bogus=1"], "--bogus"),
        (["blob"], "blob"),
    ]

    @Test func usageErrorsNameTheBadArgumentAndNeverTheToken() throws {
        for spelling in Self.spellings {
            for mistake in Self.mistakes {
                let arguments = spelling.arguments + mistake.arguments
                let r = try CLITests.run(arguments, environment: spelling.environment)
                let label = "\(arguments) \(spelling.environment)"
                #expect(r.status == 64, "\(label): \(r.stderr)")
                #expect(r.stderr.hasPrefix("Error: "), "\(label): \(r.stderr)")
                #expect(r.stderr.contains(mistake.named), "\(label): \(r.stderr)")
                #expect(!r.stderr.contains(Self.secret) && !r.stdout.contains(Self.secret), "\(label): \(r.stderr)")
            }
        }
    }

    @Test func aTokenWhereAWordWasExpectedIsNotPrintedBack() throws {
        // A mistyped option name carries the token after its `=`: the error names the option alone.
        var r = try CLITests.run(["--tokn=\(Self.secret)", "ping"])
        #expect(r.status == 64 && r.stderr.hasPrefix("Error: unknown option --tokn"), "\(r.stderr)")
        #expect(!r.stderr.contains(Self.secret) && !r.stdout.contains(Self.secret), "\(r.stderr)")

        // The token pasted as an argument: the word is shown masked.
        r = try CLITests.run(["ping", Self.secret], environment: ["LARDER_TOKEN": Self.secret])
        #expect(r.status == 64 && r.stderr.hasPrefix("Error: unexpected argument '***'"), "\(r.stderr)")
        #expect(!r.stderr.contains(Self.secret) && !r.stdout.contains(Self.secret), "\(r.stderr)")
        r = try CLITests.run(["--token", Self.secret, Self.secret])
        #expect(r.status == 64 && r.stderr.contains("unknown command '***'"), "\(r.stderr)")
        #expect(!r.stderr.contains(Self.secret) && !r.stdout.contains(Self.secret), "\(r.stderr)")
    }
}
