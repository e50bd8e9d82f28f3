import LarderStore
import LarderWire

/// The JSON parts of EVENT frames, written by hand so a record's stored bytes are spliced in, not re-encoded. The
/// member order is `subscription` first, so one body serves every subscriber of an event.
enum EventEncoder {
    /// `"seq":…,"kind":…,"collection":…[,"id":…,"rev":…],"time":…[,"record":…][,"blob":…]}`.
    static func body(_ entry: ChangeEntry, idsOnly: Bool) -> [UInt8] {
        var out = Array(#""seq":"#.utf8)
        out.reserveCapacity(160 + (idsOnly ? 0 : entry.record?.data.count ?? 0))
        JSONWriter.writeInt(entry.seq, into: &out)
        out.append(contentsOf: #","kind":"#.utf8)
        JSONWriter.writeString(entry.kind.rawValue, into: &out)
        out.append(contentsOf: #","collection":"#.utf8)
        JSONWriter.writeString(entry.collection, into: &out)
        if let record = entry.record {
            out.append(contentsOf: #","id":"#.utf8)
            JSONWriter.writeString(record.id.wireString, into: &out)
            out.append(contentsOf: #","rev":"#.utf8)
            JSONWriter.writeInt(record.rev, into: &out)
        }
        out.append(contentsOf: #","time":"#.utf8)
        Timestamp.writeQuoted(entry.time, into: &out)
        let carriesRecord = entry.kind == .create || entry.kind == .replace || entry.kind == .patch
        if carriesRecord, !idsOnly, let record = entry.record {
            out.append(contentsOf: #","record":"#.utf8)
            record.write(into: &out)
        }
        if let blob = entry.blob {
            out.append(contentsOf: #","blob":"#.utf8)
            blob.json.write(into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func event(subscription: UInt32, body: [UInt8], matches: Bool = true) -> [UInt8] {
        var out = Array(#"{"subscription":"#.utf8)
        out.reserveCapacity(out.count + 30 + body.count)
        JSONWriter.writeInt(Int64(subscription), into: &out)
        out.append(contentsOf: matches ? Array(",".utf8) : Array(#","matches":false,"#.utf8))
        out.append(contentsOf: body)
        return out
    }

    /// `since` is older than the log (or newer than anything committed): reload, then follow the events after `seq`.
    static func resync(subscription: UInt32, seq: Int64, oldestSeq: Int64) -> [UInt8] {
        ChangeEvent(subscription: subscription, seq: seq, kind: .resync, oldestSeq: oldestSeq).json.bytes
    }

    /// The subscription ended; `seq` is the last change it handled. It fell behind, unless `ending` says why else.
    static func gap(subscription: UInt32, seq: Int64, ending: LarderError? = nil) -> [UInt8] {
        ChangeEvent(subscription: subscription, seq: seq, kind: .gap, error: ending).json.bytes
    }
}
