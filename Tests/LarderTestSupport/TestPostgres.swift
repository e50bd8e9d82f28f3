import Foundation
#if canImport(Glibc)
import Glibc
#endif
import LarderStore

/// The PostgreSQL the tests use: one throwaway cluster per test process (`scripts/postgres`), started at first use
/// and removed when the process exits, or the one `LARDER_TEST_POSTGRES_URL` names. Each test takes a schema of its
/// own (`newSchema`), so tests never see each other's data.
public enum TestPostgres {
    /// The package's root directory (where `scripts/` is).
    public static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The cluster's directory when this process started it (removed at exit).
    nonisolated(unsafe) private static var ownDirectory: String?

    private static let base: Result<String, TestPostgresError> = {
        if let url = ProcessInfo.processInfo.environment["LARDER_TEST_POSTGRES_URL"], !url.isEmpty {
            return .success(url)
        }
        removeStaleClusters()
        let directory = "/tmp/larder-test-pg-\(getpid())"
        do {
            let url = try Cluster.script(["start"], directory: directory)
            ownDirectory = directory
            atexit {
                if let directory = TestPostgres.ownDirectory {
                    _ = try? Cluster.script(["stop", "--remove"], directory: directory)
                }
            }
            return .success(url)
        } catch {
            return .failure(TestPostgresError(description: "\(error)"))
        }
    }()

    /// The URL of the shared cluster's `larder` database.
    public static func url() throws -> String { try base.get() }

    /// A new empty schema on the shared cluster: the URL that works in it, and how to drop it.
    public static func newSchema() throws -> TestSchema {
        let base = try url()
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        try PGAdmin.execute(url: base, "CREATE SCHEMA \(name)")
        return TestSchema(name: name, base: base)
    }

    /// Clusters left by test processes that died without removing theirs.
    private static func removeStaleClusters() {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/tmp")) ?? []
        for entry in entries where entry.hasPrefix("larder-test-pg-") && !entry.hasSuffix(".lock") {
            guard let pid = Int32(entry.dropFirst("larder-test-pg-".count)), kill(pid, 0) != 0, errno == ESRCH else {
                continue
            }
            _ = try? Cluster.script(["stop", "--remove"], directory: "/tmp/\(entry)")
        }
    }
}

/// A test's schema: `url` connects with it first on the search path.
public struct TestSchema: Sendable {
    public let name: String
    public let base: String

    public var url: String { TestSchema.url(base, schema: name) }

    static func url(_ base: String, schema: String) -> String {
        base + (base.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)"
    }

    /// Drops the schema and everything in it.
    public func drop() { try? PGAdmin.execute(url: base, "DROP SCHEMA IF EXISTS \(name) CASCADE") }
}

public struct TestPostgresError: Error, CustomStringConvertible {
    public var description: String
}

/// A cluster of a test's own (for tests that stop and start PostgreSQL): its own directory and port.
public final class Cluster: @unchecked Sendable {
    public let directory: String
    public private(set) var url: String

    /// Creates and starts a cluster in a new directory.
    public init() throws {
        directory = "/tmp/larder-test-pg-\(getpid())-\(UUID().uuidString.prefix(8).lowercased())"
        url = try Cluster.script(["start"], directory: directory)
    }

    deinit { remove() }

    /// The port it listens on (kept across restarts).
    public var port: Int { Int((try? String(contentsOfFile: directory + "/port", encoding: .utf8))?.trimmed ?? "") ?? 0 }

    /// `pg_ctl stop` with a mode: `fast` (clients disconnected, clean) or `immediate` (as a crash).
    public func stop(mode: String = "fast") throws {
        try Cluster.run(
            [Cluster.pgBinary("pg_ctl"), "-D", directory + "/data", "-w", "-t", "60", "stop", "-m", mode], asOwner: true)
    }

    /// Starts it again (same directory, same port).
    public func start() throws { url = try Cluster.script(["start"], directory: directory) }

    public func remove() { _ = try? Cluster.script(["stop", "--remove"], directory: directory) }

    /// Runs `scripts/postgres` with `LARDER_PG_DIR=directory`; answers its last output line.
    static func script(_ arguments: [String], directory: String) throws -> String {
        let output = try run(
            [TestPostgres.packageRoot.appendingPathComponent("scripts/postgres").path] + arguments, asOwner: false,
            environment: ["LARDER_PG_DIR": directory])
        return output.split(separator: "\n").last.map(String.init) ?? ""
    }

    static func pgBinary(_ name: String) throws -> String {
        let candidates = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in candidates.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let path = "/usr/lib/postgresql/\(version)/bin/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        throw TestPostgresError(description: "no PostgreSQL \(name) found; run scripts/bootstrap")
    }

    /// Runs a command and returns its standard output; throws with its standard error when it fails. posix_spawn and
    /// waitpid rather than Foundation's `Process`, whose wait for exit hung in a test process spawning others.
    @discardableResult
    static func run(_ arguments: [String], asOwner: Bool, environment: [String: String] = [:]) throws -> String {
        var arguments = arguments
        if asOwner && getuid() == 0 {
            arguments = ["/usr/sbin/runuser", "-u", getpwnam("postgres") != nil ? "postgres" : "nobody", "--"] + arguments
        }
        let outPath = NSTemporaryDirectory() + "larder-run-\(UUID().uuidString).out"
        let errPath = outPath + ".err"
        defer {
            unlink(outPath)
            unlink(errPath)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let variables = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { "\($0)=\($1)" }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = variables.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, arguments[0], &actions, nil, argv, envp)
        guard spawned == 0 else {
            throw TestPostgresError(description: "cannot run \(arguments[0]): errno \(spawned)")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let out = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        guard status == 0 else {
            let err = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
            throw TestPostgresError(
                description: "\(arguments.joined(separator: " ")) failed (status \(status)): \(err)")
        }
        return out
    }
}

extension String {
    fileprivate var trimmed: String { trimmingCharacters(in: .whitespacesAndNewlines) }
}
