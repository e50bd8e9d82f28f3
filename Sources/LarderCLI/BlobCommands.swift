import Foundation
import LarderClient

// The `blob` commands: put (one frame, or a resumable upload), get (whole, a range, or a thumbnail) and info.
extension Commands {
    static func blobInfo(_ out: Output, _ info: BlobInfo) {
        if out.json { return out.json(.object(info.json)) }
        var rows: [(String, String)] = [
            ("id", info.id.wireString), ("size", "\(ByteSize.format(info.size)) (\(info.size) bytes)"),
            ("sha256", info.sha256),
            ("type", info.contentType), ("pixels", "\(info.width)x\(info.height)"),
            ("created", Timestamp.string(info.createdAtMs)),
        ]
        if let attached = info.attachedTo { rows.append(("attached to", "\(attached.collection)/\(attached.id.wireString)")) }
        for (key, value) in rows { out.line(out.bold(Output.pad(key, 11)) + "  " + value) }
    }

    static func blobPut(_ c: Context) async throws -> Int32 {
        let path = c.arguments[0]
        let id = try c.invocation.value("id").map { (text) throws(UsageError) in try c.uuid(text) }
        let attach = try c.attachment("attach")
        let resume = try c.seconds("resume-within", range: 0...86_400) ?? 60
        let limits = try await c.client.serverHello().limits
        let oneFrame = min(limits.blobChunkBytes, limits.maxBinaryPartBytes)
        // stdin is read to its end first (its size is declared when an upload begins): in memory when it fits one
        // frame, else into an unnamed temporary file, uploaded from there as a file is.
        let stdin = path == "-" ? try StdinSpool(inMemory: oneFrame, limit: limits.maxBlobBytes) : nil
        let file = stdin == nil ? path : stdin?.path
        let size =
            stdin.map { Int($0.size) } ?? (try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? Int
        let progress = Output.Progress(label: "put", enabled: c.output.stderrIsTerminal && (size ?? 0) >= 1 << 20)
        let info: BlobInfo
        if let file, let size, size > oneFrame {
            // Streamed from the file a chunk at a time; the client resumes by itself after a broken connection.
            info = try await c.client.putBlob(
                contentsOf: URL(fileURLWithPath: file), id: id, attachTo: attach,
                resumeWithin: .milliseconds(Int(resume * 1000)),
                progress: { progress.update(Int($0.done), Int($0.total)) })
            if let stdin, info.sha256 != stdin.sha256 {
                throw CommandFailure(
                    message: "the blob's SHA-256 (\(info.sha256)) is not stdin's (\(stdin.sha256)): the temporary "
                        + "copy changed while it was uploaded; blob \(info.id.wireString) holds what was sent")
            }
        } else {
            let bytes = try stdin?.bytes ?? Transfer.read(path)
            // The digest travels with the bytes, so the server refuses a photo damaged on the way.
            var digest = SHA256()
            digest.update(bytes)
            info = try await c.client.blobPut(
                Data(bytes), id: id, sha256: digest.finalizeHex(), attachTo: attach,
                progress: { progress.update($0, $1) })
        }
        progress.finish()
        blobInfo(c.output, info)
        return 0
    }

    /// `--range START-END` (both included, as HTTP's `bytes=` ranges), or `START-` to the end.
    static func byteRange(_ c: Context) throws(UsageError) -> (start: Int64, end: Int64?)? {
        guard let text = c.invocation.value("range") else { return nil }
        let parts = text.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let start = Int64(parts[0]), start >= 0,
            parts[1].isEmpty || Int64(parts[1]).map({ $0 >= start }) == true
        else {
            throw UsageError(
                "--range must be START-END (bytes START to END, both included, END ≥ START) or START-",
                excerpt: .option("range", text))
        }
        return (start, parts[1].isEmpty ? nil : Int64(parts[1]))
    }

    static func blobGet(_ c: Context) async throws -> Int32 {
        let destination = c.invocation.value("output")
        let toStdout = destination == nil || destination == "-"
        if toStdout && c.output.stdoutIsTerminal {
            throw UsageError(
                "refusing to write JPEG bytes to a terminal; use -o FILE or redirect stdout",
                usage: "Usage: larder blob get ID -o FILE")
        }
        let id = try c.uuid(c.arguments[0])
        if let thumb = try c.int("thumb", range: 1...Limits.maxThumbnailSize) {
            return try await thumbnailGet(c, id, maxSide: thumb, destination: toStdout ? nil : destination)
        }
        let asked = try byteRange(c)
        let info = try await c.client.blobHead(id)
        let range: Range<Int64>? = asked.map { $0.start..<(($0.end ?? info.size - 1) + 1) }
        if let range, range.lowerBound >= info.size || range.upperBound > info.size {
            throw CommandFailure(
                message: "the range \(c.invocation.value("range") ?? "") passes the end of the blob, which has "
                    + "\(info.size) bytes (the last is \(info.size - 1))")
        }
        let wanted = range ?? 0..<info.size
        let progress = Output.Progress(label: "get", enabled: c.output.stderrIsTerminal && wanted.count >= 1 << 20)
        if toStdout {
            let limits = try await c.client.serverHello().limits
            let chunk = Int64(max(1, min(limits.blobChunkBytes, limits.maxBinaryPartBytes)))
            var offset = wanted.lowerBound
            while offset < wanted.upperBound {
                let bytes = try await c.client.blob(id, range: offset..<min(offset + chunk, wanted.upperBound))
                c.output.bytes(Array(bytes))
                offset += Int64(bytes.count)
                progress.update(Int(offset - wanted.lowerBound), wanted.count)
            }
            progress.finish()
        } else if let destination {
            let written = try await c.client.writeBlob(
                id, to: URL(fileURLWithPath: destination), range: range,
                progress: { progress.update(Int($0.done), Int($0.total)) })
            progress.finish()
            if c.output.json {
                c.output.json(.object(written.json))
            } else if let range {
                c.output.line(
                    "wrote \(range.count) bytes (\(range.lowerBound)-\(range.upperBound - 1) of \(written.size)) to "
                        + "\(destination)")
            } else {
                c.output.line("wrote \(written.size) bytes to \(destination) (sha256 \(written.sha256))")
            }
        }
        return 0
    }

    /// `blob get ID --thumb N`: a thumbnail is one answer of a few KB, written whole (no ranges, no progress).
    static func thumbnailGet(_ c: Context, _ id: UUID, maxSide: Int, destination: String?) async throws -> Int32 {
        if c.invocation.value("range") != nil {
            throw UsageError(
                "--thumb and --range cannot be used together: a thumbnail is sent whole",
                usage: "Usage: larder blob get ID --thumb N -o FILE")
        }
        let blob = try await c.client.thumbnail(id, maxSide: maxSide)
        guard let destination else {
            c.output.bytes(Array(blob.bytes))
            return 0
        }
        guard FileManager.default.createFile(atPath: destination, contents: blob.bytes) else {
            throw CommandFailure(message: "cannot write \(destination)")
        }
        if c.output.json {
            c.output.json(.object(blob.info.json))
        } else if let thumbnail = blob.info.thumbnail {
            c.output.line(
                "wrote a \(thumbnail.width)×\(thumbnail.height) thumbnail, \(blob.bytes.count) bytes, to \(destination)")
        }
        return 0
    }
}
