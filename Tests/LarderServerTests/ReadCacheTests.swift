import Foundation
import LarderStore
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer
import LarderSync

@Suite("ReadCache: recent GET answers on one event loop", .ownThreads, .timeLimit(.minutes(20)))
struct ReadCacheTests {
    static func key(_ n: Int, in collection: String = "todos") -> ReadCache.Key {
        ReadCache.Key(collection: collection, id: UUID(uuidString: String(format: "00000000-0000-4000-8000-%012d", n))!)
    }

    static func record(_ key: ReadCache.Key) -> StoredRecord {
        StoredRecord(id: key.id, rev: 2, createdAt: 0, updatedAt: 0, data: Array("{}".utf8))
    }

    @Test("stays within its byte budget, evicting the oldest first")
    func boundedFirstInFirstOut() {
        var cache = ReadCache(maxBytes: 100 * (100 + 64))
        for n in 0..<1_000 { cache.insert(Self.key(n), [UInt8](repeating: 1, count: 100)) }
        #expect(cache.bytes <= cache.maxBytes)
        #expect(cache.count == 100)
        #expect(cache.get(Self.key(999)) != nil)
        #expect(cache.get(Self.key(0)) == nil)
        // An answer larger than an eighth of the budget is not kept.
        cache.insert(Self.key(5_000), [UInt8](repeating: 1, count: cache.maxBytes / 4))
        #expect(cache.get(Self.key(5_000)) == nil)
    }

    @Test("a change to a document forgets its answer; dropping a collection forgets the collection's")
    func changesInvalidate() {
        var cache = ReadCache(maxBytes: 1 << 20)
        for n in 0..<10 {
            cache.insert(Self.key(n), [1])
            cache.insert(Self.key(n, in: "other"), [2])
        }
        cache.apply(ChangeEntry(seq: 1, kind: .patch, collection: "todos", time: 0, record: Self.record(Self.key(3))))
        #expect(cache.get(Self.key(3)) == nil && cache.get(Self.key(4))?.json == [1])
        #expect(cache.get(Self.key(3, in: "other"))?.json == [2])
        cache.apply(ChangeEntry(seq: 2, kind: .drop, collection: "other", time: 0, record: nil))
        #expect((0..<10).allSatisfy { cache.get(Self.key($0, in: "other")) == nil })
        #expect(cache.count == 9)
        #expect(cache.bytes == 9 * 65)
    }

    @Test("invalidated keys do not pile up in the eviction order")
    func churnStaysBounded() {
        var cache = ReadCache(maxBytes: 1 << 20)
        for round in 0..<100_000 {
            let key = Self.key(round % 3)
            cache.insert(key, [UInt8(truncatingIfNeeded: round)])
            cache.invalidate(key)
        }
        #expect(cache.count == 0 && cache.bytes == 0)
        cache.insert(Self.key(1), [7])
        #expect(cache.get(Self.key(1))?.json == [7])
    }
}

/// The cache against a real store, on a real event loop, with the race made certain: the GET runs after the write
/// was acknowledged but before the loop's own scheduled drain of the change.
@Suite("ReadCache: never older than an acknowledged write", .ownThreads, .timeLimit(.minutes(20)))
struct ReadCacheFreshnessTests {
    @Test("a GET right after an acknowledged write, ahead of the loop's scheduled drain, sees the write")
    func getAfterAcknowledgedWriteIsFresh() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-cache-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        defer { store.close() }
        let shard = Shard(
            index: 0, configuration: .init(), store: store, stats: ServerStats(now: 0), readCacheBytes: 1 << 20)
        defer { shard.loop.stop() }
        store.addChangeListener { [shard] entries in shard.publish(entries) }

        let record = try store.create("todos", id: nil, data: ["n": 0])
        let id = record.id
        let first = shard.loop.sync { () -> [UInt8]? in try? shard.pointReads.getJSON("todos", id: id) }
        #expect(first == record.bytes)
        // Cached now.
        #expect(shard.loop.sync { shard.readCache.count } == 1)

        // A name equal to a cached one only under Unicode equivalence is the store's to judge, cached or not.
        let kelvin = shard.loop.sync { () -> LarderError? in
            do throws(LarderError) {
                _ = try shard.pointReads.getJSON("\u{212A}eys", id: id)
                return nil
            } catch {
                return error
            }
        }
        _ = try store.create("Keys", id: id, data: ["n": 0])
        #expect(shard.loop.sync { (try? shard.pointReads.getJSON("Keys", id: id)) != nil })
        let kelvinAfter = shard.loop.sync { () -> Status? in
            do throws(LarderError) {
                _ = try shard.pointReads.getJSON("\u{212A}eys", id: id)
                return nil
            } catch {
                return error.status
            }
        }
        #expect(kelvin?.status == .invalidArgument && kelvinAfter == .invalidArgument)

        for n in 1...20 {
            let written = DispatchSemaphore(value: 0)
            let answer = Locked<[UInt8]?>(nil)
            let done = DispatchSemaphore(value: 0)
            shard.loop.async {
                // The loop is held here while the write commits, so its drain task queues behind this one.
                written.wait()
                answer.withLock { $0 = try? shard.pointReads.getJSON("todos", id: id) }
                done.signal()
            }
            let updated = try store.patch("todos", id: id, patch: ["n": .int(Int64(n))], expectedRev: nil)
            written.signal()
            done.wait()
            let text = answer.withLock { $0 }.map { String(decoding: $0, as: UTF8.self) }
            #expect(text == String(decoding: updated.bytes, as: UTF8.self), "after write \(n)")
        }
    }
}
