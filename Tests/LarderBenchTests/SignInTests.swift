import Foundation
import LarderServer
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderBench

/// `--sign-in`: the bench loads a server as one of the accounts it keeps, held to the collection's rules like an app's
/// user, so that the cost of a user's request can be measured against a role token's.
@Suite(.serialized, .ownThreads, .timeLimit(.minutes(20))) struct SignInTests {
    /// An in-process server keeping accounts (cheap hashes), with the admin token "admin-secret".
    static func withAccountsServer<T>(_ body: (Int) throws -> T) throws -> T {
        try withLarderServer(configure: { configuration in
            var settings = PasswordAccountSettings()
            settings.hashParameters = .init(iterations: 1, memoryKiB: 64, parallelism: 1)
            settings.limits.signUpAllowed = true
            configuration.passwordAccounts = settings
            configuration.token = "admin-secret"
        }, body)
    }

    static func signUp(_ port: Int, _ email: String) throws {
        let client = try RawClient.tcp(port: port)
        #expect(try client.call(.hello, HelloRequest(client: "bench-tests").json).status == .ok)
        let answer = try client.call(.signUp, AccountCredentials(email: email, password: "a long password").json)
        #expect(answer.status == .ok, "\(answer.replyText)")
    }

    @Test func aSignedInRunCreatesRecordsItsUserOwnsAndReadsThem() throws {
        try Self.withAccountsServer { port in
            let admin = try RawClient.tcp(port: port)
            try admin.hello(token: "admin-secret")
            let rules: JSONObject = ["read": "owner", "create": "owner", "update": "owner", "delete": "owner"]
            #expect(try admin.call(.rulesSet, ["collection": "bench", "rules": .object(rules)]).status == .ok)
            try Self.signUp(port, "ann@example.com")

            guard
                case .run(var options) = try BenchArguments.parse([
                    "--port", "\(port)", "--connections", "2", "--requests", "300", "--preload", "50",
                    "--mix", "get=50,search=25,create=25", "--sign-in", "ann@example.com",
                ], environment: ["LARDER_BENCH_PASSWORD": "a long password"])
            else { throw BenchError("help") }
            options.quiet = true
            try options.validate()
            let results = try runBenchmark(options)
            #expect(results.total.errors == 0, "\(results.total.errorsByName)")
            #expect(results.total.count >= 300)

            // Every record is Ann's; the admin sees her id as its owner.
            let page = try admin.call(.list, ["collection": "bench", "limit": 1000])
            let owners = Set((page.replyJSON["records"]?.arrayValue ?? []).map { $0["data"]?["$owner"]?.stringValue })
            #expect(owners.count == 1 && owners.first??.hasPrefix("larder|") == true, "\(owners)")
        }
    }

    @Test func signingInNeedsThePasswordAndNoToken() throws {
        #expect(throws: UsageError.self) {
            try BenchArguments.parse(["--sign-in", "ann@example.com"], environment: [:])
        }
        #expect(throws: UsageError.self) {
            try BenchArguments.parse(
                ["--sign-in", "ann@example.com", "--token", "t"], environment: ["LARDER_BENCH_PASSWORD": "a long password"])
        }
    }

    @Test func aWrongPasswordStopsTheRunNamingSignIn() throws {
        try Self.withAccountsServer { port in
            try Self.signUp(port, "bo@example.com")
            guard
                case .run(var options) = try BenchArguments.parse([
                    "--port", "\(port)", "--requests", "10", "--sign-in", "bo@example.com",
                ], environment: ["LARDER_BENCH_PASSWORD": "not the password"])
            else { throw BenchError("help") }
            options.quiet = true
            #expect {
                try runBenchmark(options)
            } throws: { error in
                "\(error)".contains("SIGN_IN") && !"\(error)".contains("not the password")
            }
        }
    }
}
