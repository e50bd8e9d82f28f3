import Foundation
import LarderTestThreads
import Testing

/// `larder-bench replica` against a real server: each of its three measurements runs and reports its fields (a small
/// run: a check that it works, not figures); bad options are usage errors.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReplicaBenchTests {
    @Test func measuresTheReplicaBesideThePlainClient() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let bench = CLIShellTests.product("larder-bench")
        let r = try CLIShellTests.run(
            bench, ["replica", "--port", String(server.port), "--records", "60", "--writes", "20", "--changes", "10"])
        #expect(r.status == 0, "\(r.stderr)")
        for field in [
            "bootstrap records=60 list_s=", "replica_s=", "rss_mib_after_replica=", "writes n=20 local_p50_ms=",
            "drain_per_s=", "create_per_s=", "changes n=10 visible_p50_ms=", "visible_p99_ms=",
        ] {
            #expect(r.stdout.contains(field), "\(r.stdout)")
        }
        let bad = try CLIShellTests.run(bench, ["replica", "--writes", "2"])
        #expect(bad.status == 64 && bad.stderr.contains("--writes"), "\(bad.stderr)")
    }
}
