import Foundation
import LarderClient

extension CLI {
    /// The TLS settings of a command line: `--tls`, or any TLS option, turns TLS on; each has an environment
    /// variable. Skipping verification says so on stderr every time.
    static func tlsSettings(
        _ invocation: Invocation, environment: [String: String], unixSocket: Bool
    ) throws(UsageError) -> LarderClient.TLSSettings? {
        func value(_ name: String, _ variable: String) -> String? {
            invocation.value(name) ?? environment[variable].flatMap { $0.isEmpty ? nil : $0 }
        }
        func flag(_ name: String, _ variable: String) -> Bool {
            invocation.flag(name) || ["1", "true", "yes"].contains(environment[variable]?.lowercased() ?? "")
        }
        let ca = value("ca", "LARDER_CA")
        let serverName = value("tls-server-name", "LARDER_TLS_SERVER_NAME")
        let certificate = value("tls-cert", "LARDER_TLS_CERT")
        let key = value("tls-key", "LARDER_TLS_KEY")
        let skip = flag("tls-insecure-skip-verify", "LARDER_TLS_INSECURE_SKIP_VERIFY")
        guard flag("tls", "LARDER_TLS") || ca != nil || serverName != nil || certificate != nil || key != nil || skip
        else { return nil }
        if unixSocket {
            throw UsageError("TLS is for TCP: a Unix socket is always plain (drop --tls or --socket)")
        }
        if (certificate == nil) != (key == nil) {
            throw UsageError("a client certificate needs its key: give both --tls-cert and --tls-key")
        }
        for (option, path) in [("ca", ca), ("tls-cert", certificate), ("tls-key", key)] {
            if let path, !FileManager.default.isReadableFile(atPath: path) {
                throw UsageError("--\(option): cannot read \(path)", excerpt: .option(option, path))
            }
        }
        if skip {
            FileHandle.standardError.write(
                Data(("Warning: --tls-insecure-skip-verify: the server's certificate is not checked, so anyone on the "
                    + "network path can read and change this connection; use it for tests only\n").utf8))
        }
        return LarderClient.TLSSettings(
            caFile: ca, serverName: serverName, certificateFile: certificate, keyFile: key, skipVerification: skip)
    }
}
