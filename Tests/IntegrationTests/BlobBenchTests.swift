import Foundation
import LarderTestThreads
import Testing

/// `larder-bench blobs`: the in-process transfer benchmark runs its rounds against a real server (each round checks
/// the copy byte for byte) and reports both directions and the server's CPU per MiB; bad options are usage errors.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct BlobBenchTests {
    @Test func measuresBothWaysAgainstARunningServer() throws {
        let server = try ClientTestServer()
        defer { server.stop() }
        let bench = CLIShellTests.product("larder-bench")
        let r = try CLIShellTests.run(
            bench,
            ["blobs", "--port", String(server.port), "--size", "300KiB", "--rounds", "2", "--server-pid",
                String(getpid())])
        #expect(r.status == 0, "\(r.stderr)")
        let fields = [
            "upload_MBps_median=", "download_MBps_median=", "server_cpu_ms_per_MiB_up=",
            "download_memory_MBps_median=", "disk_floor_MBps_median=", "sha256_MBps_median=",
            "client_cpu_ms_per_MiB_down=",
        ]
        for field in fields {
            #expect(r.stdout.contains(field), "\(r.stdout)")
        }
        #expect(r.stdout.hasPrefix("blobs size=300 KiB rounds=2 "), "\(r.stdout)")
        let bad = try CLIShellTests.run(bench, ["blobs", "--size", "12"])
        #expect(bad.status == 64 && bad.stderr.contains("--size"), "\(bad.stderr)")
        let badWindow = try CLIShellTests.run(bench, ["blobs", "--window", "0"])
        #expect(badWindow.status == 64 && badWindow.stderr.contains("--window"), "\(badWindow.stderr)")
    }
}
