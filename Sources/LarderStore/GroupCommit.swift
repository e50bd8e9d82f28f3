import Dispatch
import Foundation
import LarderSync
import LarderWire
import Synchronization

/// The queue in front of a single writer, the same for both stores: jobs submitted from any thread run on one serial
/// dispatch queue in batches of at most `maxBatch`, and whatever arrives while a batch runs goes into the next one
/// (group commit: one transaction, one COMMIT for the batch).
final class BatchQueue<Job>: @unchecked Sendable {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<ObjectIdentifier>()
    private let maxBatch: Int
    private let lock = Lock()
    private var jobs: [Job] = []  // under `lock`
    /// The last batch's array, emptied with its capacity kept (only on `queue`): swapped with `jobs` as the next batch
    /// is taken, so that taking a batch and queueing the next one's jobs allocate nothing in steady state.
    private var spare: [Job] = []
    private var scheduled = false  // under `lock`
    private var closed = false  // under `lock`
    private var runBatch: (([Job]) -> Void)?  // set once, before the first job
    /// Batches run, jobs run in them, and the writer thread's CPU time spent running them (STATS `store.writer`).
    private let batchCount = Atomic<Int>(0)
    private let jobCount = Atomic<Int>(0)
    private let cpuNanos = Atomic<Int>(0)

    init(label: String, maxBatch: Int) {
        queue = DispatchQueue(label: label, qos: .userInitiated)
        self.maxBatch = maxBatch
        queue.setSpecific(key: key, value: ObjectIdentifier(self))
    }

    /// Sets what runs each batch (on `queue`); call before the first `enqueue`.
    func start(_ run: @escaping ([Job]) -> Void) { runBatch = run }

    var isOnQueue: Bool { DispatchQueue.getSpecific(key: key) == ObjectIdentifier(self) }

    /// Queues a job; schedules a drain only when none is pending, so a burst of writes shares one transaction. False
    /// once closed.
    func enqueue(_ job: Job) -> Bool {
        var mustSchedule = false
        let accepted: Bool = lock.withLock {
            guard !closed else { return false }
            jobs.append(job)
            if !scheduled {
                scheduled = true
                mustSchedule = true
            }
            return true
        }
        if mustSchedule { queue.async { self.drain() } }
        return accepted
    }

    private func drain() {
        while true {
            var batch: [Job] = []
            swap(&batch, &spare)
            let taken: Bool = lock.withLock {
                if jobs.isEmpty {
                    scheduled = false
                    return false
                }
                if jobs.count <= maxBatch {
                    swap(&batch, &jobs)
                } else {
                    batch.append(contentsOf: jobs[..<maxBatch])
                    jobs.removeFirst(maxBatch)
                }
                return true
            }
            guard taken else {
                spare = batch
                return
            }
            let start = threadCPUNanos()
            runBatch?(batch)
            cpuNanos.add(threadCPUNanos() - start, ordering: .relaxed)
            jobCount.add(batch.count, ordering: .relaxed)
            batchCount.add(1, ordering: .relaxed)
            // The jobs' closures go now (they hold the requests); the capacity stays for the next batch.
            batch.removeAll(keepingCapacity: true)
            if batch.capacity <= maxBatch { spare = batch }
        }
    }

    /// What the writer has done so far.
    var stats: WriterStats {
        WriterStats(
            batches: batchCount.load(ordering: .relaxed), writes: jobCount.load(ordering: .relaxed),
            cpuMicros: Int64(cpuNanos.load(ordering: .relaxed) / 1000))
    }

    /// Refuses new jobs and returns once the queued ones ran (at once when called on the queue itself).
    func close() {
        lock.withLock { closed = true }
        guard !isOnQueue else { return }
        queue.sync {}  // a drain scheduled before `closed` finishes first
    }
}

/// The CPU time the calling thread has used, in nanoseconds.
func threadCPUNanos() -> Int {
    var spec = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
    return Int(spec.tv_sec) * 1_000_000_000 + Int(spec.tv_nsec)
}

/// A write context that takes documents and blobs prepared off the writer's thread (both stores' contexts).
protocol PreparedWriteContext: WriteContext, AnyObject {
    var core: StoreCore { get }
    /// Why no write can run (the store is closed, or its database unreachable); nil while writes can.
    var closedError: LarderError? { get }
    /// The changes logged in this transaction, in order (sequence numbers are set at COMMIT).
    var changes: [ChangeEntry] { get set }
    /// Inserts a document whose collection name and size were checked.
    func insert(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord
    /// Inserts a blob validated and hashed beforehand.
    func insertBlob(_ blob: PreparedBlob) throws(LarderError) -> BlobMeta
}

extension PreparedWriteContext {
    /// PAYLOAD_TOO_LARGE when `document` passes the store's limit; `field` is the request member it came from.
    func checkSize(_ document: PreparedDocument, field: String = "data") throws(LarderError) {
        try document.checkSize(limit: core.configuration.maxDocumentBytes, field: field)
    }

    func create(_ collection: String, id: UUID?, data: JSONObject) throws(LarderError) -> StoredRecord {
        try create(collection, id: id, document: PreparedDocument(data))
    }

