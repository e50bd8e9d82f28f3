import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer
@testable import larder_server

@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct ServerOptionsTests {
    @Test func defaults() throws {
        let (command, c) = try ServerOptions.parse([])
        #expect(command == .run)
        #expect(c.host == "127.0.0.1" && c.port == 7411 && c.socketPath == nil)
        #expect(c.dataDirectory == "./larder-data" && c.token == nil)
        #expect(c.limits == .default)
        #expect(c.synchronous == .normal && c.logLevel == .info)
    }

    @Test func bothSpellingsAndEveryLimit() throws {
        let (_, c) = try ServerOptions.parse([
            "--port=0", "--host", "0.0.0.0", "--socket", "/tmp/l.sock", "--data-dir=/tmp/d", "--token", "t",
            "--max-frame-bytes", "50000000", "--max-json-bytes=8000000", "--max-document-bytes", "2000000",
            "--max-blob-bytes", "40000000", "--max-in-flight", "7", "--max-connections", "9",
            "--idle-timeout-ms", "1000", "--frame-timeout-ms", "2000", "--max-handshake-frame-bytes", "4096",
            "--zlib-level", "6", "--compression-threshold", "100", "--synchronous", "full", "--log-level", "debug",
            "--io-threads", "3", "--read-cache-bytes", "0",
        ])
        #expect(c.port == 0 && c.host == "0.0.0.0" && c.socketPath == "/tmp/l.sock" && c.dataDirectory == "/tmp/d")
        #expect(c.token == "t")
        #expect(
            c.limits
                == Limits(
                    maxFrameBytes: 50_000_000, maxJSONBytes: 8_000_000, maxDocumentBytes: 2_000_000,
                    maxBlobBytes: 40_000_000, maxInFlight: 7, maxConnections: 9, idleTimeoutMs: 1000,
                    frameTimeoutMs: 2000, maxHandshakeFrameBytes: 4096))
        #expect(c.zlibLevel == 6 && c.compressionThreshold == 100 && c.synchronous == .full && c.logLevel == .debug)
        #expect(c.ioQueues == 3 && c.readCacheBytes == 0)
    }

    @Test func environmentIsOverriddenByTheCommandLine() throws {
        let env = ["LARDER_SERVER_PORT": "9000", "LARDER_SERVER_MAX_IN_FLIGHT": "3", "LARDER_SERVER_LOG_LEVEL": "warn"]
        let (_, c) = try ServerOptions.parse(["--port", "9001"], environment: env)
        #expect(c.port == 9001 && c.limits.maxInFlight == 3 && c.logLevel == .warn)
    }

    @Test(arguments: [
        (["--nope"], "unknown option '--nope'"),
        (["--port"], "--port needs a value"),
        (["--port", "70000"], "--port needs an integer between 0 and 65535, not '70000'"),
        (["--max-in-flight", "0"], "--max-in-flight needs an integer between 1 and 2147483647, not '0'"),
        (["--io-threads", "0"], "--io-threads needs an integer between 1 and 256, not '0'"),
        (["--tcp-keepalive-s", "-1"], "--tcp-keepalive-s needs an integer between 0 and 86400, not '-1'"),
        (["--synchronous", "sometimes"], "--synchronous must be normal or full, not 'sometimes'"),
        (["stray"], "unexpected argument 'stray'"),
        (["--token-file", "/nonexistent/token"], "cannot read the token file /nonexistent/token"),
    ])
    func usageErrors(arguments: [String], message: String) {
        #expect(throws: ServerOptions.UsageError(message: message)) { try ServerOptions.parse(arguments) }
    }

    @Test func inconsistentLimitsAreAUsageError() {
        #expect(throws: ServerOptions.UsageError.self) { try ServerOptions.parse(["--max-document-bytes", "4000000"]) }
    }

    /// `--users` turns accounts on with their options; those options without it are a usage error.
    @Test func passwordAccounts() throws {
        #expect(try ServerOptions.parse([]).1.passwordAccounts == nil)
        let (_, on) = try ServerOptions.parse([
            "--users", "--allow-sign-up", "--session-ttl-ms", "60000", "--sign-in-attempts-per-account", "3",
            "--password-memory-kib", "65536", "--session-check-ms", "5000",
        ])
        let settings = try #require(on.passwordAccounts)
        #expect(settings.limits.signUpAllowed && settings.limits.sessionTtlMs == 60_000)
        #expect(settings.limits.signInAttemptsPerAccount == 3 && settings.hashParameters.memoryKiB == 65_536)
        #expect(settings.hashParameters.iterations == 2 && settings.limits.minPasswordBytes == 8)
        #expect(settings.limits.sessionCheckMs == 5_000)
        #expect(throws: ServerOptions.UsageError.self) { try ServerOptions.parse(["--users", "--session-check-ms", "0"]) }
        #expect(try ServerOptions.parse([], environment: ["LARDER_SERVER_USERS": "1"]).1.passwordAccounts != nil)
        #expect(throws: ServerOptions.UsageError.self) { try ServerOptions.parse(["--session-ttl-ms", "1000"]) }
        #expect(throws: ServerOptions.UsageError.self) {
            try ServerOptions.parse(["--users", "--min-password-bytes", "4"])
        }
        #expect(ServerOptions.helpText.contains("--users") && ServerOptions.helpText.contains("--allow-sign-up"))
    }

    @Test func help() throws {
        #expect(try ServerOptions.parse(["--port", "1", "--help"]).0 == .help)
        for option in ServerOptions.options {
            #expect(ServerOptions.helpText.contains("--\(option.name) "))
            #expect(ServerOptions.helpText.contains(option.env))
        }
        // No option names a test: the gates of a server process are hooks of a test-only build (larder-server-test).
        #expect(!ServerOptions.options.contains { $0.name.hasPrefix("test") || $0.env.hasPrefix("LARDER_TEST") })
        #expect(!ServerOptions.helpText.contains("test-") && !ServerOptions.helpText.contains("LARDER_TEST"))
        #expect(throws: ServerOptions.UsageError.self) { try ServerOptions.parse(["--test-search-gate", "/tmp/g1"]) }
        // Every variable the server reads is its own, none the CLI's.
        #expect(ServerOptions.options.allSatisfy { $0.env.hasPrefix("LARDER_SERVER_") })
    }

    @Test func tokenOptionAndFileTogether() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokens-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("tokens").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("read r-token notes\n".utf8))
        let (_, configuration) = try ServerOptions.parse(["--token", "t", "--token-file", file])
        let table = try #require(try LarderServer.tokenTable(configuration))
        #expect(table.grant(for: Array("t".utf8)) == .unrestricted)
        #expect(table.grant(for: Array("r-token".utf8)) == Grant(role: .read, collections: ["notes"]))
    }

    @Test func optionsAndEnvironment() throws {
        let (_, c) = try ServerOptions.parse(
            ["--max-watches", "3", "--max-watch-buffer-bytes=5000", "--change-retention", "10"],
            environment: ["LARDER_SERVER_CHANGE_RETENTION_MS": "60000"])
        #expect(c.limits.maxWatches == 3 && c.limits.maxWatchBufferBytes == 5000)
        #expect(c.changeRetentionEvents == 10 && c.changeRetentionMs == 60_000)
        #expect(throws: ServerOptions.UsageError.self) { try ServerOptions.parse(["--change-retention", "0"]) }
        #expect(ServerOptions.helpText.contains("--max-watch-buffer-bytes"))
    }
}

/// Every limit announced in HELLO can be set on the command line, and errors about limits name the option.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct LimitOptionTests {
    @Test func everyAnnouncedLimitHasAnOption() {
        let optionNames = Set(ServerOptions.options.map(\.name))
        for limit in Limits.default.json.keys {
            #expect(optionNames.contains(ServerOptions.optionName(limit: limit)), "no option for \(limit)")
        }
        #expect(ServerOptions.optionName(limit: "maxJSONBytes") == "max-json-bytes")
        #expect(ServerOptions.optionName(limit: "idleTimeoutMs") == "idle-timeout-ms")
    }

    @Test func inconsistentLimitsAreAUsageErrorNamingTheOptions() {
        #expect {
            _ = try ServerOptions.parse(["--max-json-bytes", "100"], environment: [:])
        } throws: { error in
            "\(error)".contains("--max-json-bytes must be at least twice --max-document-bytes")
        }
    }
}
