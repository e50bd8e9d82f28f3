import Dispatch
import Foundation
import LarderSync
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Point reads on PostgreSQL that wait at the same moment share one round trip (`PGPointReadBatcher`), and every
/// caller still gets its own answer.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PGPointReadBatchTests {
    struct Ask {
        let collection: String
        let id: UUID
        /// The `n` of the record it must answer; nil when it must answer none.
        let n: Int64?
    }

    /// Every read submitted at once, each answered.
    static func submitAll(_ store: PostgresStore, _ asks: [Ask]) -> [Result<SequencedRead, LarderError>] {
        let answers = Locked([Int: Result<SequencedRead, LarderError>]())
        let group = DispatchGroup()
        for (index, ask) in asks.enumerated() {
            group.enter()
            store.submitGet(ask.collection, id: ask.id) { result in
                answers.withLock { $0[index] = result }
                group.leave()
            }
        }
        group.wait()
        return answers.withLock { answers in asks.indices.map { answers[$0]! } }
    }

    @Test func batchedReadsGiveEveryCallerItsOwnAnswer() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let store = try PostgresStore(url: schema.url)
        defer { store.close() }
        var asks: [Ask] = []
        for n in 0..<40 {
            let collection = n % 2 == 0 ? "evens" : "odds"
            let record = try store.create(collection, id: nil, data: ["n": .int(Int64(n))])
            asks.append(Ask(collection: collection, id: record.id, n: Int64(n)))
            // The same id in the other collection: absent there.
            asks.append(Ask(collection: n % 2 == 0 ? "odds" : "evens", id: record.id, n: nil))
        }
        asks += (0..<20).map { _ in Ask(collection: "evens", id: UUID(), n: nil) }
        asks.append(asks[0])  // the same read twice
        let before = store.lastChangeSeq
        let trips = store.pointReadBatcher.roundTrips.withLock { $0.trips }
        var all = asks
        all.append(Ask(collection: "1bad", id: UUID(), n: nil))
        let answers = PGPointReadBatchTests.submitAll(store, all)
        for (ask, answer) in zip(asks, answers) {
            let read = try answer.get()
            #expect(read.seq >= before)
            if let n = ask.n {
                #expect(read.record?.id == ask.id, "\(ask.collection) \(ask.id)")
                #expect(try read.record.map { try JSONParser.parseObject($0.data)["n"] } == .int(n))
            } else {
                #expect(read.record == nil, "\(ask.collection) \(ask.id) is not there")
            }
        }
        #expect(throws: LarderError.self) { try answers.last!.get() }
        #expect((try? answers.last!.get()) == nil)
        if case .failure(let error) = answers.last! { #expect(error.status == .invalidArgument && error.field == "collection") }
        let used = store.pointReadBatcher.roundTrips.withLock { $0.trips } - trips
        #expect(used < asks.count, "\(asks.count) reads took \(used) round trips")
        // The synchronous read goes the same way, and keeps its NOT_FOUND.
        #expect(try store.get("evens", id: asks[0].id).id == asks[0].id)
        #expect(throws: LarderError.self) { try store.get("evens", id: UUID()) }
    }

    @Test func readsQueuedWhenTheStoreClosesAreAnswered() throws {
        let schema = try TestPostgres.newSchema()
        defer { schema.drop() }
        let store = try PostgresStore(url: schema.url)
        let record = try store.create("items", id: nil, data: ["n": 1])
        let answers = Locked([Result<SequencedRead, LarderError>]())
        let group = DispatchGroup()
        for _ in 0..<200 {
            group.enter()
            store.submitGet("items", id: record.id) { result in
                answers.withLock { $0.append(result) }
                group.leave()
            }
        }
        store.close()
        group.wait()
        let all = answers.withLock { $0 }
        #expect(all.count == 200)
        for answer in all {
            switch answer {
            case .success(let read): #expect(read.record?.id == record.id)
            case .failure(let error): #expect(error.status == .unavailable, "\(error)")
            }
        }
        let late = Locked<Result<SequencedRead, LarderError>?>(nil)
        store.submitGet("items", id: record.id) { result in late.withLock { $0 = result } }
        if case .failure(let error)? = late.withLock({ $0 }) {
            #expect(error.status == .unavailable)
        } else {
            Issue.record("a read after close must fail")
        }
    }
}