    func create(_ collection: String, id: UUID?, document: PreparedDocument) throws(LarderError) -> StoredRecord {
        try SQLiteStore.validateCollection(collection)
        try checkSize(document)
        return try insert(collection, id: id, document: document)
    }

    func replace(_ collection: String, id: UUID, data: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try replace(collection, id: id, document: PreparedDocument(data), expectedRev: expectedRev)
    }

    func blobPut(id: UUID?, bytes: [UInt8], expectedSHA256: String?, attachTo: BlobAttachment?) throws(LarderError)
        -> BlobMeta
    {
        try insertBlob(
            PreparedBlob(id: id, bytes: bytes, expectedSHA256: expectedSHA256, attachTo: attachTo, core: core))
    }
}

/// A store whose writes go through a group-commit writer: the synchronous write operations, the same for both
/// stores, each one job that returns after its COMMIT. Encoding, folding, validating and hashing happen here, on the
/// caller's thread: the writer's time is the scarce resource.
protocol GroupCommitStore: DocumentStore, BlobStore {
    var core: StoreCore { get }
    /// Whether the caller is on the writer's queue (where waiting for a write would wait on itself).
    var isOnWriterQueue: Bool { get }
}

extension GroupCommitStore {
    /// Submits and waits for the COMMIT; `single`: the body is one document write (`submitSingleWrite`).
    func syncWrite<T: Sendable>(
        single: Bool = false, _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> T
    ) throws(LarderError) -> T {
        guard !isOnWriterQueue else {
            throw LarderError(.internal, "a synchronous write was called from inside a write; use the WriteContext")
        }
        let box = ResultBox<T>()
        if single {
            submitSingleWrite(body) { box.set($0) }
        } else {
            submitWrite(body) { box.set($0) }
        }
        return try box.wait()
    }

    func prepare(_ data: JSONObject) throws(LarderError) -> PreparedDocument {
        let document = PreparedDocument(data)
        try document.checkSize(limit: core.configuration.maxDocumentBytes, field: "data")
        return document
    }

    public func create(_ collection: String, id: UUID?, data: JSONObject) throws(LarderError) -> StoredRecord {
        try SQLiteStore.validateCollection(collection)
        let document = try prepare(data)
        return try syncWrite(single: true) { context throws(LarderError) in
            try (context as! any PreparedWriteContext).insert(collection, id: id, document: document)
        }
    }

    public func replace(_ collection: String, id: UUID, data: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try SQLiteStore.validateCollection(collection)
        let document = try prepare(data)
        return try syncWrite(single: true) { context throws(LarderError) in
            try context.replace(collection, id: id, document: document, expectedRev: expectedRev)
        }
    }

    public func patch(_ collection: String, id: UUID, patch: JSONObject, expectedRev: Int64?) throws(LarderError)
        -> StoredRecord
    {
        try SQLiteStore.validateCollection(collection)
        return try syncWrite(single: true) { context throws(LarderError) in
            try context.patch(collection, id: id, patch: patch, expectedRev: expectedRev)
        }
    }

    public func delete(_ collection: String, id: UUID, expectedRev: Int64?) throws(LarderError)
        -> (rev: Int64, blobsDeleted: Int)
    {
        try SQLiteStore.validateCollection(collection)
        let result = try syncWrite(single: true) { context throws(LarderError) -> DeleteResult in
            let r = try context.delete(collection, id: id, expectedRev: expectedRev)
            return DeleteResult(rev: r.rev, blobs: r.blobsDeleted)
        }
        return (result.rev, result.blobs)
    }

    public func dropCollection(_ name: String) throws(LarderError) -> (documents: Int, blobs: Int) {
        try SQLiteStore.validateCollection(name)
        let result = try syncWrite { context throws(LarderError) -> DeleteResult in
            let r = try context.dropCollection(name)
            return DeleteResult(rev: Int64(r.documents), blobs: r.blobs)
        }
        return (Int(result.rev), result.blobs)
    }

    public func createIndex(_ collection: String, field: FieldPath) throws(LarderError)
        -> (name: String, created: Bool)
    {
        try SQLiteStore.validateCollection(collection)
        let result = try syncWrite { context throws(LarderError) -> IndexResult in
            let r = try context.createIndex(collection, field: field)
            return IndexResult(name: r.name, created: r.created)
        }
        return (result.name, result.created)
    }

    public func blobPut(id: UUID?, bytes: [UInt8], expectedSHA256: String?, attachTo: BlobAttachment?)
        throws(LarderError) -> BlobMeta
    {
        let prepared = try PreparedBlob(
            id: id, bytes: bytes, expectedSHA256: expectedSHA256, attachTo: attachTo, core: core)
        return try syncWrite { context throws(LarderError) in
            try (context as! any PreparedWriteContext).insertBlob(prepared)
        }
    }

    public func blobDelete(_ id: UUID) throws(LarderError) {
        try syncWrite { context throws(LarderError) in try context.blobDelete(id) }
    }
}

struct DeleteResult: Sendable {
    var rev: Int64
    var blobs: Int
}

struct IndexResult: Sendable {
    var name: String
    var created: Bool
}
