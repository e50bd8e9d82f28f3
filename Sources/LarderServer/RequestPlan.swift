import LarderWire

/// Where one decoded request runs: decided once, by `RequestPlan(for:pointReadsAreLocal:laneIsBusy:)`, and switched on
/// once by the connection that runs it. The decision is pure (the request's opcode and sizes, and two facts about the
/// server and the connection), so it is tested without a server.
enum RequestPlan: Equatable {
    /// Answered on the connection's event loop at once: PING, and the point reads (GET, BLOB_HEAD) of a store that
    /// answers them locally (SQLite). Each is one indexed lookup, cheaper than the two thread switches a hop to the
    /// work pool and back would cost.
    case inline
    /// Refused on the event loop before any work (`Router.refusal`): an EVENT sent by a client, an opcode this server
    /// does not know, or a binary part on a request that takes none.
    case refused
    /// A small CREATE, REPLACE, PATCH or DELETE, parsed on the event loop and handed straight to the store's writer:
    /// none of the connection's writes is on its lane, so none can be overtaken.
    case writer
    /// The connection's lane of the work pool: every other write (uploads included), parsed off the loop and handed to
    /// the store's writer in the order the connection sent them.
    case writeLane
    /// The work pool: the reads whose time depends on the data (searches, lists, BLOB_GET), and point reads of a
    /// store that waits on the network (PostgreSQL).
    case workPool
    /// BACKUP and BACKUP_READ, which the backup service runs on the work pool.
    case backup
    /// WATCH and UNWATCH: the connection's watch machine answers them, since they change its subscriptions.
    case watch

    /// The largest request JSON (inflated) of a CREATE, REPLACE, PATCH or DELETE that its event loop parses itself
    /// (`writer`); a larger one is parsed on the work pool, off the loop.
    static let loopWriteBytes = 4 << 10

    /// The plan for `frame`. `pointReadsAreLocal`: the store answers point reads without waiting on the network.
    /// `laneIsBusy`: some of the connection's writes are on its lane and unanswered (`LaneWrites`).
    init(for frame: Frame, pointReadsAreLocal: Bool, laneIsBusy: Bool) {
        let opcode = frame.opcode
        switch opcode {
        case .watch, .unwatch:
            self = .watch
            return
        case .event:
            self = .refused
            return
        default:
            break
        }
        guard Opcode.all.contains(opcode),
            frame.binary.isEmpty || opcode == .blobPut || opcode == .blobUploadChunk
        else {
            self = .refused
            return
        }
        switch opcode {
        case .ping:
            self = .inline
        case .get, .blobHead:
            self = pointReadsAreLocal ? .inline : .workPool
        case .backup, .backupRead:
            self = .backup
        case .create, .replace, .patch, .delete:
            self = !laneIsBusy && frame.json.count <= RequestPlan.loopWriteBytes ? .writer : .writeLane
        default:
            self = opcode.isWrite ? .writeLane : .workPool
        }
    }
}
