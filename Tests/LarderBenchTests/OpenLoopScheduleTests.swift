import LarderTestThreads
import LarderWire
import Testing

@testable import LarderBench

/// The open loop's schedule and its coordinated-omission correction on a clock the test drives: the worker is told
/// the time at each step (`fill` and `complete` take it), so what it sends and what it measures are exact, however
/// busy the machine. RunTests runs the same paths on the real clock, judging only what a slow machine cannot change.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct OpenLoopScheduleTests {
    static let ms: UInt64 = 1_000_000
    static let start: UInt64 = 1_000_000_000_000

    static func worker(rate: Double, connections: Int, pipeline: Int, seconds: Double) -> Worker<LarderDriver> {
        let phase = Phase(
            kind: .measure, connections: connections, pipeline: pipeline, threads: 1, mix: OperationMix([(.get, 1)]),
            keys: .uniform, keyspace: 100, blobKeyspace: 10, rate: rate, requests: nil, duration: seconds, warmup: 0,
            timeout: 1, seed: 1)
        let payloads = Payloads(docSize: 100, blobs: [], runNonce: 1)
        let list = (0..<connections).map { n in
            Connection(
                fd: -1, globalIndex: n,
                driver: LarderDriver(payloads: payloads, worker: 0, collection: "bench", encoder: FrameEncoder()),
                pipeline: pipeline)
        }
        return Worker(index: 0, workers: 1, phase: phase, aggregator: Aggregator(workers: 1), connections: list)
    }

    /// 400 requests a second over 4 connections for a second, looked at every millisecond: exactly 400 are sent,
    /// each at its own slot of the schedule (connection n at n/400 s, then every 10 ms), none early.
    @Test func requestsGoOutOnScheduleAndNeverAhead() {
        let worker = Self.worker(rate: 400, connections: 4, pipeline: 200, seconds: 1)
        let interval = worker.schedule(start: Self.start)
        #expect(interval == 10 * Self.ms)
        var sent: [[UInt64]] = Array(repeating: [], count: 4)
        for step in 0...1_200 {
            let now = Self.start + UInt64(step) * Self.ms
            for (n, c) in worker.connections.enumerated() {
                let before = c.inflight
                worker.fill(c, now: now, interval: interval)
                for slot in c.slots where slot.active && slot.sent == now { sent[n].append(slot.intended) }
                #expect(c.inflight - before <= 1, "a connection sent two requests in one millisecond")
            }
        }
        #expect(worker.issuedMeasured == 400)
        for n in 0..<4 {
            let offset = Self.start + UInt64(n) * 2_500_000
            #expect(sent[n] == (0..<100).map { offset + UInt64($0) * interval }, "connection \(n)")
        }
    }

    /// A server that takes 20 ms per answer, asked for 200 a second on one connection, one request at a time: request
    /// k is due at 5k ms but goes out when the one before it is answered, at 20k ms. Measured from the send, each
    /// takes 20 ms; measured from when it was due (what a user arriving on schedule sees), 15k + 20 ms.
    @Test func latencyIsMeasuredFromTheIntendedTime() throws {
        let worker = Self.worker(rate: 200, connections: 1, pipeline: 1, seconds: 1)
        let interval = worker.schedule(start: Self.start)
        let c = worker.connections[0]
        var now = Self.start
        var answered = 0
        while now < Self.start + 1_000 * Self.ms {
            worker.fill(c, now: now, interval: interval)
            try #require(c.inflight == 1)
            now += 20 * Self.ms
            worker.complete(c, slot: 0, code: ResultCode.ok, now: now)
            answered += 1
        }
        #expect(answered == 50 && worker.issuedMeasured == 50)
        let get = worker.stats[BenchOperation.get.rawValue]
        #expect(get.count == 50 && get.errors == 0)
        // The histograms keep about three significant digits.
        func near(_ value: UInt64, _ ms: Double) -> Bool { abs(Double(value) / 1e6 - ms) <= ms * 0.01 }
        #expect(near(get.uncorrected.value(atPercentile: 50), 20) && near(get.uncorrected.max, 20))
        #expect(near(get.latency.value(atPercentile: 50), 15 * 24 + 20), "\(get.latency.value(atPercentile: 50))")
        #expect(near(get.latency.max, 15 * 49 + 20) && near(get.latency.min, 20))
    }
}
