import Dispatch
import Foundation
import LarderSync
import LarderWire
import Testing

@testable import LarderServer

/// One connection to a server, in memory: its state machine is fed request frames, and the requests it hands out run
/// on the server's `Router` where `RequestPlan` sends them (on the test's thread, the work pool, the connection's
/// write lane, the store's writer), as `ServerConnection` runs them on its event loop, but without sockets, event
/// loops or a listener. Answers that come back from other threads are handed to the machine on the test's thread, in
/// the order they arrive. WATCH and UNWATCH need a connection's watch machine and shard: they are answered INTERNAL.
final class InMemoryConnection {
    let server: LarderServer
    let directory: URL
    private var machine: ConnectionStateMachine
    private var router: Router { server.context.router }
    private var lane: WorkPool.Lane?
    private var laneWrites = LaneWrites()
    /// Answers from other threads, and whether each came through the lane.
    private let arrived = Locked<[(reply: Reply, onLane: Bool)]>([])
    private let arrival = DispatchSemaphore(value: 0)
    /// Requests handed to another thread and not yet answered.
    private var outstanding = 0
    private var output = ByteBuffer()
    private var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
    /// The machine's actions not yet performed, in order.
    private var pending: [ConnectionStateMachine.Action] = []

    /// A server on a fresh data directory, and a connection to it that has said HELLO.
    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-memory-\(UUID())")
        var configuration = ServerConfiguration()
        configuration.dataDirectory = directory.path
        configuration.logLevel = .error
        server = try LarderServer(configuration: configuration)
        machine = ConnectionStateMachine(configuration: server.context.machineConfiguration, now: 0)
        send(.hello, HelloRequest(client: "in-memory").json, id: 0)
        _ = answers(1)
    }

    /// Stops the server's work pool and closes its store (no loop was ever started), and removes its data.
    func close() {
        router.pool.stop()
        router.store.close()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Sends one request frame.
    func send(_ opcode: Opcode, _ json: JSONObject = [:], binary: [UInt8] = [], id: UInt32) {
        let bytes = FrameEncoder().encode(Frame(opcode: opcode, requestID: id, json: json.bytes, binary: binary))
        bytes.withUnsafeBytes { pending += machine.bytesReceived($0, now: 0) }
        performPending()
    }

    /// The next `count` answer frames, in the order the connection wrote them (waiting for those still running).
    func answers(_ count: Int) -> [Frame] {
        var frames: [Frame] = []
        while true {
            while machine.unsentBytes > 0 {
                let written = machine.withUnsentOutput { raw in
                    output.append(raw)
                    return raw.count
                }
                pending += machine.writeCompleted(written, now: 0)
            }
            while frames.count < count, let frame = try! decoder.next(&output) { frames.append(frame) }
            if frames.count >= count || outstanding == 0 { return frames }
            guard arrival.wait(timeout: .now() + 120) == .success else {
                Issue.record("an answer did not come within two minutes")
                return frames
            }
            let (reply, onLane) = arrived.withLock { $0.removeFirst() }
            outstanding -= 1
            if onLane { laneWrites.answered() }
            pending += machine.requestCompleted(reply, now: 0)
            performPending()
        }
    }

    /// One request and its answer.
    func call(_ opcode: Opcode, _ json: JSONObject = [:], binary: [UInt8] = [], id: UInt32 = 1) -> Frame {
        send(opcode, json, binary: binary, id: id)
        return answers(1)[0]
    }

    private func performPending() {
        var index = 0
        while index < pending.count {
            if case .execute(let frame) = pending[index] { run(frame) }
            index += 1
        }
        pending.removeAll()
    }

    private func run(_ frame: Frame) {
        let collections = machine.grant?.collections
        let plan = RequestPlan(
            for: frame, pointReadsAreLocal: router.pointReadsAreLocal, laneIsBusy: laneWrites.isBusy)
        let arrive: @Sendable (Reply, Bool) -> Void = { [arrived, arrival] reply, onLane in
            arrived.withLock { $0.append((reply, onLane)) }
            arrival.signal()
        }
        if plan != .inline && plan != .refused && plan != .watch { outstanding += 1 }
        switch plan {
        case .inline:
            let reads = router.store.pointReads()
            pending += machine.requestCompleted(
                router.answerInline(frame, reads: reads, collections: collections), now: 0)
            reads.end()
        case .refused:
            pending += machine.requestCompleted(Router.refusal(frame), now: 0)
        case .watch:
            let error = LarderError(.internal, "\(frame.opcode.name) needs a ServerConnection")
            let reply = Reply(opcode: frame.opcode, requestID: frame.requestID, error: error)
            pending += machine.requestCompleted(reply, now: 0)
        case .writer:
            router.submitToWriter(frame) { arrive($0, false) }
        case .writeLane:
            let lane = self.lane ?? router.makeWriteLane()
            self.lane = lane
            laneWrites.handedOut()
            router.submitWrite(frame, on: lane, collections: collections, uploader: machine.uploader) {
                arrive($0, true)
            }
        case .workPool:
            router.submitRead(frame, collections: collections, sendFiles: false) { arrive($0, false) }
        case .backup:
            server.context.backups.handle(frame, connection: 0) { arrive($0, false) }
        }
    }
}
