import Dispatch
import Foundation
import LarderSync
import LarderWire

/// A document read with a sequence number of the change log at or after the change that wrote what it holds (the
/// log's newest number, read after the document in the same round trip), for a reader that must never go back to
/// something older (Protocol.md section 5.1, `afterSeq`). `record` is nil when the document does not exist.
public struct SequencedRead: Sendable, Equatable {
    /// The document, or nil when it does not exist.
    public var record: StoredRecord?
    /// A sequence number at or after the change that wrote `record` (or removed it).
    public var seq: Int64

    /// A read of `record` at `seq`.
    public init(record: StoredRecord?, seq: Int64) {
        self.record = record
        self.seq = seq
    }
}

/// Point reads on PostgreSQL that wait at the same moment go out together: one round trip for every read queued while
/// the previous round trip was out, one `id = ANY($2)` statement per collection, then the log's newest number. Like
/// the writer's group commit, a batch grows with the load instead of each read paying a round trip (and a pooled
/// connection) of its own. A few threads each take whatever is queued when they are free.
final class PGPointReadBatcher: @unchecked Sendable {
    typealias Completion = @Sendable (Result<SequencedRead, LarderError>) -> Void

    struct Read {
        let collection: String
        let id: UUID
        let completion: Completion
    }

    /// The most reads one round trip carries (GET_MANY's bound per statement).
    static let maxBatch = 1000

    private let readers: PGPool
    private let lock = Lock()
    private var queue: [Read] = []  // under `lock`
    private var sleeping = 0  // under `lock`: threads waiting on `wake`
    private var closed = false  // under `lock`
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchGroup()
    /// Round trips made and reads they carried (for tests).
    private(set) var roundTrips = Locked((trips: 0, reads: 0))

    init(readers: PGPool, threads: Int) {
        self.readers = readers
        for n in 0..<max(1, threads) {
            finished.enter()
            let thread = Thread { [self] in
                run()
                finished.leave()
            }
            thread.name = "larder.store.pg-reads.\(n)"
            thread.start()
        }
    }

    /// Queues a read; `completion` is called exactly once, on one of the batcher's threads (or at once on a closed
    /// store).
    func submit(_ read: Read) {
        let signal: Bool? = lock.withLock {
            if closed { return nil }
            queue.append(read)
            guard sleeping > 0 else { return false }
            sleeping -= 1
            return true
        }
        guard let signal else { return read.completion(.failure(LarderError(.unavailable, "the store is closed"))) }
        if signal { wake.signal() }
    }

    /// Reads `collection`/`id` on the calling thread, batched with whatever else is waiting.
    func read(_ collection: String, _ id: UUID) throws(LarderError) -> SequencedRead {
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<SequencedRead, LarderError>?>(nil)
        submit(Read(collection: collection, id: id) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        })
        done.wait()
        return try result.withLock { $0! }.get()
    }

    /// Answers what is queued, then stops the threads and waits for them.
    func close() {
        let sleepers: Int = lock.withLock {
            closed = true
            defer { sleeping = 0 }
            return sleeping
        }
        for _ in 0..<sleepers { wake.signal() }
        finished.wait()
    }

    private func run() {
        while true {
            let batch: [Read]? = lock.withLock {
                if queue.isEmpty {
                    if closed { return nil }
                    sleeping += 1
                    return []
                }
                let count = min(queue.count, PGPointReadBatcher.maxBatch)
                defer { queue.removeFirst(count) }
                return Array(queue[..<count])
            }
            guard let batch else { return }
            if batch.isEmpty {
                wake.wait()
                continue
            }
            execute(batch)
        }
    }

    private struct Key: Hashable {
        let collection: String
        let id: UUID
    }

    /// One round trip for `batch`; every read is answered, each with its own record, absence or error.
    private func execute(_ batch: [Read]) {
        var collections: [String] = []
        var ids: [String: [UUID]] = [:]
        for read in batch {
            if ids[read.collection] == nil { collections.append(read.collection) }
            ids[read.collection, default: []].append(read.id)
        }
        var statements = collections.map { collection in
            PGStatement(
                "SELECT \(PostgresStore.recordColumns) FROM documents WHERE collection = $1 AND id = ANY($2)",
                [.text(collection), .array(PGArray(uuids: Array(Set(ids[collection]!))))], name: "doc_get_many")
        }
        // After the documents: its snapshot is at least as new as theirs, so the number is at or after every change
        // they reflect.
        statements.append(PGStatement("SELECT last FROM larder_seq WHERE id = 1", name: "seq_last"))
        let outcome = Result { () throws(LarderError) in
            try readers.read { db throws(LarderError) in try db.run(statements) }
        }
        roundTrips.withLock {
            $0.trips += 1
            $0.reads += batch.count
        }
        switch outcome {
        case .failure(let error):
            for read in batch { read.completion(.failure(error)) }
        case .success(let results):
            let seq = results[collections.count].int(0, 0)
            var found: [Key: StoredRecord] = [:]
            for (index, collection) in collections.enumerated() {
                let result = results[index]
                for row in 0..<result.rows {
                    let record = PostgresStore.record(result, row)
                    found[Key(collection: collection, id: record.id)] = record
                }
            }
            for read in batch {
                read.completion(.success(SequencedRead(record: found[Key(collection: read.collection, id: read.id)], seq: seq)))
            }
        }
    }
}
