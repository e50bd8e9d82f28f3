import Foundation
import LarderStore
import LarderTestThreads
import LarderWire
import Testing

/// `PointReads`: a burst of GETs and BLOB_HEADs shares one read snapshot while nothing commits, yet never misses a
/// write acknowledged before the read.
@Suite("Point reads in a burst", .ownThreads, .timeLimit(.minutes(20)))
struct PointReadsTests {
    @Test("a read in the middle of a burst sees every write acknowledged before it", arguments: StoreKind.allCases)
    func seesAcknowledgedWritesMidBurst(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let reads = store.pointReads()
            defer { reads.end() }
            let first = try store.create("todos", id: nil, data: ["title": "milk"])
            #expect(try reads.get("todos", id: first.id).rev == 1)
            // The burst's snapshot is open; these writes commit after it was taken.
            _ = try store.replace("todos", id: first.id, data: ["title": "oat milk"], expectedRev: 1)
            #expect(try reads.get("todos", id: first.id).rev == 2)
            let second = try store.create("todos", id: nil, data: ["title": "bread"])
            #expect(try reads.get("todos", id: second.id).id == second.id)
            _ = try store.delete("todos", id: first.id, expectedRev: nil)
            #expect(throws: LarderError.self) { try reads.get("todos", id: first.id) }
            let blob = try store.blobPut(id: nil, bytes: try fixture("rocket.jpg"), expectedSHA256: nil, attachTo: nil)
            #expect(try reads.blobHead(blob.id).size == blob.size)
        }
    }

    @Test("NOT_FOUND and bad names are answered like single reads, and the burst goes on", arguments: StoreKind.allCases)
    func errorsMatchSingleReads(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let record = try store.create("todos", id: nil, data: ["title": "milk"])
            let reads = store.pointReads()
            defer { reads.end() }
            let missing = UUID()
            for _ in 0..<2 {
                do throws(LarderError) {
                    _ = try reads.get("todos", id: missing)
                    Issue.record("a missing document was found")
                } catch {
                    #expect(error.status == .notFound)
                    #expect(error.message.contains(missing.wireString))
                }
                do throws(LarderError) {
                    _ = try reads.get("no such name!", id: record.id)
                    Issue.record("a bad collection name was accepted")
                } catch {
                    #expect(error.status == .invalidArgument)
                }
                do throws(LarderError) {
                    _ = try reads.blobHead(missing)
                    Issue.record("a missing blob was found")
                } catch {
                    #expect(error.status == .notFound)
                }
                #expect(try reads.get("todos", id: record.id).bytes == store.get("todos", id: record.id).bytes)
                do throws(LarderError) {
                    _ = try reads.getJSON("todos", id: missing)
                    Issue.record("a missing document was found")
                } catch {
                    #expect(error.status == .notFound)
                }
            }
        }
    }

    @Test("getJSON writes exactly the record a GET answers, byte for byte", arguments: StoreKind.allCases)
    func getJSONIsTheRecordsBytes(_ kind: StoreKind) throws {
        try withStore(kind) { store in
            let datas: [JSONObject] = [
                [:], ["title": "milk", "done": false], ["name": "张伟", "tags": ["学生", "ä"], "n": 1.5],
                ["nested": ["a": ["b": [1, 2, 3]]], "quote": "say \"hi\"\n"],
            ]
            let reads = store.pointReads()
            defer { reads.end() }
            for data in datas {
                let record = try store.create("people", id: nil, data: data)
                #expect(try reads.getJSON("people", id: record.id) == record.bytes)
                let replaced = try store.replace("people", id: record.id, data: ["v": 2], expectedRev: 1)
                #expect(try reads.getJSON("people", id: record.id) == replaced.bytes)
                #expect(try reads.getJSON("people", id: record.id) == store.get("people", id: record.id).bytes)
            }
        }
    }

    @Test("ending a burst gives the reader back: more bursts than readers, one after another, never wait", arguments: StoreKind.allCases)
    func endGivesTheReaderBack(_ kind: StoreKind) throws {
        try withStore(kind, { $0.readerCount = 2 }) { store in
            let record = try store.create("todos", id: nil, data: ["title": "milk"])
            for _ in 0..<10 {
                let reads = store.pointReads()
                _ = try reads.get("todos", id: record.id)
                reads.end()
                reads.end()  // twice is harmless
            }
            // A burst in progress holds one reader; the other still serves ordinary reads.
            let open = store.pointReads()
            _ = try open.get("todos", id: record.id)
            #expect(try store.get("todos", id: record.id).id == record.id)
            open.end()
        }
    }
}
