import Foundation
import LarderClient
import LarderSync
import LarderTestProcess
import LarderTestThreads
import Testing

/// The client never blocks the thread of the task that calls it: its socket belongs to a thread of its own. Checked
/// where blocking would hurt most, on an executor with only two threads (an app's cooperative pool on a small
/// device has about as many).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct NonBlockingClientTests {
    @Test("200 tasks on two threads against a server that stops reading leave the threads free for other work")
    func requestsToASlowServerLeaveTheThreadsFree() async throws {
        let server = FakeServer(limits: Limits(maxJSONBytes: 1 << 20, maxInFlight: 256)) { request, _ in
            .reply(ClientTests.record(for: request))
        }
        defer { server.stop() }
        // Once the HELLO is answered the server reads nothing: 200 requests of 128 KiB (25 MiB) are far more than the
        // loopback socket's buffers hold, so most of them wait for the network.
        server.pauseReading()
        // Requests wait for as long as the server does not read: the test is about threads, not deadlines.
        let client = LarderClient(port: server.port, requestTimeout: .seconds(600))
        defer { client.close() }
        _ = try await client.connect()

        let executor = ThreadPoolExecutor(threads: 2)
        defer { executor.shutdown() }
        let started = Counter()
        let text = String(repeating: "x", count: 128 << 10)
        let requests = Task(executorPreference: executor) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<200 {
                    group.addTask {
                        started.add()
                        _ = try await client.create("notes", ["text": .string(text)])
                    }
                }
                try await group.waitForAll()
            }
        }
        // A task that blocked in a write would hold one of the two threads: two of them, and no further task starts.
        #expect(await waitUntil(seconds: 120) { started.value == 200 }, "only \(started.value) of 200 tasks started")
        #expect(server.requests.count == 1, "the server read only the HELLO")

        // An unrelated task on the same two threads keeps its own deadline while all 200 are waiting.
        let unrelated = Task(executorPreference: executor) { () -> Int in
            var sum = 0
            for n in 1...100 {
                await Task.yield()
                sum += n
            }
            return sum
        }
        let finished = await withTaskGroup(of: Int?.self) { group in
            group.addTask { await unrelated.value }
            group.addTask {
                try? await Task.sleep(for: .seconds(120))
                return nil
            }
            let first = await group.next()!
            group.cancelAll()
            return first
        }
        #expect(finished == 5050, "the unrelated task did not finish within 120 s")

        server.resumeReading()
        try await requests.value
        #expect(server.requests.count == 201)
    }

    /// Polls `condition` until it holds; false after `seconds` (generous: it runs out only when it never will).
    func waitUntil(seconds: Int, _ condition: @Sendable () -> Bool) async -> Bool {
        await LarderTestProcess.waitUntil(Double(seconds)) { condition() }
    }
}

/// A task executor with a fixed number of threads of its own, standing in for a small cooperative pool.
final class ThreadPoolExecutor: TaskExecutor, @unchecked Sendable {
    private let lock = Lock()
    private let ready = Condition()
    private var jobs: [UnownedJob] = []  // under `lock`
    private var stopped = false  // under `lock`

    init(threads: Int) {
        for n in 0..<threads {
            let thread = Thread { [self] in run() }
            thread.name = "test-executor-\(n)"
            thread.start()
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        lock.withLock {
            jobs.append(job)
            ready.broadcast()
        }
    }

    /// Lets the threads end once the jobs queued so far have run.
    func shutdown() {
        lock.withLock {
            stopped = true
            ready.broadcast()
        }
    }

    private func run() {
        while true {
            let next: UnownedJob? = lock.withLock {
                while jobs.isEmpty && !stopped { _ = ready.wait(on: lock, until: .now + .seconds(3600)) }
                return jobs.isEmpty ? nil : jobs.removeFirst()
            }
            guard let next else { return }
            next.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
