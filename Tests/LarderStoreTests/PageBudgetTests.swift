import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// Answers stay under the JSON limit however large the records: pages stop early with a cursor, GROUP lists fewer
/// records, GET_MANY is refused; on both stores.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct PageBudgetTests {
    static let budget = 10_000

    func withBigRecords(_ kind: StoreKind, _ body: (AnyStore, [UUID]) throws -> Void) throws {
        try withStore(kind, { $0.maxPageBytes = PageBudgetTests.budget }) { store in
            var ids: [UUID] = []
            for n in 0..<20 {
                let data: JSONObject = [
                    "n": .int(Int64(n)), "kind": .string(n % 2 == 0 ? "even" : "odd"),
                    "blob": .string(String(repeating: "x", count: 2000)),
                ]
                ids.append(try store.create("big", id: nil, data: data).id)
            }
            try body(store, ids)
        }
    }

    func answerBytes(_ records: [StoredRecord]) -> Int { records.reduce(0) { $0 + $1.bytes.count } }

    @Test(arguments: StoreKind.allCases)
    func searchAndListPagesStopAtTheBudgetAndStillReachEveryRecord(_ kind: StoreKind) throws {
        try withBigRecords(kind) { store, ids in
            for useSearch in [true, false] {
                var seen: [UUID] = []
                var cursor: String?
                var pages = 0
                repeat {
                    let page =
                        useSearch
                        ? try store.search(
                            "big", SearchQuery(sort: [SortKey(field: try FieldPath("n"))], limit: 100, cursor: cursor))
                        : try store.list("big", limit: 100, cursor: cursor)
                    #expect(page.records.count < 20)
                    #expect(answerBytes(page.records) <= PageBudgetTests.budget)
                    seen += page.records.map(\.id)
                    cursor = page.nextCursor
                    pages += 1
                } while cursor != nil && pages < 50
                #expect(seen == ids, "every record exactly once, in order (search: \(useSearch))")
                #expect(pages >= 5)
            }
        }
    }

    @Test(arguments: StoreKind.allCases)
    func getManyOverTheBudgetIsRefusedWithAClearError(_ kind: StoreKind) throws {
        try withBigRecords(kind) { store, ids in
            expectError(.payloadTooLarge, field: "ids") { _ = try store.getMany("big", ids: ids) }
            let (records, missing) = try store.getMany("big", ids: Array(ids.prefix(3)))
            #expect(records.count == 3 && missing.isEmpty)
        }
    }

    @Test(arguments: StoreKind.allCases)
    func groupCountsStayExactWhenRecordsAreCutByTheBudget(_ kind: StoreKind) throws {
        try withBigRecords(kind) { store, _ in
            let groups = try store.group("big", field: try FieldPath("kind"), filter: nil, text: nil, perGroup: 10)
            #expect(groups.map(\.count) == [10, 10])
            let listed = groups.flatMap(\.records)
            #expect(listed.count < 20 && !listed.isEmpty)
            #expect(answerBytes(listed) <= PageBudgetTests.budget)
        }
    }
}
