import LarderClient
import LarderWire

extension Commands {
    /// `larder backup FILE`.
    static func backup(_ c: Context) async throws -> Int32 {
        let path = c.arguments[0]
        let progress = Output.Progress(label: "backup", enabled: c.output.stderrIsTerminal)
        let snapshot = try await c.client.backup(to: path, progress: { progress.update(Int($0), Int($1)) })
        progress.finish()
        if c.output.json {
            var json = snapshot.json
            json["file"] = .string(path)
            c.output.json(.object(json))
        } else {
            c.output.line(
                "wrote a \(snapshot.format) backup of \(ByteSize.format(Int(snapshot.size))) to \(path) "
                    + "(sha256 \(snapshot.sha256))")
        }
        return 0
    }
}
