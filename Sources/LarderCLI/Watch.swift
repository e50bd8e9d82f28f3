#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderClient

extension Commands {
    /// `larder watch [COLLECTION]`: prints each change as it is committed until Ctrl-C (exit 0). A gap (this process
    /// fell behind) resumes where it was; a broken connection is an error (exit 1).
    static func watch(_ c: Context) async throws -> Int32 {
        let out = c.output
        let collection = c.arguments.first
        let since = try c.int("since", range: 0...Int.max).map(Int64.init)
        let filter = try FilterSyntax.filter(wheres: c.invocation.values["where"] ?? [], json: c.invocation.value("filter"))
        let idsOnly = c.invocation.flag("ids-only")
        Interrupt.exitOnSIGINT { out.flush() }
        var resume = since
        var announced = false
        while true {
            let feed = try await c.client.watch(collection: collection, filter: filter, since: resume, idsOnly: idsOnly)
            if !announced && out.stderrIsTerminal {
                out.error(
                    "watching \(collection ?? "every collection") after change \(resume ?? feed.startSeq) (Ctrl-C to stop)")
            }
            announced = true
            var events = feed.makeAsyncIterator()
            do throws(LarderError) {
                while let event = try await events.next() {
                    show(event, out)
                    out.flush()
                }
                return 0
            } catch {
                guard error.details["reason"] == "gap" else { throw error }
                let seq = error.details["seq"]?.intValue ?? feed.lastSeq
                out.error("fell behind the feed; resuming after change \(seq)")
                resume = seq
            }
        }
    }

    /// One event: a JSON line, or `#SEQ kind collection/id rev N …` for people.
    static func show(_ event: ChangeEvent, _ out: Output) {
        if out.json { return out.json(.object(event.json)) }
        var parts = [out.dim("#\(event.seq)"), out.bold(event.kind.rawValue)]
        switch event.kind {
        case .resync:
            parts.append(
                "the server's change log starts at #\(event.oldestSeq ?? 0): reload, changes after #\(event.seq) follow")
        default:
            if let collection = event.collection {
                parts.append(collection + (event.id.map { "/" + $0.wireString } ?? ""))
            }
            if let rev = event.rev { parts.append("rev \(rev)") }
            if !event.matches { parts.append("left") }
            if let blob = event.blob {
                parts.append("blob \(blob.id.wireString) \(blob.width)x\(blob.height) \(blob.size) bytes")
            }
            if let record = event.record { parts.append(Output.cell(.object(record.data), limit: 100)) }
        }
        out.line(parts.joined(separator: "  "))
    }
}

/// Ctrl-C handling for commands that run until interrupted.
enum Interrupt {
    nonisolated(unsafe) private static var source: (any DispatchSourceSignal)?

    /// On SIGINT: run `cleanup`, then exit 0 (stopping a watch is how it is meant to end).
    static func exitOnSIGINT(_ cleanup: @escaping @Sendable () -> Void) {
        guard source == nil else { return }
        signal(SIGINT, SIG_IGN)
        let signalSource = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        signalSource.setEventHandler {
            cleanup()
            exit(0)
        }
        signalSource.activate()
        source = signalSource
    }
}
