import Foundation
import LarderWire
import Testing

@testable import LarderStore

/// The trigram index is brought up to date once per group commit; it must end exactly where per-row maintenance
/// would have: every insert, text change, delete and rolled-back write of a batch accounted for.
@Suite struct FullTextMaintenanceTests {
    @Test func batchesOfMixedWritesLeaveTheIndexConsistentAndSearchesExact() throws {
        try withStore { store, directory in
            let group = DispatchGroup()
            let ids = (0..<60).map { _ in UUID() }
            func submit(_ n: Int, _ body: @escaping @Sendable (any WriteContext) throws(LarderError) -> Void) {
                group.enter()
                store.submitWrite({ context throws(LarderError) in try body(context) }, completion: { _ in group.leave() })
            }
            // Round 1 creates; round 2 changes documents the index already holds. Each round's writes land in
            // whatever batches the writer fills: creates, text changes, deletes, and writes that fail inside their
            // savepoint, all mixed within group commits.
            for (n, id) in ids.enumerated() {
                submit(n) { context throws(LarderError) in
                    _ = try context.create("notes", id: id, data: ["text": .string("北京 note \(n) alpha")])
                    if n % 11 == 0 {
                        _ = try context.patch("notes", id: id, patch: ["text": .string("深圳 note \(n) delta")], expectedRev: 1)
                    }
                }
            }
            group.wait()
            for (n, id) in ids.enumerated() {
                submit(n) { context throws(LarderError) in
                    if n % 3 == 0 {
                        _ = try context.patch("notes", id: id, patch: ["text": .string("上海 note \(n) beta")], expectedRev: nil)
                    }
                    if n % 5 == 0 { _ = try context.delete("notes", id: id, expectedRev: nil) }
                    if n % 7 == 0 {
                        // Fails after changing the text: the savepoint undoes it, the index must not see it.
                        _ = try context.replace("notes", id: id, data: ["text": "广州 gamma"], expectedRev: nil)
                        throw LarderError(.conflict, "planned failure")
                    }
                }
            }
            group.wait()
            #expect(try store.integrityCheck() == "ok")

            let scan = try SQLiteStore(configuration: StoreConfiguration(dataDirectory: directory, useTextIndex: false))
            defer { scan.close() }
            for query in ["北京", "上海 note", "alpha", "beta", "广州", "gamma", "note 4", "深圳", "delta"] {
                let text = TextQuery(query: query)
                let indexed = try store.search("notes", SearchQuery(text: text, limit: 1000)).records.map(\.id)
                let scanned = try scan.search("notes", SearchQuery(text: text, limit: 1000)).records.map(\.id)
                #expect(indexed == scanned, "\(query)")
            }
            // n % 5 == 0 deleted, unless n % 7 == 0 rolled that write back entirely.
            let expected = (0..<60).filter { $0 % 5 != 0 || $0 % 7 == 0 }.count
            #expect(try store.count("notes", filter: nil, text: TextQuery(query: "note")) == expected)
            #expect(try store.count("notes", filter: nil, text: TextQuery(query: "广州")) == 0)
        }
    }
}
