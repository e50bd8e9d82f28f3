import Foundation
import LarderSync
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DocumentTests {
    @Test(arguments: StoreKind.allCases) func createGetRoundTripsExactBytes(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let data = try object(#"{"name":"王小明","height":172.5,"tags":["a","b"],"nested":{"x":null}}"#)
            let created = try store.create("profiles", id: nil, data: data)
            #expect(created.rev == 1)
            #expect(created.createdAt == created.updatedAt)
            #expect(created.data == data.bytes)
            let read = try store.get("profiles", id: created.id)
            #expect(read == created)
            #expect(try read.decodedData() == data)
        }
    }

    @Test func recordEncodingSplicesDataAndFormatsTimestamps() throws {
        let id = try #require(UUID(uuidString: "3F2504E0-4F89-41D3-9A0C-0305E82C3301"))
        let record = StoredRecord(
            id: id, rev: 7, createdAt: 1_795_998_388_123, updatedAt: 0, data: Array(#"{"a":1}"#.utf8))
        let text = String(decoding: record.bytes, as: UTF8.self)
        #expect(
            text == #"{"id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301","rev":7,"createdAt":"2026-11-30T00:26:28.123Z","#
                + #""updatedAt":"1970-01-01T00:00:00.000Z","data":{"a":1}}"#)
        #expect(try JSONParser.parseObject(record.bytes)["data"] == ["a": 1])
    }

    @Test(arguments: StoreKind.allCases) func clientSuppliedIdAndDuplicateIsConflict(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let id = UUID()
            let record = try store.create("todos", id: id, data: ["title": "x"])
            #expect(record.id == id)
            expectError(.conflict, field: "id") { _ = try store.create("todos", id: id, data: ["title": "y"]) }
            #expect(try store.get("todos", id: id).string("title") == "x")
            // The same id in another collection is a different document.
            _ = try store.create("other", id: id, data: [:])
        }
    }

    @Test(arguments: StoreKind.allCases) func missingDocumentsAreNotFound(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            expectError(.notFound, field: "id") { _ = try store.get("todos", id: UUID()) }
            expectError(.notFound) { _ = try store.replace("todos", id: UUID(), data: [:], expectedRev: nil) }
            expectError(.notFound) { _ = try store.patch("todos", id: UUID(), patch: [:], expectedRev: nil) }
            expectError(.notFound) { _ = try store.delete("todos", id: UUID(), expectedRev: nil) }
            expectError(.notFound, field: "collection") { _ = try store.dropCollection("todos") }
        }
    }

    @Test(arguments: StoreKind.allCases, ["", "1abc", "_x", "a b", "a.b", "a\"b", "名字", String(repeating: "a", count: 65), "a;DROP"])
    func invalidCollectionNamesAreRejected(_ kind: StoreKind, name: String) throws {
        try withStore(kind) { store in
            expectError(.invalidArgument, field: "collection") { _ = try store.create(name, id: nil, data: [:]) }
            expectError(.invalidArgument, field: "collection") { _ = try store.get(name, id: UUID()) }
            expectError(.invalidArgument, field: "collection") { _ = try store.search(name, SearchQuery()) }
        }
    }

    @Test(arguments: StoreKind.allCases, ["a", "Todos", "shop_items", "pokemon-items", "A" + String(repeating: "9", count: 63)])
    func validCollectionNamesAreAccepted(_ kind: StoreKind, name: String) throws {
        try withStore(kind) { store in _ = try store.create(name, id: nil, data: [:]) }
    }

    @Test(arguments: StoreKind.allCases) func documentSizeLimit(_ kind: StoreKind) throws {
        try withStore(kind, { $0.maxDocumentBytes = 100 }) { store in
            let big: JSONObject = ["text": .string(String(repeating: "x", count: 100))]
            expectError(.payloadTooLarge, field: "data") { _ = try store.create("c", id: nil, data: big) }
            let small = try store.create("c", id: nil, data: ["text": "x"])
            expectError(.payloadTooLarge) { _ = try store.replace("c", id: small.id, data: big, expectedRev: nil) }
            expectError(.payloadTooLarge) { _ = try store.patch("c", id: small.id, patch: big, expectedRev: nil) }
            #expect(try store.get("c", id: small.id).rev == 1)
        }
    }

    @Test(arguments: StoreKind.allCases) func replaceBumpsRevisionAndChecksExpectedRevision(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let created = try store.create("todos", id: nil, data: ["title": "a"])
            let replaced = try store.replace("todos", id: created.id, data: ["title": "b"], expectedRev: 1)
            #expect(replaced.rev == 2)
            #expect(replaced.createdAt == created.createdAt)
            #expect(replaced.updatedAt >= created.updatedAt)
            do throws(LarderError) {
                _ = try store.replace("todos", id: created.id, data: ["title": "c"], expectedRev: 1)
                Issue.record("expected CONFLICT")
            } catch {
                #expect(error.status == .conflict)
                #expect(error.details["currentRev"] == .int(2))
                #expect(error.field == "rev")
            }
            let unconditional = try store.replace("todos", id: created.id, data: ["title": "d"], expectedRev: nil)
            #expect(unconditional.rev == 3)
            #expect(try store.get("todos", id: created.id) == unconditional)
        }
    }

    @Test(arguments: StoreKind.allCases) func mergePatchSemantics(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let created = try store.create(
                "profiles", id: nil,
                data: try object(#"{"name":"Emily","address":{"city":"Taipei","zip":"100"},"tags":[1,2],"weight":55}"#))
            let patched = try store.patch(
                "profiles", id: created.id,
                patch: try object(#"{"weight":null,"address":{"zip":null,"street":"Main"},"tags":[3],"isMale":false}"#),
                expectedRev: 1)
            #expect(patched.rev == 2)
            #expect(
                try patched.decodedData()
                    == (try object(
                        #"{"name":"Emily","address":{"city":"Taipei","street":"Main"},"tags":[3],"isMale":false}"#)))
            #expect(try store.get("profiles", id: created.id) == patched)
            expectError(.conflict) { _ = try store.patch("profiles", id: created.id, patch: [:], expectedRev: 1) }
            // A nested object patched onto a scalar replaces it with the patch minus its nulls.
            let again = try store.patch(
                "profiles", id: created.id, patch: try object(#"{"name":{"first":"E","drop":null}}"#), expectedRev: 2)
            #expect(try again.decodedData()["name"] == ["first": "E"])
        }
    }

    /// PATCH merges into the stored bytes without the document's tree where it can, and on the tree where it cannot
    /// (here a 19-digit integer): either way it stores, answers and indexes for search what the tree's merge gives.
    @Test(arguments: StoreKind.allCases) func patchStoresTheTreeMerge(_ kind: StoreKind) throws {
        let cases: [(data: String, patch: String)] = [
            (#"{"a":"Apple","b":2,"c":"Cherry"}"#, #"{"c":null}"#),
            (#"{"a":"Banana","b":2}"#, #"{"a":null,"d":"Durian 北京"}"#),
            (#"{"only":"Fig"}"#, #"{"only":null}"#),
            (#"{}"#, #"{"new":"Grape"}"#),
            (#"{"p":{"x":"Kiwi","y":"Lemon"},"n":1e20}"#, #"{"p":{"y":null,"z":"Mango"},"n":-0.0}"#),
            (#"{"名字":"林怡君","big":9223372036854775807}"#, #"{"名字":"王小明 😀","note":"tab\t\"Quince\""}"#),
        ]
        for (data, patch) in cases {
            let expected = MergePatch.apply(try object(patch), to: try object(data))
            let merged = try PreparedDocument(merging: try object(patch), into: try object(data).bytes)
            #expect(merged == PreparedDocument(expected), "\(data) + \(patch)")
        }
        try withStore(kind) { store in
            for (data, patch) in cases {
                let created = try store.create("c", id: nil, data: try object(data))
                let patched = try store.patch("c", id: created.id, patch: try object(patch), expectedRev: 1)
                let expected = MergePatch.apply(try object(patch), to: try object(data)).bytes
                #expect(patched.data == expected, "\(data) + \(patch)")
                #expect(try store.get("c", id: created.id).data == expected)
            }
            let found = ["apple": 1, "cherry": 0, "banana": 0, "durian": 1, "北京": 1, "fig": 0, "grape": 1, "kiwi": 1,
                         "lemon": 0, "mango": 1, "林怡君": 0, "王小明": 1, "quince": 1]
            for (text, count) in found {
                #expect(try store.count("c", filter: nil, text: TextQuery(query: text)) == count, "\(text)")
            }
        }
    }

    @Test func mergePatchFunctionMatchesRFC7396Examples() throws {
        let cases: [(String, String, String)] = [
            (#"{"a":"b"}"#, #"{"a":"c"}"#, #"{"a":"c"}"#),
            (#"{"a":"b"}"#, #"{"b":"c"}"#, #"{"a":"b","b":"c"}"#),
            (#"{"a":"b"}"#, #"{"a":null}"#, #"{}"#),
            (#"{"a":"b","b":"c"}"#, #"{"a":null}"#, #"{"b":"c"}"#),
            (#"{"a":["b"]}"#, #"{"a":"c"}"#, #"{"a":"c"}"#),
            (#"{"a":"c"}"#, #"{"a":["b"]}"#, #"{"a":["b"]}"#),
            (#"{"a":{"b":"c"}}"#, #"{"a":{"b":"d","c":null}}"#, #"{"a":{"b":"d"}}"#),
            (#"{"a":[{"b":"c"}]}"#, #"{"a":[1]}"#, #"{"a":[1]}"#),
            (#"{}"#, #"{"a":{"bb":{"ccc":null}}}"#, #"{"a":{"bb":{}}}"#),
        ]
        for (target, patch, expected) in cases {
            #expect(MergePatch.apply(try object(patch), to: try object(target)) == (try object(expected)))
        }
    }

    @Test(arguments: StoreKind.allCases) func deleteChecksRevisionAndRemoves(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let created = try store.create("todos", id: nil, data: ["title": "a"])
            expectError(.conflict) { _ = try store.delete("todos", id: created.id, expectedRev: 5) }
            let deleted = try store.delete("todos", id: created.id, expectedRev: 1)
            #expect(deleted.rev == 1)
            #expect(deleted.blobsDeleted == 0)
            expectError(.notFound) { _ = try store.get("todos", id: created.id) }
        }
    }

    @Test(arguments: StoreKind.allCases) func getManyAnswersFoundInOrderAndMissing(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let a = try store.create("c", id: nil, data: ["n": 1])
            let b = try store.create("c", id: nil, data: ["n": 2])
            let ghost = UUID()
            let result = try store.getMany("c", ids: [b.id, ghost, a.id, b.id])
            #expect(result.records.map(\.id) == [b.id, a.id])
            #expect(result.missing == [ghost])
            expectError(.invalidArgument, field: "ids") {
                _ = try store.getMany("c", ids: (0..<1001).map { _ in UUID() })
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func listPagesInCreationOrder(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            var ids: [UUID] = []
            for n in 0..<25 { ids.append(try store.create("c", id: nil, data: ["n": .int(Int64(n))]).id) }
            var seen: [UUID] = []
            var cursor: String?
            repeat {
                let page = try store.list("c", limit: 10, cursor: cursor)
                seen += page.records.map(\.id)
                cursor = page.nextCursor
            } while cursor != nil
            #expect(seen == ids)
            expectError(.invalidArgument, field: "limit") { _ = try store.list("c", limit: 0, cursor: nil) }
            expectError(.invalidArgument, field: "limit") { _ = try store.list("c", limit: 1001, cursor: nil) }
            expectError(.invalidArgument, field: "cursor") { _ = try store.list("c", limit: 5, cursor: "garbage!") }
            #expect(try store.list("empty", limit: 5, cursor: nil) == Page(records: [], nextCursor: nil))
        }
    }

    @Test(arguments: StoreKind.allCases) func collectionsCountsAndDrop(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            for _ in 0..<3 { _ = try store.create("todos", id: nil, data: [:]) }
            _ = try store.create("items", id: nil, data: [:])
            #expect(try store.collections() == [CollectionInfo(name: "items", count: 1), CollectionInfo(name: "todos", count: 3)])
            _ = try store.createIndex("todos", field: try FieldPath("title"))
            let dropped = try store.dropCollection("todos")
            #expect(dropped.documents == 3)
            #expect(try store.collections() == [CollectionInfo(name: "items", count: 1)])
            expectError(.notFound) { _ = try store.dropCollection("todos") }
            // A collection comes back on its next write, without the old index.
            _ = try store.create("todos", id: nil, data: ["title": "again"])
            #expect(try store.count("todos", filter: nil, text: nil) == 1)
            #expect(try store.createIndex("todos", field: try FieldPath("title")).created)
            let stats = try store.stats()
            #expect(stats.documents == 2)
            #expect(stats.databaseBytes > 0)
        }
    }

    @Test(arguments: StoreKind.allCases) func createIndexIsIdempotentAndRejectsEnvelope(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let first = try store.createIndex("items", field: try FieldPath("price"))
            #expect(first.created)
            let second = try store.createIndex("items", field: try FieldPath("price"))
            #expect(!second.created)
            #expect(second.name == first.name)
            expectError(.invalidArgument, field: "field") { _ = try store.createIndex("items", field: try FieldPath("$id")) }
            #expect(try store.collections().map(\.name) == ["items"])
        }
    }

    @Test(arguments: StoreKind.allCases) func concurrentWritesShareTransactionsAndAllCommit(_ kind: StoreKind) async throws {
        try await withStoreAsync(kind) { store in
            try await withThrowingTaskGroup(of: StoredRecord.self) { group in
                for n in 0..<200 {
                    group.addTask { try store.create("c", id: nil, data: ["n": .int(Int64(n))]) }
                }
                var count = 0
                for try await _ in group { count += 1 }
                #expect(count == 200)
            }
            #expect(try store.count("c", filter: nil, text: nil) == 200)
        }
    }

    @Test(arguments: StoreKind.allCases) func failingWriteInABatchDoesNotAffectOthers(_ kind: StoreKind) async throws {
        try await withStoreAsync(kind) { store in
            let existing = try store.create("c", id: nil, data: ["n": 0])
            let results = await withTaskGroup(of: Bool.self) { group in
                for n in 0..<50 {
                    group.addTask {
                        do {
                            // Every fifth write collides with the existing id.
                            _ = try store.create("c", id: n % 5 == 0 ? existing.id : nil, data: ["n": .int(Int64(n))])
                            return true
                        } catch { return false }
                    }
                }
                var ok = 0
                for await success in group where success { ok += 1 }
                return ok
            }
            #expect(results == 40)
            #expect(try store.count("c", filter: nil, text: nil) == 41)
        }
    }

    @Test(arguments: StoreKind.allCases) func submitWriteRunsSeveralOperationsAtomically(_ kind: StoreKind) async throws {
        try await withStoreAsync(kind) { store in
            let a = try store.create("c", id: nil, data: ["n": 1])
            // The second operation fails, so the first one in the same body is rolled back too.
            await #expect(throws: LarderError.self) {
                try await store.write { context throws(LarderError) in
                    _ = try context.replace("c", id: a.id, data: ["n": 2], expectedRev: nil)
                    _ = try context.create("c", id: a.id, data: [:])
                }
            }
            #expect(try store.get("c", id: a.id).rev == 1)
            let rev = try await store.write { context throws(LarderError) in
                try context.patch("c", id: a.id, patch: ["m": 1], expectedRev: 1).rev
            }
            #expect(rev == 2)
        }
    }

    @Test func closedStoreAnswersUnavailable() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-closed-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        _ = try store.create("c", id: nil, data: [:])
        try store.checkpoint()
        store.close()
        expectError(.unavailable) { _ = try store.create("c", id: nil, data: [:]) }
        expectError(.unavailable) { _ = try store.count("c", filter: nil, text: nil) }
        // Reopening finds the data.
        let reopened = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        #expect(try reopened.count("c", filter: nil, text: nil) == 1)
        #expect(try reopened.integrityCheck() == "ok")
        reopened.close()
    }

    /// One process per data directory: a store holds `larder.lock` (another process's open of the file cannot lock
    /// it); stores of one process share the hold; the last close gives it back.
    @Test func aDataDirectoryIsLockedToOneProcess() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-lock-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let lockPath = (directory as NSString).appendingPathComponent("larder.lock")
        /// Whether someone else could take the lock now (as another process would: its own open file description).
        func lockable() -> Bool {
            let fd = open(lockPath, O_RDWR)
            defer { close(fd) }
            return fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0
        }
        let first = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        #expect(!lockable())
        #expect(try String(contentsOfFile: lockPath, encoding: .utf8) == "\(getpid())\n")
        let second = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory + "/."))
        first.close()
        first.close()  // twice: still one release
        #expect(!lockable())
        _ = try second.create("c", id: nil, data: [:])
        second.close()
        #expect(lockable())

        // Held by another process (here: another open file description, with that process's pid in the file).
        let fd = open(lockPath, O_RDWR)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX | LOCK_NB) == 0)
        _ = ftruncate(fd, 0)
        _ = Array("4242\n".utf8).withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        do throws(LarderError) {
            _ = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
            Issue.record("a second process opened a locked data directory")
        } catch {
            #expect(error.status == .unavailable)
            #expect(error.message.contains("in use by another Larder process (pid 4242)"), "\(error.message)")
        }
        flock(fd, LOCK_UN)
        let reopened = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        #expect(try reopened.count("c", filter: nil, text: nil) == 1)
        // The store opened after the refusal holds the lock, and its close gives it back.
        #expect(flock(fd, LOCK_EX | LOCK_NB) != 0)
        reopened.close()
        #expect(flock(fd, LOCK_EX | LOCK_NB) == 0)
        flock(fd, LOCK_UN)
    }

    /// A lock this process gave up can be held on by a child it was starting (between fork and exec a child has a
    /// copy of every descriptor): the next open in this process waits for it instead of refusing. Here the hold is an
    /// open file description of the test's with this process's pid in the file, as the child's would be; it is let go
    /// once the store has tried (inotify sees the store open the lock file), so the store must have waited.
    @Test func aLockHeldByThisProcesssChildIsWaitedFor() throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("larder-fork-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let lockPath = (directory as NSString).appendingPathComponent("larder.lock")
        let fd = open(lockPath, O_RDWR | O_CREAT, 0o644)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX | LOCK_NB) == 0)
        _ = Array("\(getpid())\n".utf8).withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        let watch = inotify_init1(Int32(IN_CLOEXEC))
        defer { close(watch) }
        #expect(inotify_add_watch(watch, lockPath, UInt32(IN_OPEN)) >= 0)
        let opened = Locked<Result<Int64, LarderError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let result = Result { () throws(LarderError) -> Int64 in
                let store = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
                defer { store.close() }
                return try store.create("c", id: nil, data: [:]).rev
            }
            opened.withLock { $0 = result }
            done.signal()
        }
        // The store opened the lock file (and found it held) before the hold goes.
        var ready = pollfd(fd: watch, events: Int16(POLLIN), revents: 0)
        #expect(poll(&ready, 1, 60_000) == 1, "the store never tried the lock")
        flock(fd, LOCK_UN)
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(try opened.withLock { $0 }?.get() == 1)
    }

    /// The lock follows the directory, not its path: a directory deleted and made again while a store of this
    /// process still holds the old one is locked afresh (another process could otherwise open it beside this one).
    @Test func aDirectoryMadeAgainIsLockedAfresh() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-relock-\(UUID().wireString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let old = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        try FileManager.default.removeItem(atPath: directory)
        let fresh = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
        let fd = open((directory as NSString).appendingPathComponent("larder.lock"), O_RDWR)
        defer { close(fd) }
        #expect(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0)  // held by `fresh`
        fresh.close()
        old.close()
        #expect(flock(fd, LOCK_EX | LOCK_NB) == 0)
    }

    /// Root writes anywhere, so as root (CI) this shows as skipped; the next test holds for everyone.
    @Test(.enabled(if: getuid() != 0, "root may write to a read-only directory"))
    func unwritableDirectoryIsAClearError() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-ro-\(UUID().wireString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        chmod(directory, 0o500)
        defer { chmod(directory, 0o700) }
        expectError(.internal) { _ = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory)) }
    }

    /// A data directory under a regular file cannot be made, not even by root.
    @Test func aDirectoryUnderAFileIsAClearError() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("larder-f-\(UUID().wireString)").path
        _ = FileManager.default.createFile(atPath: file, contents: Data([1]))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let directory = file + "/data"
        do throws(LarderError) {
            _ = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory))
            Issue.record("expected an error")
        } catch {
            #expect(error.status == .internal && error.message.contains(directory), "\(error)")
        }
    }

    @Test func fileInPlaceOfDirectoryIsAClearError() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("larder-file-\(UUID().wireString)").path
        _ = FileManager.default.createFile(atPath: path, contents: Data([1]))
        defer { try? FileManager.default.removeItem(atPath: path) }
        do throws(LarderError) {
            _ = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: path))
            Issue.record("expected an error")
        } catch {
            #expect(error.message.contains(path))
        }
    }
}
