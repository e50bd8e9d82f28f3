import Foundation
import LarderServer
import LarderSync
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Synchronization
import Testing

/// GETs answered on an I/O loop share a read snapshot for the loop's turn (`PointReads`). A GET must still see every
/// write acknowledged before it was sent, including a write acknowledged on another loop's connection while this
/// loop's snapshot was open: here a noisy client keeps the reader's loop busy with pipelined GETs, so its turns
/// always hold a snapshot when the reader's GET arrives.
@Suite("GET after an acknowledged write, across I/O loops", .ownThreads, .timeLimit(.minutes(20)))
struct PointReadConsistencyTests {
    @Test("a GET sent after a PATCH was acknowledged on another connection sees that PATCH, every time")
    func readYourAcknowledgedWrites() throws {
        try withServerWithoutListener({ $0.ioQueues = 2 }) { server in
            // Connections go to the loops in turn: noise -> loop 1, writer -> loop 0, reader -> loop 1. The noisy
            // client lives on its own thread; it connects first.
            let stop = Atomic<Bool>(false)
            let noiseErrors = Atomic<Int>(0)
            let target = Locked<String?>(nil)
            let connected = DispatchSemaphore(value: 0)
            let noiseThread = Thread {
                guard let noise = try? RawClient.connected(to: server), (try? noise.hello(compression: [])) != nil else {
                    noiseErrors.add(1, ordering: .relaxed)
                    connected.signal()
                    return
                }
                connected.signal()
                while target.withLock({ $0 }) == nil && !stop.load(ordering: .relaxed) { usleep(1_000) }
                guard let id = target.withLock({ $0 }) else { return }
                // Ids 1-16: an id must not be reused while in flight.
                let burst = (UInt32(1)...16).flatMap { noise.encode(.get, ["collection": "counters", "id": .string(id)], id: $0) }
                while !stop.load(ordering: .relaxed) {
                    do {
                        try noise.writeAll(burst)
                        for _ in 0..<16 {
                            guard let frame = try noise.receive(), frame.status == .ok else {
                                noiseErrors.add(1, ordering: .relaxed)
                                return
                            }
                        }
                    } catch {
                        noiseErrors.add(1, ordering: .relaxed)
                        return
                    }
                }
            }
            noiseThread.start()
            defer {
                stop.store(true, ordering: .relaxed)
                while !noiseThread.isFinished { usleep(1_000) }
            }
            connected.wait()
            let writer = try RawClient.connected(to: server)
            try writer.hello(compression: [])
            let reader = try RawClient.connected(to: server)
            try reader.hello(compression: [])

            let created = try writer.call(.create, ["collection": "counters", "data": ["n": 0]])
            #expect(created.status == .ok)
            guard case .string(let id)? = created.replyJSON["id"] else {
                Issue.record("CREATE answered \(created.replyText)")
                return
            }
            target.withLock { $0 = id }
            usleep(20_000)

            for n in 1...300 {
                let patched = try writer.call(.patch, ["collection": "counters", "id": .string(id), "patch": ["n": .int(Int64(n))]])
                #expect(patched.status == .ok)
                let read = try reader.call(.get, ["collection": "counters", "id": .string(id)])
                #expect(read.status == .ok)
                guard read.replyJSON["rev"] == .int(Int64(n + 1)) else {
                    Issue.record("after PATCH \(n) was acknowledged, GET answered \(read.replyText)")
                    return
                }
            }
            #expect(noiseErrors.load(ordering: .relaxed) == 0)
        }
    }
}
