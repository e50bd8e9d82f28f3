import Foundation
import LarderServer
import LarderStore
import LarderSync
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// An event loop answers its GETs from a SQLite connection of its own, never from the pool that searches borrow: a
/// burst of slow searches (here: every reader of that pool held on a latch) leaves GETs, PINGs and the loop's other
/// connections served.
@Suite("Point reads on the event loops", .ownThreads, .timeLimit(.minutes(20)))
struct LoopPointReadTests {
    /// Holds every search-path reader that reaches it once armed, until opened; counts those it holds.
    final class ReaderLatch: @unchecked Sendable {
        private let lock = Lock()
        private let changed = Condition()
        private var armed = false
        private var open = false
        private var held = 0

        /// The store's `readerHook`.
        func pass() {
            lock.withLock {
                guard armed else { return }
                held += 1
                changed.broadcast()
                while !open { _ = changed.wait(on: lock, until: .now + .seconds(3600)) }
                held -= 1
            }
        }

        func arm() { lock.withLock { armed = true } }

        func release() {
            lock.withLock {
                open = true
                changed.broadcast()
            }
        }

        /// Waits until `count` readers are held; false after `seconds` (something is wrong, not slow).
        func waitUntilHeld(_ count: Int, seconds: Int) -> Bool {
            let deadline = ContinuousClock.now + .seconds(seconds)
            return lock.withLock {
                while held < count {
                    if !changed.wait(on: lock, until: deadline) { return held >= count }
                }
                return true
            }
        }
    }

    @Test("a GET on a loop is answered while every reader in the search path is busy")
    func getWhileEverySearchReaderIsBusy() throws {
        let directory = temporaryTestDirectory("larder-loop-reads")
        defer { try? FileManager.default.removeItem(at: directory) }
        let readers = 2
        let latch = ReaderLatch()
        var storeConfiguration = StoreConfiguration(
            dataDirectory: directory.appendingPathComponent("data").path, readerCount: readers)
        storeConfiguration.readerHook = { latch.pass() }
        let store = try SQLiteStore(configuration: storeConfiguration)
        var configuration = ServerConfiguration.forTests(in: directory)
        configuration.ioQueues = 1  // every connection on the one loop
        configuration.readCacheBytes = 0  // the GET reads the store, not a cached answer
        let server = LarderServer(configuration: configuration, store: store)
        let port = try server.start()
        defer {
            latch.release()
            server.shutdown()
        }

        let writer = try RawClient.tcp(port: port)
        try writer.hello(compression: [])
        let created = try writer.call(.create, ["collection": "notes", "data": ["text": "kept"]])
        #expect(created.status == .ok)
        guard case .string(let id)? = created.replyJSON["id"] else {
            Issue.record("CREATE answered without an id: \(created.replyText)")
            return
        }

        latch.arm()
        let searcher = try RawClient.tcp(port: port)
        try searcher.hello(compression: [])
        let searches = try searcher.sendTogether(
            Array(repeating: (Opcode.search, ["collection": "notes", "limit": 10] as JSONObject), count: readers))
        #expect(latch.waitUntilHeld(readers, seconds: 120), "the searches never took every reader")

        // Every search-path reader is held: the GET is answered from the loop's own connection.
        let reader = try RawClient.tcp(port: port)
        try reader.hello(compression: [])
        let got = try reader.call(.get, ["collection": "notes", "id": .string(id)])
        #expect(got.status == .ok)
        #expect(got.replyJSON["data"]?["text"] == .string("kept"))
        #expect(try reader.call(.blobHead, ["id": .string(UUID().uuidString)]).status == .notFound)

        latch.release()
        for _ in searches {
            let answer = try #require(try searcher.receive())
            #expect(answer.status == .ok)
        }
    }
}
