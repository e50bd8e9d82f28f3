import Foundation
import LarderTestProcess
import LarderTestThreads
import Testing

/// scripts/larder-server.service: `systemd-analyze verify` (installed by scripts/bootstrap) accepts it, pointed at the
/// built server, and it has the hardening and restart policy OPERATING.md promises.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ServiceUnitTests {
    static let unitPath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/larder-server.service")

    /// `systemd-analyze verify` on a unit with this text: its exit status and everything it said (it exits 0 on
    /// unknown keys and bad values, and only says so).
    static func verify(_ text: String, name: String = "larder-server.service") throws -> (Int32, String) {
        let directory = NSTemporaryDirectory() + "larder-unit-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let unit = directory + "/" + name, output = directory + "/out"
        _ = FileManager.default.createFile(atPath: unit, contents: Data(text.utf8))
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["systemd-analyze", "verify", unit]
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle(forWritingAtPath: output)
        try process.run()
        process.waitUntilExit()
        return (process.terminationStatus, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    @Test func systemdAnalyzeVerifiesTheUnit() throws {
        let text = try String(contentsOf: Self.unitPath, encoding: .utf8)
        let server = try ServerProcessTests.binary().path
        #expect(text.contains("ExecStart=/usr/local/bin/larder-server "))
        let (status, said) = try Self.verify(
            text.replacingOccurrences(of: "/usr/local/bin/larder-server", with: server))
        #expect(status == 0 && said.isEmpty, "systemd-analyze verify: \(said)")
        // What it checks: a misspelt key and a bad value are reported.
        let (_, bad) = try Self.verify(
            text.replacingOccurrences(of: "/usr/local/bin/larder-server", with: server)
                .replacingOccurrences(of: "ProtectSystem=strict", with: "ProtectSystem=sideways\nDynamicUsr=yes"))
        #expect(bad.contains("ProtectSystem") || bad.contains("protect system"))
        #expect(bad.contains("DynamicUsr"))
    }

    @Test func theUnitIsHardenedAndRestartsOnFailure() throws {
        let lines = Set(try String(contentsOf: Self.unitPath, encoding: .utf8).split(separator: "\n").map(String.init))
        for directive in [
            "DynamicUser=yes", "StateDirectory=larder", "ProtectSystem=strict", "NoNewPrivileges=yes",
            "KillSignal=SIGTERM", "Restart=on-failure",
        ] {
            #expect(lines.contains(directive), "the unit lacks \(directive)")
        }
        // The data directory is the state directory, the one place the service may write.
        #expect(lines.contains { $0.hasPrefix("ExecStart=") && $0.contains("--data-dir /var/lib/larder") })
    }
}
